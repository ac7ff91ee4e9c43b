// Points an unmodified viem public client (WebSocket transport) at
// chainsieve and reports, as one JSON line on stdout, what it received:
// two blocks, two pending transaction hashes, one decoded ERC-20 Transfer.
// Usage: node viem_client.mjs <ws-url> <token-address>
import { createPublicClient, parseAbiItem, webSocket } from "viem";

const [url, token] = process.argv.slice(2);
const timeout = setTimeout(() => {
  console.error("timed out waiting for events");
  process.exit(2);
}, 60_000);

const client = createPublicClient({ transport: webSocket(url) });
const chainId = await client.getChainId();

const blocks = [];
const pending = [];
let transfer = null;
const unwatch = [];

await new Promise((resolve) => {
  const check = () => {
    if (blocks.length >= 2 && pending.length >= 2 && transfer) resolve();
  };
  unwatch.push(
    client.watchBlocks({
      onBlock: (block) => {
        if (blocks.length < 2) blocks.push({ number: block.number.toString(), hash: block.hash });
        check();
      },
    }),
  );
  unwatch.push(
    client.watchPendingTransactions({
      onTransactions: (hashes) => {
        for (const hash of hashes) if (pending.length < 2) pending.push(hash);
        check();
      },
    }),
  );
  unwatch.push(
    client.watchEvent({
      address: token,
      event: parseAbiItem("event Transfer(address indexed from, address indexed to, uint256 value)"),
      onLogs: (logs) => {
        const log = logs[0];
        if (!transfer && log) {
          transfer = {
            from: log.args.from,
            to: log.args.to,
            value: log.args.value.toString(),
            blockNumber: log.blockNumber.toString(),
            transactionHash: log.transactionHash,
          };
        }
        check();
      },
    }),
  );
});

unwatch.forEach((stop) => stop());
// A block fetched the viem way must match the subscription's.
const block = await client.getBlock({ blockNumber: BigInt(blocks[1].number) });
console.log(JSON.stringify({ chainId, blocks, blockHash: block.hash, pending, transfer }));
clearTimeout(timeout);
process.exit(0);
