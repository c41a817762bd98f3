/**
 * Alias ids through the inbound proxy (issue 26): the tokenize transform's `id` expression sends a
 * legacy destination card-shaped (and SSN-shaped) aliases in place of the values; a blocking leak
 * guard lets through the Luhn-valid aliases the same request drew and still blocks a real card in
 * the same body.
 */
import t from 'tap';
import { CardScanner } from '../../src/proxy/leak-guard.js';
import { buildModel } from '../../src/model/compile.js';
import { luhnValid } from '../../src/luhn.js';
import { KEYS, startTestService } from '../helpers/service.js';
import { startUpstream } from '../helpers/upstream.js';
import { assertProxyError, configWithProxies } from '../helpers/proxy.js';
import { randomCard } from '../helpers/secrets.js';

const KEY = { 'svc-proxy-key': 'proxy_key_alias_tok_0123456789' };

t.test('the scanner: an allowed number is not a finding, any other card is', async (t) => {
  const alias = randomCard('4');
  const card = randomCard('5');
  const s = new CardScanner(new Set([alias]));
  s.push(Buffer.from(`{"card":"${alias}"}`));
  t.equal(s.end(), 0, 'the alias alone: no finding');
  const both = new CardScanner(new Set([alias]));
  both.push(Buffer.from(`{"card":"${alias}","note":"${card}"}`));
  t.equal(both.end(), 1, 'the alias and a real card: one finding');
  const none = new CardScanner();
  none.push(Buffer.from(alias));
  t.equal(none.end(), 1, 'without the allowance the alias counts as a card');
});

t.test('a legacy destination gets aliases; the guard blocks a real card beside them', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, {
    config: configWithProxies([{
      id: 'legacy', name: 'legacy', key: KEY['svc-proxy-key'], require_auth: false, destination_url: `${up.url}/legacy/`, leak_guard: 'block',
      request_transforms: [{
        type: 'tokenize',
        fields: [
          { pointer: '/card', token: { type: 'card_number', id: '{{ data | alias_card }}' } },
          { pointer: '/ssn', token: { type: 'social_security_number', id: '{{ data | alias_preserve_format: 0, 4 }}' } },
        ],
      }],
    }]),
  });
  const card = randomCard('4');
  const ok = await s.call('POST', '/proxy/pay', { key: null, headers: KEY, body: { card, ssn: '536-22-8711', amount: 12 } });
  t.equal(ok.status, 200, ok.text);
  t.equal(up.received.length, 1, 'forwarded');
  const sent = JSON.parse(up.received[0]!.body.toString()) as { card: string; ssn: string; amount: number };
  t.ok(luhnValid(sent.card) && sent.card.length === card.length && sent.card !== card, 'the destination got a Luhn-valid card-shaped alias');
  t.equal(sent.card.slice(0, 6) + sent.card.slice(-4), card.slice(0, 6) + card.slice(-4), 'first 6 and last 4 kept');
  t.match(sent.ssn, /^\d{3}-\d{2}-8711$/, 'an SSN-shaped alias');
  t.equal(sent.amount, 12);
  const read = await s.call('GET', `/tokens/${sent.card}`, { key: KEYS.private });
  t.equal(read.status, 200);
  t.equal(read.body.data, card, 'the alias is the token: a private key reads the card');

  // The same body with a real card in a free field: blocked, nothing forwarded, nothing created.
  const other = randomCard('5');
  const before = (await s.call('GET', '/tokens?size=100', { key: KEYS.private })).body.data.length as number;
  const blocked = await s.call('POST', '/proxy/pay', { key: null, headers: KEY, body: { card: randomCard('4'), ssn: '536-22-8712', note: `card ${other}` } });
  assertProxyError(t, blocked, 422, 'leak_detected', 'a real card beside the aliases:');
  t.equal(up.received.length, 1, 'nothing more forwarded');
  t.equal((await s.call('GET', '/tokens?size=100', { key: KEYS.private })).body.data.length, before, 'no token written');
  t.notOk(s.logs().includes(card) || s.logs().includes(other), 'no card number in the logs');
});

t.test('an id in a proxy\'s token template must be an alias expression the type allows: refused at load', async (t) => {
  const proxyWith = (token: Record<string, unknown>) => configWithProxies([{
    id: 'p', name: 'p', key: KEY['svc-proxy-key'], require_auth: false, destination_url: 'http://127.0.0.1:9/',
    request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/v', token }] }],
  }]);
  t.throws(() => buildModel(proxyWith({ type: 'token', id: '{{ data }}' })), /request_transforms\[0\]\.fields\[0\]\.token\.id: an id expression may only be/, '{{ data }} is refused');
  t.throws(() => buildModel(proxyWith({ type: 'token', id: '{{ data | alias_card }}' })), /token\.id: alias_card is for card and card_number tokens/);
  t.throws(() => buildModel(proxyWith({ type: 'token', id: 'fixed-id' })), /token\.id: a proxy creates many tokens/);
  t.doesNotThrow(() => buildModel(proxyWith({ type: 'card_number', id: '{{ data | alias_card }}' })));
});

t.test('every token type through the proxy tokenize transform (issue 26)', async (t) => {
  const { routing, digits } = await import('../vault/token-types-suite.js');
  const values: Record<string, unknown> = {
    token: 'a note', card: { number: randomCard('4'), expiration_month: 3, expiration_year: 2031 }, card_number: randomCard('5'),
    bank: { routing_number: routing(), account_number: digits(9) }, us_bank_routing_number: routing(), us_bank_account_number: digits(11),
    social_security_number: '536-22-8711', employer_id_number: '12-3456789',
  };
  const up = await startUpstream(t);
  const s = await startTestService(t, {
    config: configWithProxies([{
      id: 'all', name: 'all', key: KEY['svc-proxy-key'], require_auth: false, destination_url: `${up.url}/all/`, leak_guard: 'block',
      request_transforms: [{ type: 'tokenize', fields: Object.keys(values).map((type) => ({ pointer: `/${type}`, token: { type } })) }],
    }]),
  });
  const r = await s.call('POST', '/proxy/x', { key: null, headers: KEY, body: values });
  t.equal(r.status, 200, r.text);
  const sent = JSON.parse(up.received[0]!.body.toString()) as Record<string, string>;
  for (const [type, value] of Object.entries(values)) {
    t.match(sent[type], /^[0-9a-f-]{36}$/, `${type}: the destination got a token id`);
    const read = await s.call('GET', `/tokens/${sent[type]}`, { key: KEYS.private });
    t.equal(read.body.type, type);
    t.same(read.body.data, value, `${type}: the token holds the value`);
  }
  // A value that is not valid for its type: 400 naming the field, nothing forwarded.
  const bad = await s.call('POST', '/proxy/x', { key: null, headers: KEY, body: { ...values, us_bank_routing_number: '123456789' } });
  t.equal(bad.status, 400, bad.text);
  t.equal(up.received.length, 1, 'nothing more forwarded');
});
