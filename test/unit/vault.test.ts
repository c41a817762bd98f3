/** Pure vault modules: the walk, card validation and masks, expressions, the query language, merge patch. */
import t from 'tap';
import { ServiceError } from '../../src/errors.js';
import { luhnValid, maskCardNumber, validateCard } from '../../src/vault/card.js';
import { compileExpression, renderExpression } from '../../src/vault/expressions.js';
import { mergePatch } from '../../src/vault/patch.js';
import { parseQuery } from '../../src/vault/search.js';
import { assemble, planTokenize } from '../../src/vault/walk.js';

const opts = { maxDepth: 64, maxTokens: 100, now: Date.now() };

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
  t.throws(() => compileExpression('x'.repeat(1001)));
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
