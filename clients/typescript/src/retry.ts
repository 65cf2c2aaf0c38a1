/**
 * Retry pacing shared by the elector (jittered exponential backoff, and
 * warnings limited to one every few seconds during an outage), and the
 * errors of an aborted call.
 */

/** An elector logs at most one retry warning this often (ms); the ones in between are counted, and the count goes with the next warning. */
export const WARN_EVERY_MS = 5000;

/** Jittered exponential backoff: the n-th wait is drawn evenly from [d/2, d] with d = min(cap, base * 2^n). */
export class Backoff {
  private attempt = 0;
  constructor(
    readonly baseMs: number,
    readonly capMs: number,
  ) {}

  /** A campaign's: from ttl/10 (10 to 100 ms), doubling, up to 1 s, so it asks again within about a second of the server coming back. */
  static campaign(ttlMs: number): Backoff {
    return new Backoff(Math.min(Math.max(ttlMs / 10, 10), 100), 1000);
  }

  /** A renewal's: from ttl/10 (at least 10 ms), doubling, up to 1 s; see `nextBefore`. */
  static renew(ttlMs: number): Backoff {
    const base = Math.max(ttlMs / 10, 10);
    return new Backoff(base, Math.max(1000, base));
  }

  reset(): void {
    this.attempt = 0;
  }

  next(): number {
    const d = Math.min(this.capMs, this.baseMs * 2 ** Math.min(this.attempt, 20));
    this.attempt++;
    return d / 2 + Math.random() * (d / 2);
  }

  /** `next()`, but never past half the time left to `deadline` (nor under 10 ms): a retry still goes out before the deadline. */
  nextBefore(deadline: number, now: number): number {
    return Math.max(Math.min(this.next(), (deadline - now) / 2), 10);
  }
}

/** Limits retry warnings to one every `WARN_EVERY_MS`. */
export class Warnings {
  private last: number | undefined;
  private suppressed = 0;

  /** The count suppressed since the last warning, if one may be logged at `now`; else undefined. */
  allow(now: number): number | undefined {
    if (this.last !== undefined && now - this.last < WARN_EVERY_MS) {
      this.suppressed++;
      return undefined;
    }
    this.last = now;
    const n = this.suppressed;
    this.suppressed = 0;
    return n;
  }
}

/**
 * The error an aborted call or wait rejects with: a DOMException named
 * "AbortError", as fetch and the rest of Node reject with, its `cause` the
 * signal's reason, or the leasehold error the call ended with.
 */
export function abortError(cause?: unknown): DOMException {
  return new DOMException("The operation was aborted", { name: "AbortError", cause });
}

/**
 * Waits `ms`, or until `signal` is aborted (then resolves at once, not
 * rejecting: the caller looks at the signal). Its timer is cleared either
 * way, so a stopped wait never keeps the process alive.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    signal?.addEventListener("abort", done, { once: true });
  });
}
