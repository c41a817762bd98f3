/**
 * Supervision of the reactor host (README "Reactors"): a host that dies or hangs costs only the calls in
 * flight (503 reactor_unavailable); the runtime starts a new host with every registered reactor
 * compiled again, and calls that arrive during the restart wait for it.
 */
import t from 'tap';
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ReactorRuntime } from '../../src/reactors/runtime.js';
import { waitFor } from '../helpers/wait.js';
import { captureLog, fn, invokeServed, reactor, serviceError } from './helpers.js';
import { testReactorHost } from '../helpers/cli-entry.js';

const SLOW = fn('const end = Date.now() + req.args.ms; while (Date.now() < end) {} return { done: req.args.ms };');
/** `n` is the call's number on the isolate that served it (reported by the host). */
const COUNTER = `module.exports = async () => null;`;
/** CPU time (user + system, ms) the process `pid` has used so far, from /proc (Linux). */
function cpuMs(pid: number): number {
  // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / 100;
}

/**
 * Resolves once the host has spent `ms` more CPU than at the call: the slow calls are running in
 * it (issue 30: a fixed 100-150 ms sleep before the kill or close assumed they had reached it).
 * The clock ticks of /proc are 10 ms, so 100 ms is ten of them.
 */
async function hostBusy(pid: number, ms = 100): Promise<void> {
  const before = cpuMs(pid);
  await waitFor(() => cpuMs(pid) - before >= ms, { timeoutMs: 20_000, intervalMs: 10, what: `the reactor host running the slow calls (${ms} ms of CPU)` });
}

const count = async (runtime: ReactorRuntime): Promise<{ n: number }> => ({ n: (await invokeServed(runtime, 's/counter', null)).served.call });

t.test('a killed host: calls in flight get 503, the host comes back with every reactor', async (t) => {
  const cap = captureLog();
  const runtime = await ReactorRuntime.start({ log: cap.log, ...testReactorHost() });
  t.teardown(() => runtime.close());
  await runtime.register([reactor('s/slow', SLOW, { timeout_ms: 5000 }), reactor('s/counter', COUNTER)]);
  t.same(await count(runtime), { n: 1 });
  t.same(await count(runtime), { n: 2 });

  const pid = runtime.hostPid;
  t.ok(pid);
  const inFlight = [runtime.invoke('s/slow', { args: { ms: 3000 } }), runtime.invoke('s/slow', { args: { ms: 3000 } })];
  await hostBusy(pid!);
  process.kill(pid ?? 0, 'SIGKILL');
  for (const p of inFlight) {
    const err = await serviceError(p);
    t.equal(err.code, 'reactor_unavailable');
    t.equal(err.status, 503);
  }
  // This call arrives while the host is down or restarting: it waits and is served.
  t.same(await count(runtime), { n: 1 }, 'served by a fresh host (a new isolate)');
  t.not(runtime.hostPid, pid, 'a new host process');
  t.same(await runtime.invoke('s/slow', { args: { ms: 1 } }), { done: 1 }, 'every registered reactor is back');
  t.ok(cap.entries().some((e) => e.msg === 'reactor host died; restarting it' && e.signal === 'SIGKILL'));
});

t.test('calls that arrive during a restart wait for it', async (t) => {
  const runtime = await ReactorRuntime.start({ log: captureLog().log, ...testReactorHost() });
  t.teardown(() => runtime.close());
  await runtime.register([reactor('s/counter', COUNTER)]);
  const pid = runtime.hostPid;
  process.kill(pid ?? 0, 'SIGKILL');
  await waitFor(() => runtime.hostPid === undefined, { what: 'the killed host gone' });
  const results = (await Promise.all([1, 2, 3].map(() => count(runtime)))) as Array<{ n: number }>;
  // A fresh host: the warm isolate counts from 1 for the calls it ran in turn (1, 2, …); a call that
  // found it busy ran on a cold-started isolate, whose own count is 1. So: at least one 1, and the
  // counts above 1 are exactly 2..k.
  const ns = results.map((r) => r.n).sort((a, b) => a - b);
  const above = ns.filter((n) => n > 1);
  t.equal(ns.length, 3, 'all three served');
  t.ok(ns[0] === 1, 'new isolates on the new host');
  t.same(above, above.map((_, i) => i + 2), `each call ran once (counts ${ns.join(', ')})`);
  t.ok(runtime.hostPid && runtime.hostPid !== pid, 'by a new host process');
});

t.test('a host that stops answering is killed and replaced', async (t) => {
  const cap = captureLog();
  const runtime = await ReactorRuntime.start({ log: cap.log, heartbeatMs: 100, hangMs: 600, ...testReactorHost() });
  t.teardown(() => runtime.close());
  await runtime.register([reactor('s/counter', COUNTER)]);
  const pid = runtime.hostPid ?? 0;
  process.kill(pid, 'SIGSTOP');
  const stuck = count(runtime);
  const err = await serviceError(stuck);
  t.equal(err.code, 'reactor_unavailable', 'the call on the stuck host gets 503');
  t.same(await count(runtime), { n: 1 });
  t.not(runtime.hostPid, pid);
  t.ok(cap.entries().some((e) => e.msg === 'reactor host stopped answering; killing it'));
});

