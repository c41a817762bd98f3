/**
 * Configuration loading: file + environment → validate → resolve code files → freeze.
 * The only module that reads process.env and config files.
 *
 * src/config/ is a leaf: it imports nothing from the rest of src/. What needs another module (a
 * proxy's pointers and expressions, rate-limit rule names, trust_proxy CIDRs) is found by the
 * compile step (src/model/compile.ts `loadModel`), which reads a file with
 * `readConfigFile` (the config and this module's problems, not thrown) and names the loader's
 * problems and its own in one ConfigError.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parseDocument } from 'yaml';
import type { z } from 'zod';
import { adminListener } from './admin.js';
import { MAX_CODE_LENGTH } from './limits.js';
import { yamlProblems } from './yaml-error.js';
import { configSchema, PUBLIC_PERMISSIONS, TYPE_ONLY_PERMISSIONS, type Config } from './schema.js';

export { MAX_CODE_LENGTH };

export const DEFAULT_CONFIG_PATH = 'config/tokenproxy.yaml';
/** The PostgreSQL store's password, when set. */
export const STORE_PASSWORD_ENV = 'TOKENPROXY_STORE_PASSWORD';

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  ${problems.join('\n  ')}`);
    this.name = 'ConfigError';
  }
}

export interface LoadedConfig extends Config {
  /** Absolute path of the file read, or null for an in-memory config. */
  readonly source: string | null;
  /** TOKENPROXY_MASTER_KEY, when set (base64 of 32 bytes). */
  readonly masterKeyFromEnv: string | undefined;
  /** The HSM PIN from the variable secrets.master_key.pin_env names, when that is set. */
  readonly masterKeyPinFromEnv: string | undefined;
}

export interface LoadOptions {
  path?: string;
  env?: NodeJS.ProcessEnv;
}

export interface ReadOptions {
  source?: string | null;
  env?: NodeJS.ProcessEnv;
  baseDir?: string;
}

/** A schema-valid config, and the problems this module found in it (empty when none). */
export interface ReadConfig {
  config: LoadedConfig;
  problems: string[];
}

/** `tenants[0].applications[1].permissions[2]` from a zod path. */
export function formatPath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else out += out ? `.${String(seg)}` : String(seg);
  }
  return out || '(root)';
}

function zodProblems(error: z.ZodError): string[] {
  return error.issues.map((iss) => `${formatPath(iss.path)}: ${iss.message}`);
}

/** Reads, validates and freezes the config file named by options, flag or environment. */
export function loadConfigFile(opts: LoadOptions = {}): LoadedConfig {
  return orThrow(readConfigFile(opts));
}

/** Validates an in-memory config object (tests and embedding use this directly). */
export function buildConfig(raw: unknown, opts: ReadOptions = {}): LoadedConfig {
  return orThrow(readConfig(raw, opts));
}

function orThrow({ config, problems }: ReadConfig): LoadedConfig {
  if (problems.length) throw new ConfigError(problems);
  return config;
}

/**
 * The config file named by options, flag or environment, read and frozen, with this module's
 * problems (cross-references, code files) returned, not thrown; a file that cannot be read or
 * parsed, or fails the schema, throws (there is no config to return).
 */
export function readConfigFile(opts: LoadOptions = {}): ReadConfig {
  const env = opts.env ?? process.env;
  const path = resolve(opts.path ?? env.TOKENPROXY_CONFIG ?? DEFAULT_CONFIG_PATH);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError([`${path}: cannot read the config file (${(err as NodeJS.ErrnoException).code ?? 'error'})`]);
  }
  // every problem with its line and a caret (config/yaml-error.ts), not the parser's
  // message, which quotes the file and ended on a dangling colon once cut to its first line.
  const doc = parseDocument(text, { prettyErrors: false });
  if (doc.errors.length > 0) throw new ConfigError(yamlProblems(path, text, doc.errors));
  let raw: unknown;
  try {
    raw = doc.toJS();
  } catch (err) {
    // An alias without its anchor is found only here (a ReferenceError that quotes the alias's name).
    const alias = err instanceof ReferenceError && err.message.startsWith('Unresolved alias');
    throw new ConfigError([`${path}: not valid YAML or JSON: ${alias ? 'an alias (*name) names an anchor (&name) that is not set before it' : 'the document cannot be read as data'}`]);
  }
  return readConfig(raw ?? {}, { source: path, env });
}

/** readConfigFile for an in-memory config object. */
export function readConfig(raw: unknown, opts: ReadOptions = {}): ReadConfig {
  const env = opts.env ?? process.env;
  // A section left with only comments in YAML parses as null: treat it as absent (defaults).
  const input = raw && typeof raw === 'object' && !Array.isArray(raw)
    ? Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== null))
    : raw;
  const parsed = configSchema.safeParse(input);
  if (!parsed.success) throw new ConfigError(zodProblems(parsed.error));
  const cfg = parsed.data;
  if (env.PORT !== undefined) {
    const port = Number(env.PORT);
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError([`PORT: not a port number`]);
    cfg.server.port = port;
  }
  if (env.HOST) cfg.server.host = env.HOST;
  // NODE_ENV=production turns production mode on; it never turns it off (a file that
  // says `server.mode: production` stays in production whatever the environment says).
  if (env.NODE_ENV === 'production') cfg.server.mode = 'production';
  // PostgreSQL's password from the environment, as TOKENPROXY_MASTER_KEY: it wins over
  // store.password and a password in store.url. Set but empty is a missing secret, not "none".
  const pgPassword = env.TOKENPROXY_STORE_PASSWORD;
  if (cfg.store.kind === 'postgres' && pgPassword !== undefined) {
    if (pgPassword === '') throw new ConfigError([`${STORE_PASSWORD_ENV}: set but empty`]);
    cfg.store.password = pgPassword;
  }

  const source = opts.source ?? null;
  const baseDir = opts.baseDir ?? (source ? dirname(source) : process.cwd());
  const problems = [...checkReferences(cfg), ...masterKeyProblems(cfg, env.TOKENPROXY_MASTER_KEY !== undefined), ...resolveCode(cfg, baseDir)];
  const pinEnv = cfg.secrets.master_key?.pin_env;
  const loaded: LoadedConfig = {
    ...cfg, source, masterKeyFromEnv: env.TOKENPROXY_MASTER_KEY, masterKeyPinFromEnv: pinEnv === undefined ? undefined : env[pinEnv],
  };
  return { config: deepFreeze(loaded), problems };
}

/**
 * The HSM master key: one PIN source, and no second master key beside it (a key file, or
 * TOKENPROXY_MASTER_KEY, which would otherwise win silently as it wins over the key file).
 */
function masterKeyProblems(cfg: Config, envKeySet: boolean): string[] {
  const hsm = cfg.secrets.master_key;
  if (!hsm) return [];
  const problems: string[] = [];
  if ((hsm.pin_file === undefined) === (hsm.pin_env === undefined)) {
    problems.push('secrets.master_key: give the PIN in exactly one of pin_file and pin_env (never in this file)');
  }
  if (cfg.secrets.master_key_file !== undefined) problems.push('secrets.master_key_file: not with secrets.master_key (one master key: remove one of them)');
  if (envKeySet) problems.push('TOKENPROXY_MASTER_KEY: set while secrets.master_key names an HSM key (one master key: unset the variable)');
  return problems;
}

/** Cross-field rules the schema cannot say alone. */
function checkReferences(cfg: Config): string[] {
  const problems: string[] = [];
  if (cfg.server.request_header_timeout_ms > cfg.server.request_timeout_ms) {
    problems.push('server.request_header_timeout_ms: must not be above server.request_timeout_ms');
  }
  if (cfg.rate_limits.enabled && cfg.rate_limits.store === 'redis' && !cfg.rate_limits.url && !cfg.rate_limits.cluster && !cfg.rate_limits.sentinel) {
    problems.push('rate_limits.url: required (or cluster or sentinel) when rate_limits.store is redis');
  }
  problems.push(...(cfg.store.kind === 'postgres' ? postgresProblems(cfg.store) : redisProblems('store', cfg.store)), ...redisProblems('rate_limits', cfg.rate_limits));
  problems.push(...postgresRateLimitProblems(cfg));
  // server.admin is the one documented way; metrics.port/host, its older spelling, still
  // works alone, but both at once would leave it unclear where /metrics is.
  if (cfg.server.admin && (cfg.metrics.port !== undefined || cfg.metrics.host !== undefined)) {
    problems.push('metrics.port: give server.admin (host, port) or metrics.port/metrics.host, not both; metrics.port is the older spelling of server.admin');
  }
  // Two listeners on one port fail at start with "address in use"; say why before that.
  const admin = adminListener(cfg);
  if (cfg.metrics.enabled && admin && admin.port !== 0 && admin.port === cfg.server.port && overlaps(admin.host, cfg.server.host)) {
    problems.push(`${admin.from === 'server.admin' ? 'server.admin.port' : 'metrics.port'}: must differ from server.port (a separate listener for /metrics); leave it out to serve /metrics on server.port`);
  }
  const tenantIds = new Set<string>();
  const keys = new Set<string>();
  cfg.tenants.forEach((t, ti) => {
    const at = `tenants[${ti}]`;
    if (tenantIds.has(t.id.toLowerCase())) problems.push(`${at}.id: duplicate tenant id`);
    tenantIds.add(t.id.toLowerCase());
    t.applications.forEach((a, ai) => {
      const ap = `${at}.applications[${ai}]`;
      if (a.type === 'public') {
        const granted = [...a.permissions, ...a.rules.flatMap((r) => r.permissions)];
        granted.forEach((p) => {
          if (!PUBLIC_PERMISSIONS.includes(p)) problems.push(`${ap}: a public application may hold only ${PUBLIC_PERMISSIONS.join(', ')}, not "${p}"`);
        });
      }
      for (const { permission, type } of TYPE_ONLY_PERMISSIONS) {
        if (a.type !== type && a.type !== 'public' && (a.permissions.includes(permission) || a.rules.some((r) => r.permissions.includes(permission)))) {
          problems.push(`${ap}: only a ${type} application may hold "${permission}" (this one is ${a.type})`);
        }
      }
      a.keys.forEach((k, ki) => {
        const id = typeof k === 'string' ? `p:${k}` : `h:${k.sha256.toLowerCase()}`;
        if (keys.has(id)) problems.push(`${ap}.keys[${ki}]: this key is already used by another application`);
        keys.add(id);
      });
    });
    const reactorIds = new Set<string>();
    t.reactors.forEach((r, ri) => {
      if (reactorIds.has(r.id)) problems.push(`${at}.reactors[${ri}].id: duplicate reactor id "${r.id}"`);
      reactorIds.add(r.id);
      if (r.max_concurrency < r.warm_concurrency) problems.push(`${at}.reactors[${ri}].max_concurrency: must be at least warm_concurrency`);
    });
    const proxyIds = new Set<string>();
    t.proxies.forEach((p, pi) => {
      const pp = `${at}.proxies[${pi}]`;
      if (proxyIds.has(p.id)) problems.push(`${pp}.id: duplicate proxy id "${p.id}"`);
      proxyIds.add(p.id);
      if ((p.key === undefined) === (p.key_sha256 === undefined)) problems.push(`${pp}: give exactly one of key and key_sha256`);
    });
  });
  return problems;
}

/** Two listen addresses that cannot share a port: the same, or one of them every address. */
function overlaps(a: string, b: string): boolean {
  const any = (h: string) => h === '0.0.0.0' || h === '::';
  return a === b || any(a) || any(b);
}

/** One Redis topology per section; on a Cluster the tenant's hash tag must be the key's first `{…}`. */
function redisProblems(at: string, r: Config['store'] | Config['rate_limits']): string[] {
  const problems: string[] = [];
  const given = (['url', 'cluster', 'sentinel'] as const).filter((k) => r[k] !== undefined);
  if (given.length > 1) problems.push(`${at}: give one of url, cluster and sentinel, not ${given.join(' and ')}`);
  if (r.cluster && /[{}]/.test(r.key_prefix)) {
    problems.push(`${at}.key_prefix: must not contain { or } on a Redis Cluster (the keys carry the tenant as their hash tag, which the first {…} would replace)`);
  }
  return problems;
}

/** The PostgreSQL store's settings; the URL itself is never echoed (it may hold a password). */
function postgresProblems(store: Config['store']): string[] {
  const problems: string[] = [];
  if (store.url === undefined) problems.push('store.url: required when store.kind is postgres (postgres://user@host:port/database)');
  else if (!/^postgres(ql)?:\/\//i.test(store.url)) problems.push('store.url: must start with postgres:// or postgresql:// when store.kind is postgres');
  if (store.cluster || store.sentinel) problems.push('store: cluster and sentinel are Redis settings, not for store.kind postgres');
  return problems;
}

/**
 * `rate_limits.store: postgres` counts on the token store's own pool: it needs a
 * PostgreSQL token store, and the Redis settings of the section would be silently unused.
 */
function postgresRateLimitProblems(cfg: Config): string[] {
  const rl = cfg.rate_limits;
  if (!rl.enabled || rl.store !== 'postgres') return [];
  const problems: string[] = [];
  if (cfg.store.kind !== 'postgres') {
    problems.push(`rate_limits.store: postgres counts in the token store's PostgreSQL database and needs store.kind: postgres (it is ${cfg.store.kind}); use memory or redis here`);
  }
  const redisOnly = (['url', 'cluster', 'sentinel', 'username', 'password', 'tls'] as const).filter((k) => rl[k] !== undefined);
  if (redisOnly.length) {
    problems.push(`rate_limits: ${redisOnly.join(', ')} ${redisOnly.length > 1 ? 'are Redis settings' : 'is a Redis setting'}; rate_limits.store: postgres uses the token store's connection (store.url)`);
  }
  return problems;
}

