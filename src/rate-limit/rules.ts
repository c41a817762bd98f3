/**
 * The spec's rate-limit tables ("Limits": default tier, higher tier, legacy rules) as data.
 *
 * A rule is a definition (name, counter, which requests it applies to) plus limits per tier
 * (points, window, mitigation). Nothing here branches on a rule name: the limiter walks the list,
 * asks `ruleMatches` and counts the request on every rule that matches; the strictest decides
 * (docs/rate-limits.md).
 *
 * This module is pure (no I/O, no rate-limiter-flexible): it is what the config validator, the
 * "Rules" table of docs/rate-limits.md and its test read.
 */
import type { RateRuleOverride } from '../config/schema.js';
import { compiledOr, type Compiled } from '../problems.js';

export type Tier = 'default' | 'higher';
export type KeyKind = 'public' | 'private' | 'management';
export type RouteGroup =
  | 'tokenize'
  | 'tokens.create'
  | 'tokens.list'
  | 'tokens.search.get'
  | 'tokens.search.post'
  | 'tokens.read'
  | 'tokens.update'
  | 'tokens.delete'
  | 'reactor'
  | 'reactor.tokenize'
  | 'management'
  | 'proxy'
  | 'health';

/**
 * What a rule counts by (the spec's "Counter" column):
 * - `api_key`: SVC-API-KEY (its digest);
 * - `api_key_ip`: SVC-API-KEY and client IP;
 * - `proxy_key`: SVC-PROXY-KEY (its digest);
 * - `ip`: client IP (the legacy rules).
 * Every counter is also scoped by tenant.
 */
export type Counter = 'api_key' | 'api_key_ip' | 'proxy_key' | 'ip';

export type Mitigation = { kind: 'throttle' } | { kind: 'block'; blockSeconds: number };

export interface RuleLimits {
  points: number;
  durationSeconds: number;
  mitigation: Mitigation;
}

/** Which requests a rule applies to. Every present condition must hold. */
export interface RuleMatch {
  /** The request's route group is one of these (an empty list: the rule is attached to nothing). */
  routes: readonly RouteGroup[];
  /** Only for tenants flagged `test: true`. */
  testTenant?: true;
  /** The API key belongs to an application of one of these types. */
  keyKinds?: readonly KeyKind[];
  /** Only for applications marked `legacy: true`. */
  legacy?: true;
}

export const RULE_NAMES = [
  'test_tenant',
  'management_key',
  'public_key',
  'public_key_total',
  'proxy_endpoint',
  'private_key',
  'listing_tokens',
  'creating_tokens',
  'legacy_global',
  'legacy_portal',
  'legacy_tokens_search_post',
  'legacy_tokens_list',
  'legacy_tokens_create',
] as const;
export type RuleName = (typeof RULE_NAMES)[number];

export interface RuleDefinition {
  name: RuleName;
  /** The spec's wording of the row, for logs and docs. */
  title: string;
  counter: Counter;
  match: RuleMatch;
}

export const ROUTE_GROUPS: readonly RouteGroup[] = [
  'tokenize',
  'tokens.create',
  'tokens.list',
  'tokens.search.get',
  'tokens.search.post',
  'tokens.read',
  'tokens.update',
  'tokens.delete',
  'reactor',
  'management',
  'proxy',
  'health',
];

/** Every route a limit can apply to: all but the health check (probes are never limited). */
export const LIMITED_ROUTES: readonly RouteGroup[] = ROUTE_GROUPS.filter((r) => r !== 'health');
/**
 * Not a route: the `tokenize` a reactor returned, counted once the reactor ran on the
 * creating rules only, as one POST /tokenize (rate-limit/stage.ts countReactorTokenize). It is in
 * no other rule's list (not in ROUTE_GROUPS), so the call is not counted twice on the key's rule.
 */
