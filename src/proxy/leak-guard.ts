/**
 * The leak guard's scanner: finds card numbers in bytes on their way to a destination. A card
 * number here is a run of 13 to 19 digits (optionally grouped by single spaces, dashes, or `+`,
 * which is how a form-encoded body writes a space) that starts with 2–6 (the ranges of the major
 * card networks) and passes the Luhn check. In a grouped run any consecutive groups may be the
 * card (`qty 2 4242 4242 4242 4242`, two grouped cards one space apart); a contiguous run of more
 * than 19 digits is a longer number, not a card; digits glued to letters still count
 * (`card4242…`).
 *
 * The bytes are scanned as the destination will read them (`LeakScanner`). First the charset
 *: a body in UTF-16 (by its `charset` parameter, by a byte order mark, or, for JSON,
 * by the NUL bytes RFC 4627 §3 detects it by) or in a legacy multibyte charset is decoded first,
 * so its digits are seen as the destination sees them; a charset that cannot be decoded marks the
 * scan `undecodable` (a blocking proxy refuses the body). Then the media type: in any JSON type
 * (`application/json`, `text/json`, `…+json`, JSON lines) the string escapes are decoded
 * (`"\u0034\u0032…"` is a card), in a form body the percent-escapes (`%34%32…`, and `%20` is a
 * space); other bodies are scanned as they are. A buffered multipart body is also scanned part by
 * part, each by its own transfer encoding and content type (`scanBodyYielding`, in
 * leak-guard-body.ts; the path, query and headers are scanned by leak-guard-request.ts). A UUID (8-4-4-4-12 hex digits, the shape of every
 * token id) is not a card however its digits fall: it is taken out before the digits are looked
 * at, so a body full of token ids does not trip a blocking guard now and then.
 *
 * Streaming: `push` takes chunks as they pass and keeps the state of a run (and of an escape, a
 * UUID candidate or a character) that straddles two chunks, so a pass-through body is scanned
 * without being buffered. Nothing about a finding but its count leaves this module: never the
 * digits.
 */
import { luhnValid } from '../luhn.js';

const ZERO = 0x30;
const NINE = 0x39;
const SPACE = 0x20;
const DASH = 0x2d;
/** A space in application/x-www-form-urlencoded. */
const PLUS = 0x2b;
const MAX_DIGITS = 19;
const MIN_DIGITS = 13;
export const NO_ALIASES: ReadonlySet<string> = new Set();

export class CardScanner {
  /**
   * Numbers that are not findings: the Luhn-valid alias ids the same
   * request's tokenize step made. They are tokens, not cards; any other card still counts.
   */
  constructor(private readonly allowed: ReadonlySet<string> = NO_ALIASES) {}

  /**
   * The groups (contiguous digit segments) of the current run, oldest first: a card may be any
   * consecutive groups of it (`qty 2 4242 4242 4242 4242`, or two grouped cards one space apart).
   * At most MAX_DIGITS groups are kept: no card spans more.
   */
  private groups: string[] = [];
  /** Digits of the current contiguous segment (no separators). */
  private seg = '';
  private segOverflow = false;
  /** The previous byte was a separator right after a digit. */
  private pendingSeparator = false;
  private found = 0;

  /** Card numbers found so far. */
  get findings(): number {
    return this.found;
  }

  push(chunk: Uint8Array): void {
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i]!;
      if (c >= ZERO && c <= NINE) {
        this.pendingSeparator = false;
        if (this.seg.length < MAX_DIGITS) this.seg += String.fromCharCode(c);
        else this.segOverflow = true;
      } else if ((c === SPACE || c === DASH || c === PLUS) && this.seg.length > 0 && !this.pendingSeparator) {
        this.endSegment();
        this.pendingSeparator = true;
      } else if (this.seg.length > 0 || this.groups.length > 0) {
        this.endRun();
      } else {
        this.pendingSeparator = false;
      }
    }
  }

  /** Call at the end of the body: a run that ends the body is checked too. */
  end(): number {
    this.endRun();
    return this.found;
  }

  /**
   * A segment ended: checks the windows of consecutive groups that end with it, shortest first
   * (the segment alone is a contiguous number). A card found consumes its groups, so no digit is
   * counted twice. A segment over 19 digits is a longer number: no window crosses it.
   */
  private endSegment(): void {
    if (this.segOverflow) {
      this.groups = [];
    } else if (this.seg.length > 0) {
      const groups = this.groups;
      groups.push(this.seg);
      if (groups.length > MAX_DIGITS) groups.shift();
      let digits = '';
      for (let k = groups.length - 1; k >= 0; k--) {
        digits = groups[k]! + digits;
        if (digits.length > MAX_DIGITS) break;
        if (isCardNumber(digits)) {
          if (!this.allowed.has(digits)) this.found++;
          this.groups = [];
          break;
        }
      }
    }
    this.seg = '';
    this.segOverflow = false;
  }

  private endRun(): void {
    if (this.groups.length === 0 && this.seg.length < MIN_DIGITS) {
      // A lone short number (the common case): no window to check.
      this.seg = '';
      this.segOverflow = false;
    } else {
      this.endSegment();
      this.groups.length = 0;
    }
    this.pendingSeparator = false;
  }
}

