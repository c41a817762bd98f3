/**
 * A proxied body as the transforms see it: the bytes as received, parsed on first need (JSON or
 * form-urlencoded), and serialized again only when a transform changed it, so an untouched body
 * is forwarded byte for byte. A form is never parsed as a whole: `formFields` finds the named
 * fields in one pass over the bytes and `replaceFormValues` splices new values in, so the work is
 * linear in the body and every other field keeps its bytes.
 */
import { isUtf8 } from 'node:buffer';
import { ServiceError } from '../errors.js';
import { isJsonType, jsonDepthExceeds, parseJsonBytes } from '../http/body.js';
import { charsetRefusal, notUtf8Detail } from '../http/utf8.js';

export const FORM_TYPE = 'application/x-www-form-urlencoded';

const AMP = 0x26;
const EQUALS = 0x3d;
const PERCENT = 0x25;
const PLUS = 0x2b;
/** Bytes of a form looked at between two yields of the event loop. */
const YIELD_EVERY = 64 * 1024;

/** One occurrence of a form field: its decoded name and value, and where the value's bytes are. */
export interface FormField {
  name: string;
  value: string;
  /** The value's byte range in the body (end exclusive; start === end for an empty value). */
  start: number;
  end: number;
  /** The field has no `=` (`&name&`): a new value needs one. */
  bare: boolean;
  /**
   * Null when the value's bytes, percent-decoded, are UTF-8; else where they are not (`value` then
   * holds U+FFFD in their place and must not be used: the transforms refuse the field).
   */
  notUtf8: string | null;
}

/** A new value for a field occurrence found by `formFields`. */
export type FormEdit = Pick<FormField, 'start' | 'end' | 'bare' | 'value'>;

function hex(c: number | undefined): number {
  if (c === undefined) return -1;
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  return l >= 0x61 && l <= 0x66 ? l - 0x61 + 10 : -1;
}

/**
 * A name or value of application/x-www-form-urlencoded as WHATWG URL's parser decodes it: `+` is
 * a space, `%XX` a byte (a `%` without two hex digits stays), then UTF-8 (invalid sequences
 * become U+FFFD: `notUtf8` says where, and the caller refuses the value rather than use it).
 */
function decodeFormBytes(b: Buffer, start: number, end: number): { value: string; notUtf8: string | null } {
  const out = Buffer.allocUnsafe(end - start);
  let o = 0;
  for (let i = start; i < end; i++) {
    const c = b[i]!;
    if (c === PLUS) out[o++] = 0x20;
    else if (c === PERCENT && i + 2 < end && hex(b[i + 1]) >= 0 && hex(b[i + 2]) >= 0) {
      out[o++] = (hex(b[i + 1]) << 4) | hex(b[i + 2]);
      i += 2;
    } else out[o++] = c;
  }
  const bytes = out.subarray(0, o);
  if (isUtf8(bytes)) return { value: bytes.toString('utf8'), notUtf8: null };
  return { value: bytes.toString('utf8'), notUtf8: notUtf8Detail(bytes, 'The value, percent-decoded,', 'a value to tokenize must be UTF-8 text') };
}

/** A value serialized as URLSearchParams does (application/x-www-form-urlencoded). */
function encodeFormValue(value: string): string {
  return new URLSearchParams([['', value]]).toString().slice(1);
}

/** Bytes of the wanted names, by length. */
type Wanted = Map<number, Buffer[]>;

function sameBytes(a: Buffer, aStart: number, w: Buffer): boolean {
  for (let k = 0; k < w.length; k++) if (a[aStart + k] !== w[k]) return false;
  return true;
}

/** The wanted name whose bytes are `b[start..end)`, if any. */
function matchRaw(b: Buffer, start: number, end: number, wanted: Wanted): Buffer | undefined {
  const list = wanted.get(end - start);
  if (list === undefined) return undefined;
  for (const w of list) if (sameBytes(b, start, w)) return w;
  return undefined;
}

/**
 * The wanted name that `b[start..end)` decodes to (`+`, `%XX`), if any. Decodes into `scratch`
 * (no string is made unless it matches); a name that cannot decode to a wanted length is skipped.
 */