export const REACTOR_TOKENIZE: RouteGroup = 'reactor.tokenize';
/** Spec: "Listing tokens (GET /tokens, GET /tokens/search)". */
export const LISTING_ROUTES: readonly RouteGroup[] = ['tokens.list', 'tokens.search.get'];
/** Spec: "Creating tokens (POST /tokens, POST /tokenize)", and what a reactor's `tokenize` creates. */
export const CREATING_ROUTES: readonly RouteGroup[] = ['tokens.create', 'tokenize', REACTOR_TOKENIZE];

export const RULES: readonly RuleDefinition[] = [
  { name: 'test_tenant', title: 'Test tenant', counter: 'api_key', match: { routes: LIMITED_ROUTES, testTenant: true } },
  { name: 'management_key', title: 'Management API key', counter: 'api_key', match: { routes: LIMITED_ROUTES, keyKinds: ['management'] } },
  { name: 'public_key', title: 'Public API key', counter: 'api_key_ip', match: { routes: LIMITED_ROUTES, keyKinds: ['public'] } },
  // Not in the spec's tables: public keys live in browser code and `public_key` counts
  // per address, so without a ceiling one key could be used without bound from many addresses.
  { name: 'public_key_total', title: 'Public API key, all addresses', counter: 'api_key', match: { routes: LIMITED_ROUTES, keyKinds: ['public'] } },
  { name: 'proxy_endpoint', title: 'Proxy endpoint', counter: 'proxy_key', match: { routes: ['proxy'] } },
  { name: 'private_key', title: 'Private API key', counter: 'api_key', match: { routes: LIMITED_ROUTES, keyKinds: ['private'] } },
  { name: 'listing_tokens', title: 'Listing tokens (GET /tokens, GET /tokens/search)', counter: 'api_key_ip', match: { routes: LISTING_ROUTES } },
  { name: 'creating_tokens', title: 'Creating tokens (POST /tokens, POST /tokenize)', counter: 'api_key_ip', match: { routes: CREATING_ROUTES } },
  { name: 'legacy_global', title: 'Legacy: Global', counter: 'ip', match: { routes: LIMITED_ROUTES, legacy: true } },
  // The spec's legacy Portal rule guards a web portal this service does not have: it stays in the
  // data (so a custom override naming it is valid) but is attached to no route.
  { name: 'legacy_portal', title: 'Legacy: Portal', counter: 'ip', match: { routes: [], legacy: true } },
  { name: 'legacy_tokens_search_post', title: 'Legacy: POST /tokens/search', counter: 'ip', match: { routes: ['tokens.search.post'], legacy: true } },
  { name: 'legacy_tokens_list', title: 'Legacy: GET /tokens', counter: 'ip', match: { routes: ['tokens.list'], legacy: true } },
  { name: 'legacy_tokens_create', title: 'Legacy: POST /tokens and POST /tokenize', counter: 'ip', match: { routes: CREATING_ROUTES, legacy: true } },
];

const throttle = (points: number, durationSeconds: number): RuleLimits => ({
  points,
  durationSeconds,
  mitigation: { kind: 'throttle' },
});
const block = (points: number, durationSeconds: number, blockSeconds: number): RuleLimits => ({
  points,
  durationSeconds,
  mitigation: { kind: 'block', blockSeconds },
});

/** Spec, "Legacy rules (counter: client IP)": the same in both tiers; every one is a block rule. */
const LEGACY: Record<Extract<RuleName, `legacy_${string}`>, RuleLimits> = {
  legacy_global: block(1000, 10, 10),
  legacy_portal: block(600, 10, 10),
  legacy_tokens_search_post: block(50, 10, 10),
  legacy_tokens_list: block(100, 10, 10),
  legacy_tokens_create: block(200, 10, 10),
};

