/**
 * The token type registry (issue 26, src/vault/token-types.ts): a table test per type, generated
 * from the registry (a type added without examples here fails); the docs table is the generated
 * one; a fuzz of the validators; then every type over HTTP: POST /tokens and /tokenize, what a
 * reveal and a mask reader see, fingerprints (an SSN with and without dashes; per type), search by type,
 * detokenization, validation errors that name the path and never the value, all or nothing.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { CONFIG_TOKEN_TYPES } from '../../src/config/schema.js';
import type { FieldErrors } from '../../src/errors.js';
import { abaValid, maskDigits, TOKEN_TYPE_SPECS, tokenType, tokenTypesReadmeTable, tokenTypesTable } from '../../src/vault/token-types.js';
import { KEYS, startTestService } from '../helpers/service.js';
import { randomCard } from '../helpers/secrets.js';

/** A routing number with a valid ABA check digit, from 8 random digits. */
function routing(): string {
  for (;;) {
    const body = Array.from({ length: 8 }, () => Math.floor(Math.random() * 10)).join('');
    for (let d = 0; d <= 9; d++) if (abaValid(body + d)) return body + d;
  }
}
function digits(n: number): string {
  return Array.from({ length: n }, () => Math.floor(Math.random() * 10)).join('');
}
/** One digit changed: a routing number whose checksum fails. */
function badRouting(): string {
  const r = routing();
  return r.slice(0, 8) + String((Number(r[8]) + 1) % 10);
}

interface Example {
  valid: unknown[];
  /** Invalid values and the error paths (under `data`) they give. */
  invalid: Array<[unknown, string[]]>;
  /** A valid value, what a mask reader sees of it. */
  masked: Array<[unknown, unknown]>;
}
const card = randomCard('4');
const EXAMPLES: Record<string, Example> = {
  token: { valid: ['anything', ''], invalid: [[5, ['data']], [{}, ['data']]], masked: [] },
  card: {
    valid: [{ number: card }, { number: card, expiration_month: 1, expiration_year: 2030, cvc: '123' }],
    invalid: [[{ number: '4111111111111112' }, ['data.number']], ['4242', ['data']]],
    masked: [[{ number: card, expiration_month: 1, expiration_year: 2030 }, { number: `XXXXXXXXXXXX${card.slice(-4)}`, expiration_month: 1, expiration_year: 2030 }]],
  },
  card_number: {
    valid: [card, randomCard('5', 19), randomCard('3', 13)],
    invalid: [['4111111111111112', ['data']], ['4242 4242 4242 4242', ['data']], ['42424242424', ['data']], [4242424242424242, ['data']]],
    masked: [[card, `XXXXXXXXXXXX${card.slice(-4)}`]],
  },
  bank: {
    valid: [{ routing_number: routing(), account_number: digits(3) }, { routing_number: routing(), account_number: digits(17) }],
    invalid: [
      [{ routing_number: badRouting(), account_number: '12345678' }, ['data.routing_number']],
      [{ routing_number: routing(), account_number: '12' }, ['data.account_number']],
      [{ routing_number: routing() }, ['data.account_number']],
      [{ routing_number: routing(), account_number: '123456', extra: 'x' }, ['data.extra']],
      ['123', ['data']],
    ],
    masked: [[{ routing_number: '011000015', account_number: '000123456789' }, { routing_number: '011000015', account_number: 'XXXXXXXX6789' }]],
  },
  us_bank_routing_number: {
    valid: [routing(), '011000015'],
    invalid: [[badRouting(), ['data']], ['01100001', ['data']], ['0110000155', ['data']]],
    masked: [['011000015', '011000015']],
  },
  us_bank_account_number: {
    valid: [digits(3), digits(17)],
    invalid: [['12', ['data']], [digits(18), ['data']], ['12-345', ['data']]],
    masked: [['000123456789', 'XXXXXXXX6789']],
  },
  social_security_number: {
    valid: ['078-05-1120', '078051120'],
    invalid: [['078-051-120', ['data']], ['07805112', ['data']], ['078 05 1120', ['data']]],
    masked: [['078-05-1120', 'XXX-XX-1120'], ['078051120', 'XXXXX1120']],
  },
  employer_id_number: {
    valid: ['12-3456789', '123456789'],
    invalid: [['123-456789', ['data']], ['12345678', ['data']]],
    masked: [['12-3456789', 'XX-XXX6789'], ['123456789', 'XXXXX6789']],
  },
};

