/**
 * Request bodies that are read as text must be UTF-8, and must say so if they name a charset.
 *
 * JSON exchanged between systems is UTF-8 (RFC 8259 §8.1). Buffer#toString('utf8') and
 * TextDecoder without `fatal` put U+FFFD in place of every ill-formed sequence: a body holding a
 * Latin-1 `é` (0xE9) would be stored as `caf\uFFFD`, the value sent lost, and no one told. So the
 * bytes are checked before they are decoded and a body that is not UTF-8 is refused, naming the
 * offset of the first bad byte (never the bytes: they may be a card number in another charset).
 * The check is `buffer.isUtf8` (simdutf; strict: overlong forms, encoded surrogates and code points
 * past U+10FFFF are ill-formed); the offset is searched for only once it failed.
 */
import { isUtf8 } from 'node:buffer';
import { ServiceError } from '../errors.js';

/**
 * The offset of the first byte of the first ill-formed sequence in `b` (Unicode §3.9, table 3-7:
 * the lead byte of a sequence that is overlong, a surrogate, past U+10FFFF or cut short; or a
 * byte that cannot start one), or null when `b` is UTF-8.
 */
export function firstInvalidUtf8(b: Uint8Array): number | null {
  const n = b.length;
  let i = 0;
  while (i < n) {
    const c = b[i]!;
    if (c < 0x80) {
      i++;
      continue;
    }
    // The continuation bytes after the lead, and the range of the first one.
    let need: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c === 0xe0) { need = 2; lo = 0xa0; } // below: overlong
    else if (c === 0xed) { need = 2; hi = 0x9f; } // above: U+D800–U+DFFF, surrogates
    else if (c >= 0xe1 && c <= 0xef) need = 2;
    else if (c === 0xf0) { need = 3; lo = 0x90; } // below: overlong
    else if (c === 0xf4) { need = 3; hi = 0x8f; } // above: past U+10FFFF
    else if (c >= 0xf1 && c <= 0xf3) need = 3;
    else return i; // 0x80–0xC1 (a continuation byte, or an overlong lead) and 0xF5–0xFF
    if (i + need >= n) return i;
    const first = b[i + 1]!;
    if (first < lo || first > hi) return i;
    for (let k = 2; k <= need; k++) {
      const cc = b[i + k]!;
      if (cc < 0x80 || cc > 0xbf) return i;
    }
    i += need + 1;
  }
  return null;
}

/** Throws 400 invalid_json when `bytes` are not UTF-8; `subject` names them ("The request body"). */
export function requireUtf8Json(bytes: Uint8Array, subject: string): void {
  if (isUtf8(bytes)) return;
  throw new ServiceError('invalid_json', { detail: notUtf8Detail(bytes, subject, 'JSON must be UTF-8 (RFC 8259 §8.1)') });
}

/** What a refusal of bytes that are not UTF-8 says: the offset, counted in bytes from 0. */
export function notUtf8Detail(bytes: Uint8Array, subject: string, why: string): string {
  const at = firstInvalidUtf8(bytes);
  // isUtf8 and the scan follow the same table: `at` is null only if they disagreed.
  const where = at === null ? '' : `: the byte at offset ${at} (counted from 0) does not begin a UTF-8 character`;
  return `${subject} is not UTF-8${where}; ${why}`;
}

/**
 * The charset labels that name UTF-8: `utf-8` and its registered alias `csUTF8` (IANA Character
 * Sets; charset names are case-insensitive, RFC 9110 §8.3.2). `utf8` is no registered name.
 */
const UTF8_LABELS = new Set(['utf-8', 'csutf8']);

/** The `charset` parameters of a Content-Type header value: unquoted, trimmed, lower case. */
export function charsetsOf(contentType: string | undefined): string[] {
  if (!contentType) return [];
  const out: string[] = [];
  const params = contentType.split(';');
  for (let k = 1; k < params.length; k++) {
    const p = params[k]!;
    const eq = p.indexOf('=');
    if (eq === -1 || p.slice(0, eq).trim().toLowerCase() !== 'charset') continue;
    let v = p.slice(eq + 1).trim();
    if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1).replace(/\\(.)/g, '$1');
    out.push(v.trim().toLowerCase());
  }
  return out;
}

/** A label worth repeating in an answer: a short token (a long or odd one is left out rather than cut). */
const SHOWN_LABEL = /^[a-z0-9._:+-]{1,40}$/;

/**
 * 415 unsupported_media_type when the Content-Type names a charset other than UTF-8 (a client that
 * declares Latin-1 sends Latin-1 bytes, which would be read as UTF-8); null when it names none or
 * UTF-8. `what` names the body ("JSON bodies").
 */
export function charsetRefusal(contentType: string | undefined, what: string): ServiceError | null {
  const other = charsetsOf(contentType).find((c) => !UTF8_LABELS.has(c));
  if (other === undefined) return null;
  const named = SHOWN_LABEL.test(other) ? `charset=${other}` : 'a charset other than UTF-8';
  return new ServiceError('unsupported_media_type', {
    detail: `The Content-Type names ${named}: ${what} are read as UTF-8 only; send UTF-8 with charset=utf-8 or no charset`,
  });
}
