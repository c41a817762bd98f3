/**
 * The leak guard's scan of a buffered body (the body of a `block` proxy, or of one with request
 * transforms): the whole body through a LeakScanner, and a multipart body also part by part, each
 * part as its own headers say (RFC 2046 §5.1). Bounded work on every carrier: the scan lets the
 * event loop go every few milliseconds, whatever it is reading (slices of one long body, or many
 * short parts), and at most MAX_PARTS parts are read one by one, across every level of nesting
 * together. A body of 490,000 one-byte parts (4.9 MB) took each part as a body of its own with no
 * turn for other requests between them, and held the event loop for seconds.
 */
import { performance } from 'node:perf_hooks';
import { asScanType, LeakScanner, NO_ALIASES, scanType, type BodyEncoding, type ScanType } from './leak-guard.js';

/** How much of a body is handed to the scanner at once (a turn is taken between slices when due). */
const SLICE = 8 * 1024;
/** The longest the scan of one body holds the event loop before other work gets a turn. */
const TURN_MS = 5;
/** Multipart bodies inside multipart bodies are read this deep; deeper ones are scanned as bytes. */
const MAX_MULTIPART_DEPTH = 4;
/**
 * Parts read one by one in one body, every level of nesting counted together. More is refused by
 * `block` (`413 body_too_large`) and forwarded with a warning by `log` (docs/proxy.md).
 */
export const MAX_PARTS = 1_000;

/** What the scan of a whole body found (see LeakScanner). */
export interface ScanResult {
  findings: number;
  undecodable: boolean;
  /** A multipart body with more than MAX_PARTS parts: the parts past it were not read one by one. */
  tooManyParts: boolean;
}

/** Gives the event loop a turn once the scan has held it TURN_MS; counts the parts read. */
class Pacer {
  private since = performance.now();
  parts = 0;

  get due(): boolean {
    return performance.now() - this.since >= TURN_MS;
  }

  async turn(): Promise<void> {
    await new Promise<void>((resolve) => setImmediate(resolve));
    this.since = performance.now();
  }
}

/**
 * The scan of a buffered body, in slices with the event loop let go when the scan has held it a
 * few milliseconds: a 5 MB body of short digit groups takes a few hundred ms to scan, which no
 * other request should wait for in one piece. A multipart body is also scanned part by part
 * (`scanParts`): its findings are the larger of the two.
 */
export async function scanBodyYielding(body: Uint8Array, type: BodyEncoding | ScanType = 'raw', allowed: ReadonlySet<string> = NO_ALIASES): Promise<ScanResult> {
  return scanYielding(body, asScanType(type), 0, allowed, new Pacer());
}

async function scanYielding(body: Uint8Array, type: ScanType, depth: number, allowed: ReadonlySet<string>, pacer: Pacer): Promise<ScanResult> {
  const s = new LeakScanner(type, allowed);
  for (let i = 0; i < body.length; i += SLICE) {
    if (pacer.due) await pacer.turn();
    s.push(body.subarray(i, i + SLICE));
  }
  const whole = { findings: s.end(), undecodable: s.undecodable, tooManyParts: false };
  if (type.boundary === undefined) return whole;
  const parts = await scanParts(body, type.boundary, depth, allowed, pacer);
  return { findings: Math.max(whole.findings, parts.findings), undecodable: whole.undecodable || parts.undecodable, tooManyParts: parts.tooManyParts };
}

/**
 * Scans each part of a multipart body (RFC 2046 §5.1) as a destination's parser decodes it: by the
 * part's `Content-Transfer-Encoding` (`base64` and `quoted-printable` decoded; `7bit`, `8bit`,
 * `binary` or none as they are; any other is undecodable) and then its own `Content-Type` (charset,
 * JSON, form, a nested multipart), as a body of its own. A body that does not parse as multipart
 * adds nothing (the whole-body scan stands). Stops at the part past MAX_PARTS (`tooManyParts`).
 */
