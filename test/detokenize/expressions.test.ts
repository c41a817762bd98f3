/** detokenize/expressions.ts on its own: every syntax form, escapes, nesting, hostile input, errors. */
import t from 'tap';
import {
  findTokenIds, findTokenIdsInText, MAX_EXPRESSION_CHARS, MAX_EXPRESSIONS, substituteJson, substituteText, type DetokenizedToken,
} from '../../src/detokenize/expressions.js';
import { ServiceError } from '../../src/errors.js';
import { randomCard } from '../helpers/secrets.js';

const number = randomCard();
const card: DetokenizedToken = {
  id: 'card-1', type: 'card', tenant_id: 't', containers: ['/pci/'],
  data: { number, expiration_month: 12, expiration_year: 2031 },
};
const text: DetokenizedToken = { id: 'tok_2', type: 'token', data: 'Hello World' };
const obj: DetokenizedToken = { id: 'obj:3', type: 'token', data: { nested: { list: ['a', 'b'] }, n: 7 } };
const tokens = new Map([card, text, obj].map((x) => [x.id, x]));

function code(fn: () => unknown): string | null {
  try {
    fn();
  } catch (err) {
    return err instanceof ServiceError ? err.code : `not a ServiceError: ${String(err)}`;
  }
  return null;
}

t.test('the two forms, whole-string values and text insertion', async (t) => {
  t.same(substituteJson('{{ card-1 | json: \'$.number\' }}', tokens), number);
  t.same(substituteJson("{{ token: card-1 | json: '$.data.number' }}", tokens), number);
  t.same(substituteJson('{{token:card-1|json:"$.data.expiration_month"}}', tokens), 12, 'a number replaces the whole string');
  t.same(substituteJson('{{ card-1 }}', tokens), card.data, 'an object replaces the whole string');
  t.same(substituteJson('{{ token: card-1 }}', tokens), card, 'the whole token');
  t.same(substituteJson('exp {{ card-1 | json: "$.expiration_month" }}/{{ card-1 | json: "$.expiration_year" }}', tokens), 'exp 12/2031');
  t.same(substituteJson('x{{ obj:3 }}', tokens), `x${JSON.stringify(obj.data)}`, 'an object inside text is JSON');
  t.same(substituteJson("{{ obj:3 | json: '$.nested.list[1]' }}", tokens), 'b');
  t.same(substituteJson("{{ obj:3 | json: '$[\"nested\"].list[0]' }}", tokens), 'a');
  t.same(substituteJson("{{ obj:3 | json: '$.missing.path' }}", tokens), null, 'a missing path is null');
  t.same(substituteJson("a{{ obj:3 | json: '$.missing' }}b", tokens), 'ab');
  t.same(substituteJson("{{ obj:3 | json: '$' }}", tokens), obj.data);
  t.same(substituteText('card={{ card-1 | json: "$.number" }}&x=1', tokens), `card=${number}&x=1`);
  t.same(substituteText('{{ obj:3 | json: "$.n" }}', tokens), '7', 'text callers always get text');
});

t.test('Liquid filters of masks, chained with json', async (t) => {
  t.same(substituteJson("{{ card-1 | json: '$.number' | last4 }}", tokens), number.slice(-4));
  t.same(substituteJson("{{ card-1 | json: '$.number' | reveal_last: 4, '*' }}", tokens), '*'.repeat(number.length - 4) + number.slice(-4));
  t.same(substituteJson('{{ tok_2 | upcase | remove: "L" }}', tokens), 'HEO WORD');
  t.same(substituteJson("{{ tok_2 | slice: 0, 5 }}", tokens), 'Hello');
  t.same(substituteJson("{{ tok_2 | replace: '}}', 'x' | downcase }}", tokens), 'hello world', '}} inside a quoted argument');
});

t.test('what is not an expression is left as it is; escapes; nesting', async (t) => {
  for (const s of ['plain', '{{ }}', '{{ a b }}', '{{ "card-1" }}', '{ card-1 }', '{{ card-1', 'a }} b', '{% raw %}', '{{ token: }}']) {
    t.equal(substituteJson(s, tokens), s, s);
    t.same(findTokenIds(s), [], s);
  }
  t.equal(substituteJson('\\{{ card-1 }}', tokens), '{{ card-1 }}', 'an escaped {{ is literal');
  t.same(findTokenIds('\\{{ card-1 }}'), []);
  t.equal(substituteJson('\\{{ card-1 }} {{ tok_2 }}', tokens), '{{ card-1 }} Hello World');
  t.equal(substituteJson('{{{ tok_2 }}}', tokens), '{Hello World}');
  t.equal(substituteJson('{{ {{ tok_2 }} }}', tokens), '{{ Hello World }}', 'nested braces: the inner expression only');
  t.same(findTokenIds({ '{{ card-1 }}': 'x' }), [], 'object keys are not scanned');
  const split = { a: '{{ token:', b: ' card-1 }}', c: ['{{', 'tok_2', '}}'] };
  t.same(findTokenIds(split), [], 'an expression split across JSON strings is no expression');
  t.equal(substituteJson(split, tokens), split);
  t.same(findTokenIds('{{ token }}'), ['token'], '"token" alone is an id');
  t.same(findTokenIds('{{ token:obj:3 }}{{tokenx:y}}'), ['obj:3', 'tokenx:y'], 'ids may hold ":"');
  t.same(substituteJson({ '{{ card-1 }}': 'x' }, tokens), { '{{ card-1 }}': 'x' });
});

