/**
 * SVC-IDEMPOTENCY-KEY over real HTTP (src/http/idempotency.ts), run on each store kind
 * (idempotency.test.ts: embedded; test/http/idempotency-redis.test.ts: Redis, plus two instances).
 * `entries(s)` returns every stored idempotency entry of the service's store as raw text (the
 * SQLite row's columns, the Redis hash's fields), for the scans that prove they are ciphertext.
 */
import type { Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { KeyRing } from '../../src/crypto/keyring.js';
import { requestHash, sealAad, slotOf } from '../../src/http/idempotency.js';
import { keyIdOf, sha256 } from '../../src/auth/keys.js';
import { APP_PRIVATE, baseConfig, KEYS, TENANT_A, startTestService, type StartTestOptions, type TestService } from '../helpers/service.js';
import { randomCard } from '../helpers/secrets.js';
import { tokenCount } from '../helpers/tokens.js';
import { waitFor } from '../helpers/wait.js';

export type RawEntries = (s: TestService) => Promise<string[]>;

const IDEM = 'svc-idempotency-key';
const REPLAYED = 'svc-idempotent-replayed';

export const cardBody = (number = randomCard()) => ({ card: { type: 'card', data: { number, expiration_month: 12, expiration_year: 2030 } } });

/** A second key of the private application (issue 31: a replay is the key's, not the application's). */
const SECOND_PRIVATE = 'test_private_key_second_ffffffffff';
const MGMT = 'test_mgmt_key_for_idempotency_gggggg';

/** The test config, plus a second key of the private application and a management key that reads /logs. */
function suiteConfig(): Record<string, unknown> {
  const config = baseConfig();
  const tenantA = (config.tenants as Array<{ applications: Array<Record<string, unknown>> }>)[0]!;
  const apps = tenantA.applications;
  const priv = apps.find((a) => a.id === APP_PRIVATE)!;
  priv.keys = [KEYS.private, SECOND_PRIVATE];
  apps.push({ id: 'aaaaaaaa-0000-4000-8000-0000000000ee', name: 'mgmt', type: 'management', keys: [MGMT], permissions: ['log:read'] });
  return config;
}

/** The sealed value of a raw entry (a SQLite row's `sealed`, a Redis hash's `v`). */
const sealedOf = (raw: string): string | undefined => {
  const r = JSON.parse(raw) as { sealed?: string; v?: string };
  return r.sealed ?? r.v;
};

export function idempotencySuite(t: Test, options: (t: Test) => Promise<StartTestOptions>, entries: RawEntries): void {
  let s: TestService;
  t.before(async () => {
    const o = await options(t);
    s = await startTestService(t, { ...o, config: o.config ?? suiteConfig() });
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
    const ring = await KeyRing.open(Buffer.from(s.masterKey, 'base64'), s.svc.store.dataKeys);
    const raw = JSON.stringify(cardBody());
    // What a request that claimed the key and then died leaves behind: an in-flight entry naming
    // the request's hash and its API key's id.
    const keyId = keyIdOf(sha256(KEYS.private));
    const crash = async (key: string, ttlMs: number) => {
      const slot = slotOf(TENANT_A, APP_PRIVATE, key);
      const sealed = ring.seal(JSON.stringify({ v: 2, h: requestHash('POST', '/tokenize', Buffer.from(raw)), k: keyId }), sealAad(slot));
      t.same(await s.svc.store.idempotency.claimIdempotencyKey(slot, 'crashed', sealed, ttlMs), { state: 'claimed' });
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
    const otherKey = await s.call('POST', '/tokenize', { key: SECOND_PRIVATE, raw, headers: withKey(held, { 'content-type': 'application/json' }) });
    t.equal(otherKey.status, 422, 'the same request from another API key of the application');
    t.equal(otherKey.body.code, 'idempotency_key_reused');
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
    // A reveal key's PATCH answer holds the plaintext card: stored without it (issue 23).
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

  // Issue 23 finding 3 and issue 31 finding 4: a PATCH answer of a key with `reveal` carries
  // plaintext. The stored entry leaves it out; a replay renders it again, audited, for that key only.
  const patchHeaders = (key: string) => withKey(key, { 'content-type': 'application/merge-patch+json' });
  const newCard = async (card: string): Promise<string> => {
    const r = await s.call('POST', '/tokens', { body: { type: 'card', data: { number: card, expiration_month: 1, expiration_year: 2031 } } });
    if (r.status !== 201) throw new Error(`create failed: ${r.status}`);
    return r.body.id as string;
  };
  /** The plaintext of the entry in the private application's slot of `key`, opened with the ring. */
  const openEntry = async (key: string): Promise<string | null> => {
    const ring = await KeyRing.open(Buffer.from(s.masterKey, 'base64'), s.svc.store.dataKeys);
    const aad = sealAad(slotOf(TENANT_A, APP_PRIVATE, key));
    for (const raw of await entries(s)) {
      const sealed = sealedOf(raw);
      if (sealed === undefined) continue;
      try {
        return await ring.unsealOrRefresh(sealed, aad);
      } catch {
        // Another slot's entry: it opens only with its own AAD.
      }
    }
    return null;
  };
  const reveals = async (id: string): Promise<Array<Record<string, any>>> => {
    const r = await s.call('GET', `/logs?size=100&entity_id=${encodeURIComponent(id)}`, { key: MGMT });
    if (r.status !== 200) throw new Error(`GET /logs failed: ${r.status} ${r.text}`);
    return (r.body.data as Array<Record<string, any>>).filter((e) => e.operation === 'token.reveal');
  };

  t.test('a PATCH that revealed plaintext: the stored entry holds none; the replay is rendered again and audited', async (t) => {
    const card = randomCard();
    const id = await newCard(card);
    const key = `reveal-${randomUUID()}`;
    const raw = JSON.stringify({ metadata: { m: 'v' } });
    const first = await s.call('PATCH', `/tokens/${id}`, { raw, headers: patchHeaders(key) });
    t.equal(first.status, 200, first.text);
    t.equal(first.body.data.number, card, 'the first answer reveals the number');
    const stored = await openEntry(key);
    t.type(stored, 'string', 'the entry of the slot opens with the ring');
    t.notOk(stored!.includes(card), 'no card number in the stored entry, sealed or not');
    // The request hash and the answer's fingerprint are hex and can hold a long digit run by
    // chance (seen: 14 digits in the SHA-256 `h`): look for one only where values would be.
    const entry = JSON.parse(stored!) as { body: string };
    const answer = JSON.parse(entry.body) as Record<string, unknown>;
    delete answer.fingerprint;
    t.notMatch(JSON.stringify(answer), /\d{13,19}/, 'no digit run of a card length in the stored answer');
    t.notMatch(stored!, /"data"/, 'no data member');
    const before = await reveals(id);
    t.equal(before.length, 1, 'the first answer was audited');
    const again = await s.call('PATCH', `/tokens/${id}`, { raw, headers: patchHeaders(key) });
    t.equal(again.status, 200);
    t.equal(again.headers.get(REPLAYED), 'true');
    t.equal(again.text, first.text, 'the same answer, byte for byte');
    const after = await reveals(id);
    t.equal(after.length, 2, 'the replay is a reveal event of its own');
    t.match(after[0], { actor: { application_id: APP_PRIVATE }, token_ids: [id], request_id: again.headers.get('svc-trace-id') });
    t.notOk(s.logs().includes(card), 'no card number in the logs');
  });

  t.test('a replay after DELETE reveals nothing: 404 not_found, as a GET of the token answers', async (t) => {
    const card = randomCard();
    const id = await newCard(card);
    const key = `deleted-${randomUUID()}`;
    const raw = JSON.stringify({ metadata: { m: 'w' } });
    const first = await s.call('PATCH', `/tokens/${id}`, { raw, headers: patchHeaders(key) });
    t.equal(first.status, 200);
    t.equal(first.body.data.number, card);
    t.equal((await s.call('DELETE', `/tokens/${id}`)).status, 204);
    const again = await s.call('PATCH', `/tokens/${id}`, { raw, headers: patchHeaders(key) });
    t.equal(again.status, 404, again.text.slice(0, 200));
    t.equal(again.body?.code, 'not_found');
    t.notOk(again.text.includes(card), 'no card number in the answer');
    t.equal(again.headers.get(REPLAYED), null);
    t.equal((await reveals(id)).length, 1, 'only the first answer was a reveal');
  });

  t.test('a replay after the token expired reveals nothing: 404 not_found', async (t) => {
    const card = randomCard();
    const expires = new Date(Date.now() + 4_000).toISOString();
    const created = await s.call('POST', '/tokens', { body: { type: 'card', data: { number: card, expiration_month: 1, expiration_year: 2031 }, expires_at: expires } });
    t.equal(created.status, 201, created.text.slice(0, 200));
    const id = created.body.id as string;
    const key = `expired-${randomUUID()}`;
    const raw = JSON.stringify({ metadata: { m: 'e' } });
    const first = await s.call('PATCH', `/tokens/${id}`, { raw, headers: patchHeaders(key) });
    t.equal(first.status, 200, 'patched before it expired');
    t.equal(first.body.data.number, card);
    await waitFor(async () => (await s.call('GET', `/tokens/${id}`)).status === 404, { what: 'the token expired', timeoutMs: 20_000, intervalMs: 200 });
    const again = await s.call('PATCH', `/tokens/${id}`, { raw, headers: patchHeaders(key) });
    t.equal(again.status, 404, again.text.slice(0, 200));
    t.equal(again.body?.code, 'not_found');
    t.notOk(again.text.includes(card), 'no card number in the answer');
  });

  t.test('a second key of the same application does not get the first key\'s answer: 422, nothing runs', async (t) => {
    const card = randomCard();
    const id = await newCard(card);
    const key = `second-${randomUUID()}`;
    const raw = JSON.stringify({ metadata: { m: 'x' } });
    const first = await s.call('PATCH', `/tokens/${id}`, { raw, headers: patchHeaders(key) });
    t.equal(first.status, 200);
    t.equal(first.body.data.number, card);
    const other = await s.call('PATCH', `/tokens/${id}`, { key: SECOND_PRIVATE, raw, headers: patchHeaders(key) });
    t.equal(other.status, 422, other.text.slice(0, 200));
    t.equal(other.body?.code, 'idempotency_key_reused');
    t.notOk(other.text.includes(card), 'no card number in the answer');
    t.equal(other.headers.get(REPLAYED), null);
    t.equal((await reveals(id)).length, 1, 'nothing was revealed to the second key');
    const mine = await s.call('PATCH', `/tokens/${id}`, { raw, headers: patchHeaders(key) });
    t.equal(mine.headers.get(REPLAYED), 'true', 'the first key still gets its replay');
    t.equal(mine.text, first.text);

    const tokKey = `second-tok-${randomUUID()}`;
    const body = cardBody();
    t.equal((await s.call('POST', '/tokenize', { body, headers: withKey(tokKey) })).status, 200);
    const before = await tokenCount(s);
    const tok = await s.call('POST', '/tokenize', { key: SECOND_PRIVATE, body, headers: withKey(tokKey) });
    t.equal(tok.status, 422, 'POST /tokenize: the same');
    t.equal(tok.body?.code, 'idempotency_key_reused');
    t.equal(await tokenCount(s), before, 'no token was created');
  });

  t.test('an entry stored by an earlier version (the answer sealed with its plaintext) is never replayed', async (t) => {
    const card = randomCard();
    const id = await newCard(card);
    const ring = await KeyRing.open(Buffer.from(s.masterKey, 'base64'), s.svc.store.dataKeys);
    const key = `old-${randomUUID()}`;
    const slot = slotOf(TENANT_A, APP_PRIVATE, key);
    const raw = JSON.stringify({ metadata: { m: 'y' } });
    const h = requestHash('PATCH', `/tokens/${id}`, Buffer.from(raw));
    // What the earlier version stored: {h} while in flight, then {h, status, type, body}.
    t.same(await s.svc.store.idempotency.claimIdempotencyKey(slot, 'old', ring.seal(JSON.stringify({ h }), sealAad(slot)), 600_000), { state: 'claimed' });
    const oldBody = JSON.stringify({ id, tenant_id: TENANT_A, type: 'card', containers: ['/'], data: { number: card, expiration_month: 1, expiration_year: 2031 } });
    const oldEntry = { h, status: 200, type: 'application/json; charset=utf-8', body: oldBody };
    t.ok(await s.svc.store.idempotency.completeIdempotencyKey(slot, 'old', ring.seal(JSON.stringify(oldEntry), sealAad(slot)), 600_000));
    const r = await s.call('PATCH', `/tokens/${id}`, { raw, headers: patchHeaders(key) });
    t.notOk(r.text.includes(card), 'no card number in the answer');
    t.equal(r.status, 422, r.text.slice(0, 200));
    t.equal(r.body?.code, 'idempotency_key_reused');
    t.equal(r.headers.get(REPLAYED), null);
  });
}
