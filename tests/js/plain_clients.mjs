// The application of resuming_clients.mjs on the unmodified library,
// through the same cutting proxy: viem's `webSocket` transport (it
// reconnects and subscribes again from "now"; a short delay here, so what
// it loses is only what came while it was cut off) or ethers v6's
// `WebSocketProvider` (it does not reconnect). Its handlers record the
// same keys.
//
//   node plain_clients.mjs <viem|ethers> <ws url> <contract>
//
// Prints {"ready": true} once subscribed; then answers lines on stdin:
// "wait <hash> <number>" with {"have": true} once every handler has had
// that block's event; "report" with its report, and exits.
import { createInterface } from "node:readline";

import * as app from "./application.mjs";

const [library, url, contract] = process.argv.slice(2);
// Whether the socket closed for good (ethers: it never opens another).
let closed = false;
process.on("unhandledRejection", app.onError);

// Resolves once `count` eth_subscribe requests written to `socket` have
// been answered (the libraries subscribe some topics in the background).
function subscribed(socket, count) {
  const asked = new Set();
  const send = socket.send.bind(socket);
  socket.send = (data, ...rest) => {
    const request = JSON.parse(data);
    if (request.method === "eth_subscribe") asked.add(request.id);
    return send(data, ...rest);
  };
  let answered = 0;
  return new Promise((resolve) =>
    socket.addEventListener("message", ({ data }) => {
      const message = JSON.parse(data);
      if (asked.has(message.id) && typeof message.result === "string" && ++answered === count) {
        resolve();
      }
    }),
  );
}

let ready;
if (library === "viem") {
  const { createPublicClient, webSocket } = await import("viem");
  const client = createPublicClient({
    transport: webSocket(url, { reconnect: { delay: 20, attempts: 1_000 } }),
  });
  ready = subscribed((await client.transport.getRpcClient()).socket, 3);
  app.followOnViem(client, contract);
} else if (library === "ethers") {
  const { WebSocketProvider } = await import("ethers");
  const provider = new WebSocketProvider(url);
  const socket = provider.websocket;
  ready = subscribed(socket, 3);
  // Without a listener, the reset's error event would end the process.
  socket.on("error", app.onError);
  socket.on("close", () => (closed = true));
  app.followOnEthers(provider, contract);
  // ethers has no API for a topic it has no event name for: the
  // application reads its notifications off the socket.
  const bv = await provider.send("eth_subscribe", app.bvParams(contract));
  socket.addEventListener("message", ({ data }) => {
    const message = JSON.parse(data);
    if (message.method === "eth_subscription" && message.params.subscription === bv) {
      app.record("bvMinedTransactions", app.bvKey(message.params.result));
    }
  });
} else {
  throw new Error(`unknown library ${library}`);
}

await ready;
console.log(JSON.stringify({ ready: true }));

for await (const line of createInterface({ input: process.stdin })) {
  const [command, hash, number] = line.split(" ");
  if (command === "wait") {
    await app.untilBlock(library, hash, number);
    console.log(JSON.stringify({ have: true }));
  } else if (command === "report") {
    console.log(JSON.stringify({ ...app.got, errors: app.errors, closed }));
    process.exit(0);
  }
}
