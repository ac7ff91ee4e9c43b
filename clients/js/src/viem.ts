// A viem transport, usable wherever `webSocket(url)` is, whose
// subscriptions resume by cursor after every reconnection.

import { createTransport, RpcRequestError, type EIP1193RequestFn, type Transport } from "viem";

import { ResumingSession, RpcError, type ResumeOptions } from "./session.js";

export interface ResumingWebSocketConfig extends ResumeOptions {
  /** The transport's key and name, as viem's own options. */
  key?: string;
  name?: string;
  retryCount?: number;
}

/** What the transport holds beside viem's own members. */
export interface ResumingWebSocketValue {
  /** The session under it (its `reconnections`, `close()`). */
  session: ResumingSession;
  subscribe(args: {
    params: unknown[];
    onData: (data: { subscription: string; result: unknown; cursor?: string }) => void;
    onError?: (error: unknown) => void;
  }): Promise<{ subscriptionId: string; unsubscribe: () => Promise<unknown> }>;
}

/**
 * `resumingWebSocket(url)` in place of `webSocket(url)`: viem's
 * `watchBlocks`, `watchContractEvent`, `watchEvent`,
 * `watchPendingTransactions` and `transport.subscribe` go on across dropped
 * sockets and server restarts with nothing missed and nothing twice.
 */
export function resumingWebSocket(
  url: string,
  config: ResumingWebSocketConfig = {},
): Transport<"webSocket", ResumingWebSocketValue> {
  const { key = "webSocket", name = "chainsieve resuming WebSocket", retryCount, ...resume } = config;
  return ({ retryCount: clientRetryCount, timeout }) => {
    const session = new ResumingSession(url, resume);
    return createTransport(
      {
        key,
        name,
        type: "webSocket",
        retryCount: retryCount ?? clientRetryCount,
        timeout,
        // viem's request type is generic in its answer; the session's is
        // the JSON the server sent.
        request: (async ({ method, params }: { method: string; params?: unknown }) => {
          try {
            return await session.request(method, (params as unknown[] | undefined) ?? []);
          } catch (error) {
            if (error instanceof RpcError) {
              throw new RpcRequestError({
                body: { method, params },
                error: { code: error.code, message: error.message, data: error.data },
                url,
              });
            }
            throw error;
          }
        }) as EIP1193RequestFn,
      },
      {
        session,
        async subscribe({ params, onData, onError }) {
          const id = await session.subscribe(params, { onData, onError });
          return { subscriptionId: id, unsubscribe: () => session.unsubscribe(id) };
        },
      },
    );
  };
}
