"""An application on the resuming web3.py provider (`chainsieve_client`),
through a proxy that cuts its connection again and again: it follows
newHeads, logs and bvMinedTransactions with web3.py's subscription API and
records what each gets, as keys the Rust test computes the same way from a
control that never disconnects (tests/src/control.rs).

Usage: resuming_clients.py python WS_URL CONTRACT (the first argument as
the JavaScript application's, the library)

Prints {"ready": true} once subscribed; then reads lines on stdin:
"wait <hash> <number>" prints {"have": true} once every topic has that
block's event, "report <hash> <number>" its report then.
"""

import asyncio
import json
import sys

from web3 import AsyncWeb3

from chainsieve_client import Backoff, ResumingWebSocketProvider

got = {"newHeads": [], "logs": [], "bvMinedTransactions": []}
errors = []


def hexed(value):
    return value if isinstance(value, str) else value.to_0x_hex()


def key(topic, result):
    if topic == "newHeads":
        return hexed(result["hash"])
    removed = "true" if result.get("removed") else "false"
    if topic == "logs":
        index = result["logIndex"]
        index = int(index, 16) if isinstance(index, str) else index
        return f"{hexed(result['blockHash'])}/{index}/{removed}"
    return f"{hexed(result['hash'])}/{hexed(result['blockHash'])}/{removed}"


def has(block):
    return (
        block in got["newHeads"]
        and any(k.startswith(f"{block}/") for k in got["logs"])
        and any(f"/{block}/" in k for k in got["bvMinedTransactions"])
    )


async def main(url, contract):
    # Short delays: the test cuts the connection every few hundred ms.
    provider = ResumingWebSocketProvider(
        url,
        backoff=Backoff(initial=0.02, maximum=0.2),
        heartbeat=(2.0, 2.0),
        on_error=lambda error: errors.append(str(error)),
    )
    async with AsyncWeb3(provider) as w3:
        topics = {
            await w3.eth.subscribe("newHeads"): "newHeads",
            await w3.eth.subscribe("logs", {"address": contract}): "logs",
            await w3.eth.subscribe(
                "bvMinedTransactions", {"toAddress": [contract]}
            ): "bvMinedTransactions",
        }
        print(json.dumps({"ready": True}), flush=True)
        changed = asyncio.Event()

        async def follow():
            async for message in w3.socket.process_subscriptions():
                topic = topics[message["subscription"]]
                got[topic].append(key(topic, message["result"]))
                changed.set()

        following = asyncio.create_task(follow())
        while True:
            line = await asyncio.to_thread(sys.stdin.readline)
            command, block, _ = line.split()
            while not has(block):
                changed.clear()
                waiting = asyncio.ensure_future(changed.wait())
                await asyncio.wait(
                    {following, waiting}, return_when=asyncio.FIRST_COMPLETED
                )
                waiting.cancel()
                if following.done():
                    following.result()  # what ended it, raised
            if command == "wait":
                print(json.dumps({"have": True}), flush=True)
            else:
                report = {**got, "errors": errors, "reconnections": provider.reconnections}
                print(json.dumps(report), flush=True)
                following.cancel()
                return


asyncio.run(main(sys.argv[2], sys.argv[3]))
