/**
 * search_indexes, fingerprint_expression and mask holding text PostgreSQL's text cannot (U+0000,
 * a lone UTF-16 surrogate), as an embedded store written before the vault refused such text may
 * hand over to `store copy`: the PostgreSQL store keeps them losslessly (each case on its own, so
 * a lone surrogate that would silently become U+FFFD is seen, not hidden behind a NUL's error),
 * through every write and read path of the token port; and the encodings themselves (wire.ts),
 * over random strings.
 */
import t from 'tap';
import fc from 'fast-check';
import { postgresForFile } from '../helpers/postgres.js';
import { makeRecord, TENANT_A } from './contract.js';
import { PostgresStore } from '../../src/store/postgres/index.js';
import { canonicalToken } from '../../src/store/copy.js';
import type { StoredToken } from '../../src/store/types.js';
import { decodeExpression, decodeSearchIndexes, encodeExpression, encodeSearchIndexes } from '../../src/store/postgres/wire.js';
import { unstorableText } from '../../src/vault/storable-text.js';

type Expressions = Pick<StoredToken, 'search_indexes' | 'fingerprint_expression' | 'mask'>;

const NUL_EXPR = '{{ data }}\u0000';
/** Text no PostgreSQL text holds, and text that reads like an escaped form of it. */
const CASES: Expressions[] = [
  { search_indexes: ['{{ data }}\u0000'], fingerprint_expression: null, mask: null },
  { search_indexes: ['{{ data }}', 'x\ud800{{ data }}'], fingerprint_expression: null, mask: null },
  { search_indexes: ['\udc00'], fingerprint_expression: null, mask: null },
  { search_indexes: [], fingerprint_expression: NUL_EXPR, mask: null },
  { search_indexes: [], fingerprint_expression: '{{ data }}\udbff', mask: null },
  { search_indexes: [], fingerprint_expression: null, mask: 'a\u0000\ud800b{{ data }}\udfff' },
  { search_indexes: [], fingerprint_expression: null, mask: '\udc00{{ data | slice: -2 }}' },
  // The JSON text of NUL_EXPR as an expression of its own, and NUL_EXPR itself, on one token.
  { search_indexes: [JSON.stringify(NUL_EXPR)], fingerprint_expression: JSON.stringify(NUL_EXPR), mask: NUL_EXPR },
  { search_indexes: [JSON.stringify([NUL_EXPR]), '\u0001~"{{ data }}"'], fingerprint_expression: '\u0001~"{{ data }}"', mask: '\u0001~{{ data }}' },
  { search_indexes: ['{{ data | last4 }}', '{{ data }}\ud83d\ude00'], fingerprint_expression: '{{ data | digits }}', mask: 'é✓{{ data }}' },
];

/** Strings made of pieces that matter here (NUL, lone surrogates, a pair, quotes, backslashes, marker-like text) and random UTF-16. */
const piece = fc.oneof(
  fc.constantFrom('\u0000', '\ud800', '\udbff', '\udc00', '\udfff', '\ud83d\ude00', '"', '\\', '\\u0000', '\u0001~', '{{ data }}', '[', 'null', 'é'),
  fc.string({ unit: 'binary', maxLength: 6 }),
  fc.string({ maxLength: 6 }),
);
const text = fc.array(piece, { maxLength: 8 }).map((p) => p.join(''));
/** An expression as the vault accepts today: no U+0000, no lone surrogate. */
const storable = text.filter((s) => unstorableText(s) === null);

const PROPERTY_RUNS = 2000;

t.test('an expression: back as it was, escaped only when PostgreSQL text cannot hold it, and then storable', async (t) => {
  fc.assert(fc.property(text, (s) => {
    const { name, escaped } = encodeExpression(s);
    return decodeExpression(name, escaped) === s && escaped === (unstorableText(s) !== null) && unstorableText(name) === null;
  }), { numRuns: PROPERTY_RUNS });
  fc.assert(fc.property(storable, (s) => {
    const e = encodeExpression(s);
    return e.name === s && !e.escaped;
  }), { numRuns: PROPERTY_RUNS });
  for (const s of ['{{ data | last4 }}', '\u0001~"{{ data }}"', JSON.stringify(NUL_EXPR), '"x"', '']) {
    t.same(encodeExpression(s), { name: s, escaped: false }, `stored as it is: ${JSON.stringify(s)}`);
  }
  t.same(encodeExpression(NUL_EXPR), { name: JSON.stringify(NUL_EXPR), escaped: true });
  t.equal(decodeExpression(JSON.stringify(NUL_EXPR), false), JSON.stringify(NUL_EXPR), 'a name read unescaped is the name');
  t.equal(decodeExpression('not json', true), null, 'an escaped name that is not JSON: corrupt');
  t.equal(decodeExpression('["a"]', true), null, 'an escaped name that is not a JSON string: corrupt');
});

