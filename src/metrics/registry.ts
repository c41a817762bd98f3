/**
 * The service's Prometheus metrics (docs/operations.md "Metrics"): one registry per running service, so
 * several services in one process (the tests) never collide in prom-client's global registry.
 *
 * Labels are bounded sets the config or the code defines: route patterns (never the raw path),
 * methods, statuses, rule names, token types, proxy and tenant ids, outcome and error codes. No key,
 * token id, value, client IP or raw path is ever a label value.
 *
 * The modules that count things see only the small interfaces below (RequestMetrics,
 * ProxyMetrics, ReactorMetrics, VaultMetrics, StoreMetrics), never prom-client.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { RequestMetrics } from '../http/metrics.js';
import type { ProxyMetrics } from '../proxy/metrics.js';
import type { ReactorMetrics } from '../reactors/metrics.js';
import type { StoreDurability } from '../store/types.js';
import type { VaultMetrics } from '../vault/metrics.js';
import { FastHistogram, type HistogramChild } from './histogram.js';

const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** Request latency buckets (seconds): sub-millisecond answers up to the 60 s request timeout. */
const REQUEST_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const DESTINATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
const STORE_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

export interface StoreMetrics {
  written(operation: string, started: bigint): void;
  writeFailed(operation: string): void;
  created(type: string, count: number): void;
}

const secondsSince = (started: bigint): number => Number(process.hrtime.bigint() - started) / 1e9;
/** The same from a performance.now() reading (the per-request series). */
const secondsSinceMs = (started: number): number => (performance.now() - started) / 1000;

export class ServiceMetrics implements RequestMetrics, ReactorMetrics, VaultMetrics {
  readonly registry = new Registry();
  /** Observed on every request: a FastHistogram (histogram.ts), not prom-client's. */
  private readonly requests: FastHistogram<'method' | 'route' | 'status'>;
  /** Resolved children by method, then route, then status: no string built per request. */
  private readonly requestChildren = new Map<string, Map<string, Map<number, HistogramChild>>>();
  private readonly limited: Counter<'rule'>;
  private readonly tokensCreated: Counter<'type'>;
  private readonly reveals: Counter<'type'>;
  private readonly destination: FastHistogram<'tenant' | 'proxy'>;
  private readonly destinationErrors: Counter<'tenant' | 'proxy' | 'code'>;
  private readonly leakFindings: Counter<'tenant' | 'proxy' | 'action'>;
  private readonly reactorCalls: Counter<'outcome'>;
  private readonly hostRestarts: Counter;
  private readonly storeWrites: Histogram<'store' | 'operation'>;
  private readonly storeErrors: Counter<'store' | 'operation'>;
  private readonly durability: Gauge<'store' | 'appendonly' | 'appendfsync' | 'accepted_loss'>;

