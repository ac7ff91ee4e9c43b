// The application of resuming_clients.mjs, in a browser page: bundled
// with viem, ethers and @chainsieve/client by browser_clients.mjs, which
// drives it. Its parameters come in the page's query string; it sets
// `window.application` once its three subscriptions are made.
import * as app from "../application.mjs";

const query = new URLSearchParams(location.search);
const [library, url, contract] = ["library", "url", "contract"].map((name) => query.get(name));
const resume = {
  backoff: { initialMs: 20, maxMs: 200 },
  heartbeat: { intervalMs: 2_000, timeoutMs: 2_000 },
};

async function start() {
  if (library === "viem") {
    const { createPublicClient } = await import("viem");
    const { resumingWebSocket } = await import("@chainsieve/client/viem");
    const client = createPublicClient({ transport: resumingWebSocket(url, resume) });
    await app.followOnViem(client, contract);
    return client.transport.session;
  }
  const { ResumingWebSocketProvider } = await import("@chainsieve/client/ethers");
  const provider = new ResumingWebSocketProvider(url, undefined, { resume });
  provider.on("error", app.onError);
  await app.followOnEthers(provider, contract);
  await provider.subscribe(app.bvParams(contract), {
    onData: (data) => app.record("bvMinedTransactions", app.bvKey(data.result)),
    onError: app.onError,
  });
  return provider.session;
}

const session = await start();
while (session.subscriptionCount < 3) await new Promise((resolve) => setTimeout(resolve, 10));
window.application = {
  untilBlock: (hash, number) => app.untilBlock(library, hash, number),
  report: () => ({ ...app.got, errors: app.errors, reconnections: session.reconnections }),
};
