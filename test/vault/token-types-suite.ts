/**
 * Every token type over HTTP (issue 26), on whichever store the service runs: POST /tokens and
 * /tokenize, what a reveal and a mask reader see, fingerprints, search by type, detokenization,
 * validation errors naming the path and never the value, all or nothing. Run on the embedded
 * store by token-types.test.ts, on Redis and PostgreSQL by token-types-redis.test.ts and token-types-postgres.test.ts.
 */
import type { Test } from 'tap';
import { abaValid, tokenType } from '../../src/vault/token-types.js';
import { KEYS, type TestService } from '../helpers/service.js';
import { randomCard } from '../helpers/secrets.js';

/** A routing number with a valid ABA check digit, from 8 random digits. */
export function routing(): string {
  for (;;) {
    const body = Array.from({ length: 8 }, () => Math.floor(Math.random() * 10)).join('');
    for (let d = 0; d <= 9; d++) if (abaValid(body + d)) return body + d;
  }
}
export function digits(n: number): string {
  return Array.from({ length: n }, () => Math.floor(Math.random() * 10)).join('');
}
/** One digit changed: a routing number whose checksum fails. */
export function badRouting(): string {
  const r = routing();
  return r.slice(0, 8) + String((Number(r[8]) + 1) % 10);
}

export async function typesOverHttp(t: Test, s: TestService): Promise<void> {
  const card = randomCard('4');
  const ssn = '078-05-1120';
  const bank = { routing_number: routing(), account_number: digits(10) };
  const values: Record<string, unknown> = {
    card_number: card, bank, us_bank_routing_number: routing(), us_bank_account_number: digits(12),
    social_security_number: ssn, employer_id_number: '12-3456789',
  };
  const ids: Record<string, string> = {};
  for (const [type, data] of Object.entries(values)) {
    const created = await s.call('POST', '/tokens', { key: KEYS.private, body: { type, data } });
    t.equal(created.status, 201, `${type}: created (${created.text.slice(0, 200)})`);
    t.equal(created.body.type, type);
    t.same(created.body.containers, [tokenType(type)!.container], `${type}: the default container`);
    t.equal(created.body.fingerprint_expression, tokenType(type)!.fingerprint, `${type}: the default fingerprint expression`);
    t.notOk(created.text.includes(typeof data === 'string' ? data : (data as { account_number: string }).account_number), `${type}: the answer does not hold the value`);
    ids[type] = created.body.id as string;

    const revealed = await s.call('GET', `/tokens/${ids[type]}`, { key: KEYS.private });
    t.same(revealed.body.data, data, `${type}: a reveal reader sees the value`);
    const masked = await s.call('GET', `/tokens/${ids[type]}`, { key: KEYS.masked });
    t.equal(masked.status, 200);
    t.same(masked.body.data, tokenType(type)!.mask(data), `${type}: a mask reader sees the type's mask`);
  }
  t.equal((await s.call('GET', `/tokens/${ids.social_security_number}`, { key: KEYS.masked })).body.data, 'XXX-XX-1120');

  // The same SSN without dashes: the same fingerprint; deduplication finds the first token.
  const plain = await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'social_security_number', data: '078051120', deduplicate_token: true } });
  t.equal(plain.status, 201);
  t.equal(plain.body.id, ids.social_security_number, 'deduplicated onto the dashed one: the same fingerprint');
  t.same(plain.body._extras, { deduplicated: true });
  // Fingerprints are per type: a card and a card_number of the same number do not share one.
  const asCard = await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'card', data: { number: card } } });
  const cn = await s.call('GET', `/tokens/${ids.card_number}`, { key: KEYS.private });
  t.match(cn.body.fingerprint, /^[0-9a-f]{64}$/);
  t.not(asCard.body.fingerprint, cn.body.fingerprint, 'card and card_number: two fingerprints');

  // A custom mask overrides the type's.
  const custom = await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'social_security_number', data: '078-05-1121', mask: '{{ data | last4 }}' } });
  t.equal(custom.status, 201, custom.text);
  t.equal((await s.call('GET', `/tokens/${custom.body.id}`, { key: KEYS.masked })).body.data, '1121');

  // Search by type.
  const found = await s.call('POST', '/tokens/search', { key: KEYS.private, body: { query: 'type:bank' } });
  t.equal(found.status, 200, found.text);
  t.same(found.body.data.map((r: { id: string }) => r.id), [ids.bank], 'search by type:bank');

  // /tokenize: every type in one body; one invalid value and nothing is created.
  const before = (await s.call('GET', '/tokens?size=100', { key: KEYS.private })).body.data.length as number;
  const bad = await s.call('POST', '/tokenize', {
    key: KEYS.private,
    body: { a: { type: 'card_number', data: randomCard('5') }, b: { type: 'us_bank_routing_number', data: badRouting() }, c: { type: 'bank', data: { routing_number: routing(), account_number: '1' } } },
  });
  t.equal(bad.status, 400);
  t.equal(bad.body.code, 'validation_failed');
  t.same(Object.keys(bad.body.errors).sort(), ['b.data', 'c.data.account_number'], 'the paths inside the body');
  t.equal((await s.call('GET', '/tokens?size=100', { key: KEYS.private })).body.data.length, before, 'nothing was created');
  const unknown = await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'passport', data: 'x' } });
  t.equal(unknown.status, 400);
  t.match(unknown.body.errors.type[0], /must be one of: token, card, card_number, bank/, 'an unknown type lists the known ones');
  const good = await s.call('POST', '/tokenize', { key: KEYS.private, body: { a: { type: 'employer_id_number', data: '98-7654321' }, b: { type: 'us_bank_account_number', data: '5555' } } });
  t.equal(good.status, 200, good.text);
  t.same([good.body.a.type, good.body.b.type], ['employer_id_number', 'us_bank_account_number']);

  // Detokenization: the value for a reveal reader, the mask for a mask reader.
  const det = await s.call('POST', '/detokenize', { key: KEYS.private, body: { ssn: `{{ token: ${ids.social_security_number} | json: '$.data' }}`, acct: `{{ token: ${ids.bank} | json: '$.data.account_number' }}` } });
  t.equal(det.status, 200, det.text);
  t.same(det.body, { ssn, acct: bank.account_number });

  // Alias ids on this store: read, searched by id.
  const aliased = await s.call('POST', '/tokenize', { key: KEYS.private, body: { c: { type: 'card_number', data: card, id: '{{ data | alias_card }}' }, s: { type: 'social_security_number', data: ssn, id: '{{ data | alias_preserve_format: 0, 4 }}' } } });
  t.equal(aliased.status, 200, aliased.text);
  const cAlias = aliased.body.c.id as string;
  t.ok(cAlias.length === card.length && cAlias !== card && cAlias.slice(-4) === card.slice(-4), 'a card-shaped alias');
  t.same((await s.call('GET', `/tokens/${cAlias}`, { key: KEYS.private })).body.data, card, 'read by the card alias');
  t.equal((await s.call('GET', `/tokens/${aliased.body.s.id as string}`, { key: KEYS.masked })).body.data, 'XXX-XX-1120', 'read by the SSN alias, masked');
  const byId = await s.call('POST', '/tokens/search', { key: KEYS.private, body: { query: `id:${cAlias}` } });
  t.same(byId.body.data.map((r: { id: string }) => r.id), [cAlias], 'searched by its alias');

  t.notOk(s.logs().includes(ssn) || s.logs().includes(bank.account_number) || s.logs().includes(card), 'no value in the logs');
}
