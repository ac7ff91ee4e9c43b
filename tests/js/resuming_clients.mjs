// An application on a resuming client (`@chainsieve/client`), through a
// proxy that cuts its connection again and again: its handlers for
// newHeads, logs and bvMinedTransactions record what they get, as keys
// the Rust test computes the same way from a control that never
// disconnects.
//
//   node resuming_clients.mjs <viem|ethers> <ws url> <contract>
//
// Prints {"ready": true} once subscribed; then reads one line on stdin,
// the final block's hash, and prints its report once every handler has
// that block's event.
import { createInterface } from "node:readline";

const [library, url, contract] = process.argv.slice(2);
const got = { newHeads: [], logs: [], bvMinedTransactions: [] };
const errors = [];
// Woken by every handler call.
let waiters = [];
const record = (topic, key) => {
  got[topic].push(key);
  for (const wake of waiters.splice(0)) wake();
};
// Short delays: the test cuts the connection every few hundred ms.
const resume = {
  backoff: { initialMs: 20, maxMs: 200 },
  heartbeat: { intervalMs: 2_000, timeoutMs: 2_000 },
};
const bvKey = (tx) => `${tx.hash}/${tx.blockHash}/${tx.removed === true}`;
const bvParams = ["bvMinedTransactions", { toAddress: [contract] }];
let session;
let close;

if (library === "viem") {
  const { createPublicClient } = await import("viem");
  const { resumingWebSocket } = await import("@chainsieve/client/viem");
  const client = createPublicClient({ transport: resumingWebSocket(url, resume) });
  session = client.transport.session;
  const onError = (error) => errors.push(String(error));
  await client.transport.subscribe({
    params: ["newHeads"],
    onData: (data) => record("newHeads", data.result.hash),
    onError,
  });
  client.watchEvent({
    address: contract,
    onLogs: (logs) => {
      for (const log of logs) record("logs", `${log.blockHash}/${log.logIndex}/${log.removed}`);
    },
    onError,
  });
  await client.transport.subscribe({
    params: bvParams,
    onData: (data) => record("bvMinedTransactions", bvKey(data.result)),
    onError,
  });
  close = () => session.close();
} else if (library === "ethers") {
  const { ResumingWebSocketProvider } = await import("@chainsieve/client/ethers");
  const provider = new ResumingWebSocketProvider(url, undefined, { resume });
  session = provider.session;
  provider.on("error", (error) => errors.push(String(error)));
  await provider.on("block", (number) => record("newHeads", number));
  // ethers hands a filter's listener no removed log (it means them for the
  // log's orphan event, which a socket subscription's removal does not
  // reach): the test expects none here.
  await provider.on({ address: contract }, (log) =>
    record("logs", `${log.blockHash}/${log.index}/${log.removed}`),
  );
  await provider.subscribe(bvParams, {
    onData: (data) => record("bvMinedTransactions", bvKey(data.result)),
    onError: (error) => errors.push(String(error)),
  });
  close = () => provider.destroy();
} else {
  throw new Error(`unknown library ${library}`);
}

// ethers and viem's watchEvent subscribe in the background: ready once the
// session holds all three (nothing else to wait on: a short poll).
while (session.subscriptionCount < 3) await new Promise((resolve) => setTimeout(resolve, 10));
console.log(JSON.stringify({ ready: true }));

const lines = createInterface({ input: process.stdin });
const [finalHash, finalNumber] = (await lines[Symbol.asyncIterator]().next()).value.split(" ");
const finalHead = library === "ethers" ? Number(finalNumber) : finalHash;
while (
  !(
    got.newHeads.includes(finalHead) &&
    got.logs.some((key) => key.startsWith(`${finalHash}/`)) &&
    got.bvMinedTransactions.some((key) => key.includes(`/${finalHash}/`))
  )
) {
  await new Promise((resolve) => waiters.push(resolve));
}
console.log(JSON.stringify({ ...got, errors, reconnections: session.reconnections }));
close();
process.exit(0);
