/**
 * Wiring only: builds the store, the key ring, the vault, limits and the reactor host once, and
 * serves the compiled model (src/model/compile.ts: keys, proxies, reactors, the egress and CORS
 * policies, the request limits) through a pipeline
 * built per model, so a reload (src/model/reload.ts) swaps it whole. Logic lives in the modules
 * wired here.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { healthRoutes } from './api/health.js';
import { managementRoutes } from './api/management.js';
import { openApiRoutes } from './api/openapi.js';
import { proxyRoutes } from './api/proxy.js';
import { reactorRoutes } from './api/reactors.js';
import { AsyncReactorCalls, asyncReactorRoutes } from './api/reactor-results.js';
import { tokenRoutes } from './api/tokens.js';
import { detokenizeRoutes } from './api/detokenize.js';
import { AuditTrail } from './audit/trail.js';
import { Detokenizer } from './detokenize/service.js';
import { adminListener } from './config/admin.js';
import type { LoadedConfig } from './config/load.js';
import { openStoreAndRing } from './crypto/open.js';
import { StoreGuard } from './store/identity.js';
import { closeSilentConnections } from './http/connections.js';
import { DRAIN_IDLE_MS, trackConnections } from './http/drain.js';
import { Idempotency } from './http/idempotency.js';
import type { Route } from './http/context.js';
import { elementsRoutes } from './elements/routes.js';
import { createPipeline, createUpgradeHandler, type PipelineOptions } from './http/pipeline.js';
import { createLogger, errorFields, type Logger } from './log.js';
import { compileOrThrow, ModelRef, type Model } from './model/compile.js';
import { ReactorHostSync, Reloader, startKeyRefresh, type ReactorHostOptions, type ReloadOutcome } from './model/reload.js';
import { metricsEndpoint } from './metrics/endpoint.js';
import { ServiceMetrics } from './metrics/registry.js';
import { instrumentStore } from './metrics/store.js';
import { servicePorts } from './store/service-errors.js';
import { postgresPoolOf, RateLimitService } from './rate-limit/limiter.js';
import { createRateLimitStage } from './rate-limit/stage.js';
import { connectRefuser } from './proxy/methods.js';
import { OutboundProxy } from './proxy/outbound.js';
import { InboundProxy } from './proxy/inbound.js';
import type { Store } from './store/types.js';
import { TokenService } from './vault/service.js';

export interface RunningService {
  server: Server;
  /** http://host:port of the listening server. */
  url: string;
  port: number;
  store: Store;
  tokens: TokenService;
  /** Resolves detokenization expressions for every route that has them (and writes the audit trail). */
  detokenizer: Detokenizer;
  log: Logger;
  /** The model requests are served with now (swapped by `reload`). */
  readonly model: Model;
  /**
   * Re-reads the config file (SIGHUP): a valid file swaps the model (requests in flight finish on
   * the old one); an invalid one keeps the running model and logs every problem.
   */
  reload(): Promise<ReloadOutcome>;
  /** http://host:port of the admin listener serving /metrics (server.admin or metrics.port), else null. */
  metricsUrl: string | null;
  /** Every route of the router serving the current model (the OpenAPI document lists them). */
  readonly routes: readonly Route[];
  /**
   * Graceful stop: /readyz answers 503 at once, the listeners stop accepting, every answer from
   * then on says `Connection: close` and ends its connection, a keep-alive connection idle for 1 s
   * is closed (src/http/drain.ts), requests in flight get `server.shutdown_grace_ms` to finish
   * (then they are cut; asynchronous reactor runs get the same grace, then are stored as failed),
   * and only then the reactor host, the store and its writer thread are stopped.
   */
  close(): Promise<void>;
  /**
   * The first step of `close` alone: /readyz answers 503 and the listeners stop accepting, while
   * the connections open are served as before. A cluster's worker takes it, and drains (`close`)
   * once every worker has (src/cluster.ts): a connection accepted meanwhile by the primary for a
   * worker that had already closed it would be reset. The grace counts from this call.
   */
  stopAccepting(): void;
}

