/**
 * Every reactor limit at its boundary (spec "Reactors" table, issue 4): payload 5 MB accepted and
 * 5 MB + 1 byte refused before the host sees it; a 200 ms timeout stops a sync loop, an async
 * loop, a microtask chain and a promise that never settles; output 5 MB accepted, + 1 byte refused.
 */
import t from 'tap';
import { MAX_OUTPUT_BYTES, MAX_PAYLOAD_BYTES } from '../../src/reactors/protocol.js';
import { ReactorRuntime } from '../../src/reactors/runtime.js';
import { captureLog, fn, invokeServed, reactor, serviceError } from './helpers.js';
import { testReactorHost } from '../helpers/cli-entry.js';

const cap = captureLog();
const runtime = await ReactorRuntime.start({ log: cap.log, ...testReactorHost() });
t.teardown(() => runtime.close());

t.before(() => runtime.register([
  // Reports the payload it got (its single isolate's call count comes from the host: invokeServed).
  reactor('l/size', `module.exports = async (req) => ({ length: typeof req.args === 'string' ? req.args.length : -1 });`, {
    max_concurrency: 1,
    memory_limit_mb: 64,
  }),
  reactor('l/output', fn(`return 'x'.repeat(req.args.n);`), { memory_limit_mb: 64 }),
  reactor(
    'l/loops',
    `module.exports = async function (req) {
  switch (req.args.mode) {
    case 'sync': while (true) {}
    case 'async': while (true) { await null; }
    case 'microtasks': { const loop = () => Promise.resolve().then(loop); await loop(); break; }
    case 'then-chain': { await new Promise(() => { const again = () => { Promise.resolve().then(again); }; again(); }); break; }
    case 'never': await new Promise(() => {}); break;
    case 'background': { (async () => { while (true) await null; })(); return {}; }
  }
  return {};
};`,
    // A memory limit far above what 200 ms of any loop can use: the endless promise chains grow the
    // heap, and with 16 MB about half the 'microtasks' calls ran out of memory before the timeout
    // (500 reactor_out_of_memory instead of 504). This test is about the timeout; memory bombs are
    // in hostile.test.ts.
    { timeout_ms: 200, max_concurrency: 1, memory_limit_mb: 512 },
  ),
]));

t.test('the limits are the spec\'s 5 MB', async (t) => {
  t.equal(MAX_PAYLOAD_BYTES, 5 * 1024 * 1024);
  t.equal(MAX_OUTPUT_BYTES, 5 * 1024 * 1024);
});

t.test('payload: 5 MB accepted, 5 MB + 1 byte refused before the host sees it', async (t) => {
  const exact = 'x'.repeat(MAX_PAYLOAD_BYTES - 2); // JSON adds the two quotes
  t.equal(JSON.stringify(exact).length, MAX_PAYLOAD_BYTES);
  const sized = await invokeServed(runtime, 'l/size', exact);
  const first = { ...(sized.value as { length: number }), calls: sized.served.call };
  t.equal(first.length, exact.length, '5 MB reached the reactor intact');

  const over = await serviceError(runtime.invoke('l/size', { args: exact + 'x' }));
  t.equal(over.code, 'body_too_large');
  t.equal(over.status, 413);
  // Counted in UTF-8 bytes, not characters: 'é' is two bytes.
  const wide = 'é'.repeat(MAX_PAYLOAD_BYTES / 2);
  t.ok(wide.length < MAX_PAYLOAD_BYTES);
  t.equal((await serviceError(runtime.invoke('l/size', { args: wide }))).code, 'body_too_large');

  const next = { calls: (await invokeServed(runtime, 'l/size', 'small')).served.call };
  t.equal(next.calls, first.calls + 1, 'the refused calls never reached the isolate');
});

t.test('output: 5 MB accepted, 5 MB + 1 byte refused', async (t) => {
  const ok = await runtime.invoke('l/output', { args: { n: MAX_OUTPUT_BYTES - 2 } });
  t.equal(typeof ok === 'string' ? ok.length : -1, MAX_OUTPUT_BYTES - 2);
  const err = await serviceError(runtime.invoke('l/output', { args: { n: MAX_OUTPUT_BYTES - 1 } }));
  t.equal(err.code, 'reactor_invalid_output');
  t.match(err.detail, /5 MB/);
  t.equal(await runtime.invoke('l/output', { args: { n: 3 } }), 'xxx', 'the reactor still serves');
});

t.test('a 200 ms timeout stops every kind of endless call, and the isolate is replaced', async (t) => {
  const loops = async () => ({ calls: (await invokeServed(runtime, 'l/loops', { mode: 'none' })).served.call });
  const before = await loops();
  t.equal(before.calls, 1);
  for (const mode of ['sync', 'async', 'then-chain', 'never', 'microtasks']) {
    const started = performance.now();
    const err = await serviceError(runtime.invoke('l/loops', { args: { mode } }));
    const took = performance.now() - started;
    // README: a timeout is 504 reactor_timeout.
    t.match(err, { code: 'reactor_timeout', status: 504 }, `${mode}: 504 reactor_timeout`);
    // Not before the 200 ms (the host starts its clock after the call left this process). The upper
    // bound is generous for a loaded machine; that the isolate's own 200 ms timeout ended the call
    // is what the code says (the main process's deadline for a stuck host, 2 × 200 + 2000 ms,
    // would answer 503 reactor_unavailable instead).
    t.ok(took >= 190 && took < 5000, `${mode}: stopped after ${Math.round(took)} ms`);
    const after = await loops();
    t.equal(after.calls, 1, `${mode}: the next call ran in a fresh isolate`);
  }
});

t.test('microtasks left running after the result still hit the timeout', async (t) => {
  const err = await serviceError(runtime.invoke('l/loops', { args: { mode: 'background' } }));
  t.equal(err.code, 'reactor_timeout');
  t.equal((await invokeServed(runtime, 'l/loops', { mode: 'none' })).served.call, 1, 'a fresh isolate');
});

t.test('timeouts are bounded by the configuration: at most 30 s', async (t) => {
  const { configSchema } = await import('../../src/config/schema.js');
  const base = { tenants: [{ id: '00000000-0000-0000-0000-000000000001', name: 't', reactors: [{ id: 'r', name: 'r', code: 'x' }] }] };
  const parsed = configSchema.parse(base);
  t.equal(parsed.tenants[0]?.reactors[0]?.timeout_ms, 30_000, 'default 30 s');
  const over = structuredClone(base) as { tenants: Array<{ reactors: Array<Record<string, unknown>> }> };
  (over.tenants[0]?.reactors[0] ?? {}).timeout_ms = 30_001;
  t.notOk(configSchema.safeParse(over).success, '30,001 ms refused');
});

t.test('the payload limit can be raised or lowered by the operator (payloadLimitBytes)', async (t) => {
  const small = await ReactorRuntime.start({ log: captureLog().log, ...testReactorHost(), payloadLimitBytes: 1000 });
  t.teardown(() => small.close());
  await small.register([reactor('l/len', fn('return req.args.length;'))]);
  t.equal(await small.invoke('l/len', { args: 'x'.repeat(998) }), 998, '1000 bytes accepted');
  const err = await serviceError(small.invoke('l/len', { args: 'x'.repeat(999) }));
  t.match(err, { code: 'body_too_large', status: 413, detail: /1000 bytes/ });
});
