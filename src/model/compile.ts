/**
 * The compile step: a loaded config (plain, validated data from src/config/) becomes the immutable
 * model that request handling reads: the key index, the compiled proxies, the reactor and
 * code-transform definitions for the reactor host, and the client-IP rules. Every problem the
 * other modules find in a config (a proxy's pointers and expressions, rate-limit rule names,
 * trust_proxy entries) is collected by `modelChecks`, which the loader runs with its own checks
 * so that one ConfigError names all of them.
 *
 * Request handling reads the current model through one `ModelRef`; a reload (reload.ts) compiles
 * a new model and swaps the reference, and a request keeps the model it started with.
 */
import { reactorDefinitions } from '../api/reactors.js';
import { KeyIndex, sha256 } from '../auth/keys.js';
import { ConfigError, loadConfigFile, type LoadedConfig, type LoadOptions } from '../config/load.js';
import type { Config, TenantConfig } from '../config/schema.js';
import { checkAllowedOrigins } from '../http/cors.js';
import { createClientIp, createPeerTrust, parseCidr, type ClientIpResolver } from '../net/client-ip.js';
import { checkProxy, compileProxy, proxyTransformDefinitions, type CompiledProxy } from '../proxy/compile.js';
import { checkOutbound } from '../proxy/egress.js';
import { validateCustomRateLimits } from '../rate-limit/rules.js';
import type { ReactorDefinition } from '../reactors/runtime.js';

export interface Model {
  /** The config compiled, with every API and proxy key as its digest (withKeyDigests). */
  readonly config: LoadedConfig;
  readonly keys: KeyIndex;
  /** By `tenantId/proxyId`. */
  readonly proxies: ReadonlyMap<string, CompiledProxy>;
  /** Every tenant's reactors and every proxy code transform, for the reactor host. */
  readonly reactors: readonly ReactorDefinition[];
  readonly clientIp: ClientIpResolver;
  /** Whether a socket peer is listed in server.trust_proxy. */
  readonly trustedPeer: (address: string) => boolean;
}

/** The one reference to the model in use; swapped whole by a reload. */
export class ModelRef {
  constructor(public current: Model) {}
}

/** The checks of a config that need modules outside src/config/ (see src/config/load.ts `checks`). */
export function modelChecks(cfg: Config): string[] {
  const problems: string[] = [];
  cfg.server.trust_proxy.forEach((c, i) => {
    if (!parseCidr(c)) problems.push(`server.trust_proxy[${i}]: not an IP address or CIDR`);
  });
  cfg.tenants.forEach((t, ti) => {
    for (const p of validateCustomRateLimits(t.rate_limit_tier, t.custom_rate_limits)) problems.push(`tenants[${ti}].custom_rate_limits: ${p}`);
    problems.push(...checkOutbound(t, `tenants[${ti}]`));
    problems.push(...checkAllowedOrigins(t, `tenants[${ti}]`));
    t.proxies.forEach((p, pi) => problems.push(...checkProxy(p, `tenants[${ti}].proxies[${pi}]`)));
  });
  return problems;
}

/** Reads and validates a config file with every check, the model's included. */
export function loadFullConfig(opts: LoadOptions = {}): LoadedConfig {
  return loadConfigFile({ ...opts, checks: modelChecks });
}

/**
 * The config with every API key and proxy key given in plaintext replaced by its SHA-256 digest
 * (`{sha256}`, `key_sha256`), as if the file had held digests (issue 23): the model, and so every
 * Principal and compiled proxy built from it, never holds a configured key, and a reload compiles
 * its new file the same way. The loaded config is left as it was (the caller drops it).
 */
function withKeyDigests(config: LoadedConfig): LoadedConfig {
  const hex = (key: string) => sha256(key).toString('hex');
  const tenants = config.tenants.map((t): TenantConfig => Object.freeze({
    ...t,
    applications: Object.freeze(t.applications.map((a) => Object.freeze({
      ...a, keys: Object.freeze(a.keys.map((k) => (typeof k === 'string' ? Object.freeze({ sha256: hex(k) }) : k))) as typeof a.keys,
    }))) as TenantConfig['applications'],
    proxies: Object.freeze(t.proxies.map(({ key, ...p }) => Object.freeze(key === undefined ? p : { ...p, key_sha256: hex(key) }))) as TenantConfig['proxies'],
  }));
  return Object.freeze({ ...config, tenants: Object.freeze(tenants) as LoadedConfig['tenants'] });
}

/**
 * Compiles a loaded config; a config built without `modelChecks` is checked here (ConfigError).
 * The model keeps key digests only (withKeyDigests).
 */
export function compileModel(loaded: LoadedConfig): Model {
  const problems = modelChecks(loaded);
  if (problems.length) throw new ConfigError(problems);
  const config = withKeyDigests(loaded);
  const proxies = new Map<string, CompiledProxy>();
  for (const tenant of config.tenants) {
    for (const p of tenant.proxies) proxies.set(`${tenant.id}/${p.id}`, compileProxy(tenant, p));
  }
  return Object.freeze({
    config,
    keys: new KeyIndex(config.tenants),
    proxies,
    reactors: Object.freeze([...reactorDefinitions(config.tenants), ...proxyTransformDefinitions(config.tenants)]),
    clientIp: createClientIp(config.server.trust_proxy),
    trustedPeer: createPeerTrust(config.server.trust_proxy),
  });
}
