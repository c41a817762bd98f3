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
import { disclosureBudgetTable, maskDigits, TOKEN_TYPE_SPECS, tokenType, tokenTypesReadmeTable, tokenTypesTable } from '../../src/vault/token-types.js';
import { startTestService } from '../helpers/service.js';
import { badRouting, digits, routing, typesOverHttp } from './token-types-suite.js';
import { randomCard } from '../helpers/secrets.js';

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

t.test('SECURITY.md and docs/api.md hold the disclosure budget table', async (t) => {
  for (const file of ['SECURITY.md', 'docs/api.md']) {
    const doc = readFileSync(file, 'utf8');
    const a = doc.indexOf('-->\n', doc.indexOf('<!-- disclosure-budget: generated')) + 4;
    const b = doc.indexOf('<!-- disclosure-budget: end -->');
    t.ok(a > 4 && b > a, `${file}: the markers are there`);
    t.equal(doc.slice(a, b).trimEnd(), disclosureBudgetTable(), `${file}: the table is the registry's (regenerate it from disclosureBudgetTable())`);
  }
});

t.test('the budget view keeps only what the budget allows', async (t) => {
  t.equal(tokenType('card_number')!.view('4242424242424242'), '424242XXXXXX4242');
  t.same(tokenType('card')!.view({ number: '4242424242424242', expiration_month: 1, expiration_year: 2031, cvc: '123' }),
    { number: '424242XXXXXX4242', expiration_month: 1, expiration_year: 2031 }, 'no cvc');
  t.equal(tokenType('social_security_number')!.view('123-45-6789'), 'XXX-XX-6789');
  t.equal(tokenType('employer_id_number')!.view('12-3456789'), 'XX-XXX6789');
  t.same(tokenType('bank')!.view({ routing_number: '011000015', account_number: '000123456789' }), { routing_number: '011000015', account_number: 'XXXXXXXX6789' });
  t.equal(tokenType('us_bank_routing_number')!.view('011000015'), '011000015', 'routing numbers are public');
  t.equal(tokenType('token')!.view('anything at all'), 'anything at all', "a token's creator chooses with its mask");
  for (const spec of TOKEN_TYPE_SPECS) t.ok(spec.budgetDoc.length > 0, `${spec.name} states its budget`);
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

t.test('every type over HTTP', async (t) => typesOverHttp(t, await startTestService(t)));
