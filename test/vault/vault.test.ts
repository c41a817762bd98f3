/** Pure vault modules: the walk, card validation and masks, expressions, the query language, merge patch. */
import t from 'tap';
import { ServiceError } from '../../src/errors.js';
import { luhnValid } from '../../src/luhn.js';
import { maskCardNumber, validateCard } from '../../src/vault/card.js';
import { addFieldError, parseDefinition } from '../../src/vault/definition.js';
import { checkDataExpression, compileExpression, ExpressionError, MAX_EXPRESSION_OUTPUT_BYTES, renderExpression } from '../../src/vault/expressions.js';
import { applyPatch, mergePatch } from '../../src/vault/patch.js';
import { parseQuery } from '../../src/vault/search.js';
import { assemble, planTokenize } from '../../src/vault/walk.js';

const opts = { maxDepth: 64, maxTokens: 100, now: Date.now() };

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return null;
}

t.test('walk: plan order, paths and assembly', async (t) => {
  const body = { a: 'x', b: [1, 'y', { type: 'token', data: 'z' }], c: { d: null, e: 'w' } };
  const plan = planTokenize(body, opts);
  t.same(plan.definitions.map((d) => d.path), ['a', 'b[1]', 'b[2]', 'c.e']);
  t.same(plan.definitions.map((d) => d.plain), [true, true, false, true]);
  t.equal(plan.single, false);
  t.same(assemble(body, ['1', '2', '3', '4']), { a: '1', b: [1, '2', '3'], c: { d: null, e: '4' } });
  t.equal(planTokenize({ type: 'token', data: 'v' }, opts).single, true);
  t.same(assemble('root', ['id']), 'id');
  t.same(assemble(42, []), 42);
});

t.test('walk: a member named __proto__ stays a member', async (t) => {
  const body = JSON.parse('{"__proto__": "secret", "ok": "v"}');
  const out = assemble(body, ['id1', 'id2']) as Record<string, unknown>;
  t.equal(Object.getPrototypeOf(out), Object.prototype);
  t.same(Object.keys(out), ['__proto__', 'ok']);
  t.equal(Object.getOwnPropertyDescriptor(out, '__proto__')?.value, 'id1');
});

t.test('walk: limits', async (t) => {
  t.throws(() => planTokenize(Array.from({ length: 101 }, () => 'x'), opts), { code: 'too_many_tokens' });
  t.doesNotThrow(() => planTokenize(Array.from({ length: 100 }, () => 'x'), opts));
  let deep: unknown = 'x';
  for (let i = 0; i < 100; i++) deep = [deep];
  t.throws(() => planTokenize(deep, opts), { code: 'nesting_too_deep' });
  const err = (() => {
    try {
      planTokenize({ p: { type: 'card', data: { number: '4242424242424241' } }, q: { type: 'nope', data: 'x' } }, opts);
    } catch (e) {
      return e as ServiceError;
    }
  })();
  t.equal(err?.code, 'validation_failed');
  t.same(Object.keys(err?.errors ?? {}).sort(), ['p.data.number', 'q.type']);
});

t.test('card validation and masks', async (t) => {
  t.ok(luhnValid('4242424242424242'));
  t.notOk(luhnValid('4242424242424241'));
  t.equal(maskCardNumber('4242424242424242'), 'XXXXXXXXXXXX4242');
  t.equal(maskCardNumber('378282246310005'), 'XXXXXXXXXXX0005', 'length unchanged');
  const errors = {};
  t.same(validateCard({ number: '4242424242424242', expiration_month: 1, expiration_year: 2020, cvc: '1234' }, 'c', errors), { number: '4242424242424242', expiration_month: 1, expiration_year: 2020, cvc: '1234' }, 'an expired card is accepted');
  const bad: Record<string, string[]> = {};
  validateCard({ number: '42424242', expiration_month: 0, expiration_year: 99, cvc: 123, extra: 1 }, 'c', bad);
  t.same(Object.keys(bad).sort(), ['c.cvc', 'c.expiration_month', 'c.expiration_year', 'c.extra', 'c.number']);
  t.notOk(JSON.stringify(bad).includes('42424242'), 'messages never quote the value');
  const digits: Record<string, string[]> = {};
  validateCard({ number: '4242 4242 4242 4242' }, 'c', digits);
  t.ok(digits['c.number']);
});

t.test('expressions', async (t) => {
  t.equal(renderExpression('{{ data.number | reveal_last: 4 }}', { number: '4242424242424242' }), 'XXXXXXXXXXXX4242');
  t.equal(renderExpression('{{ data | last4 }}', '123456789'), '6789');
  t.equal(renderExpression('{{ data | slice: 0, 3 | upcase }}', 'abcdef'), 'ABC');
  t.equal(renderExpression('{{ data | remove: "-" }}', '12-34'), '1234');
  t.throws(() => compileExpression('{% for i in (1..1000000) %}x{% endfor %}'), /only \{\{ \}\}/);
  t.throws(() => compileExpression('{{ data | no_such_filter }}'), /invalid expression/);
  t.throws(() => compileExpression('x'.repeat(1001)), { name: 'Error', message: 'expression is longer than 1000 characters' });
  t.ok(thrown(() => compileExpression('x'.repeat(1001))) instanceof ExpressionError, 'an ExpressionError (a 400 for the field, never a 500)');
});

