/**
 * The disclosure budget of each token type (src/vault/token-types.ts) and who may send templates
 * (auth/access.ts templatePolicy), over HTTP on a running service:
 * - alias ids keep at most a card's first 6 and last 4 digits and an SSN's last 4, for every key;
 *   two aliases of one card listed by a `redact` key never show more than that together;
 * - a mask expression renders over the budget's view: a `card_number` with mask `{{ data }}` reads
 *   as its first 6, X, and its last 4 to a `mask` key;
 * - a public key (a hosted field's) sends no template at all: 403 expression_not_allowed, the same
 *   answer whatever the value, before the value is validated;
 * - a reactor's tokenize of args detokenized from tokens the key may only use (not read) creates
 *   nothing at all: templates, named options, or pieces of the card as another type.
 */
import t from 'tap';
import { KEYS, baseConfig, startTestService, type TestService } from '../helpers/service.js';
import { luhnCheckDigit, randomCard } from '../helpers/secrets.js';

const USE_ONLY = 'budget_use_only_key_aaaaaaaaaaaaaaaaa';
const REDACT = 'budget_redact_key_bbbbbbbbbbbbbbbbbbbb';
const REVEALER = 'budget_revealer_key_cccccccccccccccccc';

function config(): Record<string, unknown> {
  const c = baseConfig() as { tenants: Array<{ applications: unknown[]; reactors?: unknown[] }> };
  c.tenants[0]!.applications.push(
    { id: 'aaaaaaaa-0000-4000-8000-0000000000b1', name: 'use-only', type: 'private', keys: [USE_ONLY], permissions: ['reactor:invoke', 'token:use', 'token:create'] },
    { id: 'aaaaaaaa-0000-4000-8000-0000000000b2', name: 'redact', type: 'private', keys: [REDACT],
      rules: [{ priority: 1, container: '/', transform: 'redact', permissions: ['token:read', 'token:search'] }] },
    { id: 'aaaaaaaa-0000-4000-8000-0000000000b3', name: 'revealer', type: 'private', keys: [REVEALER], permissions: ['reactor:invoke'],
      rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: ['token:read', 'token:use', 'token:create'] }] },
  );
  c.tenants[0]!.reactors = [{ id: 'echo-tokenize', name: 'echo-tokenize', code: 'module.exports = async (req) => ({ raw: { ok: true }, tokenize: req.args });' }];
  return c;
}

/** Two Luhn-valid cards of the same length that agree on the first 6 and last 4 digits only where asked. */
function twinCards(): [string, string] {
  for (;;) {
    const a = randomCard('4', 16);
    // Same first 6 and last 4; the middle drawn again, one digit solved so that Luhn holds.
    const middle = Array.from({ length: 6 }, () => String(Math.floor(Math.random() * 10))).join('');
    for (let d = 0; d <= 9; d++) {
      const b = a.slice(0, 6) + middle.slice(0, 5) + String(d) + a.slice(12);
      if (b !== a && luhnCheckDigit(b.slice(0, 15)) === b[15]) return [a, b];
    }
  }
}

/** The longest run of leading / trailing characters `id` shares with `value`. */
function shared(id: string, value: string): { first: number; last: number } {
  let first = 0;
  while (first < id.length && first < value.length && id[first] === value[first]) first++;
  let last = 0;
  while (last < id.length && last < value.length && id[id.length - 1 - last] === value[value.length - 1 - last]) last++;
  return { first, last };
}

