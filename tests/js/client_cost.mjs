// A client that only counts: newPendingTransactions on the unmodified
// library or on @chainsieve/client's wrapper of it, for the clients
// benchmark (tests/benches/clients.rs), which reads this process's CPU
// time between two counts.
//
//   node client_cost.mjs <viem|ethers> <plain|resuming> <ws url>
//
// Prints {"ready": true} once subscribed; answers each line "count" with
// {"count": n}, the notifications handled so far.
import { createInterface } from "node:readline";

const [library, wrap, url] = process.argv.slice(2);
let count = 0;
const onData = () => {
  count += 1;
};
const onError = (error) => console.error(String(error));

if (library === "viem") {
  const { createPublicClient, webSocket } = await import("viem");
  const { resumingWebSocket } = await import("@chainsieve/client/viem");
  const transport = wrap === "resuming" ? resumingWebSocket(url) : webSocket(url);
  const client = createPublicClient({ transport });
  await client.transport.subscribe({ params: ["newPendingTransactions"], onData, onError });
} else if (library === "ethers") {
  const { WebSocketProvider } = await import("ethers");
  const { ResumingWebSocketProvider } = await import("@chainsieve/client/ethers");
  const provider = wrap === "resuming" ? new ResumingWebSocketProvider(url) : new WebSocketProvider(url);
  await provider.on("pending", onData);
} else {
  throw new Error(`unknown library ${library}`);
}
console.log(JSON.stringify({ ready: true }));
for await (const line of createInterface({ input: process.stdin })) {
  if (line === "count") console.log(JSON.stringify({ count }));
}
// stdin closed: the benchmark is done with it.
process.exit(0);
