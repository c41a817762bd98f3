/**
 * The reactor contract (README "Reactors", issue 4): args in, raw out, tokenize passed back,
 * configuration visible, console captured into the log with the reactor id and never the args;
 * errors at registration name the reactor; user errors map to the spec's problems.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { createRequire } from 'node:module';
import { MAX_CODE_LENGTH } from '../../src/config/load.js';
import { ReactorRuntime } from '../../src/reactors/runtime.js';
import { validateReactorOutput } from '../../src/reactors/contract.js';
import { captureLog, fn, invokeServed, reactor, serviceError } from './helpers.js';
import { cardPattern, randomCard } from '../helpers/secrets.js';
import { ROOT } from '../helpers/cli-entry.js';

const repo = ROOT;

const cap = captureLog();
const runtime = await ReactorRuntime.start({ log: cap.log });
t.teardown(() => runtime.close());

t.before(() => runtime.register([
  reactor(
    't1/echo',
    fn(`
      const { args, configuration } = req;
      console.log('echo called with', Object.keys(args ?? {}).length, 'keys');
      console.warn({ level: 'warned' });
      console.error(new Error('an error line'));
      return { raw: { args, configuration }, tokenize: { card: { type: 'card', data: args && args.card } } };
    `),
    { configuration: { greeting: 'hello', region: 'eu' } },
  ),
  reactor('t1/card-brand', readFileSync(join(repo, 'reactors/card-brand.js'), 'utf8')),
  reactor('t1/throws', fn(`throw new Error('card declined: ' + req.args.reason);`)),
  reactor('t1/throws-status', fn(`const e = new Error('nope ' + req.args.status); e.status = req.args.status; throw e;`)),
  reactor('t1/throws-string', fn(`throw 'a plain string';`)),
  reactor('t1/counter', `let n = 0;\nmodule.exports = async (req) => { req.configuration.k = 'changed'; return { n: ++n, k: req.configuration.k === 'changed' }; };`, {
    configuration: { k: 'original' },
  }),
  reactor('t1/bigint', fn(`return { raw: 10n };`)),
  reactor('t1/undefined', fn(`return undefined;`)),
  reactor('t1/transform', fn(`
    const { body, headers, method, path, query } = req.args;
    if (req.args.body && req.args.body.mode === 'bad') return req.args.body.result;
    return { body: { ...body, seen: { method, path, query, ua: headers['user-agent'] } }, headers: { 'x-transformed': 'yes', 'set-cookie': ['a=1', 'b=2'] } };
  `)),
  reactor('t1/sync', `module.exports = function (req) { return { raw: req.args * 2 }; };`),
]));

t.test('args in, raw out, tokenize passed back, configuration visible', async (t) => {
  const args = { card: { number: '4242424242424242', expiration_month: 12, expiration_year: 2030 }, note: 'ü €' };
  const out = await runtime.invoke('t1/echo', { args });
  t.same(out, {
    raw: { args, configuration: { greeting: 'hello', region: 'eu' } },
    tokenize: { card: { type: 'card', data: args.card } },
  });
  t.same(validateReactorOutput(out), { raw: { args, configuration: { greeting: 'hello', region: 'eu' } }, tokenize: { card: { type: 'card', data: args.card } } });
  t.same(await runtime.invoke('t1/sync', { args: 21 }), { raw: 42 }, 'a plain (non-async) function works too');
});

t.test('console output is captured into the log with the reactor id, never the args', async (t) => {
  const secret = randomCard(); // drawn per run (issue 14): only a leak can put it in the log
  await runtime.invoke('t1/echo', { args: { card: { number: secret } } });
  const lines = cap.entries().filter((e) => e.reactor === 't1/echo').slice(-3);
  t.ok(lines.length >= 3);
  t.match(lines, [
    { console: 'log', msg: 'echo called with 1 keys', level: 30 },
    { console: 'warn', msg: '{"level":"warned"}', level: 40 },
    { console: 'error', msg: /^Error: an error line/, level: 50 },
  ]);
  t.notOk(cardPattern(secret).test(cap.text()), 'the args never reach the log');
});

t.test('the example card-brand reactor', async (t) => {
  const out = await runtime.invoke('t1/card-brand', { args: { card: { number: '4242424242424242', expiration_month: 12, expiration_year: 2030 } } });
  t.match(out, { raw: { brand: 'visa', last4: '4242' }, tokenize: { card: { type: 'card', data: { number: '4242424242424242' } } } });
  const bad = await serviceError(runtime.invoke('t1/card-brand', { args: {} }));
  t.equal(bad.status, 400, 'its own 400 passes through');
  t.equal(bad.code, 'reactor_error', 'as reactor_error (README "Reactors", Errors)'); // issue 30
});

t.test('an uncaught error is a 500 "Reactor Runtime Error" with errors.error', async (t) => {
  const err = await serviceError(runtime.invoke('t1/throws', { args: { reason: 'insufficient funds' } }));
  t.equal(err.code, 'reactor_runtime_error');
  t.equal(err.status, 500);
  t.equal(err.detail, 'Reactor Runtime Error');
  t.same(err.errors, { error: ['card declined: insufficient funds'] });
  const str = await serviceError(runtime.invoke('t1/throws-string', { args: null }));
  t.same(str.errors, { error: ['a plain string'] });
});

t.test('a thrown status of 400/401/402/403/429/503 passes through; others are 500', async (t) => {
  for (const status of [400, 401, 402, 403, 429, 503]) {
    const err = await serviceError(runtime.invoke('t1/throws-status', { args: { status } }));
    t.equal(err.status, status, `status ${status}`);
    t.equal(err.code, 'reactor_error');
    t.equal(err.detail, `nope ${status}`);
  }
  for (const status of [404, 500, 302]) {
    const err = await serviceError(runtime.invoke('t1/throws-status', { args: { status } }));
    t.equal(err.status, 500, `status ${status} does not pass through`);
    t.equal(err.code, 'reactor_runtime_error');
  }
});

t.test('each call gets a fresh request and fresh module state, on the same warm isolate (issue 23)', async (t) => {
  const a = await invokeServed(runtime, 't1/counter', null);
  const b = await invokeServed(runtime, 't1/counter', null);
  t.match(a.value, { k: true });
  t.same(b.value, a.value, 'the second call starts from the code alone: n is 1 again, the configuration is the original');
  t.equal(b.served.isolate, a.served.isolate, 'the same warm isolate served both');
  t.equal(b.served.call, a.served.call + 1);
});

t.test('results that are not JSON are refused', async (t) => {
  const err = await serviceError(runtime.invoke('t1/bigint', { args: null }));
  t.equal(err.code, 'reactor_invalid_output');
  t.equal(await runtime.invoke('t1/undefined', { args: null }), undefined);
  t.same(validateReactorOutput(undefined), { raw: undefined, tokenize: undefined });
  t.throws(() => validateReactorOutput([1]), { code: 'reactor_invalid_output' });
});

t.test('transforms get { body, headers, method, path, query } and must return { body, headers? }', async (t) => {
  const out = await runtime.invoke('t1/transform', {
    transform: { body: { a: 1 }, headers: { 'user-agent': 'tap', 'x-undefined': undefined }, method: 'POST', path: '/charge', query: { q: 'x' } },
  });
  t.same(out, {
    body: { a: 1, seen: { method: 'POST', path: '/charge', query: { q: 'x' }, ua: 'tap' } },
    headers: { 'x-transformed': 'yes', 'set-cookie': ['a=1', 'b=2'] },
  });
  const bad = [
    null,
    'a string',
    [1, 2],
    { headers: {} },
    { body: 1, headers: 'x' },
    { body: 1, headers: { 'bad name': 'x' } },
    { body: 1, headers: { 'x-inject': 'a\r\nset-cookie: evil' } },
    { body: 1, headers: { 'x-num': 5 } },
  ];
  for (const result of bad) {
    const err = await serviceError(
      runtime.invoke('t1/transform', { transform: { body: { mode: 'bad', result }, headers: {}, method: 'GET', path: '/', query: {} } }),
    );
    t.equal(err.code, 'reactor_invalid_output', JSON.stringify(result));
  }
  const noHeaders = await runtime.invoke('t1/transform', {
    transform: { body: { mode: 'bad', result: { body: 'text' } }, headers: {}, method: 'GET', path: '/', query: {} },
  });
  t.same(noHeaders, { body: 'text' });
});

t.test('registration errors name each bad reactor and register none of the batch', async (t) => {
  const err = await runtime
    .register([
      reactor('t2/good', fn('return 1;')),
      reactor('t2/syntax', 'module.exports = async function (req) { return {'),
      reactor('t2/no-function', 'module.exports = { not: "a function" };'),
      reactor('t2/no-export', 'const x = 1;'),
      reactor('t2/top-throw', 'throw new Error("boom at load");'),
      reactor('t2/top-loop', 'while (true) {}', { timeout_ms: 200 }),
    ])
    .then(
      () => null,
      (e: unknown) => e as Error,
    );
  t.ok(err, 'register rejects');
  const msg = err?.message ?? '';
  t.match(msg, /"syntax" \(t2\/syntax\): does not compile: SyntaxError/);
  t.match(msg, /"no-function" \(t2\/no-function\): does not export a function \(module.exports is object\)/);
  t.match(msg, /"no-export" \(t2\/no-export\): does not export a function \(module.exports is object\)/);
  t.match(msg, /"top-throw" \(t2\/top-throw\): top-level code threw: boom at load/);
  t.match(msg, /"top-loop" \(t2\/top-loop\): top-level code did not finish within 200 ms/);
  t.notMatch(msg, /t2\/good/);
  t.notOk(runtime.keys().includes('t2/good'), 'all or nothing');
  const missing = await serviceError(runtime.invoke('t2/good', { args: null }));
  t.equal(missing.code, 'not_found');
});

t.test('code length: 50,000 characters accepted, 50,001 refused', async (t) => {
  const body = 'module.exports = async () => ({ raw: "ok" });\n';
  const exact = body + '/'.repeat(2) + 'x'.repeat(MAX_CODE_LENGTH - body.length - 2);
  t.equal(exact.length, 50_000);
  await runtime.register([reactor('t3/exact', exact)]);
  t.same(await runtime.invoke('t3/exact', { args: null }), { raw: 'ok' });
  await t.rejects(runtime.register([reactor('t3/over', exact + 'x')]), /"over" \(t3\/over\): code is 50001 characters; the limit is 50000/);
});

t.test('limits outside the schema\'s bounds are refused at registration', async (t) => {
  await t.rejects(
    runtime.register([
      reactor('t5/slow', fn('return 1;'), { timeout_ms: 30_001 }),
      reactor('t5/tiny', fn('return 1;'), { memory_limit_mb: 4 }),
      reactor('t5/twice', fn('return 1;')),
      reactor('t5/twice', fn('return 2;')),
    ]),
    /timeout_ms must be an integer in 1\.\.30000[\s\S]*memory_limit_mb must be an integer in 8\.\.2048[\s\S]*registered twice/,
  );
});

t.test('a key registered again is replaced by the new code', async (t) => {
  await runtime.register([reactor('t4/v', fn('return 1;'))]);
  t.equal(await runtime.invoke('t4/v', { args: null }), 1);
  await runtime.register([reactor('t4/v', fn('return 2;'))]);
  t.equal(await runtime.invoke('t4/v', { args: null }), 2);
  await t.rejects(runtime.register([reactor('t4/v', fn('return 3;')), reactor('t4/bad', 'nope(')]));
  t.equal(await runtime.invoke('t4/v', { args: null }), 2, 'a failed batch leaves the old code in place');
});

t.test('the main process never loads isolated-vm', async (t) => {
  const req = createRequire(import.meta.url);
  t.notOk(
    Object.keys(req.cache).some((p) => /\/isolated-vm(-v5)?\//.test(p)),
    'isolated-vm is not in the module cache',
  );
  // Static: walk the relative imports of runtime.ts; none may reach isolated-vm or the host.
  const seen = new Set<string>();
  const offending: string[] = [];
  const walk = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    const src = readFileSync(file, 'utf8');
    for (const m of src.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+'([^']+)'|import\(\s*'([^']+)'\s*\)/gm)) {
      const spec = m[1] ?? m[2] ?? '';
      if (spec.startsWith('isolated-vm') || spec === './ivm.js') offending.push(file);
      if (spec.startsWith('.')) walk(resolve(dirname(file), spec.replace(/\.js$/, '.ts')));
    }
  };
  walk(join(repo, 'src/reactors/runtime.ts'));
  t.same(offending, [], 'no module reachable from runtime.ts imports isolated-vm');
  t.notOk([...seen].some((f) => f.endsWith('/host.ts') || f.endsWith('/pool.ts') || f.endsWith('/isolate.ts')));
  t.ok(seen.size > 3);
});
