// ethers v6 against a devnet chain (no node): a wallet sends two transfers
// and waits for each, reads its transaction count and its receipt, and
// meets the devnet's clear refusal of a contract call.
// Usage: node devnet_wallet_ethers.mjs <http-url> <private-key>
import { JsonRpcProvider, Wallet } from "ethers";

const [url, key] = process.argv.slice(2);
// ethers caches identical requests for 250 ms; a nonce read before the
// last block would be reused (as against any fast chain).
const provider = new JsonRpcProvider(url, undefined, { cacheTimeout: -1 });
const wallet = new Wallet(key, provider);
const to = "0x4242424242424242424242424242424242424242";

const receipts = [];
for (const value of [1n, 2n]) {
  const sent = await wallet.sendTransaction({ to, value });
  const receipt = await sent.wait();
  receipts.push({
    hash: sent.hash,
    status: receipt.status,
    blockNumber: receipt.blockNumber,
    gasUsed: receipt.gasUsed.toString(),
  });
}
const latest = await provider.getTransactionCount(wallet.address, "latest");
const pending = await provider.getTransactionCount(wallet.address, "pending");
const fetched = await provider.getTransaction(receipts[1].hash);
let callError = null;
try {
  await provider.call({ to, data: "0x70a08231" });
} catch (error) {
  callError = error.info?.error?.message ?? error.message;
}
console.log(
  JSON.stringify({
    from: wallet.address,
    receipts,
    latest,
    pending,
    fetchedBlock: fetched?.blockNumber ?? null,
    callError,
  }),
);
process.exit(0);
