/**
 * The PostgreSQL store's compact encodings: what a column holds
 * for a field of StoredToken, and back. Every encoding is lossless for any string (a value that
 * does not have the expected shape is kept as it is, marked), so the store never needs to trust
 * the shape of what it is given; the common shapes take far fewer bytes:
 *
 * - sealed values (`v1.<kid>.<iv>.<body>`, base64url, crypto/keyring.ts): bytea, the iv and body
 *   as raw bytes (a quarter smaller than base64), the iv's length left out when it is 12;
 * - digests (fingerprints, search-index hashes: lowercase hex): bytea, half the size;
 * - token ids: a `uuid` (16 bytes) when the id is a lowercase UUID as the service makes them, else
 *   the text in `custom_id`;
 * - times: epoch milliseconds (bigint) when the text is what toISOString() writes for them, else
 *   the text as given beside it.
 */

/** First byte of an encoded value: how the rest reads. */
const AS_TEXT = 0;
const SEALED_V1 = 1;
const HEX = 2;
/** SEALED_V1 with the 12-byte iv every seal uses (crypto/keyring.ts): no iv length byte. */
const SEALED_V1_IV12 = 3;

const B64URL = /^[A-Za-z0-9_-]+$/;
const KID = /^[A-Za-z0-9_-]{1,64}$/;
const LOWER_HEX = /^(?:[0-9a-f]{2})+$/;
const CANONICAL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function text(s: string): Buffer {
  const body = Buffer.from(s, 'utf8');
  const out = Buffer.allocUnsafe(body.length + 1);
  out[0] = AS_TEXT;
  body.copy(out, 1);
  return out;
}

/** base64url that decodes and encodes back to itself (no padding, no stray bits). */
function b64(part: string): Buffer | null {
  if (!B64URL.test(part)) return null;
  const bytes = Buffer.from(part, 'base64url');
  return bytes.toString('base64url') === part ? bytes : null;
}

/** A sealed value (or any string) as bytes: [1][kid length][kid][iv length][iv][body] for the v1 form. */
export function encodeSealed(sealed: string): Buffer {
  const parts = sealed.split('.');
  if (parts.length === 4 && parts[0] === 'v1' && KID.test(parts[1]!)) {
    const iv = b64(parts[2]!);
    const body = b64(parts[3]!);
    if (iv && body && iv.length < 256) {
      const kid = Buffer.from(parts[1]!, 'latin1');
      if (iv.length === 12) return Buffer.concat([Buffer.from([SEALED_V1_IV12, kid.length]), kid, iv, body]);
      return Buffer.concat([Buffer.from([SEALED_V1, kid.length]), kid, Buffer.from([iv.length]), iv, body]);
    }
  }
  return text(sealed);
}

export function decodeSealed(b: Buffer): string {
  if (b[0] === SEALED_V1_IV12) {
    const kidEnd = 2 + b[1]!;
    return `v1.${b.toString('latin1', 2, kidEnd)}.${b.subarray(kidEnd, kidEnd + 12).toString('base64url')}.${b.subarray(kidEnd + 12).toString('base64url')}`;
  }
  if (b[0] === SEALED_V1) {
    const kidEnd = 2 + b[1]!;
    const ivEnd = kidEnd + 1 + b[kidEnd]!;
    return `v1.${b.toString('latin1', 2, kidEnd)}.${b.subarray(kidEnd + 1, ivEnd).toString('base64url')}.${b.subarray(ivEnd).toString('base64url')}`;
  }
  return b.toString('utf8', 1);
}

/** A digest (lowercase hex) as its bytes after a marker; any other string as text. */
export function encodeDigest(hex: string): Buffer {
  if (!LOWER_HEX.test(hex)) return text(hex);
  const out = Buffer.allocUnsafe(1 + hex.length / 2);
  out[0] = HEX;
  out.write(hex, 1, 'hex');
  return out;
}

export function decodeDigest(b: Buffer): string {
  return b[0] === HEX ? b.toString('hex', 1) : b.toString('utf8', 1);
}

/** Where an id goes: the uuid column for the service's own ids, custom_id for any other. */
export function splitId(id: string): { uuid: string | null; custom: string | null } {
  return CANONICAL_UUID.test(id) ? { uuid: id, custom: null } : { uuid: null, custom: id };
}

/** Ids of a lookup, split as stored. */
export function splitIds(ids: readonly string[]): { uuids: string[]; customs: string[] } {
  const uuids: string[] = [];
  const customs: string[] = [];
  for (const id of ids) (CANONICAL_UUID.test(id) ? uuids : customs).push(id);
  return { uuids, customs };
}

/** ISO 8601 text as epoch ms, and the text itself only when toISOString() would not give it back. */
export function encodeTime(iso: string | null, field: string): { ms: number | null; text: string | null } {
  if (iso === null) return { ms: null, text: null };
  const ms = Date.parse(iso);
  if (!Number.isFinite(ms)) throw new TypeError(`${field} is not a valid ISO 8601 date`);
  return { ms, text: new Date(ms).toISOString() === iso ? null : iso };
}

export function decodeTime(ms: string | number | null, text: string | null): string | null {
  if (text !== null) return text;
  return ms === null ? null : new Date(Number(ms)).toISOString();
}

