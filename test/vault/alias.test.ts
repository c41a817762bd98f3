/**
 * Alias ids (issue 26, src/vault/alias.ts): the id expressions allowed and refused, the alias
 * properties over thousands of draws (format kept, Luhn, kept digits, never the value, distinct),
 * then over HTTP: every filter through POST /tokens and /tokenize, an alias read, detokenized,
 * patched, searched and deleted like any id; a collision space forced full gives 409 and creates
 * nothing.
 */
import t from 'tap';
import { luhnValid } from '../../src/luhn.js';
import { checkAliasable, drawAlias, parseAlias, type AliasSpec } from '../../src/vault/alias.js';
import { KEYS, startTestService } from '../helpers/service.js';
import { randomCard } from '../helpers/secrets.js';

const spec = (expr: string, type: string): AliasSpec => {
  const s = parseAlias(expr, type);
  if (typeof s === 'string') throw new Error(s);
  return s;
};

t.test('id expressions: the alias forms, and nothing else', async (t) => {
  t.match(parseAlias('{{ data | alias_card }}', 'card_number'), { filter: 'alias_card', revealFirst: 6, revealLast: 4 });
  t.match(parseAlias('{{data.number|alias_card}}', 'card'), { filter: 'alias_card', source: 'data.number' });
  t.match(parseAlias('{{ data | alias_preserve_format: 0, 4 }}', 'social_security_number'), { revealFirst: 0, revealLast: 4 });
  t.match(parseAlias('{{ data | alias_preserve_length }}', 'token'), { filter: 'alias_preserve_length', revealFirst: 0, revealLast: 0 });
  for (const [expr, type] of [
    ['{{ data }}', 'token'],
    ['{{ data | slice: 0, 4 }}', 'token'],
    ['{{ data | alias_preserve_length | upcase }}', 'token'],
    ['x{{ data | alias_preserve_length }}', 'token'],
    ['{{ data | alias_card: 8, 4 }}', 'card_number'],
    ['{{ data | alias_card }}', 'token'],
    ['{{ data | alias_card }}', 'card'],
    ['{{ data.number | alias_card }}', 'card_number'],
    ['{{ data | alias_preserve_format: 6, 5 }}', 'token'],
    ['{{ data | alias_preserve_format: 1 }}', 'token'],
    ['{{ data | alias_preserve_format }}', 'bank'],
    ['{{ "4242424242424242" | alias_card }}', 'card_number'],
  ] as const) {
    t.type(parseAlias(expr, type), 'string', `refused: ${expr} on ${type}`);
  }
  t.type(checkAliasable(spec('{{ data | alias_preserve_format: 0, 4 }}', 'token'), 'abc-1234'), 'string', 'fewer than 4 drawn: refused');
  t.type(checkAliasable(spec('{{ data | alias_preserve_format }}', 'token'), 'a b c d e'), 'string', 'spaces cannot be in an id');
  t.equal(checkAliasable(spec('{{ data | alias_preserve_length }}', 'token'), 'a b c d e'), null, 'preserve_length replaces them');
  t.type(checkAliasable(spec('{{ data | alias_card }}', 'card_number'), '4242'), 'string');
});

t.test('alias properties over thousands of draws', async (t) => {
  const N = 3000;
  const card = randomCard('4', 16);
  const ac = spec('{{ data | alias_card }}', 'card_number');
  const seen = new Set<string>();
  let bad = 0;
  for (let i = 0; i < N; i++) {
    const a = drawAlias(ac, card);
    seen.add(a);
    if (a.length !== 16 || !luhnValid(a) || a === card || a.slice(0, 6) !== card.slice(0, 6) || a.slice(-4) !== card.slice(-4) || !/^\d+$/.test(a)) bad++;
  }
  t.equal(bad, 0, `alias_card: ${N} draws, each 16 digits, Luhn-valid, first 6 and last 4 kept, never the card`);
  t.ok(seen.size > N * 0.95, `alias_card: distinct draws (${seen.size} of ${N})`);
  for (const len of [13, 15, 19]) {
    const c = randomCard('5', len);
    const a = drawAlias(ac, c);
    t.ok(a.length === len && luhnValid(a) && a !== c, `alias_card on ${len} digits`);
  }

  const ssn = '536-22-8711';
  const pf = spec('{{ data | alias_preserve_format: 0, 4 }}', 'social_security_number');
  const pfAll = spec('{{ data | alias_preserve_format }}', 'token');
  const mixed = 'Ab-12.cD~9';
  bad = 0;
  for (let i = 0; i < N; i++) {
    const a = drawAlias(pf, ssn);
    if (!/^\d{3}-\d{2}-8711$/.test(a) || a === ssn) bad++;
    const m = drawAlias(pfAll, mixed);
    if (!/^[A-Z][a-z]-\d\d\.[a-z][A-Z]~\d$/.test(m) || m === mixed) bad++;
  }
  t.equal(bad, 0, 'alias_preserve_format: separators where they were, each letter or digit of its class, reveal_last kept, never the value');

  const pl = spec('{{ data | alias_preserve_length: 2, 2 }}', 'token');
  const value = 'secret value!';
  const lens = new Set<string>();
  bad = 0;
  for (let i = 0; i < N; i++) {
    const a = drawAlias(pl, value);
    lens.add(a);
    if (a.length !== value.length || !a.startsWith('se') || !a.endsWith('e!') || !/^se[A-Za-z0-9]+e!$/.test(a)) bad++;
  }
  t.equal(bad, 0, 'alias_preserve_length: the length, letters and digits, the revealed ends');
  t.equal(lens.size, N, 'alias_preserve_length: all distinct');
});

