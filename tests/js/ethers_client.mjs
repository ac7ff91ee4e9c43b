// Points an unmodified ethers v6 WebSocketProvider at chainsieve and reports,
// as one JSON line on stdout, what it received: two `block` events, two
// `pending` events and one log from a filtered subscription.
// Usage: node ethers_client.mjs <ws-url> <token-address>
import { WebSocketProvider, id } from "ethers";

const [url, token] = process.argv.slice(2);
const TRANSFER = id("Transfer(address,address,uint256)");
const timeout = setTimeout(() => {
  console.error("timed out waiting for events");
  process.exit(2);
}, 60_000);

const provider = new WebSocketProvider(url);
const network = await provider.getNetwork();

const blocks = [];
const pending = [];
let log = null;

await new Promise((resolve) => {
  const check = () => {
    if (blocks.length >= 2 && pending.length >= 2 && log) resolve();
  };
  provider.on("block", (number) => {
    if (blocks.length < 2) blocks.push(number);
    check();
  });
  provider.on("pending", (hash) => {
    if (pending.length < 2) pending.push(hash);
    check();
  });
  provider.on({ address: token, topics: [TRANSFER] }, (event) => {
    if (!log) {
      log = {
        address: event.address,
        topics: event.topics,
        blockNumber: event.blockNumber,
        blockHash: event.blockHash,
        transactionHash: event.transactionHash,
        index: event.index,
        removed: event.removed,
      };
    }
    check();
  });
});

// A block fetched the ethers way must match the event.
const block = await provider.getBlock(blocks[1]);
console.log(
  JSON.stringify({
    chainId: network.chainId.toString(),
    blocks,
    blockHash: block.hash,
    blockNumber: block.number,
    pending,
    log,
  }),
);
clearTimeout(timeout);
await provider.destroy();
process.exit(0);
