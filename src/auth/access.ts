/**
 * Every access decision about tokens, in one place ("what a key can learn is what its
 * access rule allows"). The token API, POST /tokenize, the proxy's tokenize transforms and the
 * reactors' `tokenize` all reach tokens through vault/service.ts, which asks this module and no
 * one else; a new route that goes through the service cannot forget a rule.
 *
 * The rules (docs/concepts.md "Keys, permissions and containers"):
 * - Access rules are checked in ascending priority; the first whose container is a prefix of the
 *   token's container decides; none decides → denied. An application without rules holds its
 *   plain permissions on every container, with `mask`.
 * - An expression over `data` is a read of `data`: changing `fingerprint_expression`,
 *   `search_indexes` or `mask` of an existing token without supplying its data needs
 *   `token:read` with `reveal` on the token's container.
 * - Deduplication matches only tokens the caller could read (`token:read` on the container).
 * - Fingerprints are shown only to keys that may read the token, and a fingerprint filter (list
 *   or search) matches only such tokens.
 * - List and search show only tokens in containers the key may `token:search`; the store applies
 *   that as part of its query (searchScope), so pages are full.
 */
import type { Permission } from '../config/schema.js';
import { ServiceError } from '../errors.js';
import type { ScopeRule } from '../store/types.js';
import type { AccessRule, Application, Transform } from './tenancy.js';

export type { ScopeRule, Transform };

/** What the scopes are computed from: an application's permissions and its rules in priority order. */
export interface Grants {
  readonly permissions: readonly Permission[];
  /** Sorted by ascending priority (sortRules). */
  readonly rules: readonly AccessRule[];
}

/** The rules in the order they are checked (the compiler sorts once; not per request). */
export function sortRules<R extends { priority: number }>(rules: readonly R[]): R[] {
  return [...rules].sort((a, b) => a.priority - b.priority);
}

/** Whether the application holds `permission` anywhere (the route-level check). */
export function holds(app: Application, permission: Permission): boolean {
  return app.permissions.includes(permission) || app.rules.some((r) => r.permissions.includes(permission));
}

/** The transform granted for `permission` on `container`, or null when denied. */
export function grant(app: Grants, permission: Permission, container: string): Transform | null {
  const rules = app.rules;
  if (rules.length === 0) return app.permissions.includes(permission) ? 'mask' : null;
  for (const rule of rules) {
    if (container.startsWith(rule.container)) return rule.permissions.includes(permission) ? rule.transform : null;
  }
  return null;
}

/** The transform granted, or 403 forbidden. */
export function requireGrant(app: Application, permission: Permission, container: string): Transform {
  const g = grant(app, permission, container);
  if (g === null) throw new ServiceError('forbidden', { detail: `The key lacks ${permission} on container ${container}` });
  return g;
}

/** How a token in `container` is shown to this key by a read, list or search: redact without read. */
export function readTransform(app: Application, container: string): Transform {
  return grant(app, 'token:read', container) ?? 'redact';
}

/** Whether the key may read tokens of `container` at all (any transform). */
export function mayRead(app: Application, container: string): boolean {
  return grant(app, 'token:read', container) !== null;
}

/** Fingerprints are shown only to keys that may read the token. */
export const showsFingerprint = mayRead;

/**
 * Whether `deduplicate_token` may match an existing token of `container` for this key: only when
 * the key could read it. Otherwise the definition creates a new token, as without the flag.
 */
export const mayDeduplicate = mayRead;

/**
 * A fingerprint matches only tokens whose fingerprint the key may see: the containers a
 * list or search with a fingerprint filter runs in, as the store takes it (TokenFilter.scope), are
 * those the key may both `token:search` and read (showsFingerprint). A key that may list a
 * container but not read it would otherwise create its guess where it reads, take the fingerprint
 * from the answer and search for it: a right guess would name the token that holds the number.
 * The store applies this scope in its query, so pages stay full. `undefined`: every container.
 * Equal to `grant(app, 'token:search', c) !== null && showsFingerprint(app, c)` for every c.
 */
export function fingerprintScope(app: Application): ScopeRule[] | undefined {
  return app.fingerprintScope;
}

/** fingerprintScope of an application, computed once by the compiler. */
export function computeFingerprintScope(app: Grants): ScopeRule[] | undefined {
  const both = (perms: readonly Permission[]) => perms.includes('token:search') && perms.includes('token:read');
  const rules = app.rules;
  let scope: ScopeRule[] | undefined;
  if (rules.length === 0) {
    scope = both(app.permissions) ? undefined : [];
  } else {
    scope = [];
    for (const r of rules) {
      scope.push({ prefix: r.container, allow: both(r.permissions) });
      if (r.container === '/') break; // every container starts with "/": later rules never decide
    }
    while (scope.length > 0 && !scope[scope.length - 1]!.allow) scope.pop();
    if (scope.length === 1 && scope[0]!.prefix === '/') scope = undefined;
  }
  return scope;
}