function isCardNumber(digits: string): boolean {
  if (digits.length < MIN_DIGITS || digits.length > MAX_DIGITS) return false;
  const first = digits.charCodeAt(0);
  return first >= 0x32 && first <= 0x36 && luhnValid(digits);
}

/** How a body's bytes are decoded before the scan: by its media type. */
export type BodyEncoding = 'json' | 'form' | 'raw';

/** JSON lines types: each line is a JSON text, with the same string escapes. */
const JSON_LINES = new Set(['application/x-ndjson', 'application/ndjson', 'application/jsonl', 'application/x-jsonlines', 'application/json-seq']);

/**
 * `json` for every JSON media type (`text/json` reached the destination with its
 * escapes unread): a subtype `json` or `x-json` under any type, a `+json` suffix (RFC 6839), JSON
 * lines. `form` for x-www-form-urlencoded, else `raw`.
 */
export function bodyEncoding(mediaType: string): BodyEncoding {
  const t = mediaType.split(';')[0]!.trim().toLowerCase();
  const sub = t.slice(t.indexOf('/') + 1);
  if (t.includes('/') && (sub === 'json' || sub === 'x-json' || sub.endsWith('+json') || JSON_LINES.has(t))) return 'json';
  if (t === 'application/x-www-form-urlencoded') return 'form';
  return 'raw';
}

/** What the scan needs to know of a Content-Type: see `scanType`. */
export interface ScanType {
  encoding: BodyEncoding;
  /** The `charset` parameter, trimmed, unquoted, lower case; undefined without one. */
  charset: string | undefined;
  /** More than one `charset` parameter, and they differ: the destination may take either. */
  conflictingCharsets: boolean;
  /** A text type (JSON, form, `text/*`, or no type at all): a byte order mark decides its charset. */
  sniff: boolean;
  /** The `boundary` of a multipart type: a buffered body's parts are scanned each as its own headers say. */
  boundary?: string | undefined;
}

/** The scan of a body sent with this Content-Type header value ('' for none). */
export function scanType(contentType: string): ScanType {
  const [type = '', ...params] = contentType.split(';');
  const media = type.trim().toLowerCase();
  const encoding = bodyEncoding(media);
  const charsets = new Set<string>();
  let boundary: string | undefined;
  for (const p of params) {
    const eq = p.indexOf('=');
    if (eq === -1) continue;
    const name = p.slice(0, eq).trim().toLowerCase();
    let v = p.slice(eq + 1).trim();
    if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1);
    if (name === 'charset') charsets.add(v.trim().toLowerCase());
    else if (name === 'boundary' && media.startsWith('multipart/') && boundary === undefined && v.length > 0) boundary = v;
  }
  const [charset] = charsets;
  return { encoding, charset, conflictingCharsets: charsets.size > 1, sniff: encoding !== 'raw' || media === '' || media.startsWith('text/'), boundary };
}

const RAW_TYPE: ScanType = { encoding: 'raw', charset: undefined, conflictingCharsets: false, sniff: false };

export function asScanType(type: BodyEncoding | ScanType): ScanType {
  return typeof type === 'string' ? { ...RAW_TYPE, encoding: type } : type;
}

/**
 * Charsets whose bytes are scanned as they are: UTF-8 and the single-byte charsets (every one
 * WHATWG knows is ASCII-compatible, and no byte over 0x7F stands for a digit, space, dash or `+`).
 * A UTF-8 decoder never swallows an ASCII byte into a malformed sequence, so the bytes are what
 * the destination reads whether or not they are valid.
 */
