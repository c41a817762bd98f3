/**
 * Issue 31 finding 5: tokens a reactor's `tokenize` creates count on the caller's creating rules
 * as a POST /tokenize does (one request, one point on `creating_tokens` and, for a legacy
 * application, `legacy_tokens_create`). The count happens once the reactor returned `tokenize`:
 * when the rule is exhausted the call is 429 and no token is created; a reactor call that returns
 * no `tokenize` is not a creating request. Proxies keep their own rule (not tested here).
 */
import t from 'tap';
import { startTestService } from '../helpers/service.js';
import { HttpClient, limitedConfig, tenant } from '../rate-limit/http-helpers.js';

const POINTS = 3;
const x = tenant({
  custom: { creating_tokens: { points: POINTS, duration_seconds: 600 } },
  apps: [{ kind: 'private', also: ['reactor:invoke'] }, { kind: 'private', also: ['reactor:invoke'] }],
});
(x.config as { reactors: unknown[] }).reactors = [
  {
    id: 'mint',
    name: 'mint',
    code: `module.exports = async function (req) {
  const tokenize = {};
  for (let i = 0; i < req.args.n; i++) tokenize['t' + i] = { type: 'token', data: 'minted-' + i };
  return { raw: { minted: req.args.n }, tokenize };
};`,
  },
  { id: 'plain', name: 'plain', code: `module.exports = async function (req) { return { raw: req.args }; };` },
];

const s = await startTestService(t, { config: limitedConfig([x]) });

async function tokenCount(c: HttpClient, key: string): Promise<number> {
  const r = await c.send('GET', '/tokens?size=100', { key });
  if (r.status !== 200) throw new Error(`GET /tokens answered ${r.status}: ${r.text}`);
  return (r.body as { data: unknown[] }).data.length;
}

t.test('an exhausted creating_tokens rule refuses a reactor\'s tokenize: 429, nothing created', async (t) => {
  const c = new HttpClient(s.url);
  t.teardown(() => c.close());
  const key = x.keys[0]![0]!;
  for (let i = 0; i < POINTS; i++) {
    const r = await c.send('POST', '/tokenize', { key, body: { v: { type: 'token', data: `direct-${i}` } } });
    t.equal(r.status, 200, `/tokenize ${i + 1} of ${POINTS}`);
  }
  t.equal((await c.send('POST', '/tokenize', { key, body: { v: { type: 'token', data: 'over' } } })).status, 429, 'the rule is exhausted');
  const before = await tokenCount(c, key);

  const minted = await c.send('POST', '/reactors/mint/react', { key, body: { args: { n: 10 } } });
  t.equal(minted.status, 429, 'the reactor call that would create tokens is refused');
  t.equal(minted.body?.code, 'rate_limited');
  t.match(minted.body?.detail, /"creating_tokens"/, 'the detail names the creating rule');
  t.ok(Number(minted.headers['retry-after']) >= 1, 'with Retry-After');
  t.equal(await tokenCount(c, key), before, 'no token was created');

  const plain = await c.send('POST', '/reactors/plain/react', { key, body: { args: { a: 1 } } });
  t.equal(plain.status, 200, 'a reactor call that creates nothing is not a creating request');
  t.same(plain.body, { raw: { a: 1 }, tokens: null });
});

t.test('a reactor\'s tokenize uses up the rule as /tokenize does', async (t) => {
  const c = new HttpClient(s.url);
  t.teardown(() => c.close());
  const key = x.keys[1]![0]!;
  for (let i = 0; i < POINTS; i++) {
    const r = await c.send('POST', '/reactors/mint/react', { key, body: { args: { n: 2 } } });
    t.equal(r.status, 200, `reactor tokenize ${i + 1} of ${POINTS}`);
    t.equal(Object.keys(r.body?.tokens ?? {}).length, 2);
  }
  const direct = await c.send('POST', '/tokenize', { key, body: { v: { type: 'token', data: 'after' } } });
  t.equal(direct.status, 429, '/tokenize finds the rule used up by the reactor calls');
  t.match(direct.body?.detail, /"creating_tokens"/);
});
