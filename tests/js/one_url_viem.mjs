// viem's public and wallet clients with chainsieve's URL as their only
// transport, on a node chain: the same flow as one_url_ethers.mjs.
// Usage: node one_url_viem.mjs <http-url> <private-key> <init-code> <reverting-init-code>
import { createPublicClient, createWalletClient, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { foundry } from "viem/chains";

const [url, key, initCode, reverting] = process.argv.slice(2);
const chain = { ...foundry, id: 1 };
const account = privateKeyToAccount(key);
const transport = http(url);
const client = createPublicClient({ chain, transport });
const wallet = createWalletClient({ account, chain, transport });

const deployHash = await wallet.sendTransaction({ data: initCode });
const deployed = await client.waitForTransactionReceipt({ hash: deployHash });
const contract = deployed.contractAddress;
const called = await client.call({ to: contract, data: "0x" });
const pingHash = await wallet.sendTransaction({ to: contract });
const pinged = await client.waitForTransactionReceipt({ hash: pingHash });
const logs = await client.getLogs({ address: contract, fromBlock: 0n, toBlock: "latest" });
const balance = await client.getBalance({ address: account.address });
let revertData = null;
try {
  await client.call({ data: reverting });
} catch (error) {
  revertData = error.walk((e) => e.data !== undefined)?.data ?? null;
}
console.log(
  JSON.stringify({
    contract,
    deployStatus: deployed.status,
    called: called.data ?? "0x",
    pingStatus: pinged.status,
    pingLogs: pinged.logs.length,
    pingHash,
    logs: logs.map((log) => log.transactionHash),
    balance: balance.toString(),
    revertData,
  }),
);
process.exit(0);