t.test('findTokenIds: distinct, in order, everywhere in the JSON value', async (t) => {
  const body = { a: ['{{ tok_2 }}', { b: 'x {{ token: card-1 }} {{ tok_2 }}' }], c: 1, d: null, e: '{{ obj:3 | json: "$.n" }}' };
  t.same(findTokenIds(body), ['tok_2', 'card-1', 'obj:3']);
  t.same(findTokenIdsInText('{{ a1 }}{{ b2 }}{{ a1 }}'), ['a1', 'b2']);
  const out = substituteJson(body, tokens) as Record<string, unknown>;
  t.same(out, { a: ['Hello World', { b: `x ${JSON.stringify(card)} Hello World` }], c: 1, d: null, e: 7 });
  t.same(body.a[0], '{{ tok_2 }}', 'the input is not changed');
  const unchanged = { x: ['y'] };
  t.equal(substituteJson(unchanged, tokens), unchanged, 'nothing to replace: the same value');
  const proto = JSON.parse('{"__proto__": "{{ tok_2 }}", "k": "v"}') as Record<string, unknown>;
  const p2 = substituteJson(proto, tokens) as Record<string, unknown>;
  t.ok(Object.hasOwn(p2, '__proto__'), 'a __proto__ key stays an own key');
  t.equal(Object.getPrototypeOf(p2), Object.prototype);
  t.equal(Object.getOwnPropertyDescriptor(p2, '__proto__')!.value, 'Hello World');
});

t.test('errors have stable codes and never quote values', async (t) => {
  t.equal(code(() => findTokenIds('{{ card-1 | nope }}')), 'unknown_filter');
  t.equal(code(() => findTokenIds('{{ card-1 | }}')), 'invalid_expression');
  t.equal(code(() => findTokenIds('{{ card-1 | json }}')), 'invalid_expression', 'json needs a path');
  t.equal(code(() => findTokenIds("{{ card-1 | json: 'number' }}")), 'invalid_expression', 'a path starts with $');
  t.equal(code(() => findTokenIds("{{ card-1 | json: '$..x' }}")), 'invalid_expression');
  t.equal(code(() => findTokenIds("{{ card-1 | json: '$[x]' }}")), 'invalid_expression');
  t.equal(code(() => findTokenIds("{{ card-1 | last4 extra }}")), 'invalid_expression');
  t.equal(code(() => findTokenIds("{{ card-1 | slice: 'unterminated }}")), 'invalid_expression');
  t.equal(code(() => findTokenIds(`{{ ${'a'.repeat(401)} }}`)), 'invalid_expression');
  t.equal(code(() => findTokenIds("{{ card-1 | append: '{% raw %}' }}")), 'invalid_expression', 'Liquid refuses it at parse time');
  t.equal(code(() => findTokenIds(`{{ a | slice: ${'1, '.repeat(MAX_EXPRESSION_CHARS)}1 }}`)), 'invalid_expression', 'too long');
  t.equal(code(() => substituteJson('{{ unknown-id }}', tokens)), 'unknown_token');
  t.equal(code(() => substituteText('{{ card-1 | nope }}', tokens)), 'unknown_filter');
  try {
    substituteJson(`{{ card-1 | nope${number} }}`, tokens);
    t.fail('should throw');
  } catch (err) {
    t.notMatch((err as Error).message, number.slice(0, 8), 'no value in the detail');
  }
});

t.test('hostile input: 100k expressions are counted and refused in linear time', async (t) => {
  const many = '{{ tok_2 }}'.repeat(100_000);
  t.equal(code(() => findTokenIds(many)), 'too_many_expressions');
  t.equal(code(() => findTokenIds(Array.from({ length: 100_000 }, () => '{{ tok_2 }}'))), 'too_many_expressions', 'across strings');
  t.equal(code(() => substituteJson({ a: many }, tokens)), 'too_many_expressions');
  const limit = '{{ tok_2 }}'.repeat(MAX_EXPRESSIONS);
  t.equal((substituteJson(limit, tokens) as string).length, 'Hello World'.length * MAX_EXPRESSIONS, 'exactly the limit is fine');
  // Non-expressions cost no budget and no quadratic rescans: 1 MB of each pathological shape.
  const size = 1 << 20;
  for (const [name, s] of [
    ['braces', '{'.repeat(size)],
    ['open-and-id', '{{ abc '.repeat(size / 7)],
    ['open-and-spaces', `{{${' '.repeat(size)}`],
    ['escapes', '\\{{'.repeat(size / 3)],
    ['long id run', `{{ ${'a'.repeat(size)}`],
  ] as const) {
    t.same(findTokenIds(s), [], name);
    t.equal(typeof substituteJson(s, tokens), 'string', name);
  }
  // Work grows linearly: 4x the input costs nowhere near 16x (compared by counted steps, not time).
  let calls = 0;
  const orig = String.prototype.indexOf;
  String.prototype.indexOf = function (this: string, ...a: [string, number?]) {
    calls++;
    return orig.apply(this, a);
  };
  try {
    findTokenIds('{{{ x {{ '.repeat(10_000));
    const small = calls;
    calls = 0;
    findTokenIds('{{{ x {{ '.repeat(40_000));
    t.ok(calls <= small * 4 + 10, `indexOf calls grow linearly (${small} → ${calls})`);
  } finally {
    String.prototype.indexOf = orig;
  }
});