t.test('a reactor whose top-level code crashes the host is named, and the others keep working', async (t) => {
  const runtime = await ReactorRuntime.start({ log: captureLog().log, ...testReactorHost() });
  t.teardown(() => runtime.close());
  await runtime.register([reactor('s/counter', COUNTER)]);
  await t.rejects(
    runtime.register([reactor('s/bomb', 'const o = {}; for (let i = 0; ; i++) o["k" + i] = i;', { memory_limit_mb: 8 })]),
    /"bomb" \(s\/bomb\): (crashed the reactor host while starting|top-level code exceeded the memory limit)/,
  );
  t.same(await count(runtime), { n: 1 });
  t.same(runtime.keys(), ['s/counter']);
});

t.test('a reactor that keeps crashing the host is suspended; the others keep working', async (t) => {
  const cap = captureLog();
  const runtime = await ReactorRuntime.start({
    log: cap.log,
    ...testReactorHost(),
    suspension: { strikes: 2, windowMs: 60_000, suspendMs: 4000 },
  });
  t.teardown(() => runtime.close());
  const bomb = fn('const m = new Map(); for (let i = 0; ; i++) m.set("k" + i, i);');
  await runtime.register([reactor('s/bomb', bomb, { memory_limit_mb: 8 }), reactor('s/counter', COUNTER)]);
  for (let i = 1; i <= 2; i++) {
    const err = await serviceError(runtime.invoke('s/bomb', { args: null }));
    t.equal(err.code, 'reactor_unavailable', `strike ${i}: the host went down`);
    t.notMatch(err.detail, /suspended/);
  }
  const catastrophic = () => cap.entries().filter((e) => String(e.msg).startsWith('catastrophic isolate error') && e.reactor === 's/bomb').length;
  // Bounds of the moment the suspension began (the second strike) and of the refusal, to check
  // Retry-After exactly whatever the machine's speed (it was a < 100 ms assertion). The refusal
  // comes right after the strike, before anything waits for the new host (issue 30: after the
  // restart, a loaded machine made it 3 s late into the 4 s suspension, too late to tell 1 s apart).
  const strike2 = cap.entries().filter((e) => e.msg === 'reactor suspended: it crashed the reactor host repeatedly' && e.reactor === 's/bomb');
  t.equal(strike2.length, 1, 'suspended after the second strike');
  const suspendedAt = Date.parse(String(strike2[0]!.time));
  const refusedFrom = Date.now();
  const suspended = await serviceError(runtime.invoke('s/bomb', { args: null }));
  const refusedBy = Date.now();
  t.match(suspended, { code: 'reactor_unavailable', status: 503, detail: /suspended/ });
  // Regression: Retry-After said 1 s while the suspension lasts its full duration. It is the
  // seconds left of the 4 s suspension at the refusal (the log line is written a moment after the suspension is set: 50 ms of slack).
  const retryAfter = Number(suspended.headers?.['Retry-After']);
  const most = Math.ceil((suspendedAt + 4000 - refusedFrom) / 1000);
  const least = Math.max(1, Math.ceil((suspendedAt - 50 + 4000 - refusedBy) / 1000));
  t.ok(retryAfter >= least && retryAfter <= most, `Retry-After ${retryAfter} s: what is left of the 4 s suspension (${least}..${most}), not 1 s`);
  t.ok(most >= 2, `the refusal came ${refusedFrom - suspendedAt} ms into the suspension, early enough to tell 1 s apart`);
  t.same(await count(runtime), { n: 1 }, 'the restarted host serves');
  const pid = runtime.hostPid;
  t.equal(catastrophic(), 2, 'two strikes; the refused call did not run the bomb');
  const again = await serviceError(runtime.invoke('s/bomb', { args: null }));
  t.match(again, { code: 'reactor_unavailable', status: 503, detail: /suspended/ }, 'still suspended');
  t.same(await count(runtime), { n: 2 }, 'other reactors are served');
  t.equal(runtime.hostPid, pid, 'refused without reaching the host: the host was not touched');
  t.equal(catastrophic(), 2, 'and the bomb did not run again');

  // Calls while suspended are refused at once without reaching the host, so polling is harmless:
  // the first call that is not refused as suspended is the end of the suspension.
  const after = await waitFor(
    async () => {
      const e = await serviceError(runtime.invoke('s/bomb', { args: null }));
      return /suspended/.test(e.detail ?? '') ? undefined : e;
    },
    { timeoutMs: 30_000, intervalMs: 50, what: 'the end of the suspension' },
  );
  t.ok(Date.now() - suspendedAt >= 3900, `the suspension lasted its 4 s (called again after ${Date.now() - suspendedAt} ms)`);
  t.notMatch(after.detail, /suspended/, 'after the suspension the reactor is called again');
});

t.test('close: calls in flight and later calls get 503', async (t) => {
  const runtime = await ReactorRuntime.start({ log: captureLog().log, ...testReactorHost() });
  t.teardown(() => runtime.close());
  await runtime.register([reactor('s/slow', SLOW, { timeout_ms: 5000 })]);
  const inFlight = runtime.invoke('s/slow', { args: { ms: 2000 } });
  await hostBusy(runtime.hostPid!);
  await runtime.close();
  t.equal((await serviceError(inFlight)).code, 'reactor_unavailable');
  t.equal((await serviceError(runtime.invoke('s/slow', { args: { ms: 1 } }))).code, 'reactor_unavailable');
});

t.test('a host entry that cannot start fails start()', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tp-host-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const exits = join(dir, 'exits.mjs');
  writeFileSync(exits, 'process.exit(3);\n');
  await t.rejects(ReactorRuntime.start({ log: captureLog().log, ...testReactorHost(), hostPath: exits }), /exited while starting/);
  await t.rejects(ReactorRuntime.start({ log: captureLog().log, ...testReactorHost(), hostPath: join(dir, 'missing.js') }), /not found/);
});
