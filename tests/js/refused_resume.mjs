// An application following pending transactions and heads on a resuming
// client (`@chainsieve/client`, default `onRefused: "stop"`) through the
// cutting proxy; the test keeps it cut off until its pending cursor has
// left the server's log window, so the resume is refused.
//
//   node refused_resume.mjs <viem|ethers> <ws url>
//
// Prints {"pending": true} at its first pending transaction (it holds a
// cursor then); once an error handler has had a refusal and two heads
// have come after it, prints its report and exits.
const [library, url] = process.argv.slice(2);
const resume = { backoff: { initialMs: 20, maxMs: 200 } };
// Every error its handlers get (the heads' too: none is expected).
const refusals = [];
let headsAfter = 0;
let pending = 0;
let session;
let close;
const finished = new Promise((resolve) => {
  const onError = (error) => {
    refusals.push({
      name: error.name,
      code: error.code,
      subscription: error.subscription,
      cursor: error.cursor,
      message: error.message,
    });
  };
  const onPending = () => {
    if (++pending === 1) console.log(JSON.stringify({ pending: true }));
  };
  const onHead = () => {
    if (refusals.length > 0 && ++headsAfter === 2) resolve();
  };
  return (async () => {
    if (library === "viem") {
      const { createPublicClient } = await import("viem");
      const { resumingWebSocket } = await import("@chainsieve/client/viem");
      const client = createPublicClient({ transport: resumingWebSocket(url, resume) });
      session = client.transport.session;
      client.watchPendingTransactions({ onTransactions: onPending, onError });
      client.watchBlockNumber({ onBlockNumber: onHead, onError, emitOnBegin: false });
      close = () => session.close();
    } else {
      const { ResumingWebSocketProvider } = await import("@chainsieve/client/ethers");
      const provider = new ResumingWebSocketProvider(url, undefined, { resume });
      session = provider.session;
      provider.on("error", onError);
      provider.on("pending", onPending);
      provider.on("block", onHead);
      close = () => provider.destroy();
    }
  })();
});
await finished;
console.log(
  JSON.stringify({ refusals, headsAfter, subscriptions: session.subscriptionCount, reconnections: session.reconnections }),
);
close();
process.exit(0);