t.test('alias windows beyond the type budget are refused for every key', async (t) => {
  const s = await startTestService(t, { config: config() });
  const card = randomCard();
  const over = [
    ['card', { number: card, expiration_month: 1, expiration_year: 2031 }, '{{ data.number | alias_preserve_length: 10, 0 }}'],
    ['card', { number: card, expiration_month: 1, expiration_year: 2031 }, '{{ data.number | alias_preserve_format: 0, 10 }}'],
    ['card_number', card, '{{ data | alias_preserve_format: 7, 0 }}'],
    ['card_number', card, '{{ data | alias_preserve_length: 0, 5 }}'],
    ['social_security_number', '123-45-6789', '{{ data | alias_preserve_format: 0, 6 }}'],
    ['social_security_number', '123456789', '{{ data | alias_preserve_length: 1, 0 }}'],
  ] as const;
  for (const [type, data, id] of over) {
    const r = await s.call('POST', '/tokens', { key: KEYS.private, body: { type, data, id } });
    t.equal(r.status, 400, `${type} ${id}: ${r.text}`);
    t.equal(r.body.code, 'validation_failed');
    t.match(r.body.errors.id?.[0], /disclosure budget/);
  }
  const within = [
    ['card_number', card, '{{ data | alias_preserve_format: 6, 4 }}', 6, 4],
    ['card', { number: card, expiration_month: 1, expiration_year: 2031 }, '{{ data.number | alias_card }}', 6, 4],
    ['social_security_number', '123-45-6789', '{{ data | alias_preserve_format: 0, 4 }}', 0, 4],
  ] as const;
  for (const [type, data, id, first, last] of within) {
    const r = await s.call('POST', '/tokens', { key: KEYS.private, body: { type, data, id } });
    t.equal(r.status, 201, `${type} ${id}: ${r.text}`);
    const value = typeof data === 'string' ? data : data.number;
    t.equal(r.body.id.slice(0, first), value.slice(0, first));
    t.equal(r.body.id.slice(r.body.id.length - last), value.slice(value.length - last));
  }
});

t.test('two aliases of one card listed by a redact key show no more than its first 6 and last 4', async (t) => {
  const s = await startTestService(t, { config: config() });
  const card = randomCard();
  const ids: string[] = [];
  for (const id of ['{{ data | alias_preserve_format: 6, 0 }}', '{{ data | alias_preserve_length: 0, 4 }}', '{{ data | alias_card }}']) {
    const r = await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'card_number', data: card, id } });
    t.equal(r.status, 201, r.text);
    ids.push(r.body.id as string);
  }
  const page = await s.call('GET', '/tokens?size=100', { key: REDACT });
  t.equal(page.status, 200, page.text);
  const listed = (page.body.data as Array<{ id: string; data?: unknown }>).filter((x) => ids.includes(x.id));
  t.equal(listed.length, 3, 'all three listed');
  for (const x of listed) {
    t.equal(x.data, undefined, 'redact: no data');
    // 12 digits: the kept 6 (or 4) and six drawn ones that match by chance one time in a million.
    t.notOk(x.id.includes(card.slice(0, 12)) || x.id.includes(card.slice(card.length - 12)), 'no id holds 12 leading or trailing digits');
  }
});

t.test('a card_number mask renders over the budget view: first 6 and last 4 at most', async (t) => {
  const s = await startTestService(t, { config: config() });
  const card = randomCard();
  const made = await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'card_number', data: card, mask: '{{ data }}' } });
  t.equal(made.status, 201, made.text);
  const expected = `${card.slice(0, 6)}${'X'.repeat(card.length - 10)}${card.slice(-4)}`;
  const read = await s.call('GET', `/tokens/${made.body.id}`, { key: KEYS.masked });
  t.equal(read.status, 200, read.text);
  t.equal(read.body.data, expected, 'a mask key reads the budget view, not the number');
  const list = await s.call('GET', '/tokens?type=card_number&size=100', { key: KEYS.masked });
  const listed = (list.body.data as Array<{ id: string; data?: string }>).find((x) => x.id === made.body.id);
  t.equal(listed?.data, expected, 'the list answer likewise');
  // A mask that picks the middle digits shows X there.
  const middle = await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'card_number', data: card, mask: '{{ data | slice: 6, 6 }}' } });
  t.equal(middle.status, 201, middle.text);
  const m = await s.call('GET', `/tokens/${middle.body.id}`, { key: KEYS.masked });
  t.equal(m.body.data, 'XXXXXX');
  t.notMatch(JSON.stringify([read.body, list.body, m.body]), card, 'the whole number is never shown');
  // The private key that reveals still reads the number.
  const own = await s.call('GET', `/tokens/${made.body.id}`, { key: KEYS.private });
  t.equal(own.body.data, card);
});

