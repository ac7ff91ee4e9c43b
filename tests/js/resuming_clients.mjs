// An application on a resuming client (`@chainsieve/client`), through a
// proxy that cuts its connection again and again: its handlers for
// newHeads, logs and bvMinedTransactions record what they get, as keys
// the Rust test computes the same way from a control that never
// disconnects.
//
//   node resuming_clients.mjs <viem|ethers> <ws url> <contract>
//
// Prints {"ready": true} once subscribed; then reads lines on stdin:
// "wait <hash> <number>" prints {"have": true} once every handler has that
// block's event, "report <hash> <number>" its report then.
import { createInterface } from "node:readline";

import * as app from "./application.mjs";

const [library, url, contract] = process.argv.slice(2);
// Short delays: the test cuts the connection every few hundred ms.
const resume = {
  backoff: { initialMs: 20, maxMs: 200 },
  heartbeat: { intervalMs: 2_000, timeoutMs: 2_000 },
};
let session;
let close;

if (library === "viem") {
  const { createPublicClient } = await import("viem");
  const { resumingWebSocket } = await import("@chainsieve/client/viem");
  const client = createPublicClient({ transport: resumingWebSocket(url, resume) });
  session = client.transport.session;
  await app.followOnViem(client, contract);
  close = () => session.close();
} else if (library === "ethers") {
  const { ResumingWebSocketProvider } = await import("@chainsieve/client/ethers");
  const provider = new ResumingWebSocketProvider(url, undefined, { resume });
  session = provider.session;
  provider.on("error", app.onError);
  await app.followOnEthers(provider, contract);
  await provider.subscribe(app.bvParams(contract), {
    onData: (data) => app.record("bvMinedTransactions", app.bvKey(data.result)),
    onError: app.onError,
  });
  close = () => provider.destroy();
} else {
  throw new Error(`unknown library ${library}`);
}

// ethers and viem's watchEvent subscribe in the background: ready once the
// session holds all three (nothing else to wait on: a short poll).
while (session.subscriptionCount < 3) await new Promise((resolve) => setTimeout(resolve, 10));
console.log(JSON.stringify({ ready: true }));

for await (const line of createInterface({ input: process.stdin })) {
  const [command, hash, number] = line.split(" ");
  await app.untilBlock(library, hash, number);
  if (command === "wait") {
    console.log(JSON.stringify({ have: true }));
  } else if (command === "report") {
    console.log(JSON.stringify({ ...app.got, errors: app.errors, reconnections: session.reconnections }));
    close();
    process.exit(0);
  }
}
