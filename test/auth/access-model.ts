/**
 * A small reference model of the access rules, written from the README ("Keys, permissions and
 * containers", "The token API", "Token definitions"), not from src/: the generated access suite
 * compares what the service answers with what this says.
 *
 * - Route level: a key that holds a permission nowhere (neither in `permissions` nor in a rule)
 *   gets 403 before anything else.
 * - Rules are checked in ascending priority; the first whose container is a prefix of the
 *   token's container decides; none → denied. Without rules, `permissions` apply everywhere
 *   with `mask`.
 * - Reads: reveal (plaintext), mask (cards: all but the last 4 digits as X; `token`: its mask
 *   expression, or no data), redact (no data). Lists and searches show only containers the key
 *   may search, each token shaped by the key's read rule (redact without read).
 * - Fingerprints are shown only to keys that may read the token, and a fingerprint filter (list
 *   `?fingerprint=` or search `fingerprint:`) matches only tokens the key may read: a key that may
 *   list a container but not read it cannot learn which of its tokens holds a guessed value.
 * - An expression over `data` is a read of `data`: changing fingerprint_expression,
 *   search_indexes or mask without supplying the whole data needs read with reveal (403).
 * - Every expression must depend on data: a constant is 400.
 * - Dedupe matches the oldest live token of the same tenant, type, container and fingerprint,
 *   only when the key may read that container; otherwise a new token.
 */

export type Perm = 'token:create' | 'token:read' | 'token:update' | 'token:delete' | 'token:search';
export type Transform = 'reveal' | 'mask' | 'redact';
export const PERMS: readonly Perm[] = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search'];

export interface Rule {
  priority: number;
  container: string;
  permissions: Perm[];
  transform: Transform;
}

export interface AppSpec {
  permissions: Perm[];
  rules: Rule[];
}

export interface Card {
  number: string;
  expiration_month: number;
  expiration_year: number;
}

export type TokenType = 'token' | 'card';

export function holds(app: AppSpec, perm: Perm): boolean {
  return app.permissions.includes(perm) || app.rules.some((r) => r.permissions.includes(perm));
}

export function grant(app: AppSpec, perm: Perm, container: string): Transform | null {
  if (app.rules.length === 0) return app.permissions.includes(perm) ? 'mask' : null;
  // A stable sort: rules of equal priority keep their configured order.
  const sorted = app.rules.map((r, i) => ({ r, i })).sort((a, b) => a.r.priority - b.r.priority || a.i - b.i);
  for (const { r } of sorted) if (container.startsWith(r.container)) return r.permissions.includes(perm) ? r.transform : null;
  return null;
}

/** The expressions the suite uses, by token type, with what they render to. */
export const TOKEN_EXPRESSIONS: Record<string, (d: string) => string> = {
  '{{ data }}': (d) => d,
  '{{ data | upcase }}': (d) => d.toUpperCase(),
  '{{ data | last4 }}': (d) => d.slice(-4),
  '{{ data | reveal_last: 4 }}': (d) => 'X'.repeat(Math.max(0, d.length - 4)) + d.slice(-4),
};
export const CARD_EXPRESSIONS: Record<string, (c: Card) => string> = {
  '{{ data.number }}': (c) => c.number,
  '{{ data.number | last4 }}': (c) => c.number.slice(-4),
  '{{ data.number | slice: 0, 6 }}': (c) => c.number.slice(0, 6),
  '{{ data.expiration_year }}': (c) => String(c.expiration_year),
};
export const MASKS = ['{{ data | reveal_last: 4 }}', '{{ data | last4 }}', '{{ data | upcase }}'];
/** Expressions that do not depend on data: always 400. */
export const CONSTANTS = ['{{ "0" }}', '{{ "abc" | upcase }}', '{{ 4 | plus: 2 }}'];
export const CARD_DEFAULT_FINGERPRINT = '{{ data.number }}';

export function isConstant(expr: string): boolean {
  return CONSTANTS.includes(expr);
}

export function render(expr: string, type: TokenType, data: string | Card): string {
  const f = type === 'token' ? TOKEN_EXPRESSIONS[expr] : CARD_EXPRESSIONS[expr];
  if (!f) throw new Error(`the model cannot render ${expr} for ${type}`);
  return (f as (d: unknown) => string)(data);
}

export function maskedCard(c: Card): Card {
  return { number: 'X'.repeat(c.number.length - 4) + c.number.slice(-4), expiration_month: c.expiration_month, expiration_year: c.expiration_year };
}

export interface MToken {
  id: string;
  type: TokenType;
  container: string;
  data: string | Card;
  /** Effective fingerprint expression (a card's default included), or null. */
  fp: string | null;
  search: string[];
  mask: string | null;
  metadata: Record<string, string>;
  seq: number;
  live: boolean;
}

/** Two tokens share a fingerprint exactly when this is equal (the fingerprint is an HMAC of tenant, type and value). */
export function fpClass(t: Pick<MToken, 'fp' | 'type' | 'data'>): string | null {
  return t.fp === null ? null : `${t.type}\u0000${render(t.fp, t.type, t.data)}`;
}

/** What a read with `transform` shows as `data` (undefined: no data member). */
export function shownData(t: MToken, transform: Transform): unknown {
  if (transform === 'redact') return undefined;
  if (t.type === 'card') return transform === 'reveal' ? t.data : maskedCard(t.data as Card);
  if (transform === 'reveal') return t.data;
  return t.mask === null ? undefined : render(t.mask, 'token', t.data);
}

export class Model {
  tokens: MToken[] = [];
  #seq = 0;

  live(): MToken[] {
    return this.tokens.filter((t) => t.live);
  }

  add(t: Omit<MToken, 'seq' | 'live'>): MToken {
    const tok = { ...t, seq: ++this.#seq, live: true };
    this.tokens.push(tok);
    return tok;
  }

  /** The oldest live token a deduplicating create of `t` matches, if any. */
  dedupeMatch(t: Pick<MToken, 'type' | 'container' | 'fp' | 'data'>, among: readonly MToken[] = this.tokens): MToken | null {
    const cls = fpClass(t);
    if (cls === null) return null;
    const hits = among.filter((x) => x.live && x.type === t.type && x.container === t.container && fpClass(x) === cls);
    return hits.sort((a, b) => a.seq - b.seq)[0] ?? null;
  }

  /** What a fingerprint filter finds: listed tokens of that fingerprint class that the key may read. */
  fingerprintMatches(app: AppSpec, cls: string, containerPrefix?: string): MToken[] {
    return this.listed(app, containerPrefix).filter((t) => fpClass(t) === cls && grant(app, 'token:read', t.container) !== null);
  }

  /** Newest first, in the key's search scope, under an optional container prefix. */
  listed(app: AppSpec, containerPrefix?: string): MToken[] {
    return this.live()
      .filter((t) => grant(app, 'token:search', t.container) !== null && (containerPrefix === undefined || t.container.startsWith(containerPrefix)))
      .sort((a, b) => b.seq - a.seq);
  }
}
