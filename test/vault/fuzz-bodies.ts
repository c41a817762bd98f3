/**
 * Generated bodies for POST /tokenize and POST /tokens (fast-check): well-formed and hostile. A
 * body is generated as JSON text (through the small tree below, so a member named `__proto__`,
 * `constructor` or `toString` is written exactly as a client would send it), then parsed by the
 * service the way it parses a request.
 *
 * Plaintext a leak could expose carries a marker: every token value contains NONCE, which the
 * run replaces by a fresh random string per body, and card numbers are random Luhn-valid digit
 * runs of 13 to 19 digits, so "the answer does not contain it" can only fail on a real leak.
 */
import fc from 'fast-check';
import { luhnCheckDigit } from '../helpers/secrets.js';

/** Replaced in the JSON text by a fresh nonce per body (ASCII, never escaped). */
export const NONCE = '@@N@@';

/** A JSON object written member by member, in order, duplicates and hostile names included. */
export class Obj {
  constructor(readonly entries: Array<[string, Json]>) {}
}
export class Raw {
  /** Text written as it is (a number JSON.stringify would not produce, e.g. 1e400). */
  constructor(readonly text: string) {}
}
export type Json = string | number | boolean | null | Json[] | Obj | Raw;

export function serialize(v: Json): string {
  if (v instanceof Obj) return `{${v.entries.map(([k, x]) => `${JSON.stringify(k)}:${serialize(x)}`).join(',')}}`;
  if (v instanceof Raw) return v.text;
  if (Array.isArray(v)) return `[${v.map(serialize).join(',')}]`;
  return JSON.stringify(v) ?? 'null';
}

/** Names a handler might trip on: Object.prototype members, our own field names, odd text. */
const HOSTILE_KEYS = ['__proto__', 'constructor', 'toString', 'valueOf', 'hasOwnProperty', 'prototype', '__defineGetter__', 'isPrototypeOf'];
const FIELD_NAMES = ['type', 'data', 'id', 'containers', 'metadata', 'search_indexes', 'fingerprint_expression', 'mask', 'deduplicate_token', 'expires_at'];

/**
 * Any short text: ASCII, unicode picked from a list (astral, combining, bidi, lone surrogate,
 * controls, quotes) and a little generated unicode. Mostly picked: generating graphemes is the
 * slow part of fast-check, and the volume of bodies matters more here.
 */
const ODD = ['', ' ', '\u0000', '"', '\\', '{{', '}}', '{% raw %}', '\u202e', '\ud800', '\udfff', '𝄞', 'e\u0301', 'ß', 'İ', 'ﬀ', '٣', '\u2028', '\r\n', '0', '-1', 'null', 'true', '__proto__', '%00', '🏳️‍🌈'];
const oddText = fc.oneof(
  { weight: 2, arbitrary: fc.string({ maxLength: 8 }) },
  { weight: 6, arbitrary: fc.constantFrom(...ODD) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 4 }) },
);

const key = fc.oneof(
  { weight: 6, arbitrary: fc.stringMatching(/^[a-z_]{1,10}$/) },
  { weight: 2, arbitrary: fc.constantFrom(...HOSTILE_KEYS) },
  { weight: 1, arbitrary: fc.constantFrom(...FIELD_NAMES) },
  { weight: 2, arbitrary: oddText },
);

/** A token value: odd text around the nonce (so a leak of any of it is visible). */
export const plaintext = fc.tuple(oddText, oddText).map(([a, b]) => `${a}${NONCE}${b}`);

const digits = (min: number, max: number) => fc.array(fc.integer({ min: 0, max: 9 }), { minLength: min, maxLength: max }).map((d) => d.join(''));


/** A Luhn-valid number of 13 to 19 digits (random: unique in practice). */
export const cardNumber = digits(12, 18).map((b) => b + luhnCheckDigit(b));

const oddNumber = fc.oneof(
  cardNumber.map((n) => n.slice(0, -1) + String((Number(n.at(-1)) + 1) % 10)), // Luhn-invalid
  digits(0, 12),
  digits(20, 30),
  cardNumber.map((n) => n.replace(/(\d{4})/g, '$1 ').trim()),
  cardNumber.map((n) => n.replace(/\d/g, (d) => String.fromCharCode(0x0660 + Number(d)))), // Arabic-Indic digits
  cardNumber.map((n) => Number(n)),
  fc.constantFrom<Json>(null, true, '', ' ', [], new Obj([])),
);

