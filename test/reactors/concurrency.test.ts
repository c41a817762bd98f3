/**
 * Concurrency (spec: hot concurrency 1, cold starts for concurrent calls; issue 4): concurrent
 * calls beyond the warm isolates cold-start extra ones up to max_concurrency, then queue (bounded),
 * then get reactor_busy; idle extras are disposed; a broken isolate is replaced, never reused.
 */
import t from 'tap';
import { ReactorRuntime } from '../../src/reactors/runtime.js';
import { sleep } from '../helpers/wait.js';
import { captureLog, invokeServed, reactor, serviceError } from './helpers.js';
import { testReactorHost } from '../helpers/cli-entry.js';

/**
 * Extra isolates idle this long are disposed. Long enough that the moment between two bursts of
 * the idle test never reaches it on a loaded machine (it was 300 ms: a slow moment between the
 * bursts disposed the extras and failed "the same four serve").
 */
const IDLE_MS = 1500;
/**
 * How long a call of a concurrency test spins: far longer than a cold start of an isolate even on
 * a loaded machine, so the calls of a burst really overlap (with 30 or 200 ms the warm isolate
 * could finish first and serve a waiting call before an extra one was built).
 */
const OVERLAP_MS = 1000;

const cap = captureLog();
const runtime = await ReactorRuntime.start({ log: cap.log, idleMs: IDLE_MS, ...testReactorHost() });
t.teardown(() => runtime.close());

/** Calls spin for `args.ms`; which isolate served a call is reported by the host (invokeServed). */
const SPINNER = `
module.exports = async function ({ args }) {
  if (args.mode === 'loop') while (true) {}
  if (args.mode === 'throw') throw new Error('user error');
  const end = Date.now() + (args.ms || 0);
  while (Date.now() < end) {}
  // Deterministic work, so concurrent and sequential results can be compared.
  let h = 2166136261;
  for (const c of String(args.input)) h = Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0;
  return { raw: { hash: h, input: args.input } };
};`;

t.before(() =>
  runtime.register([
    reactor('c/default', SPINNER, { warm_concurrency: 1, max_concurrency: 8, queue_limit: 100 }),
    reactor('c/narrow', SPINNER, { warm_concurrency: 1, max_concurrency: 2, queue_limit: 100 }),
    reactor('c/tiny', SPINNER, { warm_concurrency: 1, max_concurrency: 1, queue_limit: 1, timeout_ms: 3000 }),
    reactor('c/idle', SPINNER, { warm_concurrency: 1, max_concurrency: 4 }),
    reactor('c/recycle', SPINNER, { max_concurrency: 1, timeout_ms: 300 }),
  ]),
);

interface Out {
  raw: { hash: number; input: string };
  isolateId: string;
  calls: number;
}
const call = async (key: string, args: Record<string, unknown>): Promise<Out> => {
  const { value, served } = await invokeServed(runtime, key, args);
  return { ...(value as { raw: Out['raw'] }), isolateId: String(served.isolate), calls: served.call };
};

t.test('8 concurrent calls with warm_concurrency 1 all succeed, as 8 sequential calls do', async (t) => {
  const inputs = Array.from({ length: 8 }, (_, i) => `payment-${i}-${'x'.repeat(i * 100)}`);
  const sequential: Out[] = [];
  for (const input of inputs) sequential.push(await call('c/default', { input, ms: 30 }));
  const concurrent = await Promise.all(inputs.map((input) => call('c/default', { input, ms: OVERLAP_MS })));
  t.same(
    concurrent.map((o) => o.raw),
    sequential.map((o) => o.raw),
  );
  t.ok(new Set(concurrent.map((o) => o.isolateId)).size > 1, 'extra isolates were cold-started');
  t.equal(new Set(sequential.map((o) => o.isolateId)).size, 1, 'sequential calls all ran on the warm isolate');

  // Beyond max_concurrency the calls queue, and still all succeed.
  const queued = await Promise.all(inputs.map((input) => call('c/narrow', { input, ms: 30 })));
  t.same(
    queued.map((o) => o.raw),
    sequential.map((o) => o.raw),
  );
  t.ok(new Set(queued.map((o) => o.isolateId)).size <= 2, 'never more than max_concurrency isolates');
});