export interface StartOptions {
  log?: Logger;
  /**
   * For tests only: how often the expired cvcs and reactor results (default every 60 s) and idempotency
   * entries (every 10 minutes) are purged, so a test can watch the service's own purge without
   * waiting minutes. Nothing in the config or the command line sets it; `tokenproxy start` never
   * passes it.
   */
  purgeEveryMs?: { cvc?: number; idempotency?: number };
  /** The model compiled from `config` (the CLI compiled it while reading the file); compiled here when absent. */
  model?: Model;
  /**
   * For tests only: how the reactor host process is started (the tests run the compiled host.js
   * when dist/ is up to date, without their own loaders: test/helpers/cli-entry.ts). `tokenproxy
   * start` never passes it; the default runs this node on the host entry beside the service's code.
   */
  reactorHost?: ReactorHostOptions;
  /**
   * For tests only: how long a draining listener lets a keep-alive connection sit idle before it
   * closes it (src/http/drain.ts, default DRAIN_IDLE_MS). The in-process tests pass 0, so closing
   * a service whose test client keeps a connection open does not take a second more each time.
   * `tokenproxy start` never passes it.
   */
  drainIdleMs?: number;
}

const CVC_PURGE_INTERVAL_MS = 60_000;

/**
 * How often Node checks the request and header timeouts. Node's default, 30 s, let a
 * request run up to 30 s past `request_timeout_ms` (a body trickling in was cut after 30.0 s with
 * a 1 s timeout): checking at a quarter of the shorter timeout keeps the overshoot within 25% of
 * it. The check walks only connections with a request in progress, not idle ones.
 */
export function timeoutCheckInterval(requestMs: number, headersMs: number): number {
  return Math.max(100, Math.min(30_000, Math.floor(Math.min(requestMs, headersMs) / 4)));
}

/** What serves one model: its pipeline and proxies, and how many of its requests are in flight. */
interface Serving {
  model: Model;
  handle: (req: IncomingMessage, res: ServerResponse) => void;
  upgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void;
  proxies: InboundProxy;
  outbound: OutboundProxy;
  routes: Route[];
  inFlight: number;
  retired: boolean;
}