interface CodeHolder {
  code?: string | undefined;
  code_file?: string | undefined;
}

/** Reads every code_file (relative to the config file) into `code` and checks the length limit. */
function resolveCode(cfg: Config, baseDir: string): string[] {
  const problems: string[] = [];
  const visit = (holder: CodeHolder, at: string, name: string) => {
    if ((holder.code === undefined) === (holder.code_file === undefined)) {
      problems.push(`${at}: give exactly one of code and code_file`);
      return;
    }
    if (holder.code_file !== undefined) {
      const file = resolve(baseDir, holder.code_file);
      try {
        holder.code = readFileSync(file, 'utf8');
      } catch {
        problems.push(`${at}.code_file: cannot read ${file}`);
        return;
      }
    }
    const length = holder.code!.length;
    if (length > MAX_CODE_LENGTH) problems.push(`${at}: code of ${name} is ${length} characters; the limit is ${MAX_CODE_LENGTH}`);
  };
  cfg.tenants.forEach((t, ti) => {
    t.reactors.forEach((r, ri) => visit(r, `tenants[${ti}].reactors[${ri}]`, `reactor "${r.id}"`));
    t.proxies.forEach((p, pi) => {
      p.request_transforms.forEach((tr, i) => {
        if (tr.type === 'code') visit(tr, `tenants[${ti}].proxies[${pi}].request_transforms[${i}]`, `proxy "${p.id}"`);
      });
      p.response_transforms.forEach((tr, i) => {
        if (tr.type === 'code') visit(tr, `tenants[${ti}].proxies[${pi}].response_transforms[${i}]`, `proxy "${p.id}"`);
      });
    });
  });
  return problems;
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}
