"""A client that only counts: newPendingTransactions on web3.py's
WebSocketProvider or on chainsieve_client's ResumingWebSocketProvider, for
the clients benchmark (tests/benches/clients.rs), which reads this
process's CPU time between two counts.

Usage: client_cost.py web3py <plain|resuming> WS_URL

Prints {"ready": true} once subscribed; answers each line "count" with
{"count": n}, the notifications handled so far.
"""

import asyncio
import json
import sys

from web3 import AsyncWeb3, WebSocketProvider

from chainsieve_client import ResumingWebSocketProvider


async def main(wrap, url):
    provider = ResumingWebSocketProvider(url) if wrap == "resuming" else WebSocketProvider(url)
    count = 0
    async with AsyncWeb3(provider) as w3:
        await w3.eth.subscribe("newPendingTransactions")

        async def follow():
            nonlocal count
            async for _ in w3.socket.process_subscriptions():
                count += 1

        following = asyncio.create_task(follow())
        print(json.dumps({"ready": True}), flush=True)
        while True:
            line = await asyncio.to_thread(sys.stdin.readline)
            if not line:
                following.cancel()
                return
            if line.strip() == "count":
                print(json.dumps({"count": count}), flush=True)


asyncio.run(main(sys.argv[2], sys.argv[3]))
