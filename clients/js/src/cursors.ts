// Where an application keeps its subscriptions' cursors so that it
// resumes after its own restart, not only after a dropped socket.

/**
 * A store of cursors by subscription key. `save` is called after each
 * notification was handed to the application's handler, with its cursor;
 * `load` once, when a subscription of that key is made. An application that
 * must not see an event twice across its own restarts saves the cursor
 * with the effects of handling the event (in the same transaction), and
 * gives a store whose `save` does nothing and whose `load` reads it back.
 */
export interface CursorStore {
  load(key: string): string | undefined | Promise<string | undefined>;
  save(key: string, cursor: string): void | Promise<void>;
}

/** A subscription's key: its topic, filter and finality, as JSON. Two
 *  subscriptions with the same parameters share a key. */
export function subscriptionKey(params: unknown[], finality: unknown): string {
  return JSON.stringify(finality === undefined ? params : [...params, { finality }]);
}

/** Cursors in memory, for tests and for a store to wrap. */
export class MemoryCursorStore implements CursorStore {
  readonly cursors = new Map<string, string>();
  load(key: string): string | undefined {
    return this.cursors.get(key);
  }
  save(key: string, cursor: string): void {
    this.cursors.set(key, cursor);
  }
}