/**
 * Metadata in the `metadata` jsonb column. jsonb cannot hold U+0000 (SQLSTATE 22P05) nor a lone
 * UTF-16 surrogate (its `\ud800` escape is refused). The vault refuses both, but an embedded or
 * Redis store written before it did may hold them, and `store copy` must move such a token as it
 * is. Such a map is kept as an object of its pairs that jsonb holds, as they are, plus the whole
 * map, escaped (`\` → `\\`, U+0000 and a lone surrogate → `\uXXXX`), as the object member named
 * "" (MARKED): lossless, and unambiguous, since a metadata value is always a string, never an
 * object. A filter stays one `@>` on the GIN index (metadataFilter): a filter jsonb holds matches
 * the pairs at the top, as in any other row; one it cannot hold matches inside the escaped map.
 * Every other map is the object itself, as it always was.
 */
const MARKED = '';
const JSONB_REFUSES = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const TO_ESCAPE = /[\\\u0000]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
const ESCAPE = /\\(\\|u[0-9a-f]{4})/g;

const escapeText = (s: string): string => s.replace(TO_ESCAPE, (c) => (c === '\\' ? '\\\\' : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`));
const unescapeText = (s: string): string => s.replace(ESCAPE, (_, e: string) => (e === '\\' ? '\\' : String.fromCharCode(parseInt(e.slice(1), 16))));

const setOwn = (o: Record<string, unknown>, k: string, v: unknown): void => {
  // A key "__proto__" is a key like any other: `o[k] = v` would call the setter instead.
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
};

function escapedMap(m: Record<string, string>, f: (s: string) => string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(m)) setOwn(out, f(k), f(v));
  return out;
}

const holds = (s: string): boolean => !JSONB_REFUSES.test(s);
const jsonbHolds = (m: Record<string, string>): boolean => Object.entries(m).every(([k, v]) => holds(k) && holds(v));

/** The column's value (JSON text for a jsonb parameter); null for an empty map. */
export function encodeMetadata(m: Record<string, string>): string | null {
  if (Object.keys(m).length === 0) return null;
  if (jsonbHolds(m)) return JSON.stringify(m);
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(m)) if (k !== MARKED && holds(k) && holds(v)) setOwn(out, k, v);
  setOwn(out, MARKED, escapedMap(m, escapeText));
  return JSON.stringify(out);
}

/** The map a column holds (as pg parsed the jsonb). */
export function decodeMetadata(v: unknown): Record<string, string> {
  if (v === null || v === undefined) return {};
  const o = v as Record<string, unknown>;
  const marked = Object.hasOwn(o, MARKED) ? o[MARKED] : undefined;
  if (typeof marked === 'object' && marked !== null) return escapedMap(marked as Record<string, string>, unescapeText);
  return o as Record<string, string>;
}

/**
 * The jsonb values a metadata filter is tested against with `@>` (any may match): one, but for a
 * filter on the key "" (which the vault refuses), which a marked row holds only in its escaped map.
 */
export function metadataFilter(f: Record<string, string>): string[] {
  const marked: Record<string, unknown> = {};
  setOwn(marked, MARKED, escapedMap(f, escapeText));
  if (!jsonbHolds(f)) return [JSON.stringify(marked)];
  return Object.hasOwn(f, MARKED) ? [JSON.stringify(f), JSON.stringify(marked)] : [JSON.stringify(f)];
}

/**
 * Expressions (search_indexes in a text[] column; fingerprint_expression and mask as numbers of the
 * names dictionary, names.ts). PostgreSQL's text refuses U+0000 (SQLSTATE 22021) and the driver
 * writes a lone surrogate as U+FFFD (it has no UTF-8 form), and the vault refuses both, but an
 * embedded or Redis store written before it did may hold them, and `store copy` must move such a
 * token as it is. Such a string is stored as its JSON text (which escapes both), marked where no
 * row ever held anything before, not inside the text: an expression's number is negated (numbers
 * are positive identities), a list is [NULL, the list's JSON text] (no list held NULL). So every
 * string already stored reads as it did, and no expression the vault accepts (such as one that
 * starts like an escaped form) reads back as another one; every other value is stored as it always
 * was. Nothing queries these columns by value (search uses index_hashes, deduplication the
 * fingerprint), and a name is looked up by the text it is stored as.
 */

/** The name an expression is numbered under, and whether its number is negated (escaped). */
export function encodeExpression(s: string): { name: string; escaped: boolean } {
  return holds(s) ? { name: s, escaped: false } : { name: JSON.stringify(s), escaped: true };
}

/** JSON text as the value it holds; undefined when it is not JSON. */
function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The expression of a name (escaped: its number was negated); null when the name cannot be one (a corrupt row). */
export function decodeExpression(name: string, escaped: boolean): string | null {
  if (!escaped) return name;
  const s = parsed(name);
  return typeof s === 'string' ? s : null;
}

/** The search_indexes column's value: null for none, the list itself, or [null, its JSON text]. */
export function encodeSearchIndexes(list: readonly string[]): Array<string | null> | null {
  if (list.length === 0) return null;
  return list.every(holds) ? [...list] : [null, JSON.stringify(list)];
}

const strings = (v: unknown): v is string[] => Array.isArray(v) && v.every((s) => typeof s === 'string');

/** The list a search_indexes column holds; null when it holds neither form (a corrupt row). */
export function decodeSearchIndexes(v: ReadonlyArray<string | null> | null): string[] | null {
  if (v === null) return [];
  if (v[0] !== null) return strings(v) ? v : null;
  const list = v.length === 2 && typeof v[1] === 'string' ? parsed(v[1]) : undefined;
  return strings(list) ? list : null;
}
