/**
 * A reactor's `tokenize` creates typed tokens and alias ids like POST /tokenize (issue 26): the
 * types' validation, containers and masks, an alias id, and all or nothing when one value is
 * invalid for its type.
 */
import t from 'tap';
import { baseConfig, KEYS, startTestService } from '../helpers/service.js';
import { randomCard } from '../helpers/secrets.js';
import { luhnValid } from '../../src/luhn.js';

const cfg = baseConfig() as Record<string, unknown>;
(cfg.tenants as Array<Record<string, unknown>>)[0]!.reactors = [{
  id: 'typed', name: 'typed',
  code: `module.exports = async function (req) {
  return { raw: { ok: true }, tokenize: {
    ssn: { type: 'social_security_number', data: req.args.ssn },
    card: { type: 'card_number', data: req.args.card, id: '{{ data | alias_card }}' },
  } };
};`,
}];

const s = await startTestService(t, { config: cfg });

t.test('typed tokens and an alias from a reactor', async (t) => {
  const card = randomCard('4');
  const r = await s.call('POST', '/reactors/typed/react', { key: KEYS.private, body: { args: { ssn: '536-22-8711', card } } });
  t.equal(r.status, 200, r.text);
  const ssn = r.body.tokens.ssn as { id: string; type: string; containers: string[] };
  const alias = r.body.tokens.card as { id: string; type: string };
  t.equal(ssn.type, 'social_security_number');
  t.same(ssn.containers, ['/pii/high/'], 'the type\'s container');
  t.ok(luhnValid(alias.id) && alias.id !== card && alias.id.slice(-4) === card.slice(-4), 'a card-shaped alias id');
  t.equal((await s.call('GET', `/tokens/${ssn.id}`, { key: KEYS.masked })).body.data, 'XXX-XX-8711', 'the type\'s mask');
  t.equal((await s.call('GET', `/tokens/${alias.id}`, { key: KEYS.private })).body.data, card);
  t.notOk(s.logs().includes(card), 'no card number in the logs');
});

t.test('an invalid value for its type: the reactor call creates nothing', async (t) => {
  const before = (await s.call('GET', '/tokens?size=100', { key: KEYS.private })).body.data.length as number;
  const r = await s.call('POST', '/reactors/typed/react', { key: KEYS.private, body: { args: { ssn: '536-22-871', card: randomCard('5') } } });
  t.equal(r.status, 400, r.text);
  t.equal(r.body.code, 'validation_failed');
  t.equal((await s.call('GET', '/tokens?size=100', { key: KEYS.private })).body.data.length, before, 'nothing created');
});