export const TIERS: Readonly<Record<Tier, Readonly<Record<RuleName, RuleLimits>>>> = {
  // Spec, "Rate limits (default)".
  default: {
    test_tenant: throttle(50, 10),
    management_key: block(200, 60, 60),
    public_key: block(50, 10, 10),
    // 10× public_key: generous for a key shared by every browser of a site, a bound for one abuser.
    public_key_total: throttle(500, 10),
    proxy_endpoint: throttle(500, 10),
    private_key: throttle(1000, 10),
    listing_tokens: throttle(200, 10),
    creating_tokens: throttle(200, 10),
    ...LEGACY,
  },
  // Spec, "Rate limits (higher tier, available on request to the operator)".
  higher: {
    // The spec lists the test tenant row of the higher tier "without values": we keep the
    // default tier's values (50 / 10 s, throttle). A tenant that needs more uses custom_rate_limits.
    test_tenant: throttle(50, 10),
    management_key: block(400, 60, 60),
    public_key: block(100, 10, 10),
    public_key_total: throttle(1000, 10),
    proxy_endpoint: throttle(1000, 10),
    private_key: throttle(2000, 10),
    listing_tokens: throttle(400, 10),
    creating_tokens: throttle(400, 10),
    ...LEGACY,
  },
};

export interface EffectiveRule extends RuleDefinition {
  limits: RuleLimits;
}

export function isRuleName(name: string): name is RuleName {
  return (RULE_NAMES as readonly string[]).includes(name);
}

/**
 * One override over one tier's limits. `mitigation: block` without `block_seconds` blocks for
 * the (effective) window; `mitigation: throttle` drops the block.
 */
export function applyOverride(base: RuleLimits, o: RateRuleOverride | undefined): RuleLimits {
  if (!o) return base;
  const points = o.points ?? base.points;
  const durationSeconds = o.duration_seconds ?? base.durationSeconds;
  const kind = o.mitigation ?? base.mitigation.kind;
  if (kind === 'throttle') return { points, durationSeconds, mitigation: { kind } };
  const blockSeconds =
    o.block_seconds ?? (base.mitigation.kind === 'block' ? base.mitigation.blockSeconds : durationSeconds);
  return { points, durationSeconds, mitigation: { kind, blockSeconds } };
}

/** A tenant's rules: its tier's limits with its custom overrides merged over them, in table order. */
export function resolveRules(tier: Tier, custom: Readonly<Record<string, RateRuleOverride>> = {}): EffectiveRule[] {
  const limits = TIERS[tier];
  return RULES.map((def) => ({ ...def, limits: applyOverride(limits[def.name], custom[def.name]) }));
}

/**
 * A tenant's rate-limit table compiled: its tier's rules with its custom overrides
 * merged, built once by the compile step, or the problems of `custom_rate_limits` (prefixed with
 * `at`, the tenant's config path).
 */
export function compileRateTable(tier: Tier, custom: Readonly<Record<string, RateRuleOverride>>, at: string): Compiled<readonly EffectiveRule[]> {
  const problems = validateCustomRateLimits(tier, custom).map((p) => `${at}.custom_rate_limits: ${p}`);
  return compiledOr(problems, () => Object.freeze(resolveRules(tier, custom)));
}

/**
 * Problems in a tenant's `custom_rate_limits` (empty when valid), for the config loader:
 * unknown rule names, and `block_seconds` on a rule that stays a throttle rule.
 */
export function validateCustomRateLimits(tier: Tier, custom: Readonly<Record<string, RateRuleOverride>>): string[] {
  const problems: string[] = [];
  for (const [name, o] of Object.entries(custom)) {
    if (!isRuleName(name)) {
      problems.push(`unknown rate-limit rule ${JSON.stringify(name)} (known: ${RULE_NAMES.join(', ')})`);
      continue;
    }
    const kind = o.mitigation ?? TIERS[tier][name].mitigation.kind;
    if (o.block_seconds !== undefined && kind !== 'block') {
      problems.push(`${name}: block_seconds needs mitigation: block`);
    }
  }
  return problems;
}

/** The facts about a request that rule matching needs. */
export interface MatchFacts {
  route: RouteGroup;
  testTenant: boolean;
  keyKind?: KeyKind;
  legacy?: boolean;
}

export function ruleMatches(m: RuleMatch, f: MatchFacts): boolean {
  if (!m.routes.includes(f.route)) return false;
  if (m.testTenant && !f.testTenant) return false;
  if (m.keyKinds && (f.keyKind === undefined || !m.keyKinds.includes(f.keyKind))) return false;
  if (m.legacy && f.legacy !== true) return false;
  return true;
}