const month = fc.oneof({ weight: 12, arbitrary: fc.integer({ min: 1, max: 12 }) }, { weight: 1, arbitrary: fc.constantFrom<Json>(0, 13, 1.5, '12', null, -1, new Raw('1e400'), 1e21) });
const year = fc.oneof({ weight: 12, arbitrary: fc.integer({ min: 1000, max: 9999 }) }, { weight: 1, arbitrary: fc.constantFrom<Json>(99, 10_000, '2030', 2030.5, null) });
const cvc = fc.oneof({ weight: 12, arbitrary: digits(3, 4) }, { weight: 1, arbitrary: fc.oneof(digits(0, 2), digits(5, 6), fc.integer().map((n) => n as Json), fc.constantFrom<Json>('12a', '١٢٣', null)) });

const cardData: fc.Arbitrary<Json> = fc
  .record(
    {
      number: fc.oneof({ weight: 8, arbitrary: cardNumber as fc.Arbitrary<Json> }, { weight: 1, arbitrary: oddNumber }),
      expiration_month: month,
      expiration_year: year,
      cvc,
      extra: fc.tuple(key, fc.constantFrom<Json>(1, 'x', null)),
    },
    { requiredKeys: ['number'] },
  )
  .map((r) => {
    const entries: Array<[string, Json]> = [];
    if (r.number !== undefined) entries.push(['number', r.number]);
    if (r.expiration_month !== undefined) entries.push(['expiration_month', r.expiration_month]);
    if (r.expiration_year !== undefined) entries.push(['expiration_year', r.expiration_year]);
    if (r.cvc !== undefined) entries.push(['cvc', r.cvc]);
    if (r.extra !== undefined) entries.push(r.extra);
    return new Obj(entries);
  });

const expression = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('{{ data }}', '{{ data.number }}', '{{ data.number | last4 }}', '{{ data.number | slice: 0, 6 }}', '{{ data | upcase }}', '{{ data.expiration_year }}-{{ data.number | last4 }}') },
  { weight: 2, arbitrary: fc.constantFrom('{{', '{{ data | nope }}', '{% for x in data %}{{ x }}{% endfor %}', '{{ "constant" }}', '', 'plain text', '{{ data | replace: "a", "aaaaaaaaaa" | replace: "a", "aaaaaaaaaa" }}', '{{ data.constructor }}', '{{ data.__proto__ }}', '{{ data["toString"] }}') },
  { weight: 1, arbitrary: fc.constantFrom<Json>(1, null, [], new Obj([])) },
  { weight: 1, arbitrary: oddText },
);

const metadata = fc.oneof(
  { weight: 5, arbitrary: fc.array(fc.tuple(key.filter((k) => k !== 'cvc'), fc.oneof(fc.stringMatching(/^[a-z ]{0,12}$/) as fc.Arbitrary<Json>, fc.constantFrom<Json>(1, null, true, 'x'.repeat(1001)))), { maxLength: 6 }).map((e) => new Obj(e)) },
  { weight: 1, arbitrary: fc.constantFrom<Json>(null, 'meta', [], 1) },
);

const container = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('/pci/high/', '/pci/low/', '/general/high/', '/general/', '/a/b/c/').map((c) => [c] as Json) },
  { weight: 1, arbitrary: fc.constantFrom<Json>([], ['/'], ['/PCI/'], ['no-slash'], ['/a//b/'], ['/pci/high/', '/general/'], '/pci/high/', [1], ['/ü/']) },
);

