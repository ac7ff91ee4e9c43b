// The resuming session under both the viem transport and the ethers
// provider: one WebSocket to chainsieve, opened again whenever it drops,
// with every subscription made again from the cursor of the last
// notification handed to the application (the book's "Clients" chapter).

import { WebSocket as DefaultWebSocket } from "isows";

import { type CursorStore, subscriptionKey } from "./cursors.js";
import { type Backoff, backoffDelay, withBackoffDefaults } from "./backoff.js";

/** What a socket implementation must offer: the browser's `WebSocket`,
 *  `ws`, or anything shaped like them. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((event: unknown) => void) | null;
  onclose: ((event: unknown) => void) | null;
  onerror: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** How to continue when the server refuses to resume a subscription. */
export type OnRefused = "stop" | "fromBlock";

export interface ResumeOptions {
  /** The socket implementation (default: the platform's, `ws` in Node). */
  WebSocket?: WebSocketConstructor;
  /** Reconnection delays: exponential with jitter. */
  backoff?: Partial<Backoff>;
  /** A request sent when the socket has been silent for `intervalMs`; no
   *  answer within `timeoutMs` and the socket is opened again. `false`
   *  turns it off. Default `{ intervalMs: 15_000, timeoutMs: 5_000 }`. */
  heartbeat?: { intervalMs: number; timeoutMs: number } | false;
  /** When the server refuses a resume (the cursor is older than it keeps,
   *  or its block was reorganised out): the application's error handler
   *  gets a {@link ResumeRefusedError} first, then the subscription stops
   *  (`"stop"`, the default) or is made again from the start of the last
   *  cursor's block (`"fromBlock"`, mined topics only). */
  onRefused?: OnRefused;
  /** Where cursors are kept so an application resumes after its own
   *  restart; in memory only without one. */
  store?: CursorStore;
}

/** A notification as the application gets it: the subscription id it
 *  holds, the event, and the event's cursor. */
export interface Notification {
  subscription: string;
  result: unknown;
  cursor?: string;
}

export interface SubscriptionHandlers {
  onData(notification: Notification): void;
  onError?(error: Error): void;
}

/** The server refused to resume, or ended, a subscription: events may be
 *  missing from here on unless the application reads them otherwise. */
export class ResumeRefusedError extends Error {
  override readonly name = "ResumeRefusedError";
  constructor(
    readonly code: number,
    readonly serverMessage: string,
    readonly subscription: string,
    readonly cursor: string | undefined,
  ) {
    super(
      `chainsieve refused to resume subscription ${subscription}` +
        (cursor ? ` from cursor ${cursor}` : "") +
        ` (${code}): ${serverMessage}`,
    );
  }
}

/** A request whose answer the dropped socket took with it, and which is
 *  not safe to send twice. */
export class ConnectionLostError extends Error {
  override readonly name = "ConnectionLostError";
  constructor(readonly method: string) {
    super(`the connection to chainsieve dropped before ${method} was answered; it may or may not have taken effect`);
  }
}

/** A JSON-RPC error answer. */
export class RpcError extends Error {
  override readonly name = "RpcError";
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

interface JsonRpcError {
  code: number;
  message: string;
  data?: unknown;
}

interface Pending {
  method: string;
  params: unknown[];
  /** Called as the answer is read, before the next frame is: a
   *  subscription's notifications may follow its answer in the same read,
   *  and must find it adopted. */
  resolve(result: unknown): void;
  reject(error: Error): void;
  /** Sent on the socket of this generation (none yet: 0). */
  sentOn: number;
  /** Belongs to its socket: a drop fails it with {@link Superseded}
   *  instead of sending it again (a subscription made again, which the
   *  next socket makes anew). */
  ofSocket: boolean;
}

/** What a request of a dropped socket fails with (never the
 *  application's). */
class Superseded extends Error {}

/** Where a subscription resumes, before and after its first notification. */
type ResumePoint =
  | { kind: "cursor"; cursor: string }
  | { kind: "fromBlock"; block: string }
  | { kind: "now" };

interface Subscription {
  /** The id the application holds: the server's first one. */
  id: string;
  /** The topic and filter, without the options object. */
  params: unknown[];
  finality?: unknown;
  resume: ResumePoint;
  handlers: SubscriptionHandlers;
  /** The server's id on the current socket; undefined while being made. */
  serverId?: string;
  key: string;
  ended: boolean;
}

const OPTIONS = ["resumeFrom", "fromBlock", "finality"];

/** Methods that may take effect twice if sent again after a drop. */
const NOT_REPEATABLE = new Set(["eth_sendRawTransaction", "eth_sendTransaction"]);

/** Codes of an ended subscription that a resume from the last cursor cures
 *  (the nodes could not give a block: docs/src/api.md, History from the
 *  nodes). */
const RETRYABLE = new Set([-32002]);

function isOptions(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return false;
  const keys = Object.keys(value);
  return keys.length > 0 && keys.every((key) => OPTIONS.includes(key));
}

/** The block a cursor names (`<chain>:<position>@<block>:<index>:<tag>`). */
export function cursorBlock(cursor: string): number | undefined {
  const parts = cursor.split(":");
  const place = parts[parts.length - 3] ?? "";
  const at = place.indexOf("@");
  return at < 0 ? undefined : Number(place.slice(at + 1));
}

/**
 * One resuming connection. Requests wait for the socket; a drop (close,
 * error, or a missed heartbeat) opens it again after a backoff and makes
 * every subscription again with `resumeFrom` its last cursor, keeping the
 * id the application holds; the replayed notifications, then the live
 * ones, reach the handlers once each, in order.
 */
export class ResumingSession {
  readonly url: string;
  readonly #options: Required<Omit<ResumeOptions, "store" | "heartbeat" | "backoff">> & {
    backoff: Backoff;
    store?: CursorStore;
    heartbeat: { intervalMs: number; timeoutMs: number } | false;
  };
  #socket?: WebSocketLike;
  /** Counts sockets: what an older one says is not listened to. */
  #generation = 0;
  #open = false;
  #closed = false;
  #attempt = 0;
  #nextId = 1;
  #pending = new Map<number, Pending>();
  /** By the id the application holds. */
  #subscriptions = new Map<string, Subscription>();
  /** The current socket's subscription ids → the application's. */
  #serverIds = new Map<string, string>();
  #waiters: Array<() => void> = [];
  #lastHeard = 0;
  #heartbeat?: ReturnType<typeof setInterval>;
  #reconnect?: ReturnType<typeof setTimeout>;
  /** Reconnections made so far (the tests count them). */
  reconnections = 0;