async function scanParts(body: Uint8Array, boundary: string, depth: number, allowed: ReadonlySet<string>, pacer: Pacer): Promise<ScanResult> {
  const result: ScanResult = { findings: 0, undecodable: false, tooManyParts: false };
  if (depth >= MAX_MULTIPART_DEPTH) return result;
  const buf = Buffer.from(body.buffer, body.byteOffset, body.length);
  const delimiter = Buffer.from(`--${boundary}`);
  let at = buf.indexOf(delimiter);
  while (at !== -1) {
    let start = at + delimiter.length;
    if (buf[start] === 0x2d && buf[start + 1] === 0x2d) break; // the close delimiter
    // The rest of the delimiter line (transport padding), then the part.
    const eol = buf.indexOf(0x0a, start);
    if (eol === -1) break;
    if (++pacer.parts > MAX_PARTS) {
      result.tooManyParts = true;
      break;
    }
    if (pacer.due) await pacer.turn();
    start = eol + 1;
    let next = buf.indexOf(delimiter, start);
    if (next === -1) next = buf.length;
    // The CRLF before the next delimiter belongs to it.
    let end = next;
    if (end > start && buf[end - 1] === 0x0a) end--;
    if (end > start && buf[end - 1] === 0x0d) end--;
    const r = await scanPart(buf.subarray(start, end), depth, allowed, pacer);
    result.findings += r.findings;
    result.undecodable ||= r.undecodable;
    if (r.tooManyParts) {
      result.tooManyParts = true;
      break;
    }
    at = next === buf.length ? -1 : next;
  }
  return result;
}

async function scanPart(part: Buffer, depth: number, allowed: ReadonlySet<string>, pacer: Pacer): Promise<ScanResult> {
  let split = part.indexOf('\r\n\r\n');
  let bodyStart = split + 4;
  // A part without headers starts with the empty line.
  if (part[0] === 0x0d && part[1] === 0x0a) [split, bodyStart] = [0, 2];
  else if (part[0] === 0x0a) [split, bodyStart] = [0, 1];
  else if (split === -1) {
    split = part.indexOf('\n\n');
    bodyStart = split + 2;
  }
  if (split === -1) return { findings: 0, undecodable: false, tooManyParts: false };
  let contentType = '';
  let transfer = '';
  // Header lines; a folded line (starting with white space) continues the one before.
  for (const line of part.toString('latin1', 0, split).replace(/\r?\n[ \t]+/g, ' ').split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon === -1) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    if (name === 'content-type') contentType = line.slice(colon + 1).trim();
    else if (name === 'content-transfer-encoding') transfer = line.slice(colon + 1).trim().toLowerCase();
  }
  let content: Uint8Array = part.subarray(bodyStart);
  if (transfer === 'base64') content = Buffer.from(part.toString('latin1', bodyStart), 'base64');
  else if (transfer === 'quoted-printable') content = decodeQuotedPrintable(part.subarray(bodyStart));
  else if (transfer !== '' && transfer !== '7bit' && transfer !== '8bit' && transfer !== 'binary') return { findings: 0, undecodable: true, tooManyParts: false };
  return scanYielding(content, scanType(contentType), depth + 1, allowed, pacer);
}

function hexValue(c: number | undefined): number {
  if (c === undefined) return -1;
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  return l >= 0x61 && l <= 0x66 ? l - 0x61 + 10 : -1;
}

/** Quoted-printable (RFC 2045 §6.7): `=XX` is the byte XX, `=` at a line end a soft break; anything else as written. */
function decodeQuotedPrintable(b: Uint8Array): Uint8Array {
  const out = new Uint8Array(b.length);
  let o = 0;
  for (let i = 0; i < b.length; i++) {
    const c = b[i]!;
    if (c !== 0x3d) {
      out[o++] = c;
      continue;
    }
    const h = hexValue(b[i + 1]);
    const l = hexValue(b[i + 2]);
    if (h >= 0 && l >= 0) {
      out[o++] = (h << 4) | l;
      i += 2;
      continue;
    }
    // A soft line break: `=`, optional trailing white space, then CRLF or LF.
    let j = i + 1;
    while (b[j] === 0x20 || b[j] === 0x09) j++;
    if (b[j] === 0x0d && b[j + 1] === 0x0a) i = j + 1;
    else if (b[j] === 0x0a) i = j;
    else out[o++] = c;
  }
  return out.subarray(0, o);
}
