/**
 * The tenants and applications the request path works with: domain objects the
 * compiler (src/model/compile.ts) builds from the config once, not the config's own objects. An
 * application holds its access rules sorted by priority and its search and fingerprint scopes
 * computed (auth/access.ts reads them; nothing is sorted or cached per request), and no key: the
 * key index holds digests only.
 */
import type { Permission } from '../config/schema.js';
import type { RateLimitTenant } from '../rate-limit/limiter.js';
import type { ScopeRule } from '../store/types.js';

export type Transform = 'reveal' | 'mask' | 'redact';
export type ApplicationType = 'private' | 'public' | 'management';

export interface AccessRule {
  readonly priority: number;
  readonly container: string;
  readonly permissions: readonly Permission[];
  readonly transform: Transform;
}

export interface Application {
  readonly id: string;
  readonly name: string;
  readonly type: ApplicationType;
  readonly permissions: readonly Permission[];
  /** In ascending priority (sorted once, at compile time): the first whose container matches decides. */
  readonly rules: readonly AccessRule[];
  readonly legacy: boolean;
  /** Page origins a public application serves; empty for the others. */
  readonly allowedOrigins: readonly string[];
  /** auth/access.ts `searchScope`, computed at compile time. */
  readonly searchScope: ScopeRule[] | undefined;
  /** auth/access.ts `fingerprintScope`, computed at compile time. */
  readonly fingerprintScope: ScopeRule[] | undefined;
}

/**
 * A proxy transform as the original service's clients read it:
 * a mask's pattern and character, an append's location; never code, a code file's path, or an
 * appended value (it may be a credential).
 */
export interface ProxyTransformView {
  readonly type: string;
  readonly matcher?: string;
  readonly expression?: string;
  readonly replacement?: string;
  readonly options?: { readonly identifier?: string; readonly location?: string };
}

/** What the management routes show of a proxy (no key, no code, no configuration value). */
export interface ProxySummary {
  readonly id: string;
  readonly name: string;
  readonly destination_url: string;
  readonly require_auth: boolean;
  readonly timeout_ms: number;
  readonly leak_guard: 'off' | 'log' | 'block';
  readonly request_transforms: readonly ProxyTransformView[];
  readonly response_transforms: readonly ProxyTransformView[];
}

/** What the management routes show of a reactor (no code, no configuration value). */
export interface ReactorSummary {
  readonly id: string;
  readonly name: string;
  /** Its key in the reactor host. */
  readonly key: string;
  readonly timeout_ms: number;
  readonly warm_concurrency: number;
  readonly max_concurrency: number;
  readonly memory_limit_mb: number;
  /** The names of its configuration entries. */
  readonly configuration_names: readonly string[];
}

export interface Tenant extends RateLimitTenant {
  readonly id: string;
  readonly name: string;
  readonly test: boolean;
  readonly max_tokens_per_request: number;
  readonly applications: readonly Application[];
  readonly proxies: readonly ProxySummary[];
  readonly reactors: readonly ReactorSummary[];
}
