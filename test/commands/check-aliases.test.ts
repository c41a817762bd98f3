/**
 * `tokenproxy check-aliases` and `tokenproxy migrate --dry-run` list the token ids that show more
 * of their value than the type's disclosure budget (src/vault/token-types.ts), without changing
 * them; the report itself never holds more than the budget. The service and the commands run as
 * child processes on one store (store-commands-fixture.ts). Ids beyond the budget are made the
 * way a client still can: a custom id built from the value (an older version drew such aliases).
 */
import t from 'tap';
import { call, KEYS } from '../helpers/service.js';
import { randomCard } from '../helpers/secrets.js';
import { idExcess, maskedId } from '../../src/commands/alias-budget.js';
import { cli, dirs, service } from './store-commands-fixture.js';

t.setTimeout(300_000);

t.test('idExcess measures the characters an id shares with its value beyond the budget', async (t) => {
  const card = '4242424242424242';
  t.same(idExcess('card_number', '4242424242abcdef', card), { first: 4, last: 0 }, '10 leading digits: 4 beyond the first 6');
  t.same(idExcess('card', 'abcdef4242424242', { number: card }), { first: 0, last: 6 }, '10 trailing digits: 6 beyond the last 4');
  t.same(idExcess('card_number', '424242XXXXXX4242', card), { first: 0, last: 0 }, 'first 6 and last 4: within');
  t.same(idExcess('social_security_number', '1X3-45-6789', '123-45-6789'), { first: 1, last: 3 }, 'an SSN keeps no leading digit; separators count for nothing');
  t.same(idExcess('social_security_number', 'XXX-XX-6789', '123-45-6789'), { first: 0, last: 0 }, 'the last 4 and a separator: within');
  t.equal(maskedId('1X3-45-6789', 'social_security_number', { first: 1, last: 3 }), '*X*-**-6789', 'the leading digit and the 3 digits before the last 4');
  t.same(idExcess('bank', 'acct-56789', { routing_number: '011000015', account_number: '0123456789' }), { first: 0, last: 1 });
  t.equal(idExcess('token', 'anything', 'anything'), null, "a token's creator chooses");
  t.equal(idExcess('us_bank_routing_number', '011000015', '011000015'), null, 'routing numbers are public');
  t.equal(maskedId('4242424242abcdef', 'card_number', { first: 4, last: 0 }), '424242****abcdef');
  t.equal(maskedId('abcdef4242424242', 'card_number', { first: 0, last: 6 }), 'abcdef******4242', 'the 6 beyond the last 4 masked');
});

t.test('the commands list ids beyond the budget, masked, and change nothing', async (t) => {
  const { serviceDir, config, masterKey } = dirs(t);
  const env = { TOKENPROXY_MASTER_KEY: masterKey };
  const card = randomCard();
  const ssn = '123-45-6789';
  const svc = await service(serviceDir, config, env);
  let beyondId = '';
  try {
    const make = async (body: Record<string, unknown>) => {
      const r = await call(svc.url, 'POST', '/tokens', { key: KEYS.private, body });
      t.equal(r.status, 201, r.text);
      return r.body.id as string;
    };
    beyondId = await make({ type: 'card_number', data: card, id: `${card.slice(0, 10)}-order-1` });
    // Within the budget, deterministic (a drawn alias can match one more digit by chance).
    await make({ type: 'card_number', data: card, id: `${card.slice(0, 6)}-ref-${card.slice(-4)}` });
    await make({ type: 'social_security_number', data: ssn, id: 'ssn-ref-6789' });
    await make({ type: 'token', data: 'order-1 note', id: 'order-1-note' });
  } finally {
    await svc.stop();
  }
  const masked = `${card.slice(0, 6)}****-order-1`;

  const check = await cli(serviceDir, ['check-aliases', '--config', config], env);
  t.equal(check.code, 1, check.out);
  t.match(check.out, /ids beyond the disclosure budget: 1 of 4 token\(s\)/);
  t.match(check.out, masked, 'the id with the 4 digits beyond the budget as *');
  t.notMatch(check.out, card.slice(0, 10), 'the report itself shows no more than the budget');
  t.notMatch(check.out, card.slice(6, 10));

  const dry = await cli(serviceDir, ['migrate', '--dry-run', '--config', config], env);
  t.equal(dry.code, 0, `a dry run still exits 0: ${dry.out}`);
  t.match(dry.out, /nothing to do/);
  t.match(dry.out, masked, 'the dry run lists it too');
  t.notMatch(dry.out, card.slice(0, 10));

  // Nothing was rewritten: the id still names its token.
  const again = await service(serviceDir, config, env);
  try {
    const read = await call(again.url, 'GET', `/tokens/${beyondId}`, { key: KEYS.private });
    t.equal(read.status, 200, 'the token keeps its id');
    t.equal(read.body.data, card);
    const del = await call(again.url, 'DELETE', `/tokens/${beyondId}`, { key: KEYS.private });
    t.equal(del.status, 204);
  } finally {
    await again.stop();
  }
  const clean = await cli(serviceDir, ['check-aliases', '--config', config], env);
  t.equal(clean.code, 0, clean.out);
  t.match(clean.out, /ids within the disclosure budget: none of 3 token\(s\)/);
});
