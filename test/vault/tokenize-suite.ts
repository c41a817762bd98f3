/**
 * POST /tokenize over real HTTP: every rule of the spec's "Endpoints" and "Resources" sections,
 * the limits, and all-or-nothing.
 */
import type { Test } from 'tap';

import { tokenCount as countTokens } from '../helpers/tokens.js';
import { APP_PRIVATE, baseConfig, KEYS, TENANT_A, startTestService, type StartTestOptions, type TestService } from '../helpers/service.js';
import { checkResponses } from '../helpers/openapi.js';

/** A key that may create (and read) in /general/ only. */
const GENERAL_ONLY_KEY = 'test_general_only_key_000000000000';

function withGeneralOnlyApp(): Record<string, unknown> {
  const c = baseConfig() as { tenants: Array<{ applications: unknown[] }> };
  c.tenants[0]!.applications.push({
    id: 'aaaaaaaa-0000-4000-8000-000000000006', name: 'general-only', type: 'private', keys: [GENERAL_ONLY_KEY], permissions: [],
    rules: [{ priority: 1, container: '/general/', permissions: ['token:create', 'token:read'], transform: 'reveal' }],
  });
  return c;
}

/** Runs the suite against the store that `options` configures. */
export function tokenizeSuite(t: Test, options: (t: Test) => Promise<StartTestOptions>): void {
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
  const VISA = '4242424242424242';
  const MC = '5555555555554444';
  const card = (number = VISA) => ({ type: 'card', data: { number, expiration_month: 12, expiration_year: 2030, cvc: '123' } });

  let s: TestService;
  t.before(async () => {
    s = await startTestService(t, await options(t));
    await checkResponses(s);
  });

  const tokenCount = () => countTokens(s);

  function checkCardRecord(t: Test, rec: any, where: 'mask' | 'data', number = VISA) {
    t.match(rec.id, UUID, 'id is a UUID');
    t.equal(rec.tenant_id, TENANT_A);
    t.equal(rec.type, 'card');
    t.same(rec[where], { number: 'X'.repeat(number.length - 4) + number.slice(-4), expiration_month: 12, expiration_year: 2030 });
    t.notOk(where === 'mask' ? 'data' in rec : 'mask' in rec, `masked fields only under ${where}`);
    t.equal(rec.fingerprint_expression, '{{ data.number }}', 'card fingerprint expression defaults');
    t.equal(rec.created_by, APP_PRIVATE);
    t.match(rec.created_at, ISO);
    t.notOk(JSON.stringify(rec).includes('"cvc"') || JSON.stringify(rec).includes('"123"'), 'no cvc');
    t.notOk(JSON.stringify(rec).includes(number), 'no card number');
  }

  t.test('object of plain string members: same names, each a token id', async (t) => {
    const r = await s.call('POST', '/tokenize', { body: { first: 'alice', last: 'smith', ssn: '123-45-6789' } });
    t.equal(r.status, 200);
    t.same(Object.keys(r.body), ['first', 'last', 'ssn']);
    for (const v of Object.values(r.body)) t.match(v, UUID);
    t.notOk(r.text.includes('123-45-6789'));
  });

  t.test('a single card definition answers one record with `mask`', async (t) => {
    const r = await s.call('POST', '/tokenize', { body: card() });
    t.equal(r.status, 200);
    checkCardRecord(t, r.body, 'mask');
  });

  t.test('a single token definition: metadata, search_indexes and fingerprint_expression echoed, no value', async (t) => {
    const def = { type: 'token', data: 'secret-value-987', metadata: { customer: 'c1' }, search_indexes: ['{{ data | last4 }}'], fingerprint_expression: '{{ data }}' };
    const r = await s.call('POST', '/tokenize', { body: def });
    t.equal(r.status, 200);
    t.match(r.body.id, UUID);
    t.equal(r.body.type, 'token');
    t.same(r.body.metadata, { customer: 'c1' });
    t.same(r.body.search_indexes, ['{{ data | last4 }}']);
    t.equal(r.body.fingerprint_expression, '{{ data }}');
    t.notOk('data' in r.body, 'a token record never carries its value');
    t.notOk(r.text.includes('secret-value-987'));
  });

  t.test('an array mixing strings and definitions keeps length and order; cards carry `data`', async (t) => {
    const r = await s.call('POST', '/tokenize', { body: ['a', card(), 'b', { type: 'token', data: 'x' }] });
    t.equal(r.status, 200);
    t.equal(r.body.length, 4);
    t.match(r.body[0], UUID);
    checkCardRecord(t, r.body[1], 'data');
    t.match(r.body[2], UUID);
    t.equal(r.body[3].type, 'token');
    t.notOk('data' in r.body[3]);
  });

  t.test('the composite example: strings, definitions and nested arrays', async (t) => {
    const body = {
      first_name: 'John',
      last_name: 'Doe',
      primary_card: card(),
      other_cards: [card(MC), 'not-a-card'],
      nested: { deeper: { ssn: '111-22-3333', numbers: [1, true, null] } },
      count: 3,
      flag: false,
      none: null,
    };
    const r = await s.call('POST', '/tokenize', { body });
    t.equal(r.status, 200);
    t.same(Object.keys(r.body), Object.keys(body), 'member names kept in order');
    t.match(r.body.first_name, UUID);
    checkCardRecord(t, r.body.primary_card, 'data');
    checkCardRecord(t, r.body.other_cards[0], 'data', MC);
    t.match(r.body.other_cards[1], UUID);
    t.match(r.body.nested.deeper.ssn, UUID);
    t.same(r.body.nested.deeper.numbers, [1, true, null], 'numbers, booleans and null stay as they are');
    t.equal(r.body.count, 3);
    t.equal(r.body.flag, false);
    t.equal(r.body.none, null);
    const ids = new Set([r.body.first_name, r.body.last_name, r.body.primary_card.id, r.body.other_cards[0].id]);
    t.equal(ids.size, 4, 'every token has its own id');
    const got = await s.call('GET', `/tokens/${r.body.nested.deeper.ssn}`);
    t.equal(got.status, 200);
    t.equal(got.body.data, '111-22-3333', 'the stored value reads back with a reveal rule');
  });

  t.test('100 tokens are accepted; 101 are refused and nothing is created', async (t) => {
    const before = await tokenCount();
    const ok = await s.call('POST', '/tokenize', { body: Array.from({ length: 100 }, (_, i) => `v${i}`) });
    t.equal(ok.status, 200);
    t.equal(ok.body.length, 100);
    t.equal(await tokenCount(), before + 100);
    const r = await s.call('POST', '/tokenize', { body: { a: Array.from({ length: 100 }, (_, i) => `v${i}`), b: card() } });
    t.equal(r.status, 400);
    t.equal(r.body.code, 'too_many_tokens');
    t.match(r.headers.get('content-type'), /application\/problem\+json/);
    t.equal(await tokenCount(), before + 100, 'nothing created by the 101-token request');
  });

  t.test('an invalid card inside a composite body fails the whole request', async (t) => {
    const before = await tokenCount();
    const bad = card('4242424242424241');
    const r = await s.call('POST', '/tokenize', { body: { name: 'ok', primary_card: bad, list: [card(), { type: 'card', data: { number: VISA, expiration_month: 13, expiration_year: 30, cvc: '12' } }] } });
    t.equal(r.status, 400);
    t.equal(r.body.code, 'validation_failed');
    t.same(r.body.errors['primary_card.data.number'], ['card number fails the Luhn check']);
    t.ok(r.body.errors['list[1].data.expiration_month']);
    t.ok(r.body.errors['list[1].data.expiration_year']);
    t.ok(r.body.errors['list[1].data.cvc']);
    t.notOk(r.text.includes('4242424242424241'), 'the value is not echoed');
    t.equal(await tokenCount(), before, 'nothing created');
  });

  t.test('a body nested 10,000 deep is refused and nothing is created', async (t) => {
    const before = await tokenCount();
    const deepArr = '['.repeat(10_000) + '"x"' + ']'.repeat(10_000);
    const r = await s.call('POST', '/tokenize', { raw: deepArr, headers: { 'content-type': 'application/json' } });
    t.equal(r.status, 400);
    t.equal(r.body.code, 'nesting_too_deep');
    let deepObj = '"x"';
    for (let i = 0; i < 10_000; i++) deepObj = `{"a":${deepObj}}`;
    const r2 = await s.call('POST', '/tokenize', { raw: deepObj, headers: { 'content-type': 'application/json' } });
    t.equal(r2.body.code, 'nesting_too_deep');
    t.equal(await tokenCount(), before);
  });

  t.test('bad requests get problem bodies', async (t) => {
    const noKey = await s.call('POST', '/tokenize', { key: null, body: 'x' });
    t.equal(noKey.status, 401);
    t.equal(noKey.body.code, 'missing_api_key');
    t.match(noKey.headers.get('content-type'), /problem\+json/);
    const badKey = await s.call('POST', '/tokenize', { key: 'not-a-key-at-all-1234', body: 'x' });
    t.equal(badKey.status, 401);
    t.equal(badKey.body.code, 'invalid_api_key');
    const noPerm = await s.call('POST', '/tokenize', { key: KEYS.noPerm, body: 'x' });
    t.equal(noPerm.status, 403);
    t.equal(noPerm.body.code, 'forbidden');
    const ct = await s.call('POST', '/tokenize', { raw: '"x"', headers: { 'content-type': 'text/plain' } });
    t.equal(ct.status, 415);
    t.equal(ct.body.code, 'unsupported_media_type');
    const bad = await s.call('POST', '/tokenize', { raw: '{"a": 4242424242424242', headers: { 'content-type': 'application/json' } });
    t.equal(bad.status, 400);
    t.equal(bad.body.code, 'invalid_json');
    t.notOk(bad.text.includes('4242424242424242'));
    const big = await s.call('POST', '/tokenize', { raw: JSON.stringify('x'.repeat(5 * 1024 * 1024 + 10)), headers: { 'content-type': 'application/json' } });
    t.equal(big.status, 413);
    t.equal(big.body.code, 'body_too_large');
    for (const r of [noKey, badKey, noPerm, ct, bad, big]) {
      t.same(Object.keys(r.body).sort(), ['code', 'detail', 'status', 'title', 'type'], 'problem body fields');
      t.equal(r.body.status, r.status);
    }
  });

  t.test('a public key may create tokens but not read them (403: it lacks token:read)', async (t) => {
    const r = await s.call('POST', '/tokenize', { key: KEYS.public, body: { c: card() } });
    t.equal(r.status, 200);
    const read = await s.call('GET', `/tokens/${r.body.c.id}`, { key: KEYS.public });
    t.equal(read.status, 403);
    t.equal(read.body.code, 'forbidden', 'the code README gives for a missing permission'); // issue 30
  });

  t.test('a card in a container the key may not create in is 403, and nothing of the request is created', async (t) => {
    const own = await startTestService(t, { ...(await options(t)), config: withGeneralOnlyApp() });
    await checkResponses(own);
    const count = async () => (await own.call('GET', '/tokens?size=100')).body.data.length as number;
    const ok = await own.call('POST', '/tokenize', { key: GENERAL_ONLY_KEY, body: { s: 'plain', t: { type: 'token', data: 'v', containers: ['/general/low/'] } } });
    t.equal(ok.status, 200, 'plain strings (/general/high/) and /general/low/ are allowed');
    const before = await count();
    const denied = await own.call('POST', '/tokenize', { key: GENERAL_ONLY_KEY, body: { first: 'allowed', c: card() } });
    t.equal(denied.status, 403, "a card's default container /pci/high/ is not");
    t.equal(denied.body.code, 'forbidden');
    t.match(denied.body.detail, /token:create on container \/pci\/high\//);
    t.notOk(denied.text.includes(VISA));
    const explicit = await own.call('POST', '/tokens', { key: GENERAL_ONLY_KEY, body: { type: 'token', data: 'v', containers: ['/pci/low/'] } });
    t.equal(explicit.status, 403, 'nor a container named in the definition');
    t.equal(explicit.body.code, 'forbidden'); // issue 30
    t.equal(await count(), before, 'nothing created by the refused requests');
  });

  t.test('custom ids, containers, expires_at and deduplicate_token', async (t) => {
    const r = await s.call('POST', '/tokenize', { body: { type: 'token', id: 'custom-id-1', data: 'v', containers: ['/general/low/'], expires_at: '2099-01-01T00:00:00+00:00' } });
    t.equal(r.status, 200);
    t.equal(r.body.id, 'custom-id-1');
    t.same(r.body.containers, ['/general/low/']);
    t.equal(r.body.expires_at, '2099-01-01T00:00:00.000Z');
    const dup = await s.call('POST', '/tokenize', { body: ['a', { type: 'token', id: 'custom-id-1', data: 'v' }] });
    t.equal(dup.status, 409);
    t.equal(dup.body.code, 'token_conflict');
    const d1 = await s.call('POST', '/tokenize', { body: { ...card(MC), deduplicate_token: true } });
    const d2 = await s.call('POST', '/tokenize', { body: [{ ...card(MC), deduplicate_token: true }] });
    t.equal(d2.body[0].id, d1.body.id, 'same fingerprint, same token');
    t.same(d2.body[0]._extras, { deduplicated: true });
    const past = await s.call('POST', '/tokenize', { body: { type: 'token', data: 'v', expires_at: '2001-01-01T00:00:00Z' } });
    t.equal(past.status, 400);
    t.ok(past.body.errors.expires_at);
    const badContainer = await s.call('POST', '/tokenize', { body: { type: 'token', data: 'v', containers: ['PCI'] } });
    t.equal(badContainer.status, 400);
    t.ok(badContainer.body.errors.containers);
  });
}
