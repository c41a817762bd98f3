/**
 * What crosses the thread boundary between EmbeddedStore (main thread) and its writer thread
 * (writer.ts): the writes of one event-loop turn go over as ONE string, and the writer's
 * answers to them come back as one string.
 *
 * Why a string: postMessage copies a flat string in one piece, while a structured clone walks
 * every object (a params object per row, its metadata, its hashes, the op around it), property by
 * property, on the main thread on the way out and again for the answers on the way in. Measured
 * with rows of one card token each: 8-14 µs of main-thread time per write as objects, 2-7 µs as
 * one string (batches of 50 to 1, on a busy 2-core machine).
 *
 * The format: fields are length-prefixed, `<length>:<chars>` for a string and `~` for null, so any
 * value (separators, newlines, lone surrogates) comes back exactly; lengths count UTF-16 code
 * units, which is what both ends slice. A token row is a fixed sequence of fields; the rare writes
 * (delete, keys, idempotency, audit) are one JSON field each. Nothing here is persisted: both
 * ends are always the same build.
 */
import type { WriteOp, WriteRow } from './ops.js';

const NULL = '~';
const NULL_CODE = 126;

/** One string field. */
export function field(s: string | null): string {
  return s === null ? NULL : `${s.length}:${s}`;
}

/** Reads the fields of one message in order. */
export class WireReader {
  #pos = 0;
  readonly text: string;

  constructor(text: string) {
    this.text = text;
  }

  get done(): boolean {
    return this.#pos >= this.text.length;
  }

  str(): string | null {
    const s = this.text;
    const at = this.#pos;
    if (s.charCodeAt(at) === NULL_CODE) {
      this.#pos = at + 1;
      return null;
    }
    const colon = s.indexOf(':', at);
    const len = colon > at ? Number(s.slice(at, colon)) : NaN;
    const end = colon + 1 + len;
    if (!Number.isInteger(len) || len < 0 || end > s.length) throw new Error('malformed embedded-store writer message');
    this.#pos = end;
    return s.slice(colon + 1, end);
  }

