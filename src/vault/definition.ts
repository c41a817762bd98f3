/**
 * Token definitions: `{type, data, …}` objects and plain strings, validated into one normal
 * form. Pure: no I/O, no crypto. Every problem is recorded under the field's JSON path; messages
 * never quote a value.
 */
import { containerPattern } from '../config/schema.js';
import { addFieldError, type FieldErrors } from '../errors.js';
import { scrubCards } from '../log.js';
import type { CardData } from './card.js';
import { checkDataExpression, ExpressionError, MAX_EXPRESSION_LENGTH } from './expressions.js';
import { TOKEN_TYPE_NAMES, tokenType, type TokenTypeSpec } from './token-types.js';
import { checkAliasable, isIdExpression, parseAlias, type AliasSpec } from './alias.js';
import { unstorableText } from './storable-text.js';

/** A name of src/vault/token-types.ts's registry ('token', 'card', 'card_number', …). */
export type TokenType = string;
export const TOKEN_TYPES: readonly TokenType[] = TOKEN_TYPE_NAMES;

/** A `bank` token's data. */
export interface BankData {
  routing_number: string;
  account_number: string;
}
/** A token's data: a string, or the object of a card or a bank token. */
export type TokenData = string | CardData | BankData;

export const LIMITS = {
  metadataKeys: 100,
  metadataKeyLength: 100,
  metadataValueLength: 1000,
  searchIndexes: 20,
  idMin: 3,
  idMax: 400,
};
const ID_PATTERN = /^[A-Za-z0-9._~:@+=-]+$/;

const KNOWN_FIELDS = new Set([
  'type', 'data', 'id', 'containers', 'metadata', 'search_indexes', 'fingerprint_expression',
  'mask', 'deduplicate_token', 'expires_at',
]);

export interface Definition {
  /** JSON path of the definition in the request ('' at the root). */
  path: string;
  /** Made from a plain string: answered with the token's id, not a record. */
  plain: boolean;
  type: TokenType;
  data: TokenData;
  id: string | null;
  /** The id is an alias expression: drawn when the token is created; `id` is null then. */
  alias: AliasSpec | null;
  container: string;
  metadata: Record<string, string>;
  search_indexes: string[];
  /** Effective expression (a card's default applies); null: no fingerprint. */
  fingerprint_expression: string | null;
  mask: string | null;
  deduplicate: boolean;
  expires_at: string | null;
}

/**
 * A definition without its data, fixed ahead of time (a proxy's tokenize field): the
 * fields `parseDefinition` reads, frozen, with the data added per value.
 */
export type DefinitionTemplate = Readonly<Record<string, unknown>> & { readonly type: TokenType };

/** A template from its declared fields: only the ones set, copied and frozen. */
export function definitionTemplate(fields: { type: TokenType } & Record<string, unknown>): DefinitionTemplate {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) setOwn(out, k, v);
  return Object.freeze(out) as DefinitionTemplate;
}

export function isDefinitionShape(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && 'type' in v && 'data' in v;
}

export function at(path: string, field: string): string {
  return path ? `${path}.${field}` : field;
}

/**
 * Sets an own, enumerable member: `obj[key] = value` would call the `__proto__` setter instead of
 * storing a member named "__proto__" (user data names members, metadata keys and error paths).
 */
export function setOwn<T>(obj: Record<string, T>, key: string, value: T): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}

/** The one field-error helper (errors.ts), re-exported for the vault's callers. */
export { addFieldError };

const add = addFieldError;

export function plainStringDefinition(path: string, value: string): Definition {
  return {
    path, plain: true, type: 'token', data: value, id: null, alias: null, container: '/general/high/', metadata: {},
    search_indexes: [], fingerprint_expression: null, mask: null, deduplicate: false, expires_at: null,
  };
}

function checkExpression(expr: unknown, path: string, errors: FieldErrors): string | null {
  if (typeof expr !== 'string' || expr.length === 0) {
    add(errors, path, 'must be a non-empty expression string');
    return null;
  }
  if (expr.length > MAX_EXPRESSION_LENGTH) {
    add(errors, path, `must be at most ${MAX_EXPRESSION_LENGTH} characters`);
    return null;
  }
  const unstorable = unstorableText(expr);
  if (unstorable !== null) {
    add(errors, path, unstorable);
    return null;
  }
  try {
    checkDataExpression(expr);
    return expr;
  } catch (err) {
    add(errors, path, err instanceof ExpressionError ? err.message : 'invalid expression');
    return null;
  }
}

export function checkMetadata(v: unknown, path: string, errors: FieldErrors): Record<string, string> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    add(errors, path, 'must be an object of string values');
    return {};
  }
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length > LIMITS.metadataKeys) add(errors, path, `must have at most ${LIMITS.metadataKeys} keys`);
  const out: Record<string, string> = {};
  for (const [k, val] of entries) {
    // A key that cannot be stored is not named in the path either: the error is on the object.
    const badKey = unstorableText(k);
    if (badKey !== null) {
      if (!errors[path]?.includes(`keys ${badKey}`)) add(errors, path, `keys ${badKey}`);
    } else if (k.length === 0 || k.length > LIMITS.metadataKeyLength) add(errors, `${path}.${k}`, `keys must have 1 to ${LIMITS.metadataKeyLength} characters`);
    else if (typeof val !== 'string') add(errors, `${path}.${k}`, 'must be a string');
    else if (val.length > LIMITS.metadataValueLength) add(errors, `${path}.${k}`, `must be at most ${LIMITS.metadataValueLength} characters`);
    else if (unstorableText(val) !== null) add(errors, `${path}.${k}`, unstorableText(val)!);
    else setOwn(out, k, val);
  }
  return out;
}

