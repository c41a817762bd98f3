/**
 * The oracle property test of issue 23: `token:use` is a right to send, not to learn. For random
 * pairs of values of the same length that differ in content (digits and letters) and random
 * filter chains (the ones of finding 1 among them), a key without reveal sends each request twice,
 * once naming a token that holds A and once a token that holds B, and everything it observes
 * (status, code, title, detail, headers less date, trace id and rate-limit counters; the body
 * where only the destination writes it) must be equal.
 *
 * Carriers: the outbound proxy (to a local allow-listed upstream), a pre-configured proxy's
 * `detokenize` transform, reactor args (a reactor that answers the same whatever it gets), each
 * with the use-only key; POST /detokenize with a `mask` key (a use-only key may not call it).
 * Seeded: ORACLE_SEED=<n> reproduces a run (printed in every failure), ORACLE_RUNS the runs per
 * carrier (25).
 */
import fc from 'fast-check';
import t from 'tap';
import { luhnCheckDigit } from '../helpers/secrets.js';
import { detokenize, KEYS, observed, outbound, reactor, startFixture, transform, USE_ONLY, type Answer, type Fixture } from './fixture.js';

const SEED = process.env.ORACLE_SEED !== undefined ? Number(process.env.ORACLE_SEED) : Math.floor(Math.random() * 2 ** 31);
const RUNS = Number(process.env.ORACLE_RUNS ?? 25);

const digit = fc.constantFrom(...'0123456789');
const alnum = fc.constantFrom(...'0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ');

/** A Luhn-valid 16-digit number starting with 4 that is not a repeated group (the vault's test-number rule). */
const cardArb = fc.array(digit, { minLength: 14, maxLength: 14 }).map((d) => {
  const body = `4${d.join('')}`;
  return body + luhnCheckDigit(body);
}).filter((c) => !/^(\d{1,4})\1+\d?$/.test(c));

/** Two tokens' data: card numbers and cvcs, or same-length strings of digits and letters. */
type Pair = { kind: 'card'; a: { number: string; cvc: string }; b: { number: string; cvc: string } } | { kind: 'text'; a: string; b: string };
const pairArb: fc.Arbitrary<Pair> = fc.oneof(
  fc.record({
    kind: fc.constant('card' as const),
    a: fc.record({ number: cardArb, cvc: fc.array(digit, { minLength: 3, maxLength: 3 }).map((x) => x.join('')) }),
    b: fc.record({ number: cardArb, cvc: fc.array(digit, { minLength: 3, maxLength: 3 }).map((x) => x.join('')) }),
  }).filter((p) => p.a.number !== p.b.number),
  fc.integer({ min: 1, max: 40 }).chain((n) =>
    fc.record({
      kind: fc.constant('text' as const),
      a: fc.array(alnum, { minLength: n, maxLength: n }).map((x) => x.join('')),
      b: fc.array(alnum, { minLength: n, maxLength: n }).map((x) => x.join('')),
    }),
  ).filter((p) => p.a !== p.b),
);

const argText = fc.oneof(
  fc.constantFrom('\\n', '\\r', 'x', '4', '0', 'a', 'Z', '', ' '),
  fc.array(alnum, { maxLength: 6 }).map((x) => x.join('')),
  fc.constantFrom('x'.repeat(200), 'y'.repeat(300)),
);
/** Filters: the allowed ones and the value-dependent ones (finding 1's among them). */
const filterArb: fc.Arbitrary<string> = fc.oneof(
  fc.tuple(fc.integer({ min: -20, max: 20 }), fc.integer({ min: 0, max: 20 })).map(([a, b]) => `slice: ${a}, ${b}`),
  fc.constant('slice: 0, 2000000'),
  fc.constantFrom('last4', 'upcase', 'downcase'),
  fc.tuple(fc.integer({ min: 0, max: 20 }), fc.constantFrom("'X'", "'*'", "'\\n'")).map(([n, c]) => `reveal_last: ${n}, ${c}`),
  fc.integer({ min: 0, max: 20 }).map((n) => `reveal_first: ${n}`),
  argText.map((s) => `append: '${s}'`),
  argText.map((s) => `prepend: '${s}'`),
  fc.tuple(fc.constantFrom(...'0123456789aZx'), argText).map(([p, s]) => `replace: '${p}', '${s}'`),
  fc.constantFrom(...'0123456789a').map((p) => `remove: '${p}'`),
  fc.constantFrom('size', 'digits', "default: 'z'", 'truncatewords: 1', "split: '4' | join: ','", 'strip', 'url_encode'),
);
/**
 * A chain: random filters, or one of finding 1's probes, whose guess is the k-th character of
 * value A (the property must hold for chains chosen with knowledge of A): `slice` one character,
 * then `replace` it with a line break (refused in a header only when the guess is right) or with
 * text that a chain of `replace` multiplies past liquidjs' memory limit (fails only when right).
 */
