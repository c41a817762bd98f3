/**
 * Bookkeeping of rate-limit store failures: every failure is counted; logs go out at most once
 * per interval (a Redis outage under load must not turn into one log line per request), each
 * carrying how many failures it stands for. Recovery and connection errors are logged the same way.
 */
import type { Logger } from '../log.js';

export class StoreHealth {
  private total = 0;
  private unlogged = 0;
  private degraded = false;
  private lastFailureLog = -Infinity;
  private lastRecoveryLog = -Infinity;
  private lastConnectionLog = -Infinity;

  constructor(
    private readonly log: Logger,
    private readonly mode: 'reject' | 'allow',
    private readonly intervalMs: number,
  ) {}

  get failures(): number {
    return this.total;
  }

  /** One check met a store failure (an error or the timeout). */
  failed(err: unknown): void {
    this.total++;
    this.unlogged++;
    this.degraded = true;
    const now = Date.now();
    if (now - this.lastFailureLog < this.intervalMs) return;
    this.lastFailureLog = now;
    this.log.warn(
      {
        event: 'rate_limit_store_error',
        failures: this.unlogged,
        total_failures: this.total,
        on_store_error: this.mode,
        // ioredis / rate-limiter-flexible messages name the failure (ECONNREFUSED host:port,
        // "Redis connection is not ready"); never a key, a value or the URL's password.
        error: err instanceof Error ? err.message : String(err),
      },
      this.mode === 'allow' ? 'rate-limit store failed; counting on this instance only' : 'rate-limit store failed; rejecting with 503',
    );
    this.unlogged = 0;
  }

  /** A check whose every consume reached the store. */
  ok(): void {
    if (!this.degraded) return;
    this.degraded = false;
    const now = Date.now();
    if (now - this.lastRecoveryLog < this.intervalMs) return;
    this.lastRecoveryLog = now;
    this.log.info(
      { event: 'rate_limit_store_recovered', unlogged_failures: this.unlogged, total_failures: this.total },
      'rate-limit store recovered',
    );
  }

  /** A connection error of a client the service owns (reconnect attempts). */
  connectionError(err: Error): void {
    const now = Date.now();
    if (now - this.lastConnectionLog < this.intervalMs) return;
    this.lastConnectionLog = now;
    this.log.warn({ event: 'rate_limit_store_connection_error', error: err.message }, 'rate-limit store connection failed; reconnecting');
  }
}
