/**
 * The writer thread's wire format (src/store/embedded/wire.ts): every value a write can carry comes
 * back exactly, whatever characters it holds, and a truncated message is an error, not a guess.
 * The store tests (embedded.test.ts, embedded-writer.test.ts) cover the same path end to end.
 */
import t from 'tap';
import fc from 'fast-check';
import {
  decodeOp, decodeRequests, decodeResults, encodeOp, encodeRequest, encodeResult, WireReader, type WireResult,
} from '../../src/store/embedded/wire.js';
import type { WriteOp, WriteRow } from '../../src/store/embedded/writer.js';

// Strings a length prefix must survive: the format's own characters, digits, empty, surrogates.
const awkward = ['', '~', ':', '12:', '3:abc', '~~:~', '\n\0\t', '\u{1F512}', '\uD800', 'x'.repeat(5000), '__proto__'];

interface RowOptions {
  dedupe?: boolean;
  hashes?: string[];
  metadata?: Record<string, string>;
  params?: Partial<WriteRow['columns']>;
}

function row({ dedupe, hashes = [], metadata = {}, params = {} }: RowOptions = {}): WriteRow {
  const r: WriteRow = {
    tenant_id: 'tenant:1', id: 'tok~1',
    index_hashes: hashes, metadata,
    columns: {
      tenant: 'tenant:1', id: 'tok~1', type: 'card', container: '/pci/high/', sealed: 'v1.k1.a.b', fingerprint: null, expires_ms: null,
      cvc_sealed: null, cvc_expires_ms: null, created_by: 'app', created_ms: 0, fp_expr: null, rest: '{"a":1}', ...params,
    },
  };
  if (dedupe) r.dedupe = true;
  return r;
}

/** A row as the writer compares it: metadata as plain entries (the decoder's has no prototype). */
const plain = (op: WriteOp): unknown => JSON.parse(JSON.stringify(op, (_k, v: unknown) => (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.getPrototypeOf(v) === null ? { ...v } : v)));

t.test('rows round-trip: awkward strings, nulls, numbers, hashes, metadata, the dedupe flag', async (t) => {
  const metadata: Record<string, string> = {};
  for (const [i, s] of awkward.entries()) Object.defineProperty(metadata, s || `empty${i}`, { value: s, enumerable: true });
  const rows = [
    row(),
    row({ params: { fingerprint: awkward.join(''), expires_ms: 1_790_000_000_123, cvc_sealed: 'v1.k1.a.b', cvc_expires_ms: 0, created_ms: 1_790_000_000_999, fp_expr: awkward.join('~') }, dedupe: true }),
    row({ params: { rest: awkward.join('|'), sealed: awkward.join(':'), created_by: awkward.join('') }, hashes: awkward.filter(Boolean), metadata }),
  ];
  const op: WriteOp = { op: 'insert', rows };
  const back = decodeOp(new WireReader(encodeOp(op)));
  t.same(plain(back), plain(op));
  t.equal(Object.keys((back as { rows: WriteRow[] }).rows[2]!.metadata).includes('__proto__'), true, 'a "__proto__" metadata key stays a key');
  const update: WriteOp = { op: 'update', row: rows[1]! };
  t.same(plain(decodeOp(new WireReader(encodeOp(update)))), plain(update));
});

t.test('any string survives (property test)', async () => {
  fc.assert(
    fc.property(fc.array(fc.string({ unit: 'binary' }), { maxLength: 8 }), fc.option(fc.string({ unit: 'binary' })), (strings, maybe) => {
      const metadata: Record<string, string> = {};
      strings.forEach((s, i) => Object.defineProperty(metadata, `${i}${s}`, { value: s, enumerable: true }));
      const op: WriteOp = { op: 'insert', rows: [row({ params: { rest: strings.join(''), fingerprint: maybe }, hashes: strings, metadata })] };
      const back = plain(decodeOp(new WireReader(encodeOp(op))));
      if (JSON.stringify(back) !== JSON.stringify(plain(op))) throw new Error('round trip changed the row');
    }),
  );
});

t.test('other writes go as JSON; a batch of requests and its answers round-trip in order', async (t) => {
  const ops: WriteOp[] = [
    { op: 'delete', tenant_id: 't', id: 'x:y' },
    { op: 'purgeCvc', now: 123 },
    { op: 'addKey', key: { kid: 'k1', wrapped: 'w1.a.b.c', created_at: '2026-01-01T00:00:00.000Z' } },
    { op: 'idempotency', action: 'claim', slot: { tenant: 't', key: 'k~', owner: 'o' }, sealed: 's', expires_ms: 9 },
    { op: 'insert', rows: [row()] },
  ];
  const text = ops.map((op, i) => encodeRequest(i + 7, encodeOp(op))).join('');
  const back = decodeRequests(text);
  t.same(back.map((r) => r.id), [7, 8, 9, 10, 11]);
  t.same(back.map((r) => plain(r.op)), ops.map(plain));

  const results: WireResult[] = [
    { id: 1, ok: true, value: [null, { seq: 3, record: '{"x":"~"}', cvc_sealed: null, cvc_expires_ms: null }] },
    { id: 2, ok: true, value: undefined },
    { id: 3, ok: true, value: false },
    { id: 4, ok: false, error: { kind: 'duplicate', id: 'tok:1' } },
    { id: 5, ok: false, error: { kind: 'sqlite', code: 'SQLITE_FULL' } },
  ];
  t.same(decodeResults(results.map(encodeResult).join('')), results);
});

t.test('a truncated or malformed message throws', async (t) => {
  const text = encodeRequest(1, encodeOp({ op: 'insert', rows: [row({ params: { rest: 'y'.repeat(40) } })] }));
  t.throws(() => decodeRequests(text.slice(0, text.length - 5)), /malformed/);
  t.throws(() => decodeRequests('1:1X'), /malformed/);
  t.throws(() => decodeRequests('x:1'), /malformed/);
});