function matchEncoded(b: Buffer, start: number, end: number, wanted: Wanted, scratch: Buffer, maxLength: number): Buffer | undefined {
  // Each `%XX` shrinks three bytes to one: the decoded length is at least a third of the raw one.
  if ((end - start) / 3 > maxLength) return undefined;
  let o = 0;
  for (let i = start; i < end; i++) {
    if (o === maxLength) return undefined;
    const c = b[i]!;
    if (c === PLUS) scratch[o++] = 0x20;
    else if (c === PERCENT && i + 2 < end && hex(b[i + 1]) >= 0 && hex(b[i + 2]) >= 0) {
      scratch[o++] = (hex(b[i + 1]) << 4) | hex(b[i + 2]);
      i += 2;
    } else scratch[o++] = c;
  }
  return matchRaw(scratch, 0, o, wanted);
}

/**
 * The one pass of `formFields`, a slice at a time (a plain loop that the engine optimizes, with
 * the async yields outside it). A pair ends at `&` (or the end), its name at the first `=`.
 */
class FormScan {
  readonly found: FormField[] = [];
  private readonly wanted: Wanted = new Map();
  private readonly maxLength: number;
  private readonly scratch: Buffer;
  private pairStart = 0;
  private nameEnd = -1;
  private encoded = false;

  constructor(
    private readonly b: Buffer,
    names: ReadonlySet<string>,
    private readonly max: number,
  ) {
    let maxLength = 0;
    for (const n of names) {
      const bytes = Buffer.from(n, 'utf8');
      this.wanted.set(bytes.length, [...(this.wanted.get(bytes.length) ?? []), bytes]);
      maxLength = Math.max(maxLength, bytes.length);
    }
    this.maxLength = maxLength;
    this.scratch = Buffer.allocUnsafe(maxLength);
  }

  /** Positions `from` to `to` (exclusive; `b.length` stands for the end); false past `max`. */
  run(from: number, to: number): boolean {
    const { b, wanted } = this;
    const n = b.length;
    let { pairStart, nameEnd, encoded } = this;
    for (let i = from; i < to; i++) {
      const c = i < n ? b[i]! : AMP;
      if (c !== AMP) {
        if (nameEnd === -1) {
          if (c === EQUALS) nameEnd = i;
          else if (c === PERCENT || c === PLUS) encoded = true;
        }
        continue;
      }
      if (i > pairStart) {
        const end = nameEnd === -1 ? i : nameEnd;
        const hit = encoded ? matchEncoded(b, pairStart, end, wanted, this.scratch, this.maxLength) : matchRaw(b, pairStart, end, wanted);
        if (hit !== undefined) {
          if (this.found.length === this.max) return false;
          const start = Math.min(end + 1, i);
          this.found.push({ name: hit.toString('utf8'), ...decodeFormBytes(b, start, i), start, end: i, bare: nameEnd === -1 });
        }
      }
      pairStart = i + 1;
      nameEnd = -1;
      encoded = false;
    }
    this.pairStart = pairStart;
    this.nameEnd = nameEnd;
    this.encoded = encoded;
    return true;
  }
}

/**
 * Whose body it is: a caller's request, with its Content-Type header (a charset other than UTF-8
 * is refused once the body is read as JSON or a form), or a destination's answer.
 */
export type BodySource = { caller: string | undefined } | 'destination';

export class ProxyBody {
  private json: { value: unknown } | undefined;
  private dirty = false;
  /** The caller's body names a charset other than UTF-8 (a 415), while its bytes are the caller's. */
  private foreignCharset: ServiceError | null;

  constructor(
    private bytes: Buffer,
    /** Media type of the body (lower case, no parameters). */
    readonly mediaType: string,
    private readonly maxDepth: number,
    private readonly source: BodySource,
  ) {
    this.foreignCharset = source === 'destination' ? null : charsetRefusal(source.caller, 'JSON and form bodies');
  }

  /**
   * Throws the 415 for a caller's body in another charset, before its bytes are read as UTF-8
   * text (JSON, a form). A body a transform replaced is UTF-8 whatever the header said.
   */
  refuseForeignCharset(): void {
    if (this.foreignCharset) throw this.foreignCharset;
  }

  get isEmpty(): boolean {
    return !this.dirty && this.bytes.length === 0;
  }

  get isJson(): boolean {
    return isJsonType(this.mediaType);
  }

  get isForm(): boolean {
    return this.mediaType === FORM_TYPE;
  }

