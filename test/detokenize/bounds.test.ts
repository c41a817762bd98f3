/**
 * detokenize/expressions.ts bounds of issue 23, on their own: one budget per ExpressionScan over
 * every carrier (repeated strings count each time), and the 5 MB output bound checked while
 * rendering: the render stops at the bound instead of rendering everything and measuring after.
 */
import t from 'tap';
import { ExpressionScan, MAX_EXPRESSIONS, MAX_OUTPUT_BYTES, type DetokenizedToken } from '../../src/detokenize/expressions.js';
import { ServiceError } from '../../src/errors.js';

const code = async (fn: () => unknown): Promise<string | null> => {
  try {
    await fn();
  } catch (err) {
    return err instanceof ServiceError ? err.code : String(err);
  }
  return null;
};

/** A token map that counts how many expressions were evaluated (one get per evaluation). */
class Counting extends Map<string, DetokenizedToken> {
  gets = 0;
  override get(id: string): DetokenizedToken | undefined {
    this.gets++;
    return super.get(id);
  }
}

t.test('one budget over every carrier; a repeated string counts each time', async (t) => {
  const scan = new ExpressionScan();
  scan.json(Array.from({ length: 600 }, () => '{{ a }}'));
  scan.text('{{ a }}'.repeat(300));
  scan.text('x={{ a }}&y={{ b }}'.repeat(50));
  t.equal(await code(() => scan.text('{{ c }}')), 'too_many_expressions', '600 + 300 + 100 + 1');
  t.same(new ExpressionScan().json(['{{ a | slice: 0, 2 }}', '{{ b | json: "$.x" | upcase }}', '{{ a | append: "!" }}']).filtersOf('a'), new Set(['slice', 'append']));
  const full = new ExpressionScan().json(Array.from({ length: MAX_EXPRESSIONS }, () => '{{ a }}'));
  t.same(full.ids, ['a'], 'exactly the limit');
});

t.test('the output bound stops the render at the bound', async (t) => {
  const tokens = new Counting();
  for (let i = 0; i < 1000; i++) tokens.set(`t${i}`, { id: `t${i}`, type: 'token', data: 'v'.repeat(10_000) });
  const body = Array.from({ length: 1000 }, (_, i) => `{{ t${i} }}`);
  const scan = new ExpressionScan().json(body);
  t.equal(await code(() => scan.render({ tokens, detailed: true })), 'detokenized_output_too_large');
  const limit = Math.floor(MAX_OUTPUT_BYTES / 10_000) + 1;
  t.equal(tokens.gets, limit, `stopped after ${limit} of 1000 values, at the bound`);
  t.equal(await code(() => new ExpressionScan().json(body).render({ tokens, detailed: false })), 'detokenized_value_refused', 'without reveal: the uniform problem');

  // The same value 1000 times: evaluated once, counted 1000 times.
  const one = new Counting([['t', { id: 't', type: 'token', data: 'v'.repeat(6000) }]]);
  const same = new ExpressionScan().json(Array.from({ length: 1000 }, () => '{{ t }}'));
  t.equal(await code(() => same.render({ tokens: one, detailed: true })), 'detokenized_output_too_large');
  t.equal(one.gets, 1, 'one evaluation');
  const under = new ExpressionScan().json(Array.from({ length: 800 }, () => '{{ t }}'));
  const r = await under.render({ tokens: one, detailed: true });
  t.equal((r.json(Array.from({ length: 800 }, () => '{{ t }}')) as string[]).join('').length, 4_800_000, '4.8 MB is under the bound');
  // UTF-8 is counted in bytes: 2-byte characters reach the bound at half the characters.
  const wide = new Counting([['w', { id: 'w', type: 'token', data: 'é'.repeat(3000) }]]);
  t.equal(await code(() => new ExpressionScan().json(Array.from({ length: 1000 }, () => '{{ w }}')).render({ tokens: wide, detailed: true })), 'detokenized_output_too_large', '1000 x 6000 bytes');
  const distinct = new Counting();
  for (let i = 0; i < 1000; i++) distinct.set(`w${i}`, { id: `w${i}`, type: 'token', data: '€'.repeat(2000) });
  t.equal(await code(() => new ExpressionScan().json(Array.from({ length: 1000 }, (_, i) => `{{ w${i} }}`)).render({ tokens: distinct, detailed: true })),
    'detokenized_output_too_large', '1000 distinct values of 6000 bytes (2000 characters each)');
});
