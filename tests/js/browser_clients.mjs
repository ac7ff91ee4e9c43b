// The application of resuming_clients.mjs in headless Chromium (Debian's
// `chromium`, driven by playwright-core): browser/page.mjs bundled by
// esbuild for the browser (so @chainsieve/client runs on the browser's own
// WebSocket), served from 127.0.0.1, and asked through the page what it
// has. Speaks resuming_clients.mjs's lines:
//
//   node browser_clients.mjs <viem|ethers> <ws url> <contract>
//
// Prints {"ready": true} once the page has subscribed; then reads lines
// on stdin: "wait <hash> <number>" prints {"have": true} once every
// handler has that block's event, "report <hash> <number>" its report then
// (with every console error and uncaught exception of the page among its
// errors, except the line Chromium itself logs when a socket to the
// server's URL is cut before its handshake ends, which the cutter does on
// purpose: those are counted as `handshakesCut`).
import { createServer } from "node:http";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";
import { chromium } from "playwright-core";

const [library, url, contract] = process.argv.slice(2);
const bundle = await build({
  entryPoints: [fileURLToPath(new URL("./browser/page.mjs", import.meta.url))],
  bundle: true,
  format: "esm",
  platform: "browser",
  write: false,
  logLevel: "error",
});
const script = bundle.outputFiles[0].contents;
const server = createServer((request, response) => {
  if (request.url === "/page.js") {
    response.writeHead(200, { "content-type": "text/javascript" });
    response.end(script);
  } else {
    response.writeHead(200, { "content-type": "text/html" });
    response.end('<!doctype html><script type="module" src="/page.js"></script>');
  }
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  // As root in a container, Chromium's sandbox cannot start.
  args: ["--no-sandbox"],
});
const page = await browser.newPage();
const errors = [];
let handshakesCut = 0;
const cutInHandshake = `WebSocket connection to '${url}' failed: Error during WebSocket handshake: `;
page.on("console", (message) => {
  if (message.type() !== "error") return;
  if (message.text().startsWith(cutInHandshake)) handshakesCut += 1;
  else errors.push(`console: ${message.text()}`);
});
page.on("pageerror", (error) => errors.push(`page: ${error.message}`));
const query = new URLSearchParams({ library, url, contract });
await page.goto(`http://127.0.0.1:${server.address().port}/?${query}`);
await page.waitForFunction(() => window.application !== undefined, null, { timeout: 60_000 });
console.log(JSON.stringify({ ready: true }));

for await (const line of createInterface({ input: process.stdin })) {
  const [command, hash, number] = line.split(" ");
  await page.evaluate(([hash, number]) => window.application.untilBlock(hash, number), [hash, number]);
  if (command === "wait") {
    console.log(JSON.stringify({ have: true }));
  } else if (command === "report") {
    const report = await page.evaluate(() => window.application.report());
    report.errors.push(...errors);
    report.handshakesCut = handshakesCut;
    console.log(JSON.stringify(report));
    await browser.close();
    server.close();
    process.exit(0);
  }
}
