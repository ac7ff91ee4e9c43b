// The ethers provider against a scripted WebSocket server (`ws`), for
// orderings the real server makes only now and then.
import assert from "node:assert/strict";
import { test } from "node:test";

import { WebSocketServer } from "ws";

import { ResumingWebSocketProvider } from "../dist/ethers.js";

const ADDRESS = "0x00000000000000000000000000000000000000aa";
const LOG = {
  address: ADDRESS,
  topics: [],
  data: "0x",
  blockNumber: "0x1",
  blockHash: `0x${"11".repeat(32)}`,
  transactionHash: `0x${"22".repeat(32)}`,
  transactionIndex: "0x0",
  logIndex: "0x0",
  removed: false,
};

// A server that answers `eth_chainId` only after `chainIdDelayMs`, and a
// subscription at once, its first notification in the same turn.
async function scripted(chainIdDelayMs) {
  const server = new WebSocketServer({ port: 0, host: "127.0.0.1" });
  await new Promise((resolve) => server.once("listening", resolve));
  server.on("connection", (socket) => {
    socket.on("message", (data) => {
      const { id, method } = JSON.parse(String(data));
      const answer = (body) => socket.send(JSON.stringify({ jsonrpc: "2.0", id, ...body }));
      if (method === "eth_chainId") {
        setTimeout(() => answer({ result: "0x1" }), chainIdDelayMs);
      } else if (method === "eth_subscribe") {
        answer({ result: "0x5" });
        const params = { subscription: "0x5", result: LOG, cursor: "eth:1@1:0:x" };
        socket.send(JSON.stringify({ jsonrpc: "2.0", method: "eth_subscription", params }));
      } else {
        answer({ error: { code: -32601, message: `no ${method}` } });
      }
    });
  });
  return { url: `ws://127.0.0.1:${server.address().port}`, close: () => server.close() };
}

test("a log that comes before ethers knows the network reaches the listener", async () => {
  const server = await scripted(200);
  const provider = new ResumingWebSocketProvider(server.url, undefined, { resume: { heartbeat: false } });
  const failed = new Promise((_, reject) => process.once("unhandledRejection", reject));
  const log = new Promise((resolve) => provider.on({ address: ADDRESS }, resolve));
  const got = await Promise.race([log, failed]);
  assert.equal(got.blockHash, LOG.blockHash);
  await provider.destroy();
  server.close();
});
