/**
 * The compile step: a loaded config (plain, validated data from src/config/) becomes
 * the immutable model that request handling reads, in one pass: `compile(config)` returns the
 * model or every problem. Each section compiler returns its compiled value or its problems (the
 * tenants in tenants.ts; the proxies in src/proxy/compile.ts; the outbound allow-lists in
 * src/proxy/egress.ts), so nothing is checked in one pass and built in another, and every file is
 * read once (a CA file at compile, not again when the policy is built). The model holds domain
 * objects, no config object on the request path: the tenants and applications (access rules
 * sorted, scopes computed, keys as digests), the key index, the compiled proxies, the reactor
 * and code-transform definitions, the egress policy, the CORS policy, the client-IP rules and
 * the request limits.
 *
 * `loadModel` (the CLI, `tokenproxy check-config`) and a reload (reload.ts) read a file and compile
 * it with the same function; the loader's problems and the compiler's are one ConfigError.
 * Request handling reads the current model through one `ModelRef`; a reload swaps the reference,
 * and a request keeps the model it started with.
 */
import { KeyIndex, sha256 } from '../auth/keys.js';
import type { Tenant } from '../auth/tenancy.js';
import { ConfigError, readConfig, readConfigFile, type LoadedConfig, type LoadOptions, type ReadOptions } from '../config/load.js';
import type { TenantConfig } from '../config/schema.js';
import { CorsPolicy } from '../http/cors.js';
import { createClientIp, createPeerTrust, parseCidr, type ClientIpResolver } from '../net/client-ip.js';
import { compiledOr, take, type Compiled, type Problem } from '../problems.js';
import type { CompiledProxy } from '../proxy/compile.js';
import { EgressPolicy, type AllowedEntry } from '../proxy/egress.js';
import type { ReactorDefinition } from '../reactors/runtime.js';
import { compileTenant, type CompiledTenant } from './tenants.js';

export type { Problem };

/** The limits every request is held to, each with its default resolved here (one source). */
export interface RequestLimits {
  readonly bodyLimitBytes: number;
  readonly maxDepth: number;
  /** Lingering close (src/http/linger.ts): `server.lingering_*`; max bytes default twice the body limit. */
  readonly lingerTimeMs: number;
  readonly lingerMaxBytes: number;
}

export interface Model {
  /**
   * The config compiled, with every API and proxy key as its digest (withKeyDigests): for wiring
   * and a reload (what changed, what needs a restart), not for the request path.
   */
  readonly config: LoadedConfig;
  readonly tenants: readonly Tenant[];
  readonly keys: KeyIndex;
  /** By `tenantId/proxyId`. */
  readonly proxies: ReadonlyMap<string, CompiledProxy>;
  /** Every tenant's reactors, then every proxy code transform, for the reactor host. */
  readonly reactors: readonly ReactorDefinition[];
  /** The outbound proxy's allow-lists, CA files loaded (its pools are made on use; closed with it). */
  readonly egress: EgressPolicy;
  readonly cors: CorsPolicy;
  readonly clientIp: ClientIpResolver;
  /** Whether a socket peer is listed in server.trust_proxy. */
  readonly trustedPeer: (address: string) => boolean;
  readonly limits: RequestLimits;
}

/** The one reference to the model in use; swapped whole by a reload. */
export class ModelRef {
  constructor(public current: Model) {}
}

/** `server.trust_proxy` compiled: the client-IP resolver and the peer check. */
function compileTrustProxy(list: readonly string[]): Compiled<Pick<Model, 'clientIp' | 'trustedPeer'>> {
  const problems: Problem[] = [];
  list.forEach((c, i) => {
    if (!parseCidr(c)) problems.push(`server.trust_proxy[${i}]: not an IP address or CIDR`);
  });
  return compiledOr(problems, () => ({ clientIp: createClientIp(list), trustedPeer: createPeerTrust(list) }));
}

function requestLimits(server: LoadedConfig['server']): RequestLimits {
  return Object.freeze({
    bodyLimitBytes: server.body_limit_bytes,
    maxDepth: server.max_depth,
    lingerTimeMs: server.lingering_time_ms,
    lingerMaxBytes: server.lingering_max_bytes ?? 2 * server.body_limit_bytes,
  });
}

/**
 * The config with every API key and proxy key given in plaintext replaced by its SHA-256 digest
 * (`{sha256}`, `key_sha256`), as if the file had held digests: the model never holds a
 * configured key, and a reload compiles its new file the same way. The loaded config is left as
 * it was (the caller drops it).
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

/** The model of a loaded config, or every problem the compiler finds in it (by config path). */
export function compile(config: LoadedConfig): Model | Problem[] {
  const problems: Problem[] = [];
  const trust = take(compileTrustProxy(config.server.trust_proxy), problems);
  const tenants: CompiledTenant[] = [];
  config.tenants.forEach((t, ti) => {
    const c = take(compileTenant(t, `tenants[${ti}]`), problems);
    if (c) tenants.push(c);
  });
  if (problems.length > 0 || !trust) return problems;
  const keys = new KeyIndex();
  const proxies = new Map<string, CompiledProxy>();
  const egress = new Map<string, readonly AllowedEntry[]>();
  for (const c of tenants) {
    for (const { digest, app } of c.apiKeys) keys.addApiKey(digest, c.tenant, app);
    for (const { digest, proxy } of c.proxies) {
      proxies.set(`${c.tenant.id}/${proxy.settings.id}`, proxy);
      if (digest) keys.addProxyKey(digest, c.tenant, proxy.settings);
    }
    egress.set(c.tenant.id, c.egress);
  }
  const domain = Object.freeze(tenants.map((c) => c.tenant));
  return Object.freeze({
    config: withKeyDigests(config),
    tenants: domain,
    keys,
    proxies,
    reactors: Object.freeze([...tenants.flatMap((c) => c.reactors), ...tenants.flatMap((c) => c.proxies.flatMap((p) => p.proxy.definitions))]),
    egress: new EgressPolicy(egress),
    cors: new CorsPolicy(domain),
    ...trust,
    limits: requestLimits(config.server),
  });
}

/** A file or object read and compiled: the loaded config (as the file gives it) and its model. */
export interface LoadedModel {
  config: LoadedConfig;
  model: Model;
}

/** The loader's problems and the compiler's as one ConfigError, or the model. */
function compiledModel({ config, problems }: { config: LoadedConfig; problems: readonly Problem[] }): LoadedModel {
  const compiled = compile(config);
  const all = [...problems, ...(Array.isArray(compiled) ? compiled : [])];
  if (all.length > 0 || Array.isArray(compiled)) throw new ConfigError(all);
  return { config, model: compiled };
}

/** Reads a config file and compiles it; a ConfigError names every problem of the file. */
export function loadModel(opts: LoadOptions = {}): LoadedModel {
  return compiledModel(readConfigFile(opts));
}

/** Validates an in-memory config object and compiles it (tests and embedding). */
export function buildModel(raw: unknown, opts: ReadOptions = {}): LoadedModel {
  return compiledModel(readConfig(raw, opts));
}

/** The model of a config known to be valid, or a ConfigError naming every problem. */
export function compileOrThrow(config: LoadedConfig): Model {
  const compiled = compile(config);
  if (Array.isArray(compiled)) throw new ConfigError(compiled);
  return compiled;
}