export async function startService(config: LoadedConfig, opts: StartOptions = {}): Promise<RunningService> {
  const log = opts.log ?? createLogger(config.log.level);
  // Compiled first: a bad config fails before the master key is read or a connection is made.
  const first = opts.model ?? compileOrThrow(config);
  const metrics = config.metrics.enabled ? new ServiceMetrics() : undefined;
  // The guard's gates go beneath the metrics' wrappers, so a call the guard refuses counts as a failed write.
  let guard: StoreGuard | undefined;
  const { store, ring, marker } = await openStoreAndRing(config, log, undefined, (s) => {
    guard = new StoreGuard(s, log).install();
    return instrumentStore(s, metrics?.store(config.store.kind));
  }, {
    // A Redis store's persistence is read and checked before anything is written (store/redis/durability.ts).
    durability: { mode: config.server.mode, setting: config.store.durability },
  });
  if (store.durability) metrics?.storeDurability(store.kind, store.durability);
  // The ring closes after the store: in HSM mode it holds a session on the HSM until then.
  const cleanups: Array<() => Promise<void> | void> = [() => store.close(), () => ring.close()];
  try {
    // From here every store call first makes sure the store is still the one opened (store/identity.ts).
    guard!.arm(marker!);
    cleanups.unshift(() => guard!.stop());
    // Every audit append goes through one trail: anchored, its new heads logged. The
    // vault and the detokenizer append to it themselves.
    // The request path's ports answer a failing store as 503 store_unavailable (store/service-errors.ts).
    const ports = servicePorts(store);
    const audit = new AuditTrail(ports.audit, ring.auditAnchors(), log);
    cleanups.push(() => audit.close());
    const tokens = new TokenService(ports.tokens, ring, {
      maxDepth: config.server.max_depth,
      cvcRetentionMs: config.store.cvc_retention_seconds * 1000,
      metrics,
      audit,
    });
    const detokenizer = new Detokenizer(ports.tokens, tokens, { audit, log });
    // `rate_limits.store: postgres` counts on the token store's own pool.
    const limits = await RateLimitService.create(config.rate_limits, { log, ipv6Prefix: config.server.ipv6_prefix, postgres: postgresPoolOf(store) });
    cleanups.push(() => limits.close());
    await limits.ready();
    // The reactor host process starts only when some tenant has reactors (at start or at a
    // reload); the main process never loads isolated-vm itself.
    const reactors = new ReactorHostSync(log, config.server.body_limit_bytes, metrics, opts.reactorHost);
    cleanups.push(() => reactors.close());
    await reactors.sync(first.reactors);
    const rateLimits = createRateLimitStage(limits, metrics);
    let draining = false;
    const drainIdleMs = opts.drainIdleMs ?? DRAIN_IDLE_MS;
    const metricsHttp = metricsEndpoint(config.metrics, adminListener(config), metrics, drainIdleMs);
    const idempotency = new Idempotency({ store: ports.idempotency, ring, log, ...(opts.purgeEveryMs?.idempotency ? { purgeEveryMs: opts.purgeEveryMs.idempotency } : {}) });
    cleanups.push(() => idempotency.close());
    // asynchronous reactor calls' background runs, their results sealed in the store.
    const asyncCalls = new AsyncReactorCalls({ store: ports.reactorResults, ring, log });
    const serve = (model: Model): Serving => {
      const { limits: server, cors } = model;
      const proxies = new InboundProxy(model.proxies, {
        tokens, runtime: reactors.runtime, bodyLimit: server.bodyLimitBytes, maxDepth: server.maxDepth, log,
        trustedPeer: model.trustedPeer, metrics, detokenizer,
      });
      // The outbound proxy's allow-lists are the model's: a reload changes them with the rest.
      const outbound = new OutboundProxy({
        egress: model.egress, detokenizer, bodyLimit: server.bodyLimitBytes, maxDepth: server.maxDepth,
      });
      const routes: Route[] = [
        ...healthRoutes(store, () => draining, guard), ...tokenRoutes(tokens), ...managementRoutes(), ...reactorRoutes(reactors.runtime, tokens, detokenizer),
        ...asyncReactorRoutes({ runtime: reactors.runtime, tokens, detokenizer, calls: asyncCalls, ttlMs: model.config.reactors.async_result_ttl_seconds * 1000 }),
        ...proxyRoutes(proxies, outbound),
        ...detokenizeRoutes(detokenizer, audit), ...metricsHttp.routes, ...elementsRoutes(model.keys, cors),
      ];
      routes.push(...openApiRoutes(() => routes));
      const pipelineOptions: PipelineOptions = {
        routes,
        keys: model.keys,
        log,
        bodyLimit: server.bodyLimitBytes,
        maxDepth: server.maxDepth,
        clientIp: model.clientIp,
        cors,
        rateLimits,
        idempotency,
        metrics,
        linger: { timeMs: server.lingerTimeMs, maxBytes: server.lingerMaxBytes },
      };
      return {
        model, proxies, outbound, routes, inFlight: 0, retired: false,
        handle: createPipeline(pipelineOptions),
        upgrade: createUpgradeHandler(pipelineOptions),
      };
    };
    // The one reference request handling reads; a reload replaces it whole.
    const live = new ModelRef(first);
    let serving = serve(first);
    cleanups.push(() => serving.proxies.close(), () => serving.outbound.close());
    const server = createServer({
      requestTimeout: config.server.request_timeout_ms,
      headersTimeout: config.server.request_header_timeout_ms,
      connectionsCheckingInterval: timeoutCheckInterval(config.server.request_timeout_ms, config.server.request_header_timeout_ms),
      keepAliveTimeout: 65_000,
    }, (req, res) => {
      // Not served: it came behind an answer that closed its connection (a stop is under way).
      if (!connections.admit(req, res)) return;
      // A request is served by the model current when it arrived, to its end.
      const s = serving;
      s.inFlight++;
      res.once('close', () => {
        if (--s.inFlight === 0 && s.retired) retire(s);
      });
      s.handle(req, res);
    });
    const connections = trackConnections(server, drainIdleMs);
    closeSilentConnections(server, config.server.request_header_timeout_ms);
    server.on('upgrade', (req, socket, head) => serving.upgrade(req, socket, head));
    server.on('connect', connectRefuser(log));
    // When the stop began (stopAccepting): the grace counts from it.
    let stopAt: number | null = null;
    const stopAccepting = (): void => {
      if (stopAt !== null) return;
      stopAt = Date.now();
      draining = true;
      connections.stopAccepting();
      metricsHttp.stopAccepting();
    };
    cleanups.unshift(async () => {
      stopAccepting();
      const until = stopAt! + live.current.config.server.shutdown_grace_ms;
      const grace = Math.max(0, until - Date.now());
      // The admin listener drains beside the public one, so neither waits for the other.
      await Promise.all([connections.drain(grace), metricsHttp.close(grace)]);
      // asynchronous reactor runs get what is left of the same grace (the exit deadline
      // counts from the signal), then those still running are stored as failed, before the store
      // and the reactor host close.
      await asyncCalls.close(Math.max(0, until - Date.now()));
    });
    const purge = setInterval(() => {
      store.tokens.purgeCvc(new Date()).catch((err: unknown) => log.warn({ error: errorFields(err) }, 'cvc purge failed; will retry'));
      // expired asynchronous reactor results (Redis expires its own).
      store.reactorResults.purgeReactorResults(new Date()).catch((err: unknown) => log.warn({ error: errorFields(err) }, 'reactor result purge failed; will retry'));
    }, opts.purgeEveryMs?.cvc ?? CVC_PURGE_INTERVAL_MS);
    purge.unref();
    cleanups.unshift(() => clearInterval(purge));
    const refresh = startKeyRefresh(ring, config.store.data_key_refresh_seconds, log);
    cleanups.unshift(refresh);
    // An old model's last request is done: its proxy and outbound pools close, and reactors the
    // current model no longer has are disposed. The only retire (a second, module-level
    // one that also closed the outbound pool was shadowed by this one, so that pool never closed).
    const retire = (s: Serving): void => {
      void s.proxies.retire();
      s.outbound.close().catch((err: unknown) => log.warn({ error: { type: (err as Error).name } }, 'closing a retired outbound pool failed'));
      reactors.prune(live.current.reactors).catch((err: unknown) => log.warn({ error: { type: (err as Error).name } }, 'disposing removed reactors failed'));
    };
    const reloader = new Reloader(log, ring, reactors, live, (model) => {
      const old = serving;
      serving = serve(model);
      // The rate limiter lets go of removed tenants and of the limiters only they used.
      limits.retain(model.config.tenants.map((t) => t.id));
      old.retired = true;
      if (old.inFlight === 0) retire(old);
    });
    await new Promise<void>((res, rej) => {
      server.once('error', rej);
      server.listen(config.server.port, config.server.host, () => res());
    });
    const metricsUrl = await metricsHttp.listen();
    const { port, address } = server.address() as AddressInfo;
    const host = address.includes(':') ? `[${address}]` : address;
    return {
      server, port, url: `http://${host}:${port}`, store, tokens, detokenizer, log, metricsUrl,
      get model() {
        return live.current;
      },
      reload: () => reloader.reload(),
      get routes() {
        return serving.routes;
      },
      stopAccepting,
      close: async () => {
        draining = true;
        for (const c of cleanups) await c();
      },
    };
  } catch (err) {
    for (const c of cleanups) await c();
    throw err;
  }
}