t.test('a full queue answers reactor_busy (503, Retry-After)', async (t) => {
  const results = await Promise.allSettled([
    call('c/tiny', { input: 'a', ms: 300 }),
    call('c/tiny', { input: 'b', ms: 10 }),
    call('c/tiny', { input: 'c', ms: 10 }),
  ]);
  t.equal(results[0]?.status, 'fulfilled', 'the running call');
  t.equal(results[1]?.status, 'fulfilled', 'the queued call');
  const third = results[2];
  t.equal(third?.status, 'rejected');
  if (third?.status === 'rejected') {
    t.match(third.reason, { code: 'reactor_busy', status: 503, headers: { 'Retry-After': '1' } });
  }
});

t.test('extra isolates are reused while warm and disposed when idle; the warm one stays', async (t) => {
  /** The isolates a burst of four overlapping calls ran on, and when its first call came back. */
  const burst = async (): Promise<{ ids: Set<string>; firstBack: number }> => {
    let firstBack = Infinity;
    const outs = await Promise.all([0, 1, 2, 3].map(async (i) => {
      const o = await call('c/idle', { input: String(i), ms: OVERLAP_MS });
      firstBack = Math.min(firstBack, performance.now());
      return o;
    }));
    return { ids: new Set(outs.map((o) => o.isolateId)), firstBack };
  };
  // "Immediately after" needs the second burst to reach the host before an extra has been idle
  // for IDLE_MS. An extra went idle before its answer came back, so the time from the first answer
  // of the first burst to sending the second bounds that idle time from above; when a loaded
  // machine made it IDLE_MS or more, the pair of bursts runs again (issue 30), at most 3 times.
  let first: Set<string>;
  let again: Set<string>;
  for (let attempt = 1; ; attempt++) {
    const one = await burst();
    const sentAt = performance.now();
    const two = await burst();
    first = one.ids;
    again = two.ids;
    const idleAtMost = Math.round(sentAt - one.firstBack);
    if (idleAtMost < IDLE_MS || attempt === 3) break;
    t.comment(`attempt ${attempt}: the second burst came ${idleAtMost} ms after the first answer, not within the ${IDLE_MS} ms idle time (a loaded machine); again`);
  }
  t.equal(first.size, 4, 'one warm + three cold-started isolates');
  t.same([...again].sort(), [...first].sort(), 'immediately after, the same four serve');
  // A wait for a duration, not an event (the host reports no disposal): the extras went idle before
  // the second burst came back, so IDLE_MS after that their disposal timers are due, and the host
  // runs due timers before it reads the next burst's messages; load only makes the wait longer.
  // 1 s of slack on top.
  await sleep(IDLE_MS + 1000);
  const later = (await burst()).ids;
  const kept = [...later].filter((id) => first.has(id));
  t.equal(kept.length, 1, 'after the idle time only the warm isolate is left');
  t.equal(later.size, 4, 'and three new extras were cold-started for the burst');
});

t.test('a user error keeps the isolate; a timeout replaces it', async (t) => {
  const a = await call('c/recycle', { input: 'a' });
  await serviceError(runtime.invoke('c/recycle', { args: { mode: 'throw' } }));
  const b = await call('c/recycle', { input: 'b' });
  t.equal(b.isolateId, a.isolateId, 'same isolate after a user error');
  t.equal(b.calls, a.calls + 2);
  const err = await serviceError(runtime.invoke('c/recycle', { args: { mode: 'loop' } }));
  t.equal(err.code, 'reactor_timeout');
  const c = await call('c/recycle', { input: 'c' });
  t.not(c.isolateId, a.isolateId, 'a new isolate after the timeout');
  t.equal(c.calls, 1);
});