  constructor() {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.requests = new FastHistogram({
      name: 'tokenproxy_http_request_duration_seconds',
      help: 'Time from a request arriving to its answer being written, by route pattern, method and status.',
      labelNames: ['method', 'route', 'status'], buckets: REQUEST_BUCKETS, registers,
    });
    this.limited = new Counter({ name: 'tokenproxy_rate_limited_total', help: 'Requests refused with 429, by the rate-limit rule that refused them.', labelNames: ['rule'], registers });
    this.tokensCreated = new Counter({ name: 'tokenproxy_tokens_created_total', help: 'Tokens written to the store (deduplicated ones not counted), by token type.', labelNames: ['type'], registers });
    this.reveals = new Counter({ name: 'tokenproxy_token_reveals_total', help: 'Token reads answered with the plaintext (the reveal transform), by token type.', labelNames: ['type'], registers });
    this.destination = new FastHistogram({
      name: 'tokenproxy_proxy_destination_duration_seconds',
      help: 'Time from forwarding a proxied request to the destination\'s response head, by tenant and proxy id.',
      labelNames: ['tenant', 'proxy'], buckets: DESTINATION_BUCKETS, registers,
    });
    this.destinationErrors = new Counter({ name: 'tokenproxy_proxy_destination_errors_total', help: 'Proxied requests that failed at the destination, by tenant, proxy id and error code.', labelNames: ['tenant', 'proxy', 'code'], registers });
    this.leakFindings = new Counter({ name: 'tokenproxy_leak_guard_findings_total', help: 'Plaintext card numbers the leak guard found in bodies to a destination, by tenant, proxy id and action.', labelNames: ['tenant', 'proxy', 'action'], registers });
    this.reactorCalls = new Counter({ name: 'tokenproxy_reactor_calls_total', help: 'Reactor and code-transform calls answered by the reactor host, by outcome (ok, timeout, out_of_memory, user_error, host_gone…).', labelNames: ['outcome'], registers });
    this.hostRestarts = new Counter({ name: 'tokenproxy_reactor_host_restarts_total', help: 'Times the reactor host process died and was started again.', registers });
    this.storeWrites = new Histogram({
      name: 'tokenproxy_store_write_duration_seconds',
      help: 'Token store writes that succeeded, by store kind and operation.',
      labelNames: ['store', 'operation'], buckets: STORE_BUCKETS, registers,
    });
    this.storeErrors = new Counter({ name: 'tokenproxy_store_write_errors_total', help: 'Token store writes that failed (a duplicate id is not a failure), by store kind and operation.', labelNames: ['store', 'operation'], registers });
    this.durability = new Gauge({
      name: 'tokenproxy_store_durability',
      help: 'Redis store: 1 for the persistence its primaries had at start (the weakest of them; unknown where Redis would not say) and whether store.durability accepts loss.',
      labelNames: ['store', 'appendonly', 'appendfsync', 'accepted_loss'], registers,
    });
  }

  request(method: string | undefined, route: string, status: number, started: number): void {
    const m = method !== undefined && METHODS.has(method) ? method : 'other';
    let byRoute = this.requestChildren.get(m);
    if (!byRoute) this.requestChildren.set(m, (byRoute = new Map()));
    let byStatus = byRoute.get(route);
    if (!byStatus) byRoute.set(route, (byStatus = new Map()));
    let child = byStatus.get(status);
    if (!child) byStatus.set(status, (child = this.requests.labels(m, route, String(status))));
    child.observe(secondsSinceMs(started));
  }

  rateLimited(rule: string): void {
    this.limited.inc({ rule });
  }

  revealed(type: string): void {
    this.reveals.inc({ type });
  }

  call(outcome: string): void {
    this.reactorCalls.inc({ outcome });
  }

  hostRestarted(): void {
    this.hostRestarts.inc();
  }

  proxy(tenant: string, proxy: string): ProxyMetrics {
    const latency = this.destination.labels(tenant, proxy);
    const errors = this.destinationErrors;
    const leaks = this.leakFindings;
    return {
      answered: (started) => latency.observe(secondsSinceMs(started)),
      failed: (code) => errors.inc({ tenant, proxy, code }),
      leaks: (findings, blocked) => leaks.inc({ tenant, proxy, action: blocked ? 'blocked' : 'forwarded' }, findings),
    };
  }

  store(kind: string): StoreMetrics {
    const writes = new Map<string, { observe(v: number): void }>();
    const created = new Map<string, { inc(n: number): void }>();
    return {
      written: (operation, started) => {
        let child = writes.get(operation);
        if (!child) writes.set(operation, (child = this.storeWrites.labels(kind, operation)));
        child.observe(secondsSince(started));
      },
      writeFailed: (operation) => this.storeErrors.inc({ store: kind, operation }),
      created: (type, count) => {
        let child = created.get(type);
        if (!child) created.set(type, (child = this.tokensCreated.labels(type)));
        child.inc(count);
      },
    };
  }

  /** Set once at start: labels from a small fixed set (store/types.ts StoreDurability), never a node's address. */
  storeDurability(kind: string, d: StoreDurability): void {
    this.durability.set({ store: kind, appendonly: d.appendonly, appendfsync: d.appendfsync, accepted_loss: String(d.accepted_loss) }, 1);
  }

  /** The text exposition format (docs/operations.md "Metrics"). */
  render(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