const AS_BYTES = new Set([
  'utf-8', 'ibm866', 'iso-8859-2', 'iso-8859-3', 'iso-8859-4', 'iso-8859-5', 'iso-8859-6', 'iso-8859-7', 'iso-8859-8',
  'iso-8859-8-i', 'iso-8859-10', 'iso-8859-13', 'iso-8859-14', 'iso-8859-15', 'iso-8859-16', 'koi8-r', 'koi8-u',
  'macintosh', 'windows-874', 'windows-1250', 'windows-1251', 'windows-1252', 'windows-1253', 'windows-1254',
  'windows-1255', 'windows-1256', 'windows-1257', 'windows-1258', 'x-mac-cyrillic',
]);

/** `bytes`, or the name of a WHATWG encoding to decode the body with. */
type Charset = 'bytes' | string;

/**
 * The encoding a charset label names, as TextDecoder resolves labels (WHATWG Encoding), or null
 * for one it cannot decode (UTF-7, UTF-32, EBCDIC, the `replacement` labels such as iso-2022-kr,
 * an unknown name). `both`: a UTF-16 label without a byte order (`utf-16`, `ucs-2`, `unicode`):
 * WHATWG reads it little-endian, RFC 2781 big-endian, so without a BOM it is read both ways.
 */
function resolveCharset(label: string): { charset: Charset; both: boolean } | null {
  let encoding: string;
  try {
    encoding = new TextDecoder(label).encoding;
  } catch {
    return null;
  }
  if (AS_BYTES.has(encoding)) return { charset: 'bytes', both: false };
  return { charset: encoding, both: encoding === 'utf-16le' && label !== 'utf-16le' };
}

const BACKSLASH = 0x5c;
const PERCENT = 0x25;
/** Stands for a decoded character that is neither a digit nor a separator (ends a run). */
const OTHER = 0x80;
const EMPTY = new Uint8Array(0);

/** Hex digit values by byte; -1 for a byte that is not a hex digit. */
const HEX = new Int8Array(256).fill(-1);
for (let d = 0; d < 10; d++) HEX[ZERO + d] = d;
for (let d = 0; d < 6; d++) {
  HEX[0x41 + d] = 10 + d;
  HEX[0x61 + d] = 10 + d;
}

function hexValue(c: number | undefined): number {
  return c === undefined ? -1 : HEX[c]!;
}

interface Decoder {
  push(chunk: Uint8Array): Uint8Array;
  end(): Uint8Array;
}

const identity: Decoder = { push: (c) => c, end: () => EMPTY };

/** The simple escapes of JSON (RFC 8259 §7) and the byte each stands for. */
function simpleEscape(c: number): number {
  switch (c) {
    case 0x22: // "
    case 0x5c: // \
    case 0x2f: // /
      return c;
    case 0x62: return 0x08; // b
    case 0x66: return 0x0c; // f
    case 0x6e: return 0x0a; // n
    case 0x72: return 0x0d; // r
    case 0x74: return 0x09; // t
    default: return -1;
  }
}

/**
 * Decodes JSON string escapes (RFC 8259 §7): `\uXXXX` below U+0080 becomes that ASCII byte (so
 * escaped digits, spaces and dashes are seen as such), any other code unit one byte that is
 * neither digit nor separator; `\n`, `\"` and the like their character. A backslash is valid
 * JSON only inside a string, so every one is taken as an escape; a malformed escape passes as
 * written. A chunk without a backslash passes as it is.
 */
class JsonEscapeDecoder implements Decoder {
  /** 0: plain; 1: after `\`; 2–5: after `\u` and (state - 2) hex digits. */
  private state = 0;
  private unit = 0;
  /** The hex digits of an unfinished `\u` escape as written (for a malformed one). */
  private written: number[] = [];

