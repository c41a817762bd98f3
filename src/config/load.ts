/**
 * Configuration loading: file + environment → validate → resolve code files → freeze.
 * The only module that reads process.env and config files.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { parseCidr } from '../http/client-ip.js';
import { checkProxy } from '../proxy/compile.js';
import { validateCustomRateLimits } from '../rate-limit/rules.js';
import { configSchema, PUBLIC_PERMISSIONS, type Config } from './schema.js';

/** Spec: maximum code length accepted by a Reactor (also for proxy code transforms). */
export const MAX_CODE_LENGTH = 50_000;

export const DEFAULT_CONFIG_PATH = 'config/tokenproxy.yaml';

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
}

export interface LoadOptions {
  path?: string;
  env?: NodeJS.ProcessEnv;
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
  const env = opts.env ?? process.env;
  const path = resolve(opts.path ?? env.TOKENPROXY_CONFIG ?? DEFAULT_CONFIG_PATH);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError([`${path}: cannot read the config file (${(err as NodeJS.ErrnoException).code ?? 'error'})`]);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (err) {
    throw new ConfigError([`${path}: not valid YAML or JSON: ${(err as Error).message.split('\n')[0]}`]);
  }
  return buildConfig(raw ?? {}, { source: path, env });
}

/** Validates an in-memory config object (tests and embedding use this directly). */
export function buildConfig(raw: unknown, opts: { source?: string | null; env?: NodeJS.ProcessEnv; baseDir?: string } = {}): LoadedConfig {
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

  const source = opts.source ?? null;
  const baseDir = opts.baseDir ?? (source ? dirname(source) : process.cwd());
  const problems = [...checkReferences(cfg), ...resolveCode(cfg, baseDir)];
  if (problems.length) throw new ConfigError(problems);

  const loaded: LoadedConfig = { ...cfg, source, masterKeyFromEnv: env.TOKENPROXY_MASTER_KEY };
  return deepFreeze(loaded);
}

/** Cross-field rules the schema cannot say alone. */
function checkReferences(cfg: Config): string[] {
  const problems: string[] = [];
  cfg.server.trust_proxy.forEach((c, i) => {
    if (!parseCidr(c)) problems.push(`server.trust_proxy[${i}]: not an IP address or CIDR`);
  });
  if (cfg.server.request_header_timeout_ms > cfg.server.request_timeout_ms) {
    problems.push('server.request_header_timeout_ms: must not be above server.request_timeout_ms');
  }
  if (cfg.rate_limits.enabled && cfg.rate_limits.store === 'redis' && !cfg.rate_limits.url) {
    problems.push('rate_limits.url: required when rate_limits.store is redis');
  }
  const tenantIds = new Set<string>();
  const keys = new Set<string>();
  cfg.tenants.forEach((t, ti) => {
    const at = `tenants[${ti}]`;
    for (const p of validateCustomRateLimits(t.rate_limit_tier, t.custom_rate_limits)) problems.push(`${at}.custom_rate_limits: ${p}`);
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
      problems.push(...checkProxy(p, pp));
    });
  });
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
