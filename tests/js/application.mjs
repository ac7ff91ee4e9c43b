// The application of resuming_clients.mjs and plain_clients.mjs: what its
// handlers record (keys the Rust test computes the same way from its
// control), how it follows the three topics on viem, and how it waits for
// a block.

export const got = { newHeads: [], logs: [], bvMinedTransactions: [] };
export const errors = [];
// Woken by every handler call.
const waiters = [];

export const record = (topic, key) => {
  got[topic].push(key);
  for (const wake of waiters.splice(0)) wake();
};
export const onError = (error) => errors.push(String(error));

export const bvKey = (tx) => `${tx.hash}/${tx.blockHash}/${tx.removed === true}`;
export const bvParams = (contract) => ["bvMinedTransactions", { toAddress: [contract] }];

// Follows the three topics on a viem client (either transport); answers
// the two transport subscriptions' promises (watchEvent subscribes in the
// background).
export function followOnViem(client, contract) {
  const heads = client.transport.subscribe({
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
  const transactions = client.transport.subscribe({
    params: bvParams(contract),
    onData: (data) => record("bvMinedTransactions", bvKey(data.result)),
    onError,
  });
  return Promise.all([heads, transactions]);
}

// Follows heads and logs on an ethers provider (either); ethers hands a
// filter's listener no removed log (it means them for the log's orphan
// event, which a socket subscription's removal does not reach): the test
// expects none. Answers the two `on` promises.
export function followOnEthers(provider, contract) {
  return Promise.all([
    provider.on("block", (number) => record("newHeads", number)),
    provider.on({ address: contract }, (log) =>
      record("logs", `${log.blockHash}/${log.index}/${log.removed}`),
    ),
  ]);
}

// Resolves once every handler has had an event of the block `hash`
// (ethers' block event gives the number only).
export async function untilBlock(library, hash, number) {
  const head = library === "ethers" ? Number(number) : hash;
  while (
    !(
      got.newHeads.includes(head) &&
      got.logs.some((key) => key.startsWith(`${hash}/`)) &&
      got.bvMinedTransactions.some((key) => key.includes(`/${hash}/`))
    )
  ) {
    await new Promise((resolve) => waiters.push(resolve));
  }
}