  push(chunk: Uint8Array): Uint8Array {
    if (this.state === 0 && chunk.indexOf(BACKSLASH) === -1) return chunk;
    const out = new Uint8Array(chunk.length + 6);
    let o = 0;
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i]!;
      const state = this.state;
      if (state === 0) {
        if (c === BACKSLASH) this.state = 1;
        else out[o++] = c;
      } else if (state === 1) {
        if (c === 0x75 /* u */) {
          this.state = 2;
          this.unit = 0;
          this.written.length = 0;
          continue;
        }
        this.state = 0;
        const simple = simpleEscape(c);
        if (simple >= 0) out[o++] = simple;
        else {
          // Not an escape JSON has: as written, and `c` again as plain.
          out[o++] = BACKSLASH;
          i--;
        }
      } else {
        const h = HEX[c]!;
        if (h < 0) {
          out[o++] = BACKSLASH;
          out[o++] = 0x75;
          for (const w of this.written) out[o++] = w;
          this.state = 0;
          i--;
          continue;
        }
        this.unit = (this.unit << 4) | h;
        this.written.push(c);
        if (state === 5) {
          out[o++] = this.unit < 0x80 ? this.unit : OTHER;
          this.state = 0;
        } else this.state = state + 1;
      }
    }
    return out.subarray(0, o);
  }

  end(): Uint8Array {
    const state = this.state;
    this.state = 0;
    if (state === 0) return EMPTY;
    if (state === 1) return Uint8Array.of(BACKSLASH);
    return Uint8Array.from([BACKSLASH, 0x75, ...this.written]);
  }
}

/**
 * Decodes application/x-www-form-urlencoded as its parser does (WHATWG URL §5.1): `+` is a space
 * and `%XX` the byte XX; a `%` not followed by two hex digits stays as written. Decoded once, as
 * the destination decodes (`%2534` is `%34` to it, not `4`). A chunk with neither passes as it is.
 */
class FormDecoder implements Decoder {
  /** 0: plain; 1: after `%`; 2: after `%` and one hex digit. */
  private state = 0;
  private high = 0;
  private highByte = 0;

  push(chunk: Uint8Array): Uint8Array {
    if (this.state === 0 && chunk.indexOf(PERCENT) === -1 && chunk.indexOf(PLUS) === -1) return chunk;
    const out = new Uint8Array(chunk.length + 2);
    let o = 0;
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i]!;
      if (this.state === 0) {
        if (c === PERCENT) this.state = 1;
        else out[o++] = c === PLUS ? SPACE : c;
        continue;
      }
      const h = HEX[c]!;
      if (h < 0) {
        // Not an escape: `%` (and the hex digit after it) as written, and `c` again as plain.
        out[o++] = PERCENT;
        if (this.state === 2) out[o++] = this.highByte;
        this.state = 0;
        i--;
      } else if (this.state === 1) {
        this.high = h;
        this.highByte = c;
        this.state = 2;
      } else {
        out[o++] = (this.high << 4) | h;
        this.state = 0;
      }
    }
    return out.subarray(0, o);
  }

  end(): Uint8Array {
    const state = this.state;
    this.state = 0;
    if (state === 0) return EMPTY;
    return state === 1 ? Uint8Array.of(PERCENT) : Uint8Array.of(PERCENT, this.highByte);
  }
}

const UUID_LENGTH = 36;
const OTHER_BYTE = Uint8Array.of(OTHER);

/**
 * Replaces every UUID (8-4-4-4-12 hex digits, either case, not glued to another hex digit) by one
 * byte that ends a run. Candidates are found from the dash 8 bytes in; the last 36 bytes of a
 * chunk are held back until the next one shows whether they start a UUID.
 */
class UuidMasker {
  private carry: Uint8Array = EMPTY;
  /** The input byte before the carry (undefined at the start of the body). */
  private prev: number | undefined;

  push(chunk: Uint8Array, final = false): Uint8Array {
    let buf = chunk;
    if (this.carry.length > 0) {
      buf = new Uint8Array(this.carry.length + chunk.length);
      buf.set(this.carry);
      buf.set(chunk, this.carry.length);
    }
    // A UUID may start before `limit`: one starting later might not be whole yet, or its next
    // byte (which must not be a hex digit) not yet known.
    const limit = final ? buf.length : buf.length - UUID_LENGTH;
    const parts: Uint8Array[] = [];
    let last = 0;
    for (let j = buf.indexOf(DASH, 8); j !== -1; ) {
      const i = j - 8;
      if (i >= limit) break;
      if (hexValue(i === 0 ? this.prev : buf[i - 1]) < 0 && isUuidAt(buf, i) && hexValue(buf[i + UUID_LENGTH]) < 0) {
        parts.push(buf.subarray(last, i), OTHER_BYTE);
        last = i + UUID_LENGTH;
        j = buf.indexOf(DASH, last + 8);
      } else j = buf.indexOf(DASH, j + 1);
    }
    const emitted = Math.max(last, Math.min(Math.max(limit, 0), buf.length));
    if (emitted > 0) this.prev = buf[emitted - 1];
    this.carry = buf.slice(emitted);
    if (parts.length === 0) return buf.subarray(0, emitted);
    parts.push(buf.subarray(last, emitted));
    const size = parts.reduce((n, x) => n + x.length, 0);
    const out = new Uint8Array(size);
    let o = 0;
    for (const x of parts) {
      out.set(x, o);
      o += x.length;
    }
    return out;
  }