t.test('expressions: a token expression must depend on data, and yields at most 4 KB', async (t) => {
  for (const ok of ['{{ data }}', '{{ data.number | last4 }}', '{{ "a" | append: data.number }}', '{{ data["number"] }}']) {
    t.doesNotThrow(() => checkDataExpression(ok), ok);
  }
  for (const constant of ['{{ "4242424242424242" }}', '{{ 5 | plus: 3 }}', '{{ "x" | upcase }}']) {
    t.throws(() => checkDataExpression(constant), { message: 'the expression must depend on data (a constant is not allowed)' }, constant);
  }
  t.throws(() => checkDataExpression('{{ other }}'), { message: 'an expression may refer to data only' });
  t.throws(() => checkDataExpression('{{ data | append: secret }}'), { message: 'an expression may refer to data only' });
  t.equal(MAX_EXPRESSION_OUTPUT_BYTES, 4096);
  t.equal(renderExpression('{{ data }}', 'x'.repeat(4096)).length, 4096, 'exactly 4 KB is allowed');
  t.throws(() => renderExpression('{{ data }}', 'x'.repeat(4097)), { message: 'the expression yields more than 4096 bytes' });
  t.throws(() => renderExpression('{{ data }}', 'é'.repeat(2049)), { message: 'the expression yields more than 4096 bytes' }, 'counted in UTF-8 bytes');
  const chain = `{{ data${' | replace: "a", "aaaaaaaaaa"'.repeat(5)} }}`;
  t.ok(thrown(() => renderExpression(chain, 'aaaaaaaaaa')) instanceof ExpressionError, 'the finding-5 mask: 10 characters to 874 KB');
  t.throws(() => renderExpression(`{{ data${' | replace: "a", "aaaaaaaaaa"'.repeat(3)} }}`, 'a'.repeat(1000)), { message: 'the expression could not be evaluated' });
});

t.test('definitions: fields named after Object.prototype members are ordinary fields', async (t) => {
  for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) {
    const errors: Record<string, string[]> = {};
    const def = parseDefinition(JSON.parse(`{"type":"token","data":"v","${name}":1}`), '', errors, Date.now());
    t.equal(def, null, `${name}: invalid`);
    t.same(Object.getOwnPropertyDescriptor(errors, name)?.value, ['unknown field'], `${name}: an own error entry`);
    const meta: Record<string, string[]> = {};
    const withMeta = parseDefinition(JSON.parse(`{"type":"token","data":"v","metadata":{"${name}":"m"}}`), '', meta, Date.now());
    t.equal(Object.getOwnPropertyDescriptor(withMeta?.metadata ?? {}, name)?.value, 'm', `${name}: a metadata key is kept`);
  }
  const errors: Record<string, string[]> = {};
  addFieldError(errors, 'constructor', 'a');
  addFieldError(errors, 'constructor', 'b');
  t.same(errors.constructor, ['a', 'b']);
  t.equal(Object.getPrototypeOf(errors), Object.prototype, 'the errors object itself is untouched');
});

t.test('patch: which expressions change, and whether the data is supplied', async (t) => {
  const base = {
    tenant_id: 't', id: 'i', type: 'card', container: '/pci/high/', sealed: 's', cvc_sealed: null, cvc_expires_at: null, metadata: {},
    search_indexes: [], index_hashes: [], fingerprint: 'f', fingerprint_expression: '{{ data.number }}', mask: null,
    created_by: 'a', created_at: new Date().toISOString(), modified_by: null, modified_at: null, expires_at: null,
  };
  const card = { number: '4242424242424242', expiration_month: 1, expiration_year: 2030 };
  const now = Date.now();
  const of = (patch: unknown) => applyPatch(base, card, patch, now);
  t.same(of({ metadata: { a: 'b' } }).changedExpressions, []);
  t.same(of({ fingerprint_expression: '{{ data.number }}' }).changedExpressions, [], 'the same expression is no change');
  t.same(of({ fingerprint_expression: null }).changedExpressions, [], "null restores a card's default: no change here");
  t.same(of({ fingerprint_expression: '{{ data.number | last4 }}' }).changedExpressions, ['fingerprint_expression']);
  t.same(of({ search_indexes: ['{{ data.number | last4 }}'] }).changedExpressions, ['search_indexes']);
  t.equal(of({ data: { expiration_month: 2 } }).suppliesData, false, 'part of a card is not its data');
  t.equal(of({ data: { ...card, number: '5555555555554444' } }).suppliesData, true);
  t.equal(of({ data: { number: '5555555555554444', expiration_month: null, expiration_year: null } }).suppliesData, true, 'removed fields are not in the data');
  const token = { ...base, type: 'token', fingerprint_expression: null, mask: '{{ data | last4 }}' };
  t.same(applyPatch(token, 'secret', { mask: null }, now).changedExpressions, ['mask'], 'removing is changing');
  t.equal(applyPatch(token, 'secret', { data: 'new', mask: '{{ data }}' }, now).suppliesData, true);
  t.equal(applyPatch(token, 'secret', { mask: '{{ data }}' }, now).suppliesData, false);
});

t.test('search query language', async (t) => {
  t.same(parseQuery('data:6789 type:card metadata.customer:"a b" container:/pci/ id:x fingerprint:f'), {
    data: ['6789'], type: 'card', metadata: { customer: 'a b' }, container: '/pci/', ids: ['x'], fingerprint: 'f',
  });
  t.same(parseQuery('  '), { data: [], metadata: {} });
  t.throws(() => parseQuery('nonsense'), { code: 'invalid_query' });
  try {
    parseQuery('secret4242424242424242:x');
    t.fail('should throw');
  } catch (e) {
    t.ok(e instanceof ServiceError && !String(e.detail).includes('4242'), 'the unknown field is not echoed');
  }
});

t.test('merge patch (RFC 7396)', async (t) => {
  t.same(mergePatch({ a: 1, b: { c: 2, d: 3 } }, { b: { c: null, e: 4 }, f: 5 }), { a: 1, b: { d: 3, e: 4 }, f: 5 });
  t.same(mergePatch({ a: 1 }, 'x'), 'x');
});
