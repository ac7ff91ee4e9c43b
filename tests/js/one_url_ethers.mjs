// ethers v6 with chainsieve's URL as its only provider, on a node chain:
// deploys a contract, calls it, sends a transaction and waits for its
// receipt, reads logs and a balance, and makes a call that reverts; prints
// what it got as one JSON line.
// Usage: node one_url_ethers.mjs <http-url> <private-key> <init-code> <reverting-init-code>
import { JsonRpcProvider, Wallet } from "ethers";

const [url, key, initCode, reverting] = process.argv.slice(2);
// ethers caches identical requests for 250 ms; against a node that mines
// at once (anvil, as much as chainsieve in front of it) a nonce read
// before the last block would be reused.
const provider = new JsonRpcProvider(url, undefined, { cacheTimeout: -1 });
const wallet = new Wallet(key, provider);

const deployed = await (await wallet.sendTransaction({ data: initCode })).wait();
const contract = deployed.contractAddress;
const called = await provider.call({ to: contract, data: "0x" });
const pinged = await (await wallet.sendTransaction({ to: contract })).wait();
const logs = await provider.getLogs({ address: contract, fromBlock: 0, toBlock: "latest" });
const balance = await provider.getBalance(wallet.address);
let revertData = null;
try {
  await provider.call({ data: reverting });
} catch (error) {
  revertData = error.data ?? null;
}
console.log(
  JSON.stringify({
    contract,
    deployStatus: deployed.status,
    called,
    pingStatus: pinged.status,
    pingLogs: pinged.logs.length,
    pingHash: pinged.hash,
    logs: logs.map((log) => log.transactionHash),
    balance: balance.toString(),
    revertData,
  }),
);
process.exit(0);
