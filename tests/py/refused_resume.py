"""An application following pending transactions and heads on the resuming
web3.py provider (`chainsieve_client`, default `on_refused="stop"`) through
the cutting proxy; the test keeps it cut off until its pending cursor has
left the server's log window, so the resume is refused.

Usage: refused_resume.py python WS_URL

Prints {"pending": true} at its first pending transaction (it holds a
cursor then); once its error handler has had a refusal and two heads have
come after it, prints its report and exits.
"""

import asyncio
import json
import sys

from web3 import AsyncWeb3

from chainsieve_client import Backoff, ResumingWebSocketProvider

refusals = []


def on_error(error):
    refusals.append(
        {
            "name": type(error).__name__,
            "code": error.code,
            "subscription": error.subscription,
            "cursor": error.cursor,
            "message": str(error),
        }
    )


async def main(url):
    provider = ResumingWebSocketProvider(
        url, backoff=Backoff(initial=0.02, maximum=0.2), on_error=on_error
    )
    async with AsyncWeb3(provider) as w3:
        heads = await w3.eth.subscribe("newHeads")
        pending = await w3.eth.subscribe("newPendingTransactions")
        seen_pending = 0
        heads_after = 0
        async for message in w3.socket.process_subscriptions():
            if message["subscription"] == pending:
                seen_pending += 1
                if seen_pending == 1:
                    print(json.dumps({"pending": True}), flush=True)
            elif message["subscription"] == heads and refusals:
                heads_after += 1
                if heads_after == 2:
                    break
        report = {
            "refusals": refusals,
            "headsAfter": heads_after,
            "subscriptions": provider.subscription_count,
            "reconnections": provider.reconnections,
        }
        print(json.dumps(report), flush=True)


asyncio.run(main(sys.argv[2]))