type Chain = { filters: string[] } | { probe: 'newline' | 'blowup'; k: number };
const chainArb: fc.Arbitrary<Chain> = fc.oneof(
  fc.record({ filters: fc.array(filterArb, { maxLength: 4 }) }),
  fc.record({ probe: fc.constantFrom('newline' as const, 'blowup' as const), k: fc.integer({ min: 0, max: 15 }) }),
);

function filtersOf(chain: Chain, a: string): string[] {
  if ('filters' in chain) return chain.filters;
  const k = chain.k % a.length;
  const guess = a[k]!;
  if (chain.probe === 'newline') return [`slice: ${k}, 1`, `replace: '${guess}', '\\n'`];
  return [`slice: ${k}, 1`, `replace: '${guess}', '${'x'.repeat(250)}'`, `replace: 'x', '${'y'.repeat(250)}'`, `replace: 'y', '${'z'.repeat(250)}'`];
}
/** Where the expression goes: a header value, the JSON body, the query. */
const placeArb = fc.constantFrom('header' as const, 'body' as const, 'query' as const);

function expression(kind: Pair['kind'], id: string, field: 'number' | 'cvc', chain: string[]): string {
  const select = kind === 'card' ? [`json: '$.${field}'`] : [];
  return `{{ ${id} | ${[...select, ...chain].join(' | ') || "json: '$'"} }}`;
}

/** `second`: another expression after the first (finding 1's second header, `x-w`). */
type Send = (f: Fixture, expr: string, place: 'header' | 'body' | 'query', second?: string) => Promise<Answer>;

/** The proxies: the expression in a header, the JSON body or the query. */
function viaProxy(send: typeof outbound): Send {
  return (f, expr, place, second) => send(f, USE_ONLY, {
    body: place === 'body' ? { v: expr, n: 1 } : { n: 1 },
    headers: { ...(place === 'header' ? { 'x-v': expr } : {}), ...(second !== undefined ? { 'x-w': second } : {}) },
    path: place === 'query' ? `/proxy/charge?v=${encodeURIComponent(expr)}` : '/proxy/charge',
  });
}

const carriers: Array<{ name: string; send: Send; body: boolean }> = [
  { name: 'outbound proxy', send: viaProxy(outbound), body: true },
  { name: "a pre-configured proxy's detokenize transform", send: viaProxy(transform), body: true },
  { name: 'reactor args', send: (f, expr, _place, second) => reactor(f, USE_ONLY, { v: expr, w: second, n: 1 }), body: true },
  // A mask key sees the masked value in a 200 answer (that is what mask is for): its body is not compared.
  { name: 'POST /detokenize with a mask key', send: (f, expr, _place, second) => detokenize(f, KEYS.masked, { v: expr, w: second, n: 1 }), body: false },
];

t.test(`oracle property (seed ${SEED}, ${RUNS} runs per carrier)`, async (t) => {
  const f = await startFixture(t);
  const make = (data: Pair['a']) => (typeof data === 'string' ? f.text(data) : f.card(data.number, data.cvc));
  for (const c of carriers) {
    t.test(c.name, async (t) => {
      let compared = 0;
      const statuses = new Set<number>();
      await fc.assert(
        fc.asyncProperty(pairArb, chainArb, placeArb, fc.constantFrom('number' as const, 'cvc' as const), async (pair, chain, place, field) => {
          const [ida, idb] = [await make(pair.a), await make(pair.b)];
          const filters = filtersOf(chain, typeof pair.a === 'string' ? pair.a : pair.a[field]);
          // A line break can only be refused in a header.
          const where = 'probe' in chain && chain.probe === 'newline' ? 'header' : place;
          // Finding 1's second header: always refused, so that the refusal names the first one refused.
          const second = (id: string) => ('probe' in chain && chain.probe === 'newline' ? expression(pair.kind, id, field, ["append: '\\n'"]) : undefined);
          const a = await c.send(f, expression(pair.kind, ida, field, filters), where, second(ida));
          const b = await c.send(f, expression(pair.kind, idb, field, filters), where, second(idb));
          // The ids differ (same length): what names them is not part of the comparison.
          const seen = (r: Answer, id: string) => JSON.parse(JSON.stringify(observed(r, c.body)).replaceAll(id, '<id>')) as unknown;
          const [oa, ob] = [seen(a, ida), seen(b, idb)];
          if (JSON.stringify(oa) !== JSON.stringify(ob)) {
            throw new Error(`observations differ for ${pair.kind} ${where} ${JSON.stringify(filters).slice(0, 300)}:\n${JSON.stringify(oa)}\n${JSON.stringify(ob)}`);
          }
          compared++;
          statuses.add(a.status);
        }),
        { seed: SEED, numRuns: RUNS, endOnFailure: true },
      );
      t.equal(compared, RUNS, `${RUNS} pairs compared`);
      t.ok(statuses.size >= 2, `several outcomes were compared (${[...statuses].sort().join(', ')})`);
    });
  }
});