/** The expression fields of a token; changing one is a read of the token's data. */
export type ExpressionField = 'fingerprint_expression' | 'search_indexes' | 'mask';

/**
 * An expression over `data` is a read of `data`: a PATCH that changes any of `changed` on an
 * existing token without supplying the whole of its data needs `token:read` with `reveal` on its
 * container; else 403. (Creating with expressions is free: the creator supplies the data.)
 */
export function requireExpressionWrite(app: Application, container: string, changed: readonly ExpressionField[], suppliesData: boolean): void {
  if (changed.length === 0 || suppliesData) return;
  if (grant(app, 'token:read', container) === 'reveal') return;
  throw new ServiceError('forbidden', {
    detail: `Changing ${changed.join(', ')} of an existing token without supplying its data needs token:read with reveal on container ${container}`,
  });
}

/**
 * The containers a key may list and search, as the store takes it (TokenFilter.scope): an ordered
 * list of prefixes, the first that matches a container decides, none matching → left out.
 * `undefined`: every container. Equal to `grant(app, 'token:search', c) !== null` for every c.
 */
export function searchScope(app: Application): ScopeRule[] | undefined {
  return app.searchScope;
}

/** searchScope of an application, computed once by the compiler. */
export function computeSearchScope(app: Grants): ScopeRule[] | undefined {
  const rules = app.rules;
  let scope: ScopeRule[] | undefined;
  if (rules.length === 0) {
    scope = app.permissions.includes('token:search') ? undefined : [];
  } else {
    scope = [];
    for (const r of rules) {
      scope.push({ prefix: r.container, allow: r.permissions.includes('token:search') });
      if (r.container === '/') break; // every container starts with "/": later rules never decide
    }
    // Denials at the end change nothing (no match is a denial too).
    while (scope.length > 0 && !scope[scope.length - 1]!.allow) scope.pop();
    if (scope.length === 1 && scope[0]!.prefix === '/') scope = undefined;
  }
  return scope;
}

/**
 * `token:use` is a right to send a value, not to learn it. Filters whose success and
 * output length depend only on the input's length and the filter's arguments, never on its
 * content: selecting a field (`json`), cutting by position (`slice`, `last4`, `reveal_last`,
 * `reveal_first`), adding constants (`append`, `prepend`) and case (`upcase`, `downcase`). Not
 * `replace`, `remove`, `split`, `truncatewords`, `default`, `size`, `strip`, `digits`, …: their
 * result tells something of what the value holds.
 */
export const LENGTH_ONLY_FILTERS: ReadonlySet<string> = new Set([
  'json', 'slice', 'last4', 'reveal_last', 'reveal_first', 'append', 'prepend', 'upcase', 'downcase',
]);

/**
 * The filters a detokenization expression over a token of `container` may use for this key:
 * every filter ('all') with token:read `reveal` there (it may read the value anyway), else only
 * LENGTH_ONLY_FILTERS (a key that may use or see a masked value but not read it).
 */
export function computeFilters(app: Application, container: string): 'all' | ReadonlySet<string> {
  return grant(app, 'token:read', container) === 'reveal' ? 'all' : LENGTH_ONLY_FILTERS;
}

/**
 * Where the values of a tokenize come from: `clear`, the caller sent them in the request body (or
 * detokenized them from tokens it may read with reveal); `use-only`, they were computed from values
 * the caller may use but not read (a reactor's tokenize after its args were detokenized).
 */
export type ValueOrigin = 'clear' | 'use-only';

/**
 * Whose templates may run over the values: `caller`, any expression the definitions carry;
 * `named`, the type's defaults and named options only (vault/templates.ts); `none`, nothing may
 * be tokenized from them at all.
 */
export type TemplatePolicy = 'caller' | 'named' | 'none';

/**
 * A caller's template (id, fingerprint, mask, search index) computes on a value, and what it
 * yields (an id, a failure, a match) reaches the caller: it may run only over a value the caller
 * sent in the clear or may reveal. A public key is a browser's, and its values may come from a
 * hosted field the page cannot read (the page chooses the body around them), so it gets `named`
 * whatever it sends. Values computed from what the key may only use get `none`: no template rule
 * keeps them in, since their type and data are the caller's choice too (a piece of a card
 * tokenized as an account number shows the card's middle digits as the account's last 4; a check
 * digit over a piece answers 200 or 400 by digits the key may not see).
 */
export function templatePolicy(app: Application, origin: ValueOrigin): TemplatePolicy {
  if (origin === 'use-only') return 'none';
  return app.type === 'public' ? 'named' : 'caller';
}
