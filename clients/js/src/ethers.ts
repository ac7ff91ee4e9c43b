// An ethers v6 provider, usable wherever `WebSocketProvider` is, whose
// subscriptions resume by cursor after every reconnection.

import {
  SocketProvider,
  type JsonRpcApiProviderOptions,
  type Networkish,
  type SocketSubscriber,
} from "ethers";

import { ResumingSession, RpcError, type ResumeOptions, type SubscriptionHandlers } from "./session.js";

interface Payload {
  id: number;
  method: string;
  params: unknown[];
}

/**
 * `new ResumingWebSocketProvider(url)` in place of
 * `new WebSocketProvider(url)`: `provider.on("block" | "pending" | filter)`
 * and contract events go on across dropped sockets and server restarts
 * with nothing missed and nothing twice. A resume the server refuses is
 * emitted as the provider's `"error"` event (a `ResumeRefusedError`).
 */
export class ResumingWebSocketProvider extends SocketProvider {
  /** The session under it (its `reconnections`). */
  readonly session: ResumingSession;
  /** Settles once ethers knows the network: a log it is handed before
   *  that fails (its wrapper reads the network), so a subscription is
   *  made only then. */
  #networkKnown: Promise<unknown> | undefined;
  /** ethers' subscribers by the id the application holds, as ethers
   *  registers them: a notification goes to its subscriber as the session
   *  parsed it, not written out again for ethers to parse. */
  #subscribers = new Map<string, SocketSubscriber>();

  constructor(
    url: string,
    network?: Networkish,
    options?: JsonRpcApiProviderOptions & { resume?: ResumeOptions },
  ) {
    super(network, options);
    this.session = new ResumingSession(url, options?.resume);
    this.session.ready().then(
      async () => {
        await this._start();
        this.resume();
      },
      (error: unknown) => this.emit("error", error),
    );
  }

  /** A subscription to any topic, custom ones included (`bv*`), which
   *  ethers has no event name for; resolves to its id, as `eth_subscribe`.
   *  Unsubscribe with `session.unsubscribe(id)`. */
  subscribe(params: unknown[], handlers: SubscriptionHandlers): Promise<string> {
    return this.session.subscribe(params, handlers);
  }

  override async _write(message: string): Promise<void> {
    const payload = JSON.parse(message) as Payload;
    const answer = (body: { result: unknown } | { error: unknown }) =>
      this._processMessage(JSON.stringify({ jsonrpc: "2.0", id: payload.id, ...body }));
    const failed = (error: unknown) =>
      answer({
        error:
          error instanceof RpcError
            ? { code: error.code, message: error.message, data: error.data }
            : { code: -32603, message: error instanceof Error ? error.message : String(error) },
      });
    let answered: Promise<unknown>;
    if (payload.method === "eth_subscribe") {
      // Written after `_start`, so the detection it awaits is the one
      // `_start` began, which records the network first.
      this.#networkKnown ??= this._detectNetwork().catch((error: unknown) => {
        this.#networkKnown = undefined;
        throw error;
      });
      answered = this.#networkKnown.then(() =>
        this.session.subscribe(payload.params, {
          onData: (notification) => {
            const subscriber = this.#subscribers.get(notification.subscription);
            if (subscriber) subscriber._handleMessage(notification.result);
            // Before ethers registered its subscriber: it keeps these for
            // it, in order.
            else
              this._processMessage(
                JSON.stringify({ jsonrpc: "2.0", method: "eth_subscription", params: notification }),
              );
          },
          onError: (error) => this.emit("error", error),
        }),
      );
    } else if (payload.method === "eth_unsubscribe") {
      this.#subscribers.delete(String(payload.params[0]));
      answered = this.session.unsubscribe(String(payload.params[0]));
    } else {
      answered = this.session.request(payload.method, payload.params);
    }
    answered.then((result) => answer({ result }), failed);
  }

  override _register(filterId: number | string, subscriber: SocketSubscriber): void {
    super._register(filterId, subscriber);
    this.#subscribers.set(String(filterId), subscriber);
  }

  override async destroy(): Promise<void> {
    this.session.close();
    super.destroy();
  }
}
