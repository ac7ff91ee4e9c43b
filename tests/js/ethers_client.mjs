// Points an unmodified ethers v6 WebSocketProvider at chainsieve and reports,
// as one JSON line on stdout, what it received: two `block` events, two
// `pending` events and one log from a filtered subscription; then it signs
// a transaction offline and broadcasts it raw (the devnet takes it), and
// waits for its hash among the `pending` events.
// Usage: node ethers_client.mjs <ws-url> <token-address>
import { Wallet, WebSocketProvider, id } from "ethers";

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

// A transaction signed offline, as a wallet or bot does, and broadcast raw.
// ethers checks the returned hash against its own.
const wallet = new Wallet(id("chainsieve ethers client"));
const seen = new Set();
let sentHash = null;
let announced;
const isAnnounced = new Promise((resolve) => (announced = resolve));
provider.on("pending", (hash) => {
  seen.add(hash);
  if (hash === sentHash) announced();
});
const signed = await wallet.signTransaction({
  type: 2,
  chainId: network.chainId,
  nonce: 0,
  to: token,
  value: 1n,
  gasLimit: 21_000n,
  maxFeePerGas: 100_000_000_000n,
  maxPriorityFeePerGas: 1_000_000_000n,
});
const sent = await provider.broadcastTransaction(signed);
sentHash = sent.hash;
if (seen.has(sentHash)) announced();
await isAnnounced;

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
    sent: { hash: sent.hash, from: sent.from },
  }),
);
clearTimeout(timeout);
await provider.destroy();
process.exit(0);
