/**
 * The tenants section of the compile step: each tenant compiled in one pass into its
 * domain objects (src/auth/tenancy.ts), its keys as digests, its compiled proxies, its reactor
 * definitions and its outbound allow-list (CA files read here, once), or every problem in it,
 * each prefixed with its config path.
 */
import { computeFingerprintScope, computeSearchScope, sortRules } from '../auth/access.js';
import { sha256 } from '../auth/keys.js';
import type { Application, ReactorSummary, Tenant } from '../auth/tenancy.js';
import { MANAGEMENT_READ_PERMISSIONS, type ApplicationConfig, type Permission, type TenantConfig } from '../config/schema.js';
import { checkAllowedOrigins } from '../http/cors.js';
import { take, type Compiled, type Problem } from '../problems.js';
import { compileProxy, type CompiledProxy } from '../proxy/compile.js';
import { compileOutbound, type AllowedEntry } from '../proxy/egress.js';
import { compileRateTable } from '../rate-limit/rules.js';
import type { ReactorDefinition } from '../reactors/runtime.js';

/** One tenant compiled: what the model's indexes are built from. */
export interface CompiledTenant {
  tenant: Tenant;
  /** Every application key as its SHA-256 digest, with its application. */
  apiKeys: ReadonlyArray<{ digest: Buffer; app: Application }>;
  /** Every proxy with the digest of its key. */
  proxies: ReadonlyArray<{ digest: Buffer | undefined; proxy: CompiledProxy }>;
  /** The tenant's reactors, for the reactor host (its proxies' code transforms are in `proxies`). */
  reactors: readonly ReactorDefinition[];
  egress: readonly AllowedEntry[];
}

/** The runtime key of a tenant's reactor. */
export function reactorKey(tenantId: string, reactorId: string): string {
  return `${tenantId}/reactor/${reactorId}`;
}

/**
 * a management application that lists none of the management reads holds all of them,
 * so the GET /applications, /proxies and /reactors that every management key had before these
 * permissions existed keep answering for configs written then. Listing any one of them opts out.
 */
function withManagementReads(a: ApplicationConfig): readonly Permission[] {
  if (a.type !== 'management') return a.permissions;
  const lists = (p: Permission) => a.permissions.includes(p) || a.rules.some((r) => r.permissions.includes(p));
  return MANAGEMENT_READ_PERMISSIONS.some(lists) ? a.permissions : [...a.permissions, ...MANAGEMENT_READ_PERMISSIONS];
}

/** An application's access rules sorted and its scopes computed, once. */
export function compileApplication(a: ApplicationConfig): Application {
  const grants = { permissions: Object.freeze([...withManagementReads(a)]), rules: Object.freeze(sortRules(a.rules).map((r) => Object.freeze({ ...r }))) };
  return Object.freeze({
    id: a.id, name: a.name, type: a.type, legacy: a.legacy, allowedOrigins: Object.freeze([...a.allowed_origins]), ...grants,
    searchScope: computeSearchScope(grants), fingerprintScope: computeFingerprintScope(grants),
  });
}

export function compileTenant(t: TenantConfig, at: string): Compiled<CompiledTenant> {
  const problems: Problem[] = [];
  const rateTable = take(compileRateTable(t.rate_limit_tier, t.custom_rate_limits, at), problems) ?? [];
  const egress = take(compileOutbound(t.outbound, at), problems);
  problems.push(...checkAllowedOrigins(t, at));
  const applications = t.applications.map(compileApplication);
  const reactors: ReactorSummary[] = t.reactors.map((r) => Object.freeze({
    id: r.id, name: r.name, key: reactorKey(t.id, r.id), timeout_ms: r.timeout_ms, warm_concurrency: r.warm_concurrency,
    max_concurrency: r.max_concurrency, memory_limit_mb: r.memory_limit_mb,
    configuration_names: Object.freeze(Object.keys(r.configuration)),
  }));
  // The tenant's proxies are filled in below: a compiled proxy refers to its tenant.
  const proxySummaries: CompiledProxy['settings'][] = [];
  const tenant: Tenant = Object.freeze({
    id: t.id, name: t.name, test: t.test, max_tokens_per_request: t.max_tokens_per_request,
    rateTable,
    applications: Object.freeze(applications), proxies: proxySummaries, reactors: Object.freeze(reactors),
  });
  const proxies: Array<{ digest: Buffer | undefined; proxy: CompiledProxy }> = [];
  t.proxies.forEach((p, pi) => {
    const proxy = take(compileProxy(tenant, p, `${at}.proxies[${pi}]`), problems);
    if (!proxy) return;
    proxySummaries.push(proxy.settings);
    // The loader reports a proxy with neither key nor key_sha256; none here is that problem.
    const digest = p.key !== undefined ? sha256(p.key) : p.key_sha256 !== undefined ? Buffer.from(p.key_sha256, 'hex') : undefined;
    proxies.push({ digest, proxy });
  });
  Object.freeze(proxySummaries);
  if (problems.length > 0 || !egress) return { ok: false, problems };
  const apiKeys = t.applications.flatMap((a, ai) => a.keys.map((k) => ({
    digest: typeof k === 'string' ? sha256(k) : Buffer.from(k.sha256, 'hex'),
    app: applications[ai]!,
  })));
  const definitions: ReactorDefinition[] = t.reactors.map((r) => ({
    key: reactorKey(t.id, r.id),
    name: `${t.name}/${r.id}`,
    code: r.code!,
    configuration: { ...r.configuration },
    timeout_ms: r.timeout_ms,
    warm_concurrency: r.warm_concurrency,
    max_concurrency: r.max_concurrency,
    queue_limit: r.queue_limit,
    memory_limit_mb: r.memory_limit_mb,
  }));
  return {
    ok: true,
    value: { tenant, apiKeys, proxies, reactors: definitions, egress },
  };
}