  /** The parsed JSON (undefined for an empty body). */
  jsonValue(): unknown {
    if (this.json) return this.json.value;
    if (this.bytes.length === 0) return undefined;
    // At most maxDepth bytes cannot open more than maxDepth levels: no scan.
    if (this.bytes.length > this.maxDepth && jsonDepthExceeds(this.bytes, this.maxDepth)) {
      throw new ServiceError('nesting_too_deep', { detail: `The body is nested deeper than ${this.maxDepth} levels` });
    }
    // A caller's body in another charset is refused before it is read (415); UTF-8 is checked
    // before decoding (http/utf8.ts); where parsing stops is named, never what the body holds.
    this.refuseForeignCharset();
    if (this.source === 'destination' && !isUtf8(this.bytes)) {
      // Read as UTF-8 it would change in silence on its way to the caller.
      throw new ServiceError('destination_response_untransformable', {
        detail: notUtf8Detail(this.bytes, "The destination's JSON answer", 'the response transforms read JSON as UTF-8 only'),
      });
    }
    this.json = { value: parseJsonBytes(this.bytes, 'The body (declared as JSON)') };
    return this.json.value;
  }

  /**
   * The occurrences of the form fields named in `names`, in body order, found in one pass (which
   * lets the event loop go every 64 KB); null as soon as there are more than `max` (the rest is
   * not looked at). A name is compared only when its bytes are as long as a wanted name's (or,
   * with `%` or `+`, could decode to one); a value is decoded only when its name is wanted.
   */
  async formFields(names: ReadonlySet<string>, max: number): Promise<FormField[] | null> {
    this.refuseForeignCharset();
    const b = this.serialize();
    const scan = new FormScan(b, names, max);
    for (let from = 0; from <= b.length; from += YIELD_EVERY) {
      // Other requests get the event loop between slices of a large form.
      if (from > 0) await new Promise<void>((resolve) => setImmediate(resolve));
      if (!scan.run(from, Math.min(from + YIELD_EVERY, b.length + 1))) return null;
    }
    return scan.found;
  }

  /**
   * Puts new values in place of field values found by `formFields` on the current bytes (one
   * edit per occurrence; for the same occurrence the last edit wins). Linear in the body.
   */
  replaceFormValues(edits: readonly FormEdit[]): void {
    if (edits.length === 0) return;
    const b = this.serialize();
    const byStart = new Map<number, FormEdit>();
    for (const e of edits) byStart.set(e.start, e);
    const sorted = [...byStart.values()].sort((x, y) => x.start - y.start);
    const parts: Buffer[] = [];
    let last = 0;
    for (const e of sorted) {
      parts.push(b.subarray(last, e.start), Buffer.from(`${e.bare ? '=' : ''}${encodeFormValue(e.value)}`, 'utf8'));
      last = e.end;
    }
    parts.push(b.subarray(last));
    this.bytes = Buffer.concat(parts);
    this.json = undefined;
    this.dirty = false;
  }

  /**
   * The form's bytes as text, for a step that splits and joins it whole (a detokenize step): 415
   * for a caller's form in another charset, 400 validation_failed for bytes that are not UTF-8
   * (they would come out as U+FFFD, changed in silence).
   */
  formText(): string {
    this.refuseForeignCharset();
    const b = this.serialize();
    if (!isUtf8(b)) {
      throw new ServiceError('validation_failed', { detail: notUtf8Detail(b, 'The form body', 'its bytes must be UTF-8 to be read and rewritten; nothing was sent') });
    }
    return b.toString('utf8');
  }

  /** What a code transform sees: parsed JSON for JSON bodies, else the text. */
  forCode(): unknown {
    return this.isJson ? this.jsonValue() : this.text();
  }

  text(): string {
    return this.serialize().toString('utf8');
  }

  /** A transform changed the JSON value in place (or replaced it). */
  setJson(value: unknown): void {
    this.foreignCharset = null;
    this.json = { value };
    this.dirty = true;
  }

  /** A code transform returned a body: objects are JSON, strings are taken as they are. */
  replace(body: unknown): void {
    this.foreignCharset = null;
    if (typeof body === 'string') {
      this.bytes = Buffer.from(body, 'utf8');
      this.json = undefined;
      this.dirty = false;
      return;
    }
    this.setJson(body ?? null);
  }

  serialize(): Buffer {
    if (!this.dirty) return this.bytes;
    if (this.json) this.bytes = Buffer.from(JSON.stringify(this.json.value) ?? '', 'utf8');
    this.dirty = false;
    return this.bytes;
  }
}