t.test('a public key sends no template: the same 403 for every value, before validation', async (t) => {
  const s = await startTestService(t, { config: config() });
  const [a, b] = twinCards();
  const guess = (digit: string) => `{{ data.number | slice: 7, 1 | replace: '${digit}', 'xxxxxxxxxx' | replace: 'x', 'xxxxxxxxxx' | replace: 'x', 'xxxxxxxxxx' | replace: 'x', 'xxxxxxxxxx' }}`;
  const bodies = (card: string) => [
    { a: { type: 'card', data: { number: card, expiration_month: 1, expiration_year: 2031 }, id: '{{ data.number | alias_preserve_length: 10, 0 }}' },
      b: { type: 'card', data: { number: card, expiration_month: 1, expiration_year: 2031 }, id: '{{ data.number | alias_preserve_format: 0, 10 }}' } },
    { type: 'card', data: { number: card, expiration_month: 1, expiration_year: 2031 }, fingerprint_expression: guess(card[7]!) },
    { type: 'card', data: { number: card, expiration_month: 1, expiration_year: 2031, cvc: '123' }, search_indexes: ["{{ data.cvc | replace: '123', 'xxxxxxxxxx' }}"] },
    { type: 'card_number', data: card, mask: '{{ data }}' },
    { type: 'card_number', data: card, id: '{{ data | alias_preserve_format: 6, 4 }}' },
    // Invalid data too: the refusal comes first, whatever the value.
    { type: 'card_number', data: `${card.slice(0, 15)}x`, mask: '{{ data }}' },
  ];
  const seen: string[][] = [[], []];
  for (const [i, card] of [a, b].entries()) {
    for (const body of bodies(card)) {
      const r = await s.call('POST', '/tokenize', { key: KEYS.public, body });
      t.equal(r.status, 403, r.text);
      t.equal(r.body.code, 'expression_not_allowed');
      t.notMatch(r.text, card.slice(6, 12), 'no middle digits in the answer');
      seen[i]!.push(JSON.stringify(r.body));
    }
  }
  t.same(seen[0], seen[1], 'two cards equal on the budget: the same answers');
  const count = await s.call('POST', '/tokens/search', { key: KEYS.private, body: { query: 'type:card', size: 100 } });
  t.equal(count.body.data.length, 0, 'nothing was created');
  // Named options still work for a public key: the default fingerprint, alias_card, metadata.
  const ok = await s.call('POST', '/tokenize', {
    key: KEYS.public,
    body: { type: 'card', data: { number: a, expiration_month: 1, expiration_year: 2031 }, id: '{{ data.number | alias_card }}', fingerprint_expression: '{{ data.number }}', metadata: { order: '7' } },
  });
  t.equal(ok.status, 200, ok.text);
  t.equal(ok.body.id.slice(0, 6) + ok.body.id.slice(-4), a.slice(0, 6) + a.slice(-4));
  // PATCH of an expression by a public key is refused likewise.
  const patched = await s.call('PATCH', `/tokens/${ok.body.id}`, {
    key: KEYS.public, body: { mask: '{{ data }}' }, headers: { 'content-type': 'application/merge-patch+json' },
  });
  t.not(patched.status, 200, 'a public key does not set a mask');
});

async function reactorTokenize(s: TestService, tokenId: string, extra: Record<string, unknown>) {
  return s.call('POST', '/reactors/echo-tokenize/react', {
    key: USE_ONLY,
    body: { args: { type: 'card_number', data: `{{ ${tokenId} | json: '$.number' }}`, ...extra } },
  });
}

