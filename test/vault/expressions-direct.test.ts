/**
 * `{{ data.a.b }}` expressions are read directly instead of rendered by liquidjs
 * (src/vault/expressions.ts readDirect): for every data shape the answer must be liquidjs' own.
 */
import t from 'tap';
import fc from 'fast-check';
import { readDirect, renderExpression, renderInScope } from '../../src/vault/expressions.js';

/** What a render ends in: its text, or that it threw (both paths must agree on that too). */
function outcome(fn: () => string): string {
  try {
    return `ok:${fn()}`;
  } catch (err) {
    return `threw:${(err as Error).message}`;
  }
}
const liquid = (expr: string, data: unknown): string => outcome(() => renderInScope(expr, { data }));
const direct = (expr: string, data: unknown): string => outcome(() => renderExpression(expr, data));

const exprs = ['{{ data | digits }}', '{{data|digits}}', '{{ data | digits | size }}', '{{ data.number }}', '{{data.number}}', '{{  data.a.b  }}', '{{ data.size }}', '{{ data.first }}', '{{ data.a.length }}', '{{ data.constructor }}', '{{ data.__proto__ }}', '{{ data }}', '{{ data.number | last4 }}'];
const datas: unknown[] = [
  { number: '4242424242424242', expiration_month: 12 },
  { number: 4242 },
  { number: null },
  { number: ['1', '2'] },
  { number: { x: '1' } },
  {},
  'a plain string',
  '123-45-6789',
  '٣٤٥ 12',
  { a: { b: 'deep', length: 'L' }, size: 'S', first: 'F' },
  { a: 'not an object', size: 3 },
  [1, 2, 3],
  Object.assign(Object.create({ number: 'inherited' }) as object, { other: '1' }),
  JSON.parse('{"__proto__": "own", "constructor": "own too"}'),
];

t.test('the direct read answers exactly as liquidjs, or leaves it to liquidjs', async (t) => {
  for (const expr of exprs) {
    for (const data of datas) {
      t.equal(direct(expr, data), liquid(expr, data), `${expr} over ${JSON.stringify(data)}`);
    }
  }
  t.equal(readDirect(['number'], { number: '4242' }), '4242', 'the default card fingerprint is read directly');
  t.equal(readDirect(['number'], { number: 4242 }), undefined, 'a number goes to liquidjs');
  t.equal(readDirect(null, { number: '1' }), undefined, 'an expression with filters goes to liquidjs');
});

t.test('random data: the direct read equals liquidjs (property test)', async () => {
  const key = fc.constantFrom('number', 'a', 'b', 'size', 'first', 'last', 'constructor', '__proto__', 'toString');
  const value = fc.letrec((tie) => ({
    v: fc.oneof({ depthSize: 'small' }, fc.string(), fc.integer(), fc.constant(null), fc.boolean(), fc.array(tie('v'), { maxLength: 3 }), fc.dictionary(key, tie('v'), { maxKeys: 3 })),
  })).v;
  fc.assert(
    fc.property(fc.array(key, { minLength: 1, maxLength: 3 }), value, (path, data) => {
      const expr = `{{ data.${path.join('.')} }}`;
      const fast = direct(expr, data);
      const viaLiquid = liquid(expr, data);
      if (fast !== viaLiquid) throw new Error(`${expr}: ${JSON.stringify(fast)} vs ${JSON.stringify(viaLiquid)} over ${JSON.stringify(data)}`);
    }),
    { numRuns: 500 },
  );
});