  constructor(url: string, options: ResumeOptions = {}) {
    this.url = url;
    this.#options = {
      WebSocket: options.WebSocket ?? (DefaultWebSocket as unknown as WebSocketConstructor),
      backoff: withBackoffDefaults(options.backoff),
      heartbeat: options.heartbeat ?? { intervalMs: 15_000, timeoutMs: 5_000 },
      onRefused: options.onRefused ?? "stop",
      store: options.store,
    };
    this.#connect();
  }

  /** Sends a JSON-RPC request once the socket is open; a request the drop
   *  took is sent again on the next socket (but a transaction, which is
   *  refused with {@link ConnectionLostError}). */
  request(method: string, params: unknown[] = []): Promise<unknown> {
    return this.#request(method, params, false);
  }

  #request(method: string, params: unknown[], ofSocket: boolean): Promise<unknown> {
    return new Promise((resolve, reject) => this.#call(method, params, ofSocket, resolve, reject));
  }

  /** Sends a request whose answer goes to `resolve` or `reject` as it is
   *  read. */
  #call(
    method: string,
    params: unknown[],
    ofSocket: boolean,
    resolve: (result: unknown) => void,
    reject: (error: Error) => void,
  ): void {
    if (this.#closed) {
      reject(new Error("the session is closed"));
      return;
    }
    const id = this.#nextId++;
    const pending: Pending = { method, params, resolve, reject, sentOn: 0, ofSocket };
    this.#pending.set(id, pending);
    if (this.#open) this.#send(id, pending);
  }

  /** Subscribes (`params`: the topic, its filter and, optionally, an
   *  options object) and returns the id the application holds, the same
   *  across every reconnection. */
  async subscribe(params: unknown[], handlers: SubscriptionHandlers): Promise<string> {
    const base = [...params];
    let given: Record<string, unknown> = {};
    if (base.length > 1 && isOptions(base[base.length - 1])) {
      given = base.pop() as Record<string, unknown>;
    }
    const key = subscriptionKey(base, given.finality);
    const stored = await this.#options.store?.load(key);
    let resume: ResumePoint;
    if (stored) resume = { kind: "cursor", cursor: stored };
    else if (typeof given.resumeFrom === "string") resume = { kind: "cursor", cursor: given.resumeFrom };
    else if (typeof given.fromBlock === "string") resume = { kind: "fromBlock", block: given.fromBlock };
    else resume = await this.#startingPoint(given.finality);
    const subscription: Subscription = {
      id: "",
      params: base,
      finality: given.finality,
      resume,
      handlers,
      key,
      ended: false,
    };
    return new Promise((resolve, reject) =>
      this.#make(
        subscription,
        false,
        (serverId) => {
          subscription.id = serverId;
          this.#subscriptions.set(serverId, subscription);
          this.#adopt(subscription, serverId);
          resolve(serverId);
        },
        reject,
      ),
    );
  }

  /** Ends a subscription; nothing of it reaches the handlers after. */
  async unsubscribe(id: string): Promise<boolean> {
    const subscription = this.#subscriptions.get(id);
    if (!subscription) return false;
    subscription.ended = true;
    this.#subscriptions.delete(id);
    const serverId = subscription.serverId;
    if (serverId === undefined) return true;
    this.#serverIds.delete(serverId);
    return (await this.request("eth_unsubscribe", [serverId])) as boolean;
  }

  /** Closes the socket for good; pending requests fail. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#reconnect);
    clearInterval(this.#heartbeat);
    for (const pending of this.#pending.values()) pending.reject(new Error("the session is closed"));
    this.#pending.clear();
    this.#socket?.close();
    this.#socket = undefined;
  }

  /** How many subscriptions are active (made, and neither ended nor
   *  unsubscribed). */
  get subscriptionCount(): number {
    return this.#subscriptions.size;
  }

  /** Resolves once the socket is open (for the ethers provider's start). */
  ready(): Promise<void> {
    if (this.#open) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  /** Where a new subscription can be resumed from before its first
   *  notification: the log's head cursor (docs/src/api.md, The head
   *  cursor), or for a finality subscription the block after the chain's
   *  last one of that grade (where a plain one starts). */
  async #startingPoint(finality: unknown): Promise<ResumePoint> {
    if (typeof finality === "string") {
      const block = (await this.request("eth_getBlockByNumber", [finality, false])) as {
        number?: string;
      } | null;
      if (block?.number) return { kind: "fromBlock", block: `0x${(BigInt(block.number) + 1n).toString(16)}` };
      return { kind: "now" };
    }
    try {
      const head = (await this.request("chainsieve_headCursor", [])) as string | null;
      return head ? { kind: "cursor", cursor: head } : { kind: "now" };
    } catch (error) {
      // A server without head cursors: resumable from the first
      // notification on.
      if (error instanceof RpcError && error.code === -32601) return { kind: "now" };
      throw error;
    }
  }

  /** `eth_subscribe` from the subscription's resume point; its server id
   *  to `made` as the answer is read. `ofSocket`: a subscription made
   *  again, which a drop leaves to the next socket. */
  #make(
    subscription: Subscription,
    ofSocket: boolean,
    made: (serverId: string) => void,
    failed: (error: Error) => void,
  ): void {
    const options: Record<string, unknown> = {};
    const resume = subscription.resume;
    if (resume.kind === "cursor") options.resumeFrom = resume.cursor;
    if (resume.kind === "fromBlock") options.fromBlock = resume.block;
    if (subscription.finality !== undefined) options.finality = subscription.finality;
    const params = Object.keys(options).length > 0 ? [...subscription.params, options] : subscription.params;
    this.#call("eth_subscribe", params, ofSocket, (serverId) => made(serverId as string), failed);
  }

  /** Routes the server's `serverId` to `subscription`. The server sends a
   *  subscription's answer before its first notification, and the answer
   *  is handled as it is read, so nothing comes for an id not yet routed. */
  #adopt(subscription: Subscription, serverId: string): void {
    subscription.serverId = serverId;
    this.#serverIds.set(serverId, subscription.id);
  }

  #connect(): void {
    const generation = ++this.#generation;
    const socket = new this.#options.WebSocket(this.url);
    this.#socket = socket;
    const current = () => generation === this.#generation && !this.#closed;
    socket.onopen = () => {
      if (!current()) return;
      this.#opened();
    };
    socket.onmessage = (event) => {
      if (!current()) return;
      this.#lastHeard = Date.now();
      this.#received(String(event.data));
    };
    const dropped = () => {
      if (!current()) return;
      this.#dropped();
    };
    socket.onclose = dropped;
    socket.onerror = dropped;
  }

  #opened(): void {
    this.#open = true;
    this.#attempt = 0;
    this.#lastHeard = Date.now();
    this.#startHeartbeat();
    // Subscriptions first, in the order they were made, then whatever the
    // application asked meanwhile (and what the drop took).
    for (const [id, pending] of this.#pending) this.#send(id, pending);
    for (const subscription of this.#subscriptions.values()) {
      if (subscription.serverId === undefined) this.#resubscribe(subscription);
    }
    for (const wake of this.#waiters.splice(0)) wake();
  }

  #dropped(): void {
    const wasOpen = this.#open;
    this.#open = false;
    clearInterval(this.#heartbeat);
    try {
      this.#socket?.close();
    } catch {
      // Already closed.
    }
    this.#socket = undefined;
    this.#generation++;
    this.#serverIds.clear();
    for (const subscription of this.#subscriptions.values()) subscription.serverId = undefined;
    for (const [id, pending] of this.#pending) {
      if (pending.ofSocket) {
        this.#pending.delete(id);
        pending.reject(new Superseded());
      } else if (pending.sentOn === 0) {
        continue;
      } else if (NOT_REPEATABLE.has(pending.method)) {
        this.#pending.delete(id);
        pending.reject(new ConnectionLostError(pending.method));
      } else {
        pending.sentOn = 0;
      }
    }
    if (wasOpen) this.reconnections++;
    const delay = backoffDelay(this.#options.backoff, this.#attempt++);
    this.#reconnect = setTimeout(() => this.#connect(), delay);
  }

  #startHeartbeat(): void {
    const heartbeat = this.#options.heartbeat;
    if (!heartbeat) return;
    const generation = this.#generation;
    this.#heartbeat = setInterval(() => {
      if (generation !== this.#generation || Date.now() - this.#lastHeard < heartbeat.intervalMs) return;
      const timer = setTimeout(() => {
        if (generation === this.#generation) this.#dropped();
      }, heartbeat.timeoutMs);
      // Of this socket: a drop fails it instead of sending it again.
      this.#request("eth_chainId", [], true).then(
        () => clearTimeout(timer),
        () => clearTimeout(timer),
      );
    }, heartbeat.intervalMs);
  }

  #send(id: number, pending: Pending): void {
    pending.sentOn = this.#generation;
    this.#socket?.send(JSON.stringify({ jsonrpc: "2.0", id, method: pending.method, params: pending.params }));
  }

  #resubscribe(subscription: Subscription): void {
    this.#make(
      subscription,
      true,
      (serverId) => {
        if (subscription.ended) {
          this.request("eth_unsubscribe", [serverId]).catch(() => undefined);
          return;
        }
        this.#adopt(subscription, serverId);
      },
      (error) => this.#refused(subscription, error),
    );
  }

  /** The server would not make `subscription` again from its resume
   *  point: a try-again answer waits for the next reconnection; a refusal
   *  goes to the application. */
  #refused(subscription: Subscription, error: unknown): void {
    if (subscription.ended || error instanceof Superseded) return;
    if (error instanceof RpcError && RETRYABLE.has(error.code)) {
      this.#retryLater(subscription);
      return;
    }
    const code = error instanceof RpcError ? error.code : -32603;
    const message = error instanceof Error ? error.message : String(error);
    this.#giveUp(subscription, code, message);
  }

  /** Makes the subscription again after a backoff, on this socket. */
  #retryLater(subscription: Subscription): void {
    const generation = this.#generation;
    const delay = backoffDelay(this.#options.backoff, 0);
    setTimeout(() => {
      if (generation === this.#generation && this.#open && !subscription.ended) this.#resubscribe(subscription);
    }, delay);
  }

  #giveUp(subscription: Subscription, code: number, message: string): void {
    const cursor = subscription.resume.kind === "cursor" ? subscription.resume.cursor : undefined;
    subscription.handlers.onError?.(new ResumeRefusedError(code, message, subscription.id, cursor));
    const block = cursor === undefined ? undefined : cursorBlock(cursor);
    if (this.#options.onRefused === "fromBlock" && block !== undefined && !subscription.ended) {
      subscription.resume = { kind: "fromBlock", block: `0x${block.toString(16)}` };
      this.#resubscribe(subscription);
      return;
    }
    subscription.ended = true;
    this.#subscriptions.delete(subscription.id);
  }

  #received(text: string): void {
    let message: {
      id?: number;
      result?: unknown;
      error?: JsonRpcError;
      method?: string;
      params?: unknown;
    };
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    if (typeof message.id === "number") {
      const pending = this.#pending.get(message.id);
      if (!pending) return;
      this.#pending.delete(message.id);
      if (message.error) pending.reject(new RpcError(message.error.code, message.error.message, message.error.data));
      else pending.resolve(message.result);
      return;
    }
    if (message.method === "eth_subscription") this.#notified(message.params);
  }

  #notified(raw: unknown): void {
    const params = raw as { subscription: string; result?: unknown; cursor?: string; error?: JsonRpcError };
    const id = this.#serverIds.get(params.subscription);
    // Of a subscription unsubscribed, or of a socket since dropped.
    if (id === undefined) return;
    const subscription = this.#subscriptions.get(id);
    if (!subscription || subscription.ended) return;
    if (params.error) {
      this.#serverIds.delete(params.subscription);
      subscription.serverId = undefined;
      if (RETRYABLE.has(params.error.code)) this.#retryLater(subscription);
      else this.#giveUp(subscription, params.error.code, params.error.message);
      return;
    }
    if (params.cursor !== undefined) subscription.resume = { kind: "cursor", cursor: params.cursor };
    subscription.handlers.onData({ subscription: id, result: params.result, cursor: params.cursor });
    const store = this.#options.store;
    if (params.cursor !== undefined && store) {
      Promise.resolve(store.save(subscription.key, params.cursor)).catch((error: unknown) =>
        subscription.handlers.onError?.(error instanceof Error ? error : new Error(String(error))),
      );
    }
  }
}
