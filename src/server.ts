/**
 * Wiring only: builds the store, the key ring, the vault, keys, limits and routes from the
 * config, and serves them. Logic lives in the modules wired here.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, resolve } from 'node:path';
import { healthRoutes } from './api/health.js';
import { managementRoutes } from './api/management.js';
import { proxyRoutes } from './api/proxy.js';
import { reactorDefinitions, reactorRoutes } from './api/reactors.js';
import { tokenRoutes } from './api/tokens.js';
import { KeyIndex } from './auth/keys.js';
import type { LoadedConfig } from './config/load.js';
import { KeyRing } from './crypto/keyring.js';
import { loadMasterKey } from './crypto/master-key.js';
import { createClientIp, createPeerTrust } from './http/client-ip.js';
import { closeSilentConnections } from './http/connections.js';
import type { Route } from './http/context.js';
import { createPipeline, createUpgradeHandler, type PipelineOptions } from './http/pipeline.js';
import { createLogger, type Logger } from './log.js';
import { RateLimitService } from './rate-limit/limiter.js';
import { createRateLimitStage } from './rate-limit/stage.js';
import { ReactorRuntime } from './reactors/runtime.js';
import { proxyTransformDefinitions } from './proxy/compile.js';
import { connectRefuser } from './proxy/methods.js';
import { ProxyService } from './proxy/service.js';
import { createStore } from './store/factory.js';
import type { TokenStore } from './store/types.js';
import { TokenService } from './vault/service.js';

export interface RunningService {
  server: Server;
  /** http://host:port of the listening server. */
  url: string;
  port: number;
  store: TokenStore;
  tokens: TokenService;
  log: Logger;
  /**
   * Graceful stop: /readyz answers 503 at once, the listener stops accepting, idle keep-alive
   * connections are closed, requests in flight get `server.shutdown_grace_ms` to finish (then they
   * are cut), and only then the reactor host, the store and its writer thread are stopped.
   */
  close(): Promise<void>;
}

export interface StartOptions {
  log?: Logger;
}

const CVC_PURGE_INTERVAL_MS = 60_000;

export async function startService(config: LoadedConfig, opts: StartOptions = {}): Promise<RunningService> {
  const log = opts.log ?? createLogger(config.log.level);
  // The master key first: a missing or bad key fails before any connection is made.
  const master = loadMasterKey({
    fromEnv: config.masterKeyFromEnv,
    file: config.secrets.master_key_file,
    storeKind: config.store.kind,
    dataDir: dirname(resolve(config.store.path)),
    warn: (msg) => log.warn(msg),
  });
  const store = await createStore(config.store, { log });
  const cleanups: Array<() => Promise<void> | void> = [() => store.close()];
  try {
    const ring = await KeyRing.open(master, store);
    master.fill(0);
    const tokens = new TokenService(store, ring, {
      maxDepth: config.server.max_depth,
      cvcRetentionMs: config.store.cvc_retention_seconds * 1000,
    });
    const limits = RateLimitService.create(config.rate_limits, { log });
    cleanups.push(() => limits.close());
    // The reactor host process starts only when some tenant has reactors; the main process never
    // loads isolated-vm itself.
    const reactors = [...reactorDefinitions(config.tenants), ...proxyTransformDefinitions(config.tenants)];
    let runtime: ReactorRuntime | null = null;
    if (reactors.length > 0) {
      runtime = await ReactorRuntime.start({ log, payloadLimitBytes: config.server.body_limit_bytes });
      cleanups.push(() => runtime!.close());
      await runtime.register(reactors);
    }
    const proxies = new ProxyService(config.tenants, {
      tokens, runtime, bodyLimit: config.server.body_limit_bytes, maxDepth: config.server.max_depth, log,
      trustedPeer: createPeerTrust(config.server.trust_proxy),
    });
    cleanups.push(() => proxies.close());
    let draining = false;
    const routes: Route[] = [
      ...healthRoutes(store, () => draining), ...tokenRoutes(tokens), ...managementRoutes(), ...reactorRoutes(runtime, tokens), ...proxyRoutes(proxies),
    ];
    const pipelineOptions: PipelineOptions = {
      routes,
      keys: new KeyIndex(config.tenants),
      log,
      bodyLimit: config.server.body_limit_bytes,
      maxDepth: config.server.max_depth,
      clientIp: createClientIp(config.server.trust_proxy),
      rateLimits: createRateLimitStage(limits),
      linger: {
        timeMs: config.server.lingering_time_ms,
        maxBytes: config.server.lingering_max_bytes ?? 2 * config.server.body_limit_bytes,
      },
    };
    const server = createServer({
      requestTimeout: config.server.request_timeout_ms,
      headersTimeout: config.server.request_header_timeout_ms,
      keepAliveTimeout: 65_000,
    }, createPipeline(pipelineOptions));
    closeSilentConnections(server, config.server.request_header_timeout_ms);
    server.on('upgrade', createUpgradeHandler(pipelineOptions, (ctx, socket, head) => proxies.upgrade(ctx, socket, head)));
    server.on('connect', connectRefuser(log));
    cleanups.unshift(() => drainServer(server, config.server.shutdown_grace_ms));
    const purge = setInterval(() => {
      store.purgeCvc(new Date()).catch(() => log.warn('cvc purge failed; will retry'));
    }, CVC_PURGE_INTERVAL_MS);
    purge.unref();
    cleanups.unshift(() => clearInterval(purge));
    await new Promise<void>((res, rej) => {
      server.once('error', rej);
      server.listen(config.server.port, config.server.host, () => res());
    });
    const { port, address } = server.address() as AddressInfo;
    const host = address.includes(':') ? `[${address}]` : address;
    return {
      server, port, url: `http://${host}:${port}`, store, tokens, log,
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

/** How often a draining server closes the keep-alive connections that have become idle. */
const DRAIN_POLL_MS = 50;

/**
 * Stops accepting, then closes each keep-alive connection as soon as it is idle (its request
 * answered) until none is left; whatever is still busy after `graceMs` is cut.
 */
function drainServer(server: Server, graceMs: number): Promise<void> {
  return new Promise((res) => {
    const poll = setInterval(() => server.closeIdleConnections(), DRAIN_POLL_MS);
    const cut = setTimeout(() => server.closeAllConnections(), graceMs);
    server.close(() => {
      clearInterval(poll);
      clearTimeout(cut);
      res();
    });
    server.closeIdleConnections();
  });
}
