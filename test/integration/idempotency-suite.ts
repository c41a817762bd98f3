/**
 * SVC-IDEMPOTENCY-KEY over real HTTP (src/http/idempotency.ts), run on each store kind
 * (idempotency.test.ts: embedded; test/redis/idempotency.test.ts: Redis, plus two instances).
 * `entries(s)` returns every stored idempotency entry of the service's store as raw text (the
 * SQLite row's columns, the Redis hash's fields), for the scans that prove they are ciphertext.
 */
import type { Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { KeyRing } from '../../src/crypto/keyring.js';
import { requestHash, sealAad, slotOf } from '../../src/http/idempotency.js';
import { APP_PRIVATE, KEYS, TENANT_A, startTestService, type StartTestOptions, type TestService } from '../helpers/service.js';
import { randomCard } from '../helpers/secrets.js';
import { tokenCount } from '../helpers/tokens.js';
import { waitFor } from '../helpers/wait.js';

export type RawEntries = (s: TestService) => Promise<string[]>;

const IDEM = 'svc-idempotency-key';
const REPLAYED = 'svc-idempotent-replayed';

export const cardBody = (number = randomCard()) => ({ card: { type: 'card', data: { number, expiration_month: 12, expiration_year: 2030 } } });

export function idempotencySuite(t: Test, options: (t: Test) => Promise<StartTestOptions>, entries: RawEntries): void {
  let s: TestService;
  t.before(async () => {
    s = await startTestService(t, await options(t));
  });
  const withKey = (key: string, extra: Record<string, string> = {}) => ({ [IDEM]: key, ...extra });

  t.test('POST /tokenize retried after success: the same answer, replayed, and no second token', async (t) => {
    const key = randomUUID();
    const body = cardBody();
    const before = await tokenCount(s);
    const first = await s.call('POST', '/tokenize', { body, headers: withKey(key) });
    t.equal(first.status, 200, first.status === 200 ? 'created' : first.text);
    t.match(first.body.card.id, /^[0-9a-f-]{36}$/);
    t.equal(first.headers.get(REPLAYED), null, 'the first answer is not a replay');
    t.equal(await tokenCount(s), before + 1);
    for (let i = 0; i < 3; i++) {
      const again = await s.call('POST', '/tokenize', { body, headers: withKey(key) });
      t.equal(again.status, 200);
      t.equal(again.text, first.text, 'the same body, byte for byte');
      t.equal(again.headers.get(REPLAYED), 'true');
      t.match(again.headers.get('content-type'), /^application\/json/);
      t.not(again.headers.get('svc-trace-id'), first.headers.get('svc-trace-id'), "the replay carries its own request's trace id");
    }
    t.equal(await tokenCount(s), before + 1, 'no token was created by the retries');
    const without = await s.call('POST', '/tokenize', { body });
    t.equal(without.status, 200);
    t.not(without.body.card.id, first.body.card.id, 'without the header the route runs as usual');
  });

  t.test('POST /tokens (201) and PATCH /tokens/{id} replay their answers', async (t) => {
    const key = randomUUID();
    const body = { type: 'token', data: `n-${randomUUID()}`, metadata: { a: '1' } };
    const before = await tokenCount(s);
    const created = await s.call('POST', '/tokens', { body, headers: withKey(key) });
    t.equal(created.status, 201);
    const again = await s.call('POST', '/tokens', { body, headers: withKey(key) });
    t.equal(again.status, 201);
    t.equal(again.text, created.text);
    t.equal(again.headers.get(REPLAYED), 'true');
    t.equal(await tokenCount(s), before + 1);

    const patchKey = randomUUID();
    const patch = (metadata: Record<string, string>) =>
      s.call('PATCH', `/tokens/${created.body.id}`, { raw: JSON.stringify({ metadata }), headers: withKey(patchKey, { 'content-type': 'application/merge-patch+json' }) });
    const p1 = await patch({ a: '2' });
    t.equal(p1.status, 200);
    t.equal(p1.body.metadata.a, '2');
    const other = await s.call('PATCH', `/tokens/${created.body.id}`, {
      raw: JSON.stringify({ metadata: { a: '3' } }), headers: { 'content-type': 'application/merge-patch+json' },
    });
    t.equal(other.status, 200, 'a change in between, without a key');
    const p2 = await patch({ a: '2' });
    t.equal(p2.status, 200);
    t.equal(p2.text, p1.text, 'the stored answer, not the current token');
    t.equal(p2.headers.get(REPLAYED), 'true');
    t.equal((await s.call('GET', `/tokens/${created.body.id}`)).body.metadata.a, '3', 'the replay changed nothing');
    const elsewhere = await s.call('PATCH', `/tokens/${randomUUID()}`, {
      raw: JSON.stringify({ metadata: { a: '2' } }), headers: withKey(patchKey, { 'content-type': 'application/merge-patch+json' }),
    });
    t.equal(elsewhere.status, 422, 'the same key on another path');
    t.equal(elsewhere.body.code, 'idempotency_key_reused');
  });

  t.test('the same key with another body, method or path: 422 idempotency_key_reused, nothing created', async (t) => {
    const key = randomUUID();
    const card = randomCard();
    t.equal((await s.call('POST', '/tokenize', { body: cardBody(card), headers: withKey(key) })).status, 200);
    const before = await tokenCount(s);
    const other = randomCard();
    for (const [path, body] of [['/tokenize', cardBody(other)], ['/tokens', cardBody(card).card]] as const) {
      const r = await s.call('POST', path, { body, headers: withKey(key) });
      t.equal(r.status, 422, path);
      t.equal(r.body.code, 'idempotency_key_reused');
      t.equal(r.headers.get('content-type'), 'application/problem+json');
      t.notOk(r.text.includes(card) || r.text.includes(other), 'no card number in the problem');
    }
    t.equal(await tokenCount(s), before);
  });

  t.test('a failed request stores nothing: its retry runs again, and the key stays usable', async (t) => {
    const key = randomUUID();
    const bad = { card: { type: 'card', data: { number: '4111111111111112', expiration_month: 12, expiration_year: 2030 } } };
    const before = await tokenCount(s);
    for (let i = 0; i < 2; i++) {
      const r = await s.call('POST', '/tokenize', { body: bad, headers: withKey(key) });
      t.equal(r.status, 400, 'validated again, not replayed and not in flight');
      t.equal(r.body.code, 'validation_failed');
      t.equal(r.headers.get(REPLAYED), null);
    }
    const invalidJson = await s.call('POST', '/tokenize', { raw: '{"a":', headers: withKey(key, { 'content-type': 'application/json' }) });
    t.equal(invalidJson.status, 400);
    t.equal(invalidJson.body.code, 'invalid_json');
    const good = await s.call('POST', '/tokenize', { body: cardBody(), headers: withKey(key) });
    t.equal(good.status, 200, 'the released key serves another request');
    t.equal(await tokenCount(s), before + 1);
    const dupKey = randomUUID();
    const id = `idem-${randomUUID()}`;
    t.equal((await s.call('POST', '/tokens', { body: { id, type: 'token', data: 'x' } })).status, 201);
    for (let i = 0; i < 2; i++) {
      const r = await s.call('POST', '/tokens', { body: { id, type: 'token', data: 'x' }, headers: withKey(dupKey) });
      t.equal(r.status, 409);
      t.equal(r.body.code, 'token_conflict', 'a 409 of the route is not stored either');
    }
  });

  t.test('keys are scoped to the tenant and the application: the same key elsewhere does not collide', async (t) => {
    const key = randomUUID();
    const body = cardBody();
    const answers = [];
    for (const apiKey of [KEYS.private, KEYS.masked, KEYS.tenantB]) {
      const r = await s.call('POST', '/tokenize', { key: apiKey, body, headers: withKey(key) });
      t.equal(r.status, 200);
      t.equal(r.headers.get(REPLAYED), null, 'not a replay of another caller');
      answers.push(r.body.card.id);
    }
    t.equal(new Set(answers).size, 3, 'three tokens');
    const again = await s.call('POST', '/tokenize', { key: KEYS.masked, body, headers: withKey(key) });
    t.equal(again.headers.get(REPLAYED), 'true');
    t.equal(again.body.card.id, answers[1], "each caller's own answer is replayed");
  });

  t.test('a large body (parsed, walked and answered in the JSON worker) is replayed byte for byte', async (t) => {
    const key = randomUUID();
    const body = Object.fromEntries(Array.from({ length: 90 }, (_, i) => [`f${i}`, `${randomUUID()}-`.repeat(22)]));
    t.ok(JSON.stringify(body).length > 64 * 1024, 'over the 64 KB worker threshold');
    const before = await tokenCount(s);
    const first = await s.call('POST', '/tokenize', { body, headers: withKey(key) });
    t.equal(first.status, 200);
    const again = await s.call('POST', '/tokenize', { body, headers: withKey(key) });
    t.equal(again.headers.get(REPLAYED), 'true');
    t.equal(again.text, first.text);
    t.equal(await tokenCount(s), before + 90);
  });

  t.test('an invalid key is 400 invalid_idempotency_key, before anything runs', async (t) => {
    const before = await tokenCount(s);
    for (const bad of ['with space', 'x'.repeat(256), 'a,b', 'ü', '']) {
      const r = await s.call('POST', '/tokenize', { body: cardBody(), headers: withKey(bad) });
      t.equal(r.status, 400, JSON.stringify(bad.slice(0, 20)));
      t.equal(r.body.code, 'invalid_idempotency_key');
      t.equal(r.headers.get('content-type'), 'application/problem+json');
    }
    t.equal((await s.call('POST', '/tokenize', { body: cardBody(), headers: withKey('A-z0.9_:~+/=') })).status, 200, 'every allowed character');
    t.equal((await s.call('POST', '/tokenize', { body: cardBody(), headers: withKey('k'.repeat(255)) })).status, 200, '255 characters');
    t.equal(await tokenCount(s), before + 2);
  });

  t.test('concurrent duplicates on one instance: one answer made, the others in flight (409) or replays', async (t) => {
    const key = randomUUID();
    const body = cardBody();
    const before = await tokenCount(s);
    const rs = await Promise.all(Array.from({ length: 12 }, () => s.call('POST', '/tokenize', { body, headers: withKey(key) })));
    const made = rs.filter((r) => r.status === 200 && r.headers.get(REPLAYED) === null);
    t.equal(made.length, 1, 'exactly one request ran');
    t.comment(`${rs.filter((r) => r.status === 409).length} in flight, ${rs.filter((r) => r.headers.get(REPLAYED)).length} replayed`);
    for (const r of rs) {
      if (r === made[0]) continue;
      if (r.status === 409) {
        t.equal(r.body.code, 'idempotency_key_in_flight');
        t.equal(r.headers.get('retry-after'), '1');
      } else {
        t.equal(r.status, 200);
        t.equal(r.headers.get(REPLAYED), 'true');
        t.equal(r.text, made[0]!.text);
      }
    }
    t.equal(await tokenCount(s), before + 1);
  });

  t.test('a claim left by a crashed request: 409 (422 for another body) while it lives, then it expires and the request runs', async (t) => {
    const ring = await KeyRing.open(Buffer.from(s.masterKey, 'base64'), s.svc.store);
    const raw = JSON.stringify(cardBody());
    // What a request that claimed the key and then died leaves behind: an in-flight entry.
    const crash = async (key: string, ttlMs: number) => {
      const slot = slotOf(TENANT_A, APP_PRIVATE, key);
      const sealed = ring.seal(JSON.stringify({ h: requestHash('POST', '/tokenize', Buffer.from(raw)) }), sealAad(slot));
      t.same(await s.svc.store.claimIdempotencyKey(slot, 'crashed', sealed, ttlMs), { state: 'claimed' });
    };
    const send = (key: string, body: string) => s.call('POST', '/tokenize', { raw: body, headers: withKey(key, { 'content-type': 'application/json' }) });
    const held = randomUUID();
    await crash(held, 600_000);
    const before = await tokenCount(s);
    const busy = await send(held, raw);
    t.equal(busy.status, 409);
    t.equal(busy.body.code, 'idempotency_key_in_flight');
    t.equal(busy.headers.get('retry-after'), '1');
    const other = await send(held, JSON.stringify(cardBody()));
    t.equal(other.status, 422, 'another body with a key in flight');
    t.equal(other.body.code, 'idempotency_key_reused');
    t.equal(await tokenCount(s), before, 'nothing ran');
    const expiring = randomUUID();
    await crash(expiring, 1);
    const ran = await waitFor(async () => {
      const r = await send(expiring, raw);
      return r.status === 200 ? r : false;
    }, { what: 'the crashed claim expired' });
    t.match(ran.body.card.id, /^[0-9a-f-]{36}$/);
    t.equal((await send(expiring, raw)).headers.get(REPLAYED), 'true', 'and its answer is stored');
  });

  t.test('stored entries are ciphertext: no token id, masked value, card digits or client key in clear', async (t) => {
    const key = `scan-${randomUUID()}`;
    const card = randomCard();
    const already = (await entries(s)).length;
    const tok = await s.call('POST', '/tokenize', { body: cardBody(card), headers: withKey(key) });
    t.equal(tok.status, 200);
    const created = await s.call('POST', '/tokens', { body: { type: 'card', data: { number: card, expiration_month: 1, expiration_year: 2031 } }, headers: withKey(`${key}-2`) });
    t.equal(created.status, 201);
    const mask = created.body.mask?.number;
    t.type(mask, 'string', 'the answer holds a masked number');
    // A reveal key's PATCH answer holds the plaintext card: stored sealed like the token itself.
    const patched = await s.call('PATCH', `/tokens/${created.body.id}`, {
      raw: JSON.stringify({ metadata: { m: 'v' } }), headers: withKey(`${key}-3`, { 'content-type': 'application/merge-patch+json' }),
    });
    t.equal(patched.status, 200);
    t.equal(patched.body.data.number, card, 'the PATCH answer revealed the number');
    const stored = await entries(s);
    t.equal(stored.length, already + 3, 'three answers were stored');
    const dump = stored.join('\n');
    for (const [what, value] of [['token id', tok.body.card.id], ['token id', created.body.id], ['masked number', mask], ['card', card],
      ['client key', key]] as const) {
      t.notOk(dump.includes(value), `no ${what} in the stored entries`);
    }
    t.match(dump, /v\d+\.[^.\s]+\.[^.\s]+\.[^.\s]+/, 'sealed values');
    t.notOk(s.logs().includes(card), 'no card number in the logs');
  });
}
