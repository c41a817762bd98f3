/**
 * Issue 23, findings 1 and 2, as they were reproduced against the service:
 * 1. `token:use` was an oracle: a key that may only send a value computed on it with filters and
 *    read the difference in the service's own answer (which header was refused; a filter that
 *    failed or not), without anything reaching the destination.
 * 2. Detokenization was unbounded: 40 KB of expressions answered with more than 50 MB; 1,001
 *    expressions in a form body were all sent; every header started a new expression budget.
 * The oracle property test (oracle.test.ts) checks the rule of finding 1 on random input.
 */
import t from 'tap';
import { randomCard, randomCvc } from '../helpers/secrets.js';
import { detokenize, KEYS, observed, outbound, problemOf, reactor, REVEAL_USE, startFixture, transform, USE_ONLY } from './fixture.js';

const CARD = randomCard('4');
const CVC = randomCvc();
/** A digit that is not the first digit of `s`. */
const wrongDigit = (s: string) => (s[0] === '5' ? '6' : '5');

t.test('finding 1: a key without reveal learns nothing from the service answer', async (t) => {
  const f = await startFixture(t);
  const id = await f.card(CARD, CVC);
  const sent = () => f.up.received.length;

  t.test('outbound proxy: two headers, the refused one named the guessed digit', async (t) => {
    const probe = (guess: string) => outbound(f, USE_ONLY, {
      body: { ok: 1 },
      headers: {
        'x-a': `{{ ${id} | json: '$.number' | slice: 0, 1 | replace: '${guess}', '\\n' }}`,
        'x-b': `{{ ${id} | json: '$.number' | append: '\\n' }}`,
      },
    });
    const before = sent();
    const right = await probe(CARD[0]!);
    const wrong = await probe(wrongDigit(CARD));
    t.same(observed(right, true), observed(wrong, true), 'the right and the wrong guess look the same');
    t.ok(right.status >= 400, `refused: ${right.status} ${right.text}`);
    t.equal(sent(), before, 'nothing was sent');
    t.notMatch(right.text + wrong.text, /x-a|x-b|'/i, 'the answer names no header and no filter argument');
  });

  t.test("a pre-configured proxy's detokenize transform, for the cvc", async (t) => {
    const probe = (guess: string) => transform(f, USE_ONLY, {
      body: { ok: 1 },
      headers: {
        'x-a': `{{ ${id} | json: '$.cvc' | slice: 0, 1 | replace: '${guess}', '\\n' }}`,
        'x-b': `{{ ${id} | json: '$.cvc' | append: '\\n' }}`,
      },
    });
    const before = sent();
    const right = await probe(CVC[0]!);
    const wrong = await probe(wrongDigit(CVC));
    t.same(observed(right, true), observed(wrong, true), 'the right and the wrong guess look the same');
    t.ok(right.status >= 400, `refused: ${right.status} ${right.text}`);
    t.equal(sent(), before, 'nothing was sent');
    t.notMatch(right.text + wrong.text, /x-a|x-b|'/i);
  });

  t.test('reactor args: a replace chain that blows up only on the right guess', async (t) => {
    const grow = (c: string) => `${c.repeat(250)}`;
    const probe = (guess: string) => reactor(f, USE_ONLY, {
      card: `{{ ${id} | json: '$.number' | slice: 0, 1 | replace: '${guess}', '${grow('x')}' | replace: 'x', '${grow('y')}' | replace: 'y', '${grow('z')}' }}`,
    });
    const right = await probe(CARD[0]!);
    const wrong = await probe(wrongDigit(CARD));
    t.same(observed(right, true), observed(wrong, true), 'the right and the wrong guess look the same');
  });

  t.test('without reveal, what fails after the values were put in is one problem that names nothing', async (t) => {
    const before = sent();
    const header = await outbound(f, USE_ONLY, { body: { ok: 1 }, headers: { 'x-b': `{{ ${id} | json: '$.number' | append: '\\n' }}` } });
    t.equal(header.status, 422, header.text);
    t.match(problemOf(header), { code: 'detokenized_value_refused', detail: 'The values named in the request could not be put into it; nothing was sent' });
    const viaTransform = await transform(f, USE_ONLY, { body: { ok: 1 }, headers: { 'x-c': `{{ ${id} | json: '$.cvc' | prepend: '\\r' }}` } });
    t.match(problemOf(viaTransform), { code: 'detokenized_value_refused', detail: problemOf(header).detail });
    t.equal(sent(), before, 'nothing was sent');
    // A filter that fails to evaluate (liquidjs' memory limit): the same problem.
    const failed = await reactor(f, USE_ONLY, { card: `{{ ${id} | json: '$.number' | slice: 0, 2000000 }}` });
    t.equal(failed.status, 422, failed.text);
    t.match(problemOf(failed), { code: 'detokenized_value_refused', detail: problemOf(header).detail });
    // The output bound: 1,000 expressions of a 6,000-character value add up to 6 MB.
    const long = await f.text('v'.repeat(6000));
    const args = Array.from({ length: 1000 }, () => `{{ ${long} }}`);
    const over = await reactor(f, USE_ONLY, args);
    t.equal(over.status, 422, `the output bound, uniform: ${over.text.slice(0, 200)}`);
    t.match(problemOf(over), { code: 'detokenized_value_refused', detail: problemOf(header).detail });
    const detailed = await reactor(f, REVEAL_USE, args);
    t.equal(detailed.status, 413, detailed.text.slice(0, 200));
    t.equal(problemOf(detailed).code, 'detokenized_output_too_large', 'with reveal: the detailed code');
    const under = await reactor(f, USE_ONLY, args.slice(0, 800));
    t.equal(under.status, 200, '4.8 MB is under the bound');
  });

  t.test('keys with reveal keep every filter and the detailed errors', async (t) => {
    const r = await outbound(f, REVEAL_USE, {
      body: { ok: 1 },
      headers: { 'x-a': `{{ ${id} | json: '$.number' | replace: '${CARD[0]}', '\\n' }}` },
    });
    t.equal(r.status, 400, r.text);
    t.equal(problemOf(r).code, 'validation_failed');
    t.match(problemOf(r).detail, /x-a/, 'the refused header is named to a key that may read the value anyway');
    const ok = await reactor(f, REVEAL_USE, { card: `{{ ${id} | json: '$.number' | replace: '0', 'o' | remove: '1' }}` });
    t.equal(ok.status, 200, ok.text);
  });
});

t.test('finding 2: bounded work on every carrier', async (t) => {
  const f = await startFixture(t);
  const id = await f.card(CARD, CVC);
  const sent = () => f.up.received.length;

  t.test('POST /detokenize with 40 KB of expressions is stopped at the output bound', async (t) => {
    // Each expression turns the masked number (12 X, 4 digits) into about 900 KB of text.
    const expr = `{{ ${id} | json: '$.number' | replace: 'X', '${'a'.repeat(300)}' | replace: 'a', '${'b'.repeat(250)}' }}`;
    const body: Record<string, string> = {};
    for (let i = 0; JSON.stringify(body).length < 40_000; i++) body[`k${i}`] = expr;
    const masked = await detokenize(f, KEYS.masked, body);
    t.not(masked.status, 200, `the mask key is refused (${masked.status}), not answered`);
    t.ok(masked.text.length < 10_000, `a short answer (${masked.text.length} characters)`);
    // With reveal the filters are allowed; the output bound stops the render.
    const revealBody: Record<string, string> = {};
    // The digit the number holds most often: 16 digits hold some digit at least twice, so each
    // expression renders at least 2 x 300 x 250 = 150,000 characters, and 60 of them pass 5 MB.
    const digit = [...'0123456789'].sort((a, b) => CARD.split(b).length - CARD.split(a).length)[0]!;
    t.ok(CARD.split(digit).length - 1 >= 2, `the digit ${digit} occurs at least twice in the card`);
    const big = `{{ ${id} | json: '$.number' | replace: '${digit}', '${'a'.repeat(300)}' | replace: 'a', '${'b'.repeat(250)}' }}`;
    for (let i = 0; JSON.stringify(revealBody).length < 40_000; i++) revealBody[`k${i}`] = big;
    const revealed = await detokenize(f, KEYS.private, revealBody);
    t.equal(revealed.status, 413, `the output bound: ${revealed.status} (${revealed.text.length} characters)`);
    t.equal(problemOf(revealed).code, 'detokenized_output_too_large');
  });

  t.test('a large POST /detokenize answer (sent in pieces) is whole', async (t) => {
    const long = await f.text('w'.repeat(4900));
    const body = { a: Array.from({ length: 999 }, () => `{{ ${long} }}`), b: `x{{ ${id} | json: '$.number' }}` };
    const r = await detokenize(f, KEYS.private, body);
    t.equal(r.status, 200, r.text.slice(0, 200));
    t.same(r.body, { a: Array.from({ length: 999 }, () => 'w'.repeat(4900)), b: `x${CARD}` });
  });

  t.test('1,001 expressions in a form body are refused, nothing is sent', async (t) => {
    const raw = Array.from({ length: 1001 }, (_, i) => `f${i}=${encodeURIComponent(`{{ ${id} | json: '$.expiration_month' }}`)}`).join('&');
    const before = sent();
    const r = await outbound(f, USE_ONLY, { raw, headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    t.equal(r.status, 400, r.text.slice(0, 300));
    t.equal(problemOf(r).code, 'too_many_expressions');
    t.equal(sent(), before, 'nothing was sent');
    const ok = await outbound(f, USE_ONLY, { raw: raw.split('&').slice(0, 1000).join('&'), headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    t.equal(ok.status, 200, 'exactly 1,000 are sent');
  });

  t.test('the budget is one per request, across body, headers and query', async (t) => {
    const e = `{{ ${id} | json: '$.expiration_month' }}`;
    const before = sent();
    const headers: Record<string, string> = {};
    for (let i = 0; i < 2; i++) headers[`x-h${i}`] = e.repeat(50);
    const r = await outbound(f, USE_ONLY, {
      body: Array.from({ length: 850 }, () => e),
      headers,
      path: `/proxy/charge?${Array.from({ length: 51 }, (_, i) => `q${i}=${encodeURIComponent(e)}`).join('&')}`,
    });
    t.equal(r.status, 400, r.text.slice(0, 300));
    t.equal(problemOf(r).code, 'too_many_expressions', '850 + 100 + 51 = 1,001');
    const viaTransform = await transform(f, USE_ONLY, { body: Array.from({ length: 900 }, () => e), headers: { ...headers, 'x-h2': e } });
    t.equal(problemOf(viaTransform).code, 'too_many_expressions', 'the detokenize transform too');
    t.equal(sent(), before, 'nothing was sent');
  });
});