const idValue = fc.oneof(
  { weight: 4, arbitrary: fc.stringMatching(/^[A-Za-z0-9._~:@+=-]{3,24}$/) as fc.Arbitrary<Json> },
  // A small set, so ids collide across bodies and within one (token_conflict, nothing written).
  { weight: 2, arbitrary: fc.constantFrom<Json>('fuzz-id-1', 'fuzz-id-2', 'fuzz-id-3') },
  { weight: 1, arbitrary: fc.constantFrom<Json>('ab', 'x'.repeat(401), 'has space', 'ü-id', 7, null) },
  // Alias expressions (issue 26), allowed and refused.
  { weight: 1, arbitrary: fc.constantFrom<Json>('{{ data | alias_card }}', '{{ data.number | alias_card }}', '{{ data | alias_preserve_format }}', '{{ data | alias_preserve_format: 0, 4 }}', '{{ data | alias_preserve_length: 2, 2 }}', '{{ data }}', '{{ data | alias_card: 9, 9 }}', '{{ data | slice: 0, 4 }}') },
);

const expiresAt = fc.constantFrom<Json>('2099-01-01T00:00:00Z', '2099-12-31T23:59:59.999+02:00', '2000-01-01T00:00:00Z', 'tomorrow', '2099-13-40T00:00:00Z', 0, null);

/** Data for the typed tokens: digit strings of every length, SSN and EIN shapes, bank objects, junk. */
const typedData: fc.Arbitrary<Json> = fc.oneof(
  { weight: 3, arbitrary: fc.stringMatching(/^[0-9]{0,20}$/) as fc.Arbitrary<Json> },
  { weight: 2, arbitrary: fc.stringMatching(/^[0-9]{2,3}-[0-9]{2,7}(-[0-9]{4})?$/) as fc.Arbitrary<Json> },
  { weight: 2, arbitrary: fc.tuple(fc.stringMatching(/^[0-9]{8,10}$/), fc.stringMatching(/^[0-9]{1,18}$/)).map(([r, a]) => new Obj([['routing_number', r], ['account_number', a]]) as Json) },
  { weight: 1, arbitrary: fc.constantFrom<Json>(null, 1, [], new Obj([]), new Obj([['routing_number', 1]]), '011000015', '078-05-1120', '12-3456789') },
  { weight: 1, arbitrary: plaintext as fc.Arbitrary<Json> },
);

const typeAndData: fc.Arbitrary<Array<[string, Json]>> = fc.oneof(
  { weight: 6, arbitrary: fc.oneof({ weight: 12, arbitrary: plaintext as fc.Arbitrary<Json> }, { weight: 1, arbitrary: fc.constantFrom<Json>(1, null, true, [], new Obj([])) }).map((d): Array<[string, Json]> => [['type', 'token'], ['data', d]]) },
  { weight: 3, arbitrary: cardData.map((d): Array<[string, Json]> => [['type', 'card'], ['data', d]]) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom<Json>('Token', 'cards', '', 1, null, 'toString', '__proto__'), plaintext).map(([ty, d]): Array<[string, Json]> => [['type', ty], ['data', d]]) },
  // The typed tokens of issue 26, with data that fits some type or none.
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom<Json>('card_number', 'bank', 'us_bank_routing_number', 'us_bank_account_number', 'social_security_number', 'employer_id_number'), typedData).map(([ty, d]): Array<[string, Json]> => [['type', ty], ['data', d]]) },
);

/** Optional members: each present in about one definition in four, usually well-formed. */
const optional = fc.record(
  {
    id: idValue,
    containers: container,
    metadata,
    search_indexes: fc.oneof({ weight: 4, arbitrary: fc.array(expression, { maxLength: 3 }) as fc.Arbitrary<Json> }, { weight: 1, arbitrary: fc.constantFrom<Json>('{{ data }}', null, Array.from({ length: 21 }, () => '{{ data }}')) }),
    fingerprint_expression: expression,
    mask: expression,
    deduplicate_token: fc.oneof({ weight: 4, arbitrary: fc.boolean() as fc.Arbitrary<Json> }, { weight: 1, arbitrary: fc.constantFrom<Json>('true', 1, null) }),
    expires_at: expiresAt,
  },
  { requiredKeys: [] },
);

/** A `{type, data, …}` definition: its members in any order, sometimes with a hostile extra. */
export const definition: fc.Arbitrary<Json> = fc
  .tuple(typeAndData, fc.option(optional, { freq: 2 }), fc.option(fc.tuple(key, fc.constantFrom<Json>(1, 'x', null, new Obj([]))), { freq: 6 }), fc.nat())
  .map(([td, opt, extra, rot]) => {
    const entries: Array<[string, Json]> = [...td];
    for (const [k, v] of Object.entries(opt ?? {})) if (v !== undefined) entries.push([k, v as Json]);
    if (extra) entries.push(extra);
    // Members in a rotated order: `data` before `type`, extras first, and so on.
    const r = rot % entries.length;
    return new Obj([...entries.slice(r), ...entries.slice(0, r)]);
  });

