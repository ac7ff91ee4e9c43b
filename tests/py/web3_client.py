"""web3.py pointed at chainsieve unchanged: chain id, two new heads, two
pending transaction hashes and one filtered log. (Not the `bv*` topics:
web3.py formats their results as transactions and cannot read BlockVision's
`""` block fields.) Prints a JSON report as its last line; the Rust test
(tests/tests/clients.rs) checks it against the server.

Usage: web3_client.py WS_URL TOKEN_ADDRESS
"""

import asyncio
import json
import sys

from web3 import AsyncWeb3, WebSocketProvider

TRANSFER = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"


async def main(url: str, token: str) -> None:
    async with AsyncWeb3(WebSocketProvider(url)) as w3:
        chain_id = await w3.eth.chain_id
        heads = await w3.eth.subscribe("newHeads")
        pending = await w3.eth.subscribe("newPendingTransactions", False)
        logs = await w3.eth.subscribe(
            "logs", {"address": token, "topics": [TRANSFER]}
        )
        report = {"chainId": chain_id, "heads": [], "pending": [], "log": None}
        async for message in w3.socket.process_subscriptions():
            sub, result = message["subscription"], message["result"]
            if sub == heads and len(report["heads"]) < 2:
                report["heads"].append(
                    {"number": result["number"], "hash": result["hash"].to_0x_hex()}
                )
            elif sub == pending and len(report["pending"]) < 2:
                report["pending"].append(result.to_0x_hex())
            elif sub == logs and report["log"] is None:
                report["log"] = {
                    "address": result["address"],
                    "topics": [t.to_0x_hex() for t in result["topics"]],
                    "removed": result["removed"],
                }
            if (
                len(report["heads"]) == 2
                and len(report["pending"]) == 2
                and report["log"] is not None
            ):
                break
        # The block web3 fetches for the newest head agrees with it.
        block = await w3.eth.get_block(report["heads"][-1]["number"])
        report["blockHash"] = block["hash"].to_0x_hex()
        assert await w3.eth.unsubscribe(heads)
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2]), timeout=80))
