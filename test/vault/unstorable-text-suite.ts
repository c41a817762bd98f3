/**
 * Text a store cannot hold: U+0000 (PostgreSQL's text and jsonb refuse it) and a lone UTF-16
 * surrogate (no UTF-8 form) in a string stored in clear is 400 validation_failed naming the
 * field, on every store, before anything is written; text every store holds is kept as sent.
 * The bodies are raw JSON, so the escapes (`\u0000`, `\ud800`) reach the service as sent.
 */
import type { Test } from 'tap';
import { startTestService, type StartTestOptions, type TestService } from '../helpers/service.js';

const MERGE = { 'content-type': 'application/merge-patch+json' };
const JSON_TYPE = { 'content-type': 'application/json' };

/** A definition's JSON with `fields` (raw JSON members) after type and data. */
const def = (fields: string): string => String.raw`{"type":"token","data":"unstorable-secret-1",` + fields + '}';

/** [what, raw JSON members of a definition, the path the error must name] */
const CASES: Array<[string, string, string]> = [
  ['U+0000 in a metadata value', String.raw`"metadata":{"note":"a\u0000b"}`, 'metadata.note'],
  ['a lone high surrogate in a metadata value', String.raw`"metadata":{"note":"a\ud800b"}`, 'metadata.note'],
  ['a lone low surrogate in a metadata value', String.raw`"metadata":{"ok":"x","note":"\udc00"}`, 'metadata.note'],
  ['a high surrogate at the end of a metadata value', String.raw`"metadata":{"note":"ab\udbff"}`, 'metadata.note'],
  ['U+0000 in a metadata key', String.raw`"metadata":{"ok":"x","k\u0000":"v"}`, 'metadata'],
  ['a lone surrogate in a metadata key', String.raw`"metadata":{"k\udfff":"v"}`, 'metadata'],
  ['U+0000 in a custom id', String.raw`"id":"abc\u0000def"`, 'id'],
  ['U+0000 in a search index expression', String.raw`"search_indexes":["{{ data }}","{{ data | append: \"\u0000\" }}"]`, 'search_indexes[1]'],
  ['a lone surrogate in a search index expression', String.raw`"search_indexes":["{{ data | append: '\ud800' }}"]`, 'search_indexes[0]'],
  ['U+0000 in a fingerprint_expression', String.raw`"fingerprint_expression":"{{ data }}\u0000"`, 'fingerprint_expression'],
  ['U+0000 in a mask', String.raw`"mask":"{{ data | append: '\u0000' }}"`, 'mask'],
  ['a lone surrogate in a mask', String.raw`"mask":"{{ data | prepend: '\ud800' }}"`, 'mask'],
];

export function unstorableTextSuite(t: Test, options: (t: Test) => Promise<StartTestOptions>): void {
  let s: TestService;
  t.before(async () => {
    s = await startTestService(t, await options(t));
  });

  const count = async (): Promise<number> => {
    const r = await s.call('GET', '/tokens?size=100');
    if (r.status !== 200) throw new Error(`list answered ${r.status}: ${r.text}`);
    return (r.body.data as unknown[]).length;
  };

  const refused = (t: Test, r: { status: number; body: any; text: string }, path: string): void => {
    t.equal(r.status, 400, r.text);
    t.equal(r.body?.code, 'validation_failed');
    t.same(Object.keys(r.body?.errors ?? {}), [path], `the error names ${path} only`);
    t.notOk(r.text.includes('unstorable-secret'), 'the data is not quoted');
  };

  t.test('POST /tokens: each field refused, naming its path; nothing created', async (t) => {
    const before = await count();
    for (const [what, fields, path] of CASES) {
      await t.test(what, async (t) => refused(t, await s.call('POST', '/tokens', { raw: def(fields), headers: JSON_TYPE }), path));
    }
    t.equal(await count(), before, 'no token was created');
  });

  t.test('POST /tokenize: each field refused at its path in the body; nothing created, not even the valid members', async (t) => {
    const before = await count();
    for (const [what, fields, path] of CASES) {
      await t.test(what, async (t) => {
        const raw = `{"ok":"plain-value","card":${def(fields)}}`;
        refused(t, await s.call('POST', '/tokenize', { raw, headers: JSON_TYPE }), `card.${path}`);
      });
    }
    t.equal(await count(), before, 'no token was created');
  });

  t.test('PATCH /tokens/{id}: refused naming the path; the token is unchanged', async (t) => {
    const c = await s.call('POST', '/tokens', { body: { type: 'token', data: 'unstorable-secret-2', metadata: { note: 'first' } } });
    t.equal(c.status, 201, c.text);
    for (const [what, fields, path] of CASES) {
      if (path === 'id') continue; // the id cannot change at all
      await t.test(what, async (t) => refused(t, await s.call('PATCH', `/tokens/${c.body.id}`, { raw: `{${fields}}`, headers: MERGE }), path));
    }
    const after = await s.call('GET', `/tokens/${c.body.id}`);
    t.equal(after.status, 200, after.text);
    t.same(after.body.metadata, { note: 'first' }, 'metadata as it was');
    t.same(after.body.search_indexes ?? [], [], 'no search index was added');
    t.equal(after.body.mask ?? null, null, 'no mask was set');
  });

  t.test('text every store holds is accepted and read back as sent (surrogate pairs, controls other than U+0000, U+FFFF)', async (t) => {
    const raw = def(String.raw`"metadata":{"emoji":"\ud83d\ude00","tab":"a\tb\u0001","bom":"\ufeff\uffff","accent":"é","\ud83d\udd11":"key"},` +
      String.raw`"search_indexes":["{{ data | append: '\ud83d\ude00' }}"]`);
    const c = await s.call('POST', '/tokens', { raw, headers: JSON_TYPE });
    t.equal(c.status, 201, c.text);
    const r = await s.call('GET', `/tokens/${c.body.id}`);
    t.equal(r.status, 200, r.text);
    t.same(r.body.metadata, { emoji: '\ud83d\ude00', tab: 'a\tb\u0001', bom: '\ufeff\uffff', accent: 'é', '\ud83d\udd11': 'key' });
    t.same(r.body.search_indexes, ["{{ data | append: '\ud83d\ude00' }}"]);
  });

  t.test('token data is sealed, not stored as text: U+0000 and lone surrogates in it are kept', async (t) => {
    for (const raw of [String.raw`"a\u0000b"`, String.raw`"a\ud800b\udc00"`]) {
      const c = await s.call('POST', '/tokens', { raw: `{"type":"token","data":${raw},"search_indexes":["{{ data }}"]}`, headers: JSON_TYPE });
      t.equal(c.status, 201, c.text);
      const r = await s.call('GET', `/tokens/${c.body.id}`);
      t.equal(r.body?.data, JSON.parse(raw), `${raw}: revealed as sent`);
    }
  });
}