  /** One character that is not a field (an op's kind, a row's dedupe flag). */
  flag(): string {
    if (this.#pos >= this.text.length) throw new Error('malformed embedded-store writer message');
    return this.text.charAt(this.#pos++);
  }

  need(): string {
    const v = this.str();
    if (v === null) throw new Error('malformed embedded-store writer message');
    return v;
  }

  num(): number | null {
    const v = this.str();
    return v === null ? null : Number(v);
  }

  count(): number {
    const n = Number(this.need());
    if (!Number.isSafeInteger(n) || n < 0) throw new Error('malformed embedded-store writer message');
    return n;
  }
}

/** Appends one string field to `out` (push, not `+`: see encodeRow). */
function put(out: string[], s: string | null): void {
  if (s === null) out.push(NULL);
  else out.push(`${s.length}:`, s);
}

function putNum(out: string[], n: number | null): void {
  if (n === null) out.push(NULL);
  else put(out, String(n));
}

/**
 * A token row's fields appended to `out`: its columns (format.ts TokenColumns), then the dedupe
 * flag, its index hashes and its metadata pairs. Collected in an array and joined once:
 * `+` on every field built a rope of ~30 pieces a row that postMessage then flattened, in a profile
 * of 100-string bodies 6.5 % of the main thread's time in postMessage.
 */
function putRow(out: string[], r: WriteRow): void {
  const c = r.columns;
  put(out, c.tenant); put(out, c.id); put(out, c.type); put(out, c.container); put(out, c.sealed); put(out, c.fingerprint);
  putNum(out, c.expires_ms); put(out, c.cvc_sealed); putNum(out, c.cvc_expires_ms); put(out, c.created_by); putNum(out, c.created_ms);
  put(out, c.fp_expr); put(out, c.rest);
  out.push(r.dedupe === true ? '1' : '0');
  put(out, String(r.index_hashes.length));
  for (const h of r.index_hashes) put(out, h);
  const keys = Object.keys(r.metadata);
  put(out, String(keys.length));
  for (const k of keys) {
    put(out, k);
    put(out, r.metadata[k]!);
  }
}

/** A token row as one string (putRow). */
export function encodeRow(r: WriteRow): string {
  const out: string[] = [];
  putRow(out, r);
  return out.join('');
}

function decodeRow(rd: WireReader): WriteRow {
  const tenant = rd.need();
  const id = rd.need();
  const columns = {
    tenant, id, type: rd.need(), container: rd.need(), sealed: rd.need(), fingerprint: rd.str(), expires_ms: rd.num(),
    cvc_sealed: rd.str(), cvc_expires_ms: rd.num(), created_by: rd.need(), created_ms: rd.num() ?? NaN, fp_expr: rd.str(), rest: rd.str(),
  };
  if (!Number.isFinite(columns.created_ms)) throw new Error('malformed embedded-store writer message');
  const row: WriteRow = { tenant_id: tenant, id, index_hashes: [], metadata: {}, columns };
  if (rd.flag() === '1') row.dedupe = true;
  for (let n = rd.count(); n > 0; n--) row.index_hashes.push(rd.need());
  // No prototype: a metadata key "__proto__" is a key like any other (Object.entries reads it).
  const metadata = Object.create(null) as Record<string, string>;
  for (let n = rd.count(); n > 0; n--) {
    const k = rd.need();
    metadata[k] = rd.need();
  }
  row.metadata = metadata;
  return row;
}

/** One write without its id: `I` rows (insert), `U` a row (update), `J` any other write as JSON. */
export function encodeOp(op: WriteOp): string {
  if (op.op === 'insert') {
    const out = ['I'];
    put(out, String(op.rows.length));
    for (const r of op.rows) putRow(out, r);
    return out.join('');
  }
  if (op.op === 'update') return 'U' + encodeRow(op.row);
  return 'J' + field(JSON.stringify(op));
}

export function decodeOp(rd: WireReader): WriteOp {
  const kind = rd.flag();
  if (kind === 'I') {
    const rows: WriteRow[] = [];
    for (let n = rd.count(); n > 0; n--) rows.push(decodeRow(rd));
    return { op: 'insert', rows };
  }
  if (kind === 'U') return { op: 'update', row: decodeRow(rd) };
  if (kind === 'J') return JSON.parse(rd.need()) as WriteOp;
  throw new Error('malformed embedded-store writer message');
}

/** Main thread → writer: the writes of one turn, each its id and its encodeOp frame. */
export function encodeRequest(id: number, frame: string): string {
  return field(String(id)) + frame;
}

export function decodeRequests(text: string): Array<{ id: number; op: WriteOp }> {
  const rd = new WireReader(text);
  const out: Array<{ id: number; op: WriteOp }> = [];
  while (!rd.done) out.push({ id: rd.count(), op: decodeOp(rd) });
  return out;
}

/** An answer's outcome: the write's value, or what failed (ErrorDescriptor in writer.ts). */
export type WireResult = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: unknown };

/** Writer → main thread: per write its id, then `o` and its value as JSON (`~`: undefined), or `e` and the failure as JSON. */
export function encodeResult(r: WireResult): string {
  const payload = r.ok ? r.value : r.error;
  return field(String(r.id)) + (r.ok ? 'o' : 'e') + (payload === undefined ? NULL : field(JSON.stringify(payload)));
}

export function decodeResults(text: string): WireResult[] {
  const rd = new WireReader(text);
  const out: WireResult[] = [];
  while (!rd.done) {
    const id = rd.count();
    const ok = rd.flag() === 'o';
    const json = rd.str();
    const payload: unknown = json === null ? undefined : JSON.parse(json);
    out.push(ok ? { id, ok, value: payload } : { id, ok, error: payload });
  }
  return out;
}
