/** The token API over real HTTP: create, read (reveal/mask/redact), patch, delete, list, search, tenancy. */
import type { Test } from 'tap';
import { KeyRing } from '../../src/crypto/keyring.js';
import { APP_PRIVATE, baseConfig, KEYS, TENANT_A, startTestService, type StartTestOptions, type TestService } from '../helpers/service.js';
import { checkResponses } from '../helpers/openapi.js';
import { randomCard } from '../helpers/secrets.js';

/** A key whose one access rule reads and searches everything with `redact`. */
const REDACT_KEY = 'test_redact_key_ffffffffffffffffff';

function withRedactApp(): Record<string, unknown> {
  const c = baseConfig() as { tenants: Array<{ applications: unknown[] }> };
  c.tenants[0]!.applications.push({
    id: 'aaaaaaaa-0000-4000-8000-000000000005', name: 'redactor', type: 'private', keys: [REDACT_KEY], permissions: [],
    rules: [{ priority: 1, container: '/', permissions: ['token:read', 'token:search'], transform: 'redact' }],
  });
  return c;
}

/** Runs the suite against the store that `options` configures. */
export function tokensSuite(t: Test, options: (t: Test) => Promise<StartTestOptions>): void {
  const VISA = '4242424242424242';
  const card = { type: 'card', data: { number: VISA, expiration_month: 7, expiration_year: 2031, cvc: '987' } };

  let s: TestService;
  t.before(async () => {
    s = await startTestService(t, await options(t));
    await checkResponses(s);
  });

  t.test('POST /tokens creates one token (201) and GET reads it with the rule transform', async (t) => {
    const c = await s.call('POST', '/tokens', { body: { ...card, metadata: { order: 'o-1' } } });
    t.equal(c.status, 201);
    t.same(c.body.mask, { number: 'XXXXXXXXXXXX4242', expiration_month: 7, expiration_year: 2031 });
    const revealed = await s.call('GET', `/tokens/${c.body.id}`);
    t.equal(revealed.status, 200);
    t.same(revealed.body.data, { number: VISA, expiration_month: 7, expiration_year: 2031 }, 'reveal: plaintext without cvc');
    t.notOk(revealed.text.includes('"cvc"') || revealed.text.includes('"987"'), 'the cvc is never returned');
    t.same(revealed.body.metadata, { order: 'o-1' });
    const masked = await s.call('GET', `/tokens/${c.body.id}`, { key: KEYS.masked });
    t.same(masked.body.data, { number: 'XXXXXXXXXXXX4242', expiration_month: 7, expiration_year: 2031 }, 'plain permissions: mask');
    const arr = await s.call('POST', '/tokens', { body: [card] });
    t.same([arr.status, arr.body.code], [400, 'validation_failed'], 'POST /tokens takes one definition'); // issue 30: the code too
  });

  t.test('token type: reveal returns the value, mask applies the mask expression, otherwise no data', async (t) => {
    const c = await s.call('POST', '/tokens', { body: { type: 'token', data: '123-45-6789', mask: '{{ data | reveal_last: 4 }}' } });
    t.equal(c.status, 201);
    t.equal((await s.call('GET', `/tokens/${c.body.id}`)).body.data, '123-45-6789');
    t.equal((await s.call('GET', `/tokens/${c.body.id}`, { key: KEYS.masked })).body.data, 'XXXXXXX6789');
    const plain = await s.call('POST', '/tokens', { body: { type: 'token', data: 'abc' } });
    const m = await s.call('GET', `/tokens/${plain.body.id}`, { key: KEYS.masked });
    t.notOk('data' in m.body, 'a mask read of a token without a mask expression: no data');
  });

  t.test('a redact rule: no data for cards and tokens (mask expression or not), in reads, lists and searches', async (t) => {
    const own = await startTestService(t, { ...(await options(t)), config: withRedactApp() });
    await checkResponses(own);
    const c = await own.call('POST', '/tokens', { body: { ...card, search_indexes: ['{{ data.number | last4 }}'] } });
    const k = await own.call('POST', '/tokens', { body: { type: 'token', data: 'redact-me-QZXW', mask: '{{ data | reveal_last: 4 }}', search_indexes: ['{{ data | last4 }}'] } });
    for (const id of [c.body.id, k.body.id]) {
      const r = await own.call('GET', `/tokens/${id}`, { key: REDACT_KEY });
      t.equal(r.status, 200);
      t.notOk('data' in r.body, 'no data');
      t.ok('fingerprint_expression' in r.body || r.body.type === 'token', 'the rest of the record is there');
      t.notOk(r.text.includes(VISA) || r.text.includes('QZXW'), 'no plaintext, not even the revealed last four: upper-case QZXW never occurs by chance in a UUID or a hex fingerprint, as 1234 can');
    }
    t.equal((await own.call('GET', `/tokens/${c.body.id}`, { key: REDACT_KEY })).body.fingerprint, c.body.fingerprint, 'a redact reader may read: it sees the fingerprint');
    const list = await own.call('GET', '/tokens', { key: REDACT_KEY });
    t.same(list.body.data.map((x: { id: string }) => x.id), [k.body.id, c.body.id]);
    t.ok(list.body.data.every((x: object) => !('data' in x)), 'lists are redacted');
    const found = await own.call('POST', '/tokens/search', { key: REDACT_KEY, body: { query: 'data:4242' } });
    t.same(found.body.data.map((x: { id: string }) => x.id), [c.body.id]);
    t.notOk('data' in found.body.data[0]);
    t.equal((await own.call('DELETE', `/tokens/${c.body.id}`, { key: REDACT_KEY })).status, 403, 'the rule grants read and search only');
  });

  t.test('PATCH of the cvc: replaces the retained cvc, never returns it; other patches keep it, a new number drops it', async (t) => {
    const ring = await KeyRing.open(Buffer.from(s.masterKey, 'base64'), s.svc.store.dataKeys);
    const cvcOf = async (id: string) => {
      const stored = await s.svc.store.tokens.get(TENANT_A, id);
      return stored?.cvc_sealed ? ring.unseal(stored.cvc_sealed, `${TENANT_A}:${id}:cvc`) : null;
    };
    const merge = { 'content-type': 'application/merge-patch+json' };
    const c = await s.call('POST', '/tokens', { body: card });
    t.equal(await cvcOf(c.body.id), '987', 'the cvc is retained sealed');
    const p = await s.call('PATCH', `/tokens/${c.body.id}`, { body: { data: { cvc: '4321' } }, headers: merge });
    t.equal(p.status, 200);
    t.same(p.body.data, { number: VISA, expiration_month: 7, expiration_year: 2031 }, 'the rest of the card is unchanged');
    t.notOk(JSON.stringify({ ...p.body, id: null, fingerprint: null }).includes('4321') || p.text.includes('"cvc"'), 'the cvc is not in the answer (the random id and hex fingerprint aside, which can hold 4321 by chance)');
    t.equal(await cvcOf(c.body.id), '4321', 'the new cvc replaced the old one');
    t.equal((await s.call('PATCH', `/tokens/${c.body.id}`, { body: { metadata: { m: '1' } }, headers: merge })).status, 200);
    t.equal(await cvcOf(c.body.id), '4321', 'a patch without cvc or number keeps it');
    const bad = await s.call('PATCH', `/tokens/${c.body.id}`, { body: { data: { cvc: '12' } }, headers: merge });
    t.equal(bad.status, 400);
    t.ok(bad.body.errors['data.cvc']);
    t.notOk(bad.text.includes('"12"'), 'the value is not echoed');
    t.equal(await cvcOf(c.body.id), '4321', 'a refused patch changes nothing');
    t.equal((await s.call('PATCH', `/tokens/${c.body.id}`, { body: { data: { number: '5555555555554444' } }, headers: merge })).status, 200);
    t.equal(await cvcOf(c.body.id), null, 'a new number without a cvc drops the old cvc');
  });

  t.test('other tenants see 404; missing permission is 403; unknown id 404', async (t) => {
    const c = await s.call('POST', '/tokens', { body: { type: 'token', data: 'tenant-a-secret' } });
    const other = await s.call('GET', `/tokens/${c.body.id}`, { key: KEYS.tenantB });
    t.equal(other.status, 404);
    t.equal(other.body.code, 'not_found');
    t.equal((await s.call('DELETE', `/tokens/${c.body.id}`, { key: KEYS.tenantB })).status, 404);
    t.equal((await s.call('GET', '/tokens/00000000-0000-4000-8000-000000000000')).status, 404);
    const del = await s.call('DELETE', `/tokens/${c.body.id}`, { key: KEYS.noPerm });
    t.equal(del.status, 403);
    const listB = await s.call('GET', '/tokens?size=100', { key: KEYS.tenantB });
    t.notOk(listB.body.data.some((x: { id: string }) => x.id === c.body.id), 'not in the other tenant list');
  });

  t.test('PATCH is a merge patch; needs application/merge-patch+json', async (t) => {
    const c = await s.call('POST', '/tokens', { body: { type: 'token', data: 'v1', metadata: { a: '1', b: '2' }, search_indexes: ['{{ data }}'] } });
    const wrongType = await s.call('PATCH', `/tokens/${c.body.id}`, { body: { metadata: { a: 'x' } } });
    t.equal(wrongType.status, 415);
    const p = await s.call('PATCH', `/tokens/${c.body.id}`, { body: { data: 'v2', metadata: { a: null, c: '3' } }, headers: { 'content-type': 'application/merge-patch+json' } });
    t.equal(p.status, 200);
    t.same(p.body.metadata, { b: '2', c: '3' });
    t.equal(p.body.data, 'v2');
    t.equal(p.body.modified_by, APP_PRIVATE);
    const found = await s.call('POST', '/tokens/search', { body: { query: 'data:v2' } });
    t.same(found.body.data.map((x: { id: string }) => x.id), [c.body.id], 'search indexes recomputed');
    t.equal((await s.call('POST', '/tokens/search', { body: { query: 'data:v1' } })).body.data.length, 0);
    const bad = await s.call('PATCH', `/tokens/${c.body.id}`, { body: { type: 'card' }, headers: { 'content-type': 'application/merge-patch+json' } });
    t.equal(bad.status, 400);
    t.ok(bad.body.errors.type);
  });

  t.test('DELETE answers 204 and the token is gone', async (t) => {
    const c = await s.call('POST', '/tokens', { body: { type: 'token', data: 'bye' } });
    const d = await s.call('DELETE', `/tokens/${c.body.id}`);
    t.equal(d.status, 204);
    t.equal(d.text, '');
    t.equal((await s.call('GET', `/tokens/${c.body.id}`)).status, 404);
  });

  t.test('list: cursor pages, filters, /v2 path; a new token is listed at once', async (t) => {
    const own = await startTestService(t, await options(t));
    await checkResponses(own);
    const made: string[] = [];
    for (let i = 0; i < 5; i++) made.push((await own.call('POST', '/tokens', { body: { type: 'token', data: `v${i}`, metadata: { batch: i % 2 ? 'odd' : 'even' } } })).body.id);
    const cardTok = await own.call('POST', '/tokens', { body: card });
    const p1 = await own.call('GET', '/tokens?size=4');
    t.equal(p1.status, 200);
    t.equal(p1.body.pagination.page_size, 4);
    t.equal(p1.body.data.length, 4);
    t.equal(p1.body.data[0].id, cardTok.body.id, 'newest first');
    t.type(p1.body.pagination.next, 'string');
    const p2 = await own.call('GET', `/v2/tokens?size=4&start=${encodeURIComponent(p1.body.pagination.next)}`);
    t.equal(p2.body.data.length, 2);
    t.equal(p2.body.pagination.next, null, 'next is null at the end');
    const all = [...p1.body.data, ...p2.body.data].map((x: { id: string }) => x.id);
    t.same(new Set(all), new Set([...made, cardTok.body.id]));
    t.equal((await own.call('GET', '/tokens?type=card')).body.data.length, 1);
    t.equal((await own.call('GET', '/tokens?metadata.batch=odd')).body.data.length, 2);
    t.equal((await own.call('GET', '/tokens?container=/pci/')).body.data.length, 1);
    t.equal((await own.call('GET', `/tokens?fingerprint=${cardTok.body.fingerprint}`)).body.data.length, 1);
    // issue 30: each refusal with its status and code (README "The token API", "Errors")
    const tooBig = await own.call('GET', '/tokens?size=101');
    t.same([tooBig.status, tooBig.body.code], [400, 'validation_failed'], 'size is 1–100');
    const garbage = await own.call('GET', '/tokens?start=garbage!');
    t.same([garbage.status, garbage.body.code], [400, 'invalid_cursor']);
    const bogus = await own.call('GET', '/tokens?bogus=1');
    t.same([bogus.status, bogus.body.code], [400, 'validation_failed'], 'an unknown filter');
  });

  t.test('search: POST and GET, query fields, at once after create', async (t) => {
    const own = await startTestService(t, await options(t));
    await checkResponses(own);
    const a = await own.call('POST', '/tokenize', { body: { type: 'card', data: { number: VISA, expiration_month: 1, expiration_year: 2030 }, search_indexes: ['{{ data.number | last4 }}'], metadata: { customer: 'c 1' } } });
    await own.call('POST', '/tokenize', { body: { type: 'token', data: 'x-4242', search_indexes: ['{{ data | last4 }}'] } });
    const r = await own.call('POST', '/tokens/search', { body: { query: 'data:4242', size: 10 } });
    t.equal(r.status, 200);
    t.equal(r.body.data.length, 2);
    const onlyCard = await own.call('POST', '/v2/tokens/search', { body: { query: 'data:4242 type:card metadata.customer:"c 1"' } });
    t.same(onlyCard.body.data.map((x: { id: string }) => x.id), [a.body.id]);
    const g = await own.call('GET', `/tokens/search?query=${encodeURIComponent('data:4242 type:token')}`);
    t.equal(g.body.data.length, 1);
    t.equal((await own.call('GET', `/v2/tokens/search?query=${encodeURIComponent(`fingerprint:${a.body.fingerprint}`)}`)).body.data.length, 1);
    const bad = await own.call('POST', '/tokens/search', { body: { query: 'whatever' } });
    t.equal(bad.status, 400);
    t.equal(bad.body.code, 'invalid_query');
    const none = await own.call('POST', '/tokens/search', { body: { query: 'data:0000' } });
    t.same(none.body, { pagination: { page_size: 20, next: null }, data: [] });
  });

  t.test('routes: 404 and 405 problems, health', async (t) => {
    const nf = await s.call('GET', '/nope');
    t.equal(nf.status, 404);
    t.equal(nf.body.code, 'route_not_found');
    const mna = await s.call('PUT', '/tokenize', { body: {} });
    t.equal(mna.status, 405);
    t.equal(mna.headers.get('allow'), 'POST');
    t.equal((await s.call('GET', '/healthz', { key: null })).status, 200);
    const ready = await s.call('GET', '/readyz', { key: null });
    t.equal(ready.status, 200);
    t.equal(ready.body.store, s.svc.store.kind);
    const traced = await s.call('GET', '/healthz', { key: null, headers: { 'svc-trace-id': 'trace-abc-123' } });
    t.equal(traced.headers.get('svc-trace-id'), 'trace-abc-123');
    // A trace id is logged on every line of its request: one holding a card number is replaced.
    const card = randomCard();
    const carded = await s.call('GET', '/healthz', { key: null, headers: { 'svc-trace-id': card } });
    t.not(carded.headers.get('svc-trace-id'), card, 'a card number is not taken as the trace id');
    t.match(carded.headers.get('svc-trace-id'), /^[0-9a-f-]{36}$/, 'a new UUID instead');
  });
}
