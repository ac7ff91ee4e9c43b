// Reconnection delays: exponential, capped, with jitter so that the
// clients a server restart cut off do not all come back at once.

export interface Backoff {
  /** The first delay's upper bound. Default 250 ms. */
  initialMs: number;
  /** The largest delay. Default 30 s. */
  maxMs: number;
}

export function withBackoffDefaults(backoff: Partial<Backoff> = {}): Backoff {
  return { initialMs: backoff.initialMs ?? 250, maxMs: backoff.maxMs ?? 30_000 };
}

/** The delay before try `attempt` (0 first): half the exponential bound
 *  plus a random part of the other half ("equal jitter"). */
export function backoffDelay(backoff: Backoff, attempt: number, random: () => number = Math.random): number {
  const bound = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(attempt, 30));
  return bound / 2 + random() * (bound / 2);
}