t.test('aliases over HTTP', async (t) => {
  const s = await startTestService(t);
  const card = randomCard('4', 16);
  const created = await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'card_number', data: card, id: '{{ data | alias_card }}' } });
  t.equal(created.status, 201, created.text);
  const alias = created.body.id as string;
  t.ok(luhnValid(alias) && alias !== card && alias.slice(0, 6) === card.slice(0, 6) && alias.slice(-4) === card.slice(-4), 'the id is a card-shaped alias');
  t.same((await s.call('GET', `/tokens/${alias}`, { key: KEYS.private })).body.data, card, 'read by its alias');

  // Two tokens of the same value: two aliases.
  const again = await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'card_number', data: card, id: '{{ data | alias_card }}' } });
  t.not(again.body.id, alias, 'an alias is not a fingerprint');

  const cardTok = await s.call('POST', '/tokenize', {
    key: KEYS.private,
    body: {
      c: { type: 'card', data: { number: card, expiration_month: 2, expiration_year: 2031 }, id: '{{ data.number | alias_card }}' },
      s: { type: 'social_security_number', data: '536-22-8711', id: '{{ data | alias_preserve_format: 0, 4 }}' },
      l: { type: 'token', data: 'a private note', id: '{{ data | alias_preserve_length }}' },
    },
  });
  t.equal(cardTok.status, 200, cardTok.text);
  t.ok(luhnValid(cardTok.body.c.id) && cardTok.body.c.id.length === 16);
  t.match(cardTok.body.s.id, /^\d{3}-\d{2}-8711$/);
  t.match(cardTok.body.l.id, /^[A-Za-z0-9]{14}$/);

  // Detokenize, patch, search, delete by alias.
  const det = await s.call('POST', '/detokenize', { key: KEYS.private, body: { n: `{{ token: ${alias} | json: '$.data' }}`, ssn: `{{ token: ${cardTok.body.s.id} | json: '$.data' }}` } });
  t.equal(det.status, 200, det.text);
  t.same(det.body, { n: card, ssn: '536-22-8711' });
  const patched = await s.call('PATCH', `/tokens/${alias}`, { key: KEYS.private, body: { metadata: { k: 'v' } }, headers: { 'content-type': 'application/merge-patch+json' } });
  t.equal(patched.status, 200, patched.text);
  const found = await s.call('POST', '/tokens/search', { key: KEYS.private, body: { query: `id:${alias}` } });
  t.same(found.body.data.map((r: { id: string }) => r.id), [alias], 'search by the alias');
  t.equal((await s.call('DELETE', `/tokens/${alias}`, { key: KEYS.private })).status, 204);
  t.equal((await s.call('GET', `/tokens/${alias}`, { key: KEYS.private })).status, 404);

  // Refused expressions and values: 400, nothing created, no value echoed.
  const refused = await s.call('POST', '/tokenize', {
    key: KEYS.private,
    body: { ok: { type: 'token', data: 'fine', id: '{{ data | alias_preserve_length }}' }, bad: { type: 'token', data: 'leaky', id: '{{ data }}' } },
  });
  t.equal(refused.status, 400);
  t.same(Object.keys(refused.body.errors), ['bad.id']);
  t.notOk(refused.text.includes('leaky'));

  // A fixed custom id still works, and its reuse is 409.
  t.equal((await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'token', data: 'x', id: 'my-fixed-id' } })).status, 201);
  t.equal((await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'token', data: 'y', id: 'my-fixed-id' } })).body.code, 'token_conflict');
  t.notOk(s.logs().includes(card), 'no card number in the logs');
});

t.test('a full alias space: 409 after the bounded draws, and the request creates nothing', async (t) => {
  const s = await startTestService(t);
  // A 13-digit card keeps 10 of its digits: at most 100 aliases (one middle digit is the Luhn fix).
  const card = randomCard('4', 13);
  const ids = new Set<string>();
  let conflict: { status: number; body: { code: string } } | null = null;
  for (let round = 0; round < 10 && conflict === null; round++) {
    const body = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`c${i}`, { type: 'card_number', data: card, id: '{{ data | alias_card }}' }]));
    const before = ids.size;
    const r = await s.call('POST', '/tokenize', { key: KEYS.private, body });
    if (r.status === 409) {
      conflict = r;
      const listed = await s.call('POST', '/tokens/search', { key: KEYS.private, body: { query: 'type:card_number', size: 100 } });
      t.equal(listed.body.data.length, before, 'the refused request created nothing');
      break;
    }
    t.equal(r.status, 200, r.text);
    for (const v of Object.values(r.body) as Array<{ id: string }>) ids.add(v.id);
    t.equal(ids.size, before + 20, 'every alias distinct');
  }
  t.ok(conflict, `the space filled up: 409 after ${ids.size} aliases`);
  t.equal(conflict?.body.code, 'token_conflict');
  t.ok(ids.size <= 100, 'no more aliases than the space holds');
});