t.test('search_indexes: back as they were, the list itself unless PostgreSQL text cannot hold one', async (t) => {
  fc.assert(fc.property(fc.array(text, { maxLength: 5 }), (list) => {
    const v = encodeSearchIndexes(list);
    const back = decodeSearchIndexes(v);
    const plain = list.every((s) => unstorableText(s) === null);
    return JSON.stringify(back) === JSON.stringify(list) && back!.length === list.length && back!.every((s, i) => s === list[i])
      && (v ?? []).every((s) => s === null || unstorableText(s) === null)
      && (list.length === 0 ? v === null : plain ? JSON.stringify(v) === JSON.stringify(list) : v![0] === null && v!.length === 2);
  }), { numRuns: PROPERTY_RUNS });
  t.same(encodeSearchIndexes(['{{ data }}', JSON.stringify(['x\u0000'])]), ['{{ data }}', JSON.stringify(['x\u0000'])], 'text that reads like the escaped form: as it is');
  t.same(encodeSearchIndexes([NUL_EXPR, '{{ data }}']), [null, JSON.stringify([NUL_EXPR, '{{ data }}'])]);
  t.same(decodeSearchIndexes(null), []);
  for (const corrupt of [[null], [null, 'x'], [null, '"x"'], [null, '[1]'], ['a', null], [null, '[]', 'x']]) {
    t.equal(decodeSearchIndexes(corrupt), null, `corrupt: ${JSON.stringify(corrupt)}`);
  }
});

const server = await postgresForFile(t);
if (server) {
  t.test('PostgreSQL store: every case reads back as written', async (t) => {
    const store = await PostgresStore.connect({ url: (await server.database(t)).url });
    t.teardown(() => store.close());
    const written: StoredToken[] = [];
    for (const [i, c] of CASES.entries()) {
      const r = makeRecord(c);
      try {
        await store.tokens.insertMany([r]);
      } catch (err) {
        t.fail(`insert (${i}): ${(err as Error).message}`);
        continue;
      }
      const got = await store.tokens.get(TENANT_A, r.id);
      t.equal(got && canonicalToken(got), canonicalToken(r), `get (${i}): ${JSON.stringify(c)}`);
      written.push(r);
    }
    const many = await store.tokens.getMany(TENANT_A, written.map((r) => r.id));
    t.same(many.map(canonicalToken).sort(), written.map(canonicalToken).sort(), 'getMany');
    const listed = (await store.tokens.list(TENANT_A, {}, { size: 100, after: null })).items;
    t.same(listed.map(canonicalToken), written.map(canonicalToken).reverse(), 'list, newest first');

    // An update to each case, and back to plain expressions.
    const base = makeRecord({ search_indexes: ['{{ data }}'], fingerprint_expression: '{{ data }}', mask: '{{ data }}' });
    await store.tokens.insertMany([base]);
    for (const [i, c] of CASES.entries()) {
      const changed = { ...base, ...c, modified_by: 'app-2', modified_at: new Date().toISOString() };
      try {
        t.ok(await store.tokens.update(changed), `update (${i})`);
      } catch (err) {
        t.fail(`update (${i}): ${(err as Error).message}`);
        continue;
      }
      const got = await store.tokens.get(TENANT_A, base.id);
      t.equal(got && canonicalToken(got), canonicalToken(changed), `read back after update (${i})`);
    }
    t.ok(await store.tokens.update(base), 'update back to plain expressions');
    const plain = await store.tokens.get(TENANT_A, base.id);
    t.equal(plain && canonicalToken(plain), canonicalToken(base));

    // A deduplicating insert writes one, and answers the token it matched, decoded.
    const fp = 'ab'.repeat(32);
    const first = makeRecord({ ...CASES[5]!, fingerprint: fp, search_indexes: CASES[1]!.search_indexes, fingerprint_expression: NUL_EXPR });
    const second = makeRecord({ fingerprint: fp });
    try {
      t.same(await store.tokens.insertMany([first], { dedupe: [true] }), [null], 'the first is written');
      const hit = (await store.tokens.insertMany([second], { dedupe: [true] }))[0];
      t.equal(hit && canonicalToken(hit), canonicalToken(first), 'the second is answered the first, as written');
    } catch (err) {
      t.fail(`deduplicating insert: ${(err as Error).message}`);
    }
  });
}