/** Numbers, booleans and null: left as they are by the walk. */
const scalar = fc.oneof(
  fc.integer() as fc.Arbitrary<Json>,
  fc.double({ noNaN: true, noDefaultInfinity: true }) as fc.Arbitrary<Json>,
  fc.boolean() as fc.Arbitrary<Json>,
  fc.constant<Json>(null),
  fc.constantFrom<Json>(new Raw('1e400'), new Raw('-0'), new Raw('1E-400'), 9007199254740993),
);

/** A walked document: objects and arrays of values, definitions and plain strings, nested. */
const { doc } = fc.letrec<{ doc: Json; obj: Json; arr: Json }>((tie) => ({
  doc: fc.oneof(
    { maxDepth: 4, depthIdentifier: 'doc' },
    { weight: 3, arbitrary: plaintext as fc.Arbitrary<Json> },
    { weight: 2, arbitrary: scalar },
    { weight: 2, arbitrary: definition },
    { weight: 2, arbitrary: tie('obj') },
    { weight: 1, arbitrary: tie('arr') },
  ),
  obj: fc.array(fc.tuple(key, tie('doc')), { maxLength: 5 }).map((e) => new Obj(e)),
  arr: fc.array(tie('doc'), { maxLength: 5 }),
}));

/** `v` inside `levels` of arrays and objects (around the 64-level limit and past it). */
const deep = fc.tuple(fc.integer({ min: 20, max: 80 }), doc, fc.array(fc.boolean(), { minLength: 80, maxLength: 80 })).map(([levels, v, kinds]) => {
  let out: Json = v;
  for (let i = 0; i < levels; i++) out = kinds[i] ? [out] : new Obj([['d', out]]);
  return out;
});

/** Large arrays within the body limit: many values, or around the 100-token limit. */
const wide = fc.oneof(
  fc.array(plaintext, { minLength: 90, maxLength: 110 }) as fc.Arbitrary<Json>,
  fc.array(definition, { minLength: 95, maxLength: 105 }) as fc.Arbitrary<Json>,
  fc.tuple(fc.integer({ min: 1000, max: 5000 }), plaintext).map(([n, s]) => [...Array.from({ length: n }, (_, i) => i), s] as Json),
  fc.tuple(fc.integer({ min: 200, max: 1000 }), plaintext).map(([n, s]) => new Obj([...Array.from({ length: n }, (_, i): [string, Json] => [`k${i}`, null]), ['s', s]])),
);

/** A body for POST /tokenize: anything a client could send, mostly reasonable, often hostile. */
export const tokenizeBody: fc.Arbitrary<Json> = fc.oneof(
  { weight: 6, arbitrary: definition },
  { weight: 8, arbitrary: fc.array(fc.tuple(key, doc), { maxLength: 6 }).map((e) => new Obj(e)) as fc.Arbitrary<Json> },
  { weight: 3, arbitrary: fc.array(doc, { maxLength: 6 }) as fc.Arbitrary<Json> },
  { weight: 1, arbitrary: plaintext as fc.Arbitrary<Json> },
  { weight: 1, arbitrary: scalar },
  { weight: 1, arbitrary: deep },
  { weight: 1, arbitrary: wide },
);

/** A body for POST /tokens: mostly one definition, sometimes something else. */
export const createBody: fc.Arbitrary<Json> = fc.oneof(
  { weight: 8, arbitrary: definition },
  { weight: 1, arbitrary: tokenizeBody },
);

/** Raw texts that are not one JSON value, or are JSON of another shape. */
export const malformed = fc.constantFrom('', '{', '{"type":"token","data":"x"', '[1,]', "{'a':1}", 'null', '"just a string"', '\ufeff{}', '{"a":1}{"b":2}', '[' .repeat(200) + ']'.repeat(200), '{"a":"\\ud800"}');
