/**
 * The isolates of one reactor (host process only).
 *
 * Spec: hot concurrency 1 by default, cold starts for concurrent calls. So `warm_concurrency`
 * isolates are built at registration and kept; a call that finds none idle cold-starts an extra
 * one while fewer than `max_concurrency` exist; beyond that it waits in a FIFO queue of at most
 * `queue_limit` (for at most `timeout_ms`), and a full queue answers `busy`. Extra isolates are
 * disposed after `idleMs` without work. Broken isolates are disposed and warm ones replaced.
 */
import { Sandbox, type CompiledCode } from './isolate.js';
import type { CallResult, HostReactorDef, ServedBy } from './protocol.js';

/** A failed warm replacement is retried after this long (never in a tight loop). */
const RETRY_WARM_MS = 1000;

export interface PoolEvents {
  onCatastrophicError(key: string, message: string): void;
  log(level: 'info' | 'warn' | 'error', msg: string, reactor: string): void;
}

interface Waiter {
  resolve(sb: Sandbox): void;
  reject(failure: CallResult): void;
  timer: NodeJS.Timeout;
}

const busy = (): CallResult => ({ ok: false, failure: { kind: 'busy' }, logs: [] });

export class ReactorPool {
  private readonly idle: Sandbox[] = [];
  private readonly waiters: Waiter[] = [];
  private readonly compiled: CompiledCode = {};
  /** Isolates alive or being built; `warmLive` counts the warm ones among them. */
  private live = 0;
  private warmLive = 0;
  private starting = 0;
  private closed = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private readonly max: number;

  constructor(
    readonly def: HostReactorDef,
    private readonly idleMs: number,
    private readonly events: PoolEvents,
  ) {
    this.max = Math.max(def.max_concurrency, def.warm_concurrency);
  }

  /** Builds the warm isolates; throws (ReactorCodeError for bad code) with nothing left running. */
  async init(): Promise<void> {
    // The first build also produces the code cache the others reuse.
    const first = await this.build();
    first.warm = true;
    const rest = await Promise.allSettled(Array.from({ length: this.def.warm_concurrency - 1 }, () => this.build()));
    const built = [first, ...rest.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []))];
    const failed = rest.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      for (const sb of built) sb.dispose();
      throw failed.reason;
    }
    for (const sb of built) {
      sb.warm = true;
      this.idle.push(sb);
    }
    this.live = this.warmLive = built.length;
  }

  async invoke(argsJson: string): Promise<CallResult> {
    return (await this.invokeServed(argsJson)).result;
  }

  /** `invoke`, and which isolate served the call (none when it was refused before one ran it). */
  async invokeServed(argsJson: string): Promise<{ result: CallResult; served?: ServedBy }> {
    let sb: Sandbox;
    try {
      sb = await this.acquire();
    } catch (failure) {
      return { result: failure as CallResult };
    }
    const result = await sb.run(argsJson);
    const served = sb.served;
    this.release(sb);
    return { result, served };
  }

  /** Stops taking calls; in-flight calls finish, then their isolates go too. */
  close(): void {
    this.closed = true;
    clearTimeout(this.retryTimer);
    for (const w of this.waiters.splice(0)) {
      clearTimeout(w.timer);
      w.reject({ ok: false, failure: { kind: 'unknown_reactor' }, logs: [] });
    }
    for (const sb of this.idle.splice(0)) sb.dispose();
  }

  /** For tests and diagnostics. */
  stats(): { live: number; idle: number; waiting: number; starting: number } {
    return { live: this.live, idle: this.idle.length, waiting: this.waiters.length, starting: this.starting };
  }

  private build(): Promise<Sandbox> {
    return Sandbox.create(this.def, this.compiled, (message) => this.events.onCatastrophicError(this.def.key, message));
  }

  private acquire(): Promise<Sandbox> {
    if (this.closed) return Promise.reject({ ok: false, failure: { kind: 'unknown_reactor' }, logs: [] });
    const sb = this.idle.pop();
    if (sb) {
      clearTimeout(sb.idleTimer);
      return Promise.resolve(sb);
    }
    // Waiters that a starting isolate will serve do not count against the queue limit.
    const queued = this.waiters.length - this.starting;
    if (this.live >= this.max && queued >= this.def.queue_limit) return Promise.reject(busy());
    return new Promise<Sandbox>((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        timer: setTimeout(() => {
          const i = this.waiters.indexOf(waiter);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(busy());
        }, this.def.timeout_ms),
      };
      this.waiters.push(waiter);
      if (this.live < this.max) this.spawn(false);
    });
  }

  private release(sb: Sandbox): void {
    if (sb.broken || sb.disposed || this.closed) {
      sb.dispose();
      this.live--;
      if (sb.warm) this.warmLive--;
      this.replenish();
      return;
    }
    const w = this.waiters.shift();
    if (w) {
      clearTimeout(w.timer);
      w.resolve(sb);
      return;
    }
    this.idle.push(sb);
    if (!sb.warm) {
      sb.idleTimer = setTimeout(() => {
        const i = this.idle.indexOf(sb);
        if (i < 0) return;
        this.idle.splice(i, 1);
        sb.dispose();
        this.live--;
      }, this.idleMs);
      sb.idleTimer.unref();
    }
  }

  /** Keeps the warm count, and starts isolates for waiters nobody is building for. */
  private replenish(): void {
    if (this.closed) return;
    while (this.warmLive < this.def.warm_concurrency && this.live < this.max) this.spawn(true);
    while (this.waiters.length > this.starting && this.live < this.max) this.spawn(false);
  }

  private spawn(warm: boolean): void {
    this.live++;
    this.starting++;
    if (warm) this.warmLive++;
    this.build().then(
      (sb) => {
        this.starting--;
        sb.warm = warm;
        this.release(sb);
      },
      (err: unknown) => {
        this.starting--;
        this.live--;
        if (warm) this.warmLive--;
        this.events.log('error', `could not start an isolate: ${err instanceof Error ? err.message : String(err)}`, this.def.key);
        // A waiter that counted on this isolate must not wait for nothing.
        if (this.waiters.length > this.starting && this.live === 0) {
          const w = this.waiters.shift();
          if (w) {
            clearTimeout(w.timer);
            w.reject({ ok: false, failure: { kind: 'internal', message: 'could not start an isolate' }, logs: [] });
          }
        }
        if (!this.closed && warm) {
          clearTimeout(this.retryTimer);
          this.retryTimer = setTimeout(() => this.replenish(), RETRY_WARM_MS);
          this.retryTimer.unref();
        }
      },
    );
  }
}
