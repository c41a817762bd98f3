/**
 * Text every store can keep as it was sent. A string the vault stores in clear (metadata keys and
 * values, custom ids, expressions) must read back the same from the embedded, Redis and
 * PostgreSQL stores alike, so validation refuses, on every store, what one of them cannot hold:
 *
 * - U+0000: PostgreSQL's text and jsonb have no NUL (SQLSTATE 22021 / 22P05): a 503 there where
 *   another store answered 201, and a token that no `store copy` to PostgreSQL could move;
 * - a lone UTF-16 surrogate (a JSON `\ud800` with no pair): it has no UTF-8 form, so a driver
 *   writes U+FFFD instead (the value changes silently) or the database refuses the escape.
 *
 * Token data is sealed before it is stored (ciphertext, any bytes), so none of this applies to it.
 */

const NUL = '\u0000';
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Why `s` cannot be stored as text on every store (a message that never quotes it), or null. */
export function unstorableText(s: string): string | null {
  if (s.includes(NUL)) return 'must not hold U+0000 (NUL): the PostgreSQL store cannot keep it as text';
  if (LONE_SURROGATE.test(s)) return 'must not hold a lone UTF-16 surrogate (\\ud800-\\udfff without its pair): it has no UTF-8 form';
  return null;
}