  end(): Uint8Array {
    return this.push(EMPTY, true);
  }
}

function isUuidAt(buf: Uint8Array, i: number): boolean {
  if (i + UUID_LENGTH > buf.length) return false;
  for (let k = 0; k < UUID_LENGTH; k++) {
    const c = buf[i + k]!;
    if (k === 8 || k === 13 || k === 18 || k === 23) {
      if (c !== DASH) return false;
    } else if (hexValue(c) < 0) return false;
  }
  return true;
}

/**
 * Decodes a body in a charset that is not read byte for byte (UTF-16, legacy multibyte) with
 * TextDecoder (fatal: a malformed body throws rather than being guessed at) into one byte per
 * character: the character itself below U+0080, else one byte that is neither digit nor separator
 * (ends a run). A character split across chunks is kept by the decoder until it is whole. A byte
 * order mark of its own encoding at the start is dropped.
 */
class CharsetDecoder implements Decoder {
  private readonly decoder: TextDecoder;

  constructor(encoding: string) {
    this.decoder = new TextDecoder(encoding, { fatal: true });
  }

  push(chunk: Uint8Array): Uint8Array {
    return narrow(this.decoder.decode(chunk, { stream: true }));
  }

  end(): Uint8Array {
    return narrow(this.decoder.decode());
  }
}

function narrow(text: string): Uint8Array {
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    out[i] = c < 0x80 ? c : OTHER;
  }
  return out;
}

/** One way of reading the body: a charset, then the media type's escapes, UUIDs out, the card scan. */
class Reading {
  /** Null for a body read byte for byte. */
  private readonly decoder: Decoder | null;
  private readonly escapes: Decoder;
  private readonly uuids = new UuidMasker();
  private readonly cards: CardScanner;
  /** The charset decoder threw: the body is not in this charset. */
  failed = false;

  constructor(
    readonly charset: Charset,
    encoding: BodyEncoding,
    readonly group: number,
    allowed: ReadonlySet<string>,
  ) {
    this.cards = new CardScanner(allowed);
    this.decoder = charset === 'bytes' ? null : new CharsetDecoder(charset);
    this.escapes = encoding === 'json' ? new JsonEscapeDecoder() : encoding === 'form' ? new FormDecoder() : identity;
  }

  get findings(): number {
    return this.failed ? 0 : this.cards.findings;
  }

  push(chunk: Uint8Array): void {
    if (this.failed) return;
    let text = chunk;
    if (this.decoder !== null) {
      try {
        text = this.decoder.push(chunk);
      } catch {
        this.failed = true;
        return;
      }
    }
    this.cards.push(this.uuids.push(this.escapes.push(text)));
  }

  end(): void {
    if (this.failed) return;
    if (this.decoder !== null) {
      let rest: Uint8Array;
      try {
        rest = this.decoder.end();
      } catch {
        this.failed = true;
        return;
      }
      if (rest.length > 0) this.cards.push(this.uuids.push(this.escapes.push(rest)));
    }
    const escaped = this.escapes.end();
    if (escaped.length > 0) this.cards.push(this.uuids.push(escaped));
    this.cards.push(this.uuids.end());
    this.cards.end();
  }
}

/** Bytes a byte order mark and RFC 4627's detection look at. */
const SNIFF = 4;

/**
 * The leak guard's scan of one body: read in every charset the destination may decode it in (see
 * `readings`), each reading decoded as its media type says (`bodyEncoding`), UUIDs taken out,
 * then the card-number scan; the findings are those of the reading that finds the most. Streaming,
 * like CardScanner. `undecodable` after `end()`: the body is in a charset the guard cannot decode
 * (unknown label, UTF-32, or bytes that are not valid in the charset it declares or its BOM
 * shows), so the findings may miss what the destination reads.
 */
export class LeakScanner {
  private readonly type: ScanType;
  /** The first bytes, held until there are enough to look for a byte order mark. */
  private head: Uint8Array | null = EMPTY;
  private list: Reading[] = [];
  private unknownCharset = false;