t.test('the registry, type by type: valid and invalid values, masks (generated from the registry)', async (t) => {
  for (const spec of TOKEN_TYPE_SPECS) {
    const ex = EXAMPLES[spec.name];
    t.ok(ex, `${spec.name} has examples in this test`);
    if (!ex) continue;
    for (const v of ex.valid) {
      const errors: FieldErrors = {};
      t.not(spec.parse(v, 'data', errors), null, `${spec.name}: a valid value is accepted`);
      t.same(errors, {});
    }
    for (const [v, paths] of ex.invalid) {
      const errors: FieldErrors = {};
      t.equal(spec.parse(v, 'data', errors), null, `${spec.name}: an invalid value is refused`);
      t.same(Object.keys(errors).sort(), paths, `${spec.name}: errors at ${paths.join(', ')}`);
      const text = JSON.stringify(errors);
      if (typeof v === 'string' && v.length > 3) t.notOk(text.includes(v), `${spec.name}: the message does not echo the value`);
    }
    for (const [v, seen] of ex.masked) t.same(spec.mask(v), seen, `${spec.name}: what a mask reader sees`);
  }
  t.equal(tokenType('nope'), undefined);
  t.equal(maskDigits('536-22-8711'), 'XXX-XX-8711');
  t.equal(maskDigits('12'), '12', 'fewer digits than kept: as it is');
});

t.test('the config schema lists the registry\'s types', async (t) => {
  t.same([...CONFIG_TOKEN_TYPES], TOKEN_TYPE_SPECS.map((s) => s.name), 'src/config/schema.ts CONFIG_TOKEN_TYPES is the registry\'s list');
});

t.test('docs/api.md and README.md hold the generated tables', async (t) => {
  for (const [file, table, fn] of [['docs/api.md', tokenTypesTable(), 'tokenTypesTable'], ['README.md', tokenTypesReadmeTable(), 'tokenTypesReadmeTable']] as const) {
    const doc = readFileSync(file, 'utf8');
    const a = doc.indexOf('-->\n', doc.indexOf('<!-- token-types: generated')) + 4;
    const b = doc.indexOf('<!-- token-types: end -->');
    t.ok(a > 4 && b > a, `${file}: the markers are there`);
    t.equal(doc.slice(a, b).trimEnd(), table, `${file}: the table is the registry's (regenerate it from ${fn}())`);
    for (const spec of TOKEN_TYPE_SPECS) t.ok(doc.includes(`| \`${spec.name}\` |`), `${file} names ${spec.name}`);
  }
});

t.test('fuzz: the validators never throw, whatever the data', async (t) => {
  const samples: unknown[] = [null, undefined, 0, -1, 1e308, NaN, true, [], {}, '', ' ', '\u0000', 'x'.repeat(10_000), '9'.repeat(19),
    { number: null }, { routing_number: 5, account_number: [] }, { __proto__: { number: '4242424242424242' } }, Object.create(null)];
  for (let i = 0; i < 500; i++) {
    const len = Math.floor(Math.random() * 25);
    samples.push(Array.from({ length: len }, () => '0123456789-- aZ'[Math.floor(Math.random() * 15)]).join(''));
  }
  let thrown = 0;
  for (const spec of TOKEN_TYPE_SPECS) {
    for (const v of samples) {
      try {
        const errors: FieldErrors = {};
        const out = spec.parse(v, 'data', errors);
        if (out !== null) spec.mask(out);
        else if (Object.keys(errors).length === 0) throw new Error(`${spec.name}: refused without a message`);
      } catch (err) {
        thrown++;
        t.fail(`${spec.name} threw on a sample: ${(err as Error).message}`);
      }
    }
  }
  t.equal(thrown, 0, `${samples.length * TOKEN_TYPE_SPECS.length} validations, none threw`);
});

t.test('every type over HTTP', async (t) => {
  const s = await startTestService(t);
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

  t.notOk(s.logs().includes(ssn) || s.logs().includes(bank.account_number) || s.logs().includes(card), 'no value in the logs');
});