t.test("a use-only key learns nothing through a reactor's tokenize of detokenized args", async (t) => {
  const s = await startTestService(t, { config: config() });
  const [a, b] = twinCards();
  const ids: string[] = [];
  for (const card of [a, b]) {
    const r = await s.call('POST', '/tokens', { key: KEYS.private, body: { type: 'card', data: { number: card, expiration_month: 1, expiration_year: 2031 } } });
    t.equal(r.status, 201, r.text);
    ids.push(r.body.id as string);
  }
  const denied = await s.call('POST', '/detokenize', { key: USE_ONLY, body: { pan: `{{ ${ids[0]} | json: '$.number' }}` } });
  t.equal(denied.status, 403, 'the key may not read the card');
  // `\\{{` is a literal `{{` to the detokenizer: the reactor receives the template itself.
  const probes = [
    { id: '\\{{ data | alias_preserve_length: 10, 0 }}' },
    { id: '\\{{ data | alias_preserve_format: 0, 4 }}' },
    { search_indexes: ["\\{{ data | slice: 7, 1 | replace: '5', 'xxxxxxxxxx' }}"] },
    { fingerprint_expression: '\\{{ data | slice: 6, 6 }}' },
    { mask: '\\{{ data }}' },
  ];
  const answers: string[][] = [[], []];
  for (const [i, id] of ids.entries()) {
    for (const probe of probes) {
      const r = await reactorTokenize(s, id, probe);
      t.equal(r.status, 403, r.text);
      t.equal(r.body.code, 'expression_not_allowed');
      answers[i]!.push(JSON.stringify(r.body));
    }
  }
  t.same(answers[0], answers[1], 'the same answers for two cards equal on the budget');
  // Nothing computed from a value the key may only use is tokenized, named options included: a
  // piece of the card as another type shows that type's budget (its "last 4" are the card's
  // middle digits), and a check digit over a piece answers by digits the key may not see.
  const pieces = (id: string) => [
    { id: '\\{{ data | alias_card }}' },
    { type: 'us_bank_account_number', data: `{{ ${id} | json: '$.number' | slice: 4, 8 }}` },
    ...[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map((d) => ({ type: 'card_number', data: `${a.slice(0, 6)}{{ ${id} | json: '$.number' | slice: 6, 1 }}00000000${d}` })),
  ];
  const pieceAnswers: string[][] = [[], []];
  for (const [i, id] of ids.entries()) {
    for (const probe of pieces(id)) {
      const r = await reactorTokenize(s, id, probe);
      t.equal(r.status, 403, r.text);
      t.equal(r.body.code, 'expression_not_allowed');
      pieceAnswers[i]!.push(JSON.stringify(r.body));
    }
  }
  t.same(pieceAnswers[0], pieceAnswers[1], 'the same answers whatever the middle digits');
  const page = await s.call('GET', '/tokens?size=100', { key: KEYS.private });
  t.equal(page.body.data.length, 2, 'nothing was created but the two cards');
  // A key that may read the card with reveal computes on it as on its own: its templates run.
  const revealed = await s.call('POST', '/reactors/echo-tokenize/react', {
    key: REVEALER, body: { args: { type: 'card_number', data: `{{ ${ids[0]} | json: '$.number' }}`, id: '\\{{ data | alias_preserve_format: 6, 4 }}' } },
  });
  t.equal(revealed.status, 200, revealed.text);
  const kept = shared(revealed.body.tokens.id as string, a);
  t.ok(kept.first >= 6 && kept.last >= 4, 'its alias keeps the first 6 and last 4');
  // Args the caller sent in the clear keep the caller's templates.
  const clear = await s.call('POST', '/reactors/echo-tokenize/react', {
    key: KEYS.private, body: { args: { type: 'token', data: 'its own value', search_indexes: ['\\{{ data | upcase }}'] } },
  });
  t.equal(clear.status, 200, clear.text);
  t.match(clear.body.tokens, { search_indexes: ['{{ data | upcase }}'] }, 'the template was kept');
});