  /** `allowed`: numbers that are not findings (CardScanner). */
  constructor(type: BodyEncoding | ScanType = 'raw', private readonly allowed: ReadonlySet<string> = NO_ALIASES) {
    this.type = asScanType(type);
    if (!this.type.sniff && this.type.charset === undefined && !this.type.conflictingCharsets) this.start(EMPTY);
  }

  get findings(): number {
    let n = 0;
    for (const r of this.list) n = Math.max(n, r.findings);
    return n;
  }

  /** See the class comment; meaningful after `end()`. */
  get undecodable(): boolean {
    if (this.unknownCharset) return true;
    // A group is one charset the destination reads the body in (a UTF-16 label without a byte
    // order is one group of two readings): undecodable when every reading of a group failed.
    const groups = new Map<number, boolean>();
    for (const r of this.list) groups.set(r.group, (groups.get(r.group) ?? true) && r.failed);
    for (const failed of groups.values()) if (failed) return true;
    return false;
  }

  push(chunk: Uint8Array): void {
    if (this.head !== null) {
      const held = this.head.length === 0 ? chunk : concat(this.head, chunk);
      if (held.length < SNIFF) {
        this.head = held.length === chunk.length ? Uint8Array.from(held) : held;
        return;
      }
      this.start(held);
      return;
    }
    for (const r of this.list) r.push(chunk);
  }

  end(): number {
    if (this.head !== null) this.start(this.head);
    for (const r of this.list) r.end();
    return this.findings;
  }

  /** Decides the readings from the first bytes and feeds them those bytes. */
  private start(first: Uint8Array): void {
    this.head = null;
    const { encoding } = this.type;
    let group = 0;
    const add = (charset: Charset, g: number) => {
      for (const r of this.list) if (r.charset === charset) return;
      this.list.push(new Reading(charset, encoding, g, this.allowed));
    };
    // The bytes as they are: the reading when nothing says otherwise (UTF-8), and always one more,
    // so a body that fails its declared charset is still scanned (for `log`) the same way
    // however it was cut into chunks.
    add('bytes', group++);
    const { charset, conflictingCharsets } = this.type;
    if (conflictingCharsets) this.unknownCharset = true;
    if (charset !== undefined) {
      const resolved = resolveCharset(charset);
      if (resolved === null) this.unknownCharset = true;
      else if (!resolved.both) add(resolved.charset, group++);
      else if (first[0] === 0xfe && first[1] === 0xff) add('utf-16be', group++);
      else if (first[0] === 0xff && first[1] === 0xfe) add('utf-16le', group++);
      else {
        add('utf-16le', group);
        add('utf-16be', group++);
      }
    }
    if (this.type.sniff) {
      const sniffed = sniffCharset(first, encoding === 'json');
      if (sniffed === null) this.unknownCharset = true;
      else if (sniffed !== undefined) add(sniffed, group++);
    }
    if (first.length > 0) for (const r of this.list) r.push(first);
  }
}

/**
 * The charset the first bytes show: a byte order mark (WHATWG's decode lets it override the
 * label), or for JSON without one, the NULs of UTF-16/UTF-32 text that starts with ASCII (RFC
 * 4627 §3; parsers such as Jackson still detect it). Null for UTF-32, which the guard cannot
 * decode; undefined when they show nothing.
 */
function sniffCharset(b: Uint8Array, json: boolean): Charset | null | undefined {
  if (b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf) return 'bytes';
  if (b[0] === 0xff && b[1] === 0xfe) return b[2] === 0 && b[3] === 0 ? null : 'utf-16le';
  if (b[0] === 0xfe && b[1] === 0xff) return 'utf-16be';
  if (b[0] === 0 && b[1] === 0 && b[2] === 0xfe && b[3] === 0xff) return null;
  if (!json || b.length < 2) return undefined;
  if (b[0] === 0) return b[1] === 0 ? null : 'utf-16be';
  if (b[1] === 0) return b.length >= 4 && b[2] === 0 && b[3] === 0 ? null : 'utf-16le';
  return undefined;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** Card numbers in a whole body, decoded per `type` (see LeakScanner). */
export function countCardNumbers(body: Uint8Array, type: BodyEncoding | ScanType = 'raw'): number {
  const s = new LeakScanner(type);
  s.push(body);
  return s.end();
}
