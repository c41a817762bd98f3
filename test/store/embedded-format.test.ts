/**
 * The embedded store's format 6 codec (src/store/embedded/format.ts, issue 24 item 2) is lossless:
 * ids, sealed values, digests and times come back exactly, whatever they hold, and the canonical
 * forms the service writes are stored binary (the point of the format). The store contract
 * (embedded.test.ts) covers the same path end to end.
 */
import t from 'tap';
import fc from 'fast-check';
import { randomBytes, randomUUID } from 'node:crypto';
import { packHex, packId, packSealed, packTime, unpackHex, unpackId, unpackSealed } from '../../src/store/embedded/format.js';

t.test('canonical values are stored binary, and come back as they were', async (t) => {
  const id = randomUUID();
  t.ok(Buffer.isBuffer(packId(id)) && (packId(id) as Buffer).length === 16, 'a UUID: 16 bytes');
  t.equal(unpackId(packId(id)), id);
  const fp = randomBytes(32).toString('hex');
  t.ok(Buffer.isBuffer(packHex(fp)) && (packHex(fp) as Buffer).length === 32, 'a digest: 32 bytes');
  t.equal(unpackHex(packHex(fp)), fp);
  const sealed = `v1.k12.${randomBytes(12).toString('base64url')}.${randomBytes(77).toString('base64url')}`;
  const packed = packSealed(sealed);
  t.ok(Buffer.isBuffer(packed), 'a sealed value: one BLOB');
  t.equal((packed as Buffer).length, 1 + 1 + 3 + 1 + 12 + 77, 'tag, kid length, kid, iv length, iv, body');
  t.equal(unpackSealed(packed), sealed);
  t.same(packTime('2026-11-26T07:09:16.127Z', 'x'), { ms: Date.parse('2026-11-26T07:09:16.127Z'), exact: null });
  t.same(packTime('2099-01-01T00:00:00+00:00', 'x'), { ms: Date.parse('2099-01-01T00:00:00Z'), exact: '2099-01-01T00:00:00+00:00' }, 'a non-canonical time keeps its text');
});

t.test('anything else stays the text it was', async (t) => {
  for (const s of ['custom-id-1', 'ABCDEF01-0000-4000-8000-000000000000', '', 'fp-1', 'v1.k1.a.b', 'v1.k1.AB.CD=', 'v2.k1.AA.AA', 'v1..AA.AA', 'v1.k1.A.AA']) {
    t.equal(unpackId(packId(s)), s);
    t.equal(unpackHex(packHex(s)), s);
    t.equal(unpackSealed(packSealed(s)), s);
  }
  t.equal(typeof packId('ABCDEF01-0000-4000-8000-000000000000'), 'string', 'an upper-case UUID is not canonical: text');
  t.equal(typeof packSealed('v1.k1.AB.CD='), 'string', 'padding is not canonical base64url: text');
});

t.test('any string round-trips through every packing (property test)', async () => {
  const sealedLike = fc.tuple(fc.constantFrom('v1', 'v2', ''), fc.string(), fc.base64String(), fc.base64String()).map(([v, k, a, b]) => `${v}.${k}.${a.replace(/[+/=]/g, '-')}.${b.replace(/[+/=]/g, '_')}`);
  fc.assert(
    fc.property(fc.oneof(fc.string({ unit: 'binary' }), fc.uuid(), sealedLike, fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), maxLength: 70 })), (s) => {
      return unpackId(packId(s)) === s && unpackHex(packHex(s)) === s && unpackSealed(packSealed(s)) === s;
    }),
    { numRuns: 2000 },
  );
});
