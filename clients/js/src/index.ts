// chainsieve's resuming clients: a session that reconnects and resumes
// every subscription by cursor, under a viem transport
// (`@chainsieve/client/viem`) and an ethers v6 provider
// (`@chainsieve/client/ethers`).

export {
  ResumingSession,
  ResumeRefusedError,
  ConnectionLostError,
  RpcError,
  cursorBlock,
  type ResumeOptions,
  type OnRefused,
  type Notification,
  type SubscriptionHandlers,
  type WebSocketLike,
  type WebSocketConstructor,
} from "./session.js";
export { type CursorStore, MemoryCursorStore, subscriptionKey } from "./cursors.js";
export { type Backoff, backoffDelay } from "./backoff.js";
