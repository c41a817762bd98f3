/**
 * The PostgreSQL store's compact encodings (src/store/postgres/wire.ts, issue 24 item 2): every
 * string comes back as it went in, whatever its shape, and the common shapes take the short form.
 */
import t from 'tap';
import { randomBytes, randomUUID } from 'node:crypto';
import { decodeDigest, decodeSealed, decodeTime, encodeDigest, encodeSealed, encodeTime, splitId, splitIds } from '../../src/store/postgres/wire.js';

const iv = () => randomBytes(12).toString('base64url');
const body = (n: number) => randomBytes(n).toString('base64url');

t.test('sealed values: the v1 form as bytes, anything else as text, every one back as it was', async (t) => {
  const v1 = `v1.k1.${iv()}.${body(70)}`;
  const shortest = encodeSealed(v1);
  t.ok(shortest.length < v1.length * 0.8, `${shortest.length} bytes for ${v1.length} characters`);
  const odd = [
    v1, `v1.k12.${body(16)}.${body(3)}`, `v1.k1.${iv()}.${body(1)}`, 'v1.k1.a.b', 'v1.k1.AB==.cd', 'v1.k1.ab=.cd', `v2.k1.${iv()}.${body(5)}`,
    'v1.k 1.aaaa.bbbb', `v1.k1.${iv()}`, '', 'plain text é ✓', `v1.${'k'.repeat(64)}.${iv()}.${body(9)}`, `v1.${'k'.repeat(65)}.${iv()}.${body(9)}`,
    // base64url whose last character carries stray bits: not canonical, kept as text
    'v1.k1.AAAAAAAAAAAAAAAB.bb',
  ];
  for (const s of odd) t.equal(decodeSealed(encodeSealed(s)), s, JSON.stringify(s));
});

t.test('digests: lowercase hex as half the bytes, anything else as text', async (t) => {
  const hex = randomBytes(32).toString('hex');
  t.equal(encodeDigest(hex).length, 33);
  for (const s of [hex, hex.toUpperCase(), 'abc', '', 'race', 'zz', '00', 'ééé']) t.equal(decodeDigest(encodeDigest(s)), s, JSON.stringify(s));
  t.notSame(encodeDigest('00'), encodeDigest('\u0000'), 'hex and text never meet');
});

t.test('ids: the service\'s uuids to the uuid column, any other id as text', async (t) => {
  const u = randomUUID();
  t.same(splitId(u), { uuid: u, custom: null });
  for (const c of [u.toUpperCase(), `${u} `, 'my-id', '']) t.same(splitId(c), { uuid: null, custom: c }, JSON.stringify(c));
  t.same(splitIds([u, 'x', u.toUpperCase()]), { uuids: [u], customs: ['x', u.toUpperCase()] });
});

t.test('times: epoch ms when toISOString writes them back, else the text too', async (t) => {
  const now = new Date().toISOString();
  t.same(encodeTime(now, 'x'), { ms: Date.parse(now), text: null });
  for (const s of [now, '2030-01-01T00:00:00Z', '2030-01-01', '2030-01-01T00:00:00.000+02:00', null]) {
    const e = encodeTime(s, 'x');
    t.equal(decodeTime(e.ms, e.text), s, String(s));
  }
  t.throws(() => encodeTime('not a date', 'expires_at'), TypeError);
});