export function checkSearchIndexes(v: unknown, path: string, errors: FieldErrors): string[] {
  if (!Array.isArray(v)) {
    add(errors, path, 'must be an array of expressions');
    return [];
  }
  if (v.length > LIMITS.searchIndexes) add(errors, path, `must have at most ${LIMITS.searchIndexes} expressions`);
  return v.map((e, i) => checkExpression(e, `${path}[${i}]`, errors)).filter((e): e is string => e !== null);
}

export function checkExpiresAt(v: unknown, path: string, errors: FieldErrors, now: number): string | null {
  if (v === null) return null;
  if (typeof v !== 'string' || !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(v) || Number.isNaN(Date.parse(v))) {
    add(errors, path, 'must be an ISO 8601 timestamp with a UTC offset');
    return null;
  }
  if (Date.parse(v) <= now) {
    add(errors, path, 'must be in the future');
    return null;
  }
  return new Date(Date.parse(v)).toISOString();
}

export function checkMask(v: unknown, type: TokenTypeSpec, path: string, errors: FieldErrors): string | null {
  if (!type.customMask) {
    add(errors, path, 'card tokens are masked by the service (all but the last four digits); mask is for the other types');
    return null;
  }
  return checkExpression(v, path, errors);
}

/** Validates a `{type, data, …}` object at `path`; returns null (with errors recorded) when invalid. */
export function parseDefinition(obj: Record<string, unknown>, path: string, errors: FieldErrors, now: number): Definition | null {
  const before = Object.keys(errors).length;
  for (const k of Object.keys(obj)) if (!KNOWN_FIELDS.has(k)) add(errors, at(path, k), 'unknown field');

  const spec = typeof obj.type === 'string' ? tokenType(obj.type) : undefined;
  if (spec === undefined) {
    add(errors, at(path, 'type'), `must be one of: ${TOKEN_TYPES.join(', ')}`);
    return null;
  }
  const t = spec.name;
  const data = spec.parse(obj.data, at(path, 'data'), errors) as TokenData | null;

  let id: string | null = null;
  let alias: AliasSpec | null = null;
  if (typeof obj.id === 'string' && isIdExpression(obj.id)) {
    const parsed = parseAlias(obj.id, t);
    if (typeof parsed === 'string') add(errors, at(path, 'id'), parsed);
    else if (data !== null) {
      const value = t === 'card' ? (data as CardData).number : data;
      const problem = typeof value === 'string' ? checkAliasable(parsed, value) : 'an alias is drawn from a string';
      if (problem === null) alias = parsed;
      else add(errors, at(path, 'id'), problem);
    }
  } else if (obj.id !== undefined) {
    if (typeof obj.id !== 'string' || obj.id.length < LIMITS.idMin || obj.id.length > LIMITS.idMax || !ID_PATTERN.test(obj.id)) {
      add(errors, at(path, 'id'), `must be ${LIMITS.idMin} to ${LIMITS.idMax} characters of letters, digits and . _ ~ : @ + = -`);
    } else if (scrubCards(obj.id) !== obj.id) {
      // Ids are stored in clear, named in audit events and logs: the check the trace id
      // gets (a Luhn-valid 13-19 digit run, plain or grouped by dashes) keeps card numbers out.
      add(errors, at(path, 'id'), 'must not hold a card number (a Luhn-valid run of 13 to 19 digits)');
    } else id = obj.id;
  }

  let container = spec.container;
  if (obj.containers !== undefined) {
    const c = obj.containers;
    if (!Array.isArray(c) || c.length !== 1 || typeof c[0] !== 'string' || !containerPattern.test(c[0])) {
      add(errors, at(path, 'containers'), 'must be an array of exactly one container that starts and ends with "/", lower case');
    } else container = c[0];
  }

  const metadata = obj.metadata === undefined ? {} : checkMetadata(obj.metadata, at(path, 'metadata'), errors);
  const search_indexes = obj.search_indexes === undefined ? [] : checkSearchIndexes(obj.search_indexes, at(path, 'search_indexes'), errors);
  let fingerprint_expression = spec.fingerprint;
  if (obj.fingerprint_expression !== undefined) {
    fingerprint_expression = checkExpression(obj.fingerprint_expression, at(path, 'fingerprint_expression'), errors);
  }
  const mask = obj.mask === undefined ? null : checkMask(obj.mask, spec, at(path, 'mask'), errors);
  let deduplicate = false;
  if (obj.deduplicate_token !== undefined) {
    if (typeof obj.deduplicate_token !== 'boolean') add(errors, at(path, 'deduplicate_token'), 'must be a boolean');
    else deduplicate = obj.deduplicate_token;
    if (deduplicate && fingerprint_expression === null) add(errors, at(path, 'deduplicate_token'), 'needs a fingerprint_expression');
  }
  const expires_at = obj.expires_at === undefined ? null : checkExpiresAt(obj.expires_at, at(path, 'expires_at'), errors, now);

  if (Object.keys(errors).length !== before || data === null) return null;
  return { path, plain: false, type: t, data, id, alias, container, metadata, search_indexes, fingerprint_expression, mask, deduplicate, expires_at };
}
