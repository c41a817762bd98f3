/** detokenize/serialize.ts: stringifyInTurns gives what JSON.stringify gives, for any JSON value. */
import fc from 'fast-check';
import t from 'tap';
import { stringifyInTurns as inTurns } from '../../src/detokenize/serialize.js';

async function stringifyInTurns(v: unknown): Promise<string> {
  const pieces: string[] = [];
  await inTurns(v, (p) => {
    pieces.push(p);
  });
  return pieces.join('');
}

t.test('equal to JSON.stringify on random JSON (seeded)', async (t) => {
  const seed = Number(process.env.SERIALIZE_SEED ?? 23);
  await fc.assert(
    fc.asyncProperty(fc.jsonValue(), async (v) => {
      t.equal(await stringifyInTurns(v), JSON.stringify(v));
    }),
    { seed, numRuns: 200 },
  );
  const proto = JSON.parse('{"__proto__": "x", "k": [1, null, "\\u2028"]}') as unknown;
  t.equal(await stringifyInTurns(proto), JSON.stringify(proto), 'an own __proto__ key');
  t.equal(await stringifyInTurns({ a: undefined, b: [undefined], c: Number.NaN }), JSON.stringify({ a: undefined, b: [undefined], c: Number.NaN }));
  const big = Array.from({ length: 2000 }, (_, i) => ({ [`k${i}`]: 'v'.repeat(2000) }));
  t.equal(await stringifyInTurns(big), JSON.stringify(big), '4 MB, in turns');
  const pieces: string[] = [];
  await inTurns(big, (p) => {
    pieces.push(p);
  });
  t.ok(pieces.length > 50, `handed out in pieces (${pieces.length})`);
  t.ok(pieces.every((p) => p.length < 80 * 1024), 'none much over 64 K characters');
});
