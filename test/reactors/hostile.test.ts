/**
 * Hostile reactor code (issue 4): CPU and memory bombs, and attempts to reach the host. Each must
 * end in an error for its own call, never crash this (main) process, and leave the runtime able to
 * serve a normal reactor right after, while another client keeps calling a normal reactor.
 *
 * Some memory bombs (object-property, Map, Set growth; `new Array(1e8).fill()`) hit isolated-vm
 * 5.0.4's catastrophic out-of-memory path, which takes the host process down: those calls get
 * reactor_unavailable (503) and the runtime restarts the host.
 */
import t from 'tap';
import { ServiceError } from '../../src/errors.js';
import { ReactorRuntime } from '../../src/reactors/runtime.js';
import { captureLog, fn, reactor, serviceError } from './helpers.js';
import { testReactorHost } from '../helpers/cli-entry.js';

const cap = captureLog();
const runtime = await ReactorRuntime.start({ log: cap.log, restartWaitMs: 10_000, ...testReactorHost() });
t.setTimeout(300_000);
t.teardown(() => runtime.close());

/**
 * What each bomb must end in, by the README's error table: a timeout is 504 reactor_timeout, an
 * uncaught error (a refused allocation, a stack overflow) 500 reactor_runtime_error, a result over
 * 5 MB 500 reactor_invalid_output.
 *
 * Heap growth ends in one of two documented answers, and which one is isolated-vm's choice, not
 * the bomb's: 500 reactor_out_of_memory, or 503 reactor_unavailable when the catastrophic path
 * takes the host down. Runs of this suite saw set-growth end both ways with the same code and
 * limits (reported, not pinned). These bombs get the longest timeout (30 s), so a timeout never
 * decides for them: with 500 ms, GC near the limit made set-growth, array-1e8-fill and array-push
 * answer 504 now and then, which the test did not accept (a flake). On isolated-vm 6.2 (Node 24)
 * array-1e8-fill takes 18.4 s to reach a 16 MB limit in a bare isolate with one context, no
 * tokenproxy code involved (`new Array(1e8).fill(0)` under `ctx.eval`), and once hit the 30 s
 * timeout in a loaded run. 30 s is the most a reactor may have (the spec's limit), so for that bomb
 * alone the timeout is a third documented way to be stopped; the service serving on is asserted
 * all the same.
 */
const TIMEOUT = { reactor_timeout: 504 };
const THROWN = { reactor_runtime_error: 500 };
const HEAP = { reactor_out_of_memory: 500, reactor_unavailable: 503 };

/** [name, body, the codes (with their README status) that count as "stopped"] */
const bombs: Array<[string, string, Record<string, number>]> = [
  ['while-true', 'while (true) {}', TIMEOUT],
  ['async-loop', 'for (;;) { await null; }', TIMEOUT],
  ['object-properties', 'const o = {}; for (let i = 0; ; i++) o["k" + i] = i;', HEAP],
  ['map-growth', 'const m = new Map(); for (let i = 0; ; i++) m.set("k" + i, i);', HEAP],
  ['set-growth', 'const s = new Set(); for (let i = 0; ; i++) s.add(i);', HEAP],
  ['array-1e8-fill', 'const a = new Array(1e8); a.fill(0); return a.length;', { ...HEAP, ...TIMEOUT }],
  // isolated-vm 5.0.4 (Node 20) runs out of memory copying the array out; 6.x (Node 22/24) copies
  // the holey array and its JSON is over 5 MB: 500 reactor_invalid_output, also a documented answer.
  // On 6.2 the in-sandbox JSON.stringify of 1e8 holes (500 M characters) also reached the 30 s
  // timeout in a loaded Node 24 CI run: like array-1e8-fill, a third way to be stopped.
  ['array-1e8-returned', 'return { raw: new Array(1e8) };', { ...HEAP, ...TIMEOUT, reactor_invalid_output: 500 }],
  ['array-push', 'const a = []; for (;;) a.push({ x: a.length });', HEAP],
  // Allocations V8 refuses outright (RangeError) and a stack overflow: thrown, catchable errors.
  ['string-doubling', 'let s = "x"; for (;;) s += s;', THROWN],
  ['arraybuffer-1gb', 'return new ArrayBuffer(1024 * 1024 * 1024).byteLength;', THROWN],
  ['typed-array-2gb', 'return new Uint8Array(2 ** 31).length;', THROWN],
  ['deep-recursion', 'const f = (n) => f(n + 1) + 1; return f(0);', THROWN],
  ['output-over-5mb', 'return "x".repeat(6 * 1024 * 1024);', { reactor_invalid_output: 500 }],
  ['never-settles', 'await new Promise(() => {});', TIMEOUT],
];

/** A bomb's timeout: 500 ms when only a timeout stops it, 10 s when a timeout is one of its ends, else 30 s. */
function timeoutOf(codes: Record<string, number>): number {
  if (!('reactor_timeout' in codes)) return 30_000;
  return 'reactor_out_of_memory' in codes ? 10_000 : 500;
}

/** Escapes: each must throw inside the sandbox (a 500 for its own call), never reach the host. */
const escapes: Array<[string, string]> = [
  ['process', 'return process.pid;'],
  ['require', 'return require("fs").readdirSync("/");'],
  ['constructor-constructor', 'return globalThis.constructor.constructor("return process")().pid;'],
  ['function-this', 'return Function("return this")().process.mainModule;'],
  ['new-function-require', 'return new Function("return require")()("child_process");'],
  ['console-constructor', 'return console.log.constructor("return process")().env;'],
  ['eval-process', 'return eval("process").pid;'],
  ['dynamic-import', 'const fs = await import("fs"); return fs.readdirSync("/");'],
  ['async-function-ctor', 'const AF = (async () => {}).constructor; return (await AF("return process")()).pid;'],
  ['timers', 'return await new Promise((r) => setTimeout(r, 10));'],
  ['fetch', 'return (await fetch("http://127.0.0.1/")).status;'],
  ['webassembly', 'return WebAssembly.Memory.name;'],
  ['harness-hook', 'return __tp_define.toString();'],
  ['stack-frames', `
    Error.prepareStackTrace = (_, frames) => frames.map((f) => typeof f.getThis() + ':' + (f.getFunction() ? 'fn' : 'none'));
    const frames = new Error().stack;
    // Only the sandbox's own frames are visible; none carries a host object.
    const host = frames.map((x) => x).filter(() => typeof process !== 'undefined');
    if (host.length) return host;
    throw new Error('no host frames: ' + frames.length);`],
];

t.before(() =>
  runtime.register([
    reactor('h/normal', fn('return { raw: { double: req.args.n * 2 } };')),
    // Only the bombs that must end in a timeout get a short one; for the rest memory, a thrown
    // error or the output limit must decide, never the clock (a 6 MB output took over 500 ms to
    // copy out on a loaded machine with isolated-vm 6).
    // The two array-1e8 bombs, for which a timeout is itself a documented end, get 10 s: on
    // isolated-vm 6.2 under load both ran to 30 s, a core busy all the while.
    ...bombs.map(([name, body, codes]) => reactor(`h/${name}`, fn(body), { timeout_ms: timeoutOf(codes), memory_limit_mb: 16 })),
    ...escapes.map(([name, body]) => reactor(`h/escape-${name}`, fn(body), { timeout_ms: 1000 })),
  ]),
);

/**
 * Keeps calling the normal reactor until stopped. Calls may fail with 503 only while a host is
 * being replaced; every other outcome must be the right answer.
 */
function backgroundClient(): { stop(): Promise<{ ok: number; unavailable: number; wrong: unknown[] }> } {
  let running = true;
  const tally = { ok: 0, unavailable: 0, wrong: [] as unknown[] };
  const loop = (async () => {
    for (let n = 0; running; n++) {
      try {
        const out = await runtime.invoke('h/normal', { args: { n } });
        if (JSON.stringify(out) === JSON.stringify({ raw: { double: n * 2 } })) tally.ok++;
        else tally.wrong.push(out);
      } catch (err) {
        if (err instanceof ServiceError && err.code === 'reactor_unavailable') tally.unavailable++;
        else tally.wrong.push(err);
      }
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return tally;
    },
  };
}

/** The bombs whose call took the host down in this run (reactor_unavailable, host replaced). */
const tookHostDown: string[] = [];

t.test('bombs end in an error for their own call; the runtime keeps serving', async (t) => {
  for (const [name, , codes] of bombs) {
    const client = backgroundClient();
    const pidBefore = runtime.hostPid;
    const started = performance.now();
    const err = await serviceError(runtime.invoke(`h/${name}`, { args: null }));
    const took = Math.round(performance.now() - started);
    t.ok(err.code in codes, `${name}: ${err.code} (${err.status}) after ${took} ms, one of ${Object.keys(codes).join(', ')}`);
    t.equal(err.status, codes[err.code], `${name}: the README's status for ${err.code}`);
    // Right after: a normal call is served (after a host restart when the bomb took it down).
    t.same(await runtime.invoke('h/normal', { args: { n: 21 } }), { raw: { double: 42 } }, `${name}: normal call served`);
    const tally = await client.stop();
    t.same(tally.wrong, [], `${name}: the other client only ever got right answers or 503`);
    t.ok(tally.ok > 0, `${name}: the other client was served (${tally.ok} ok, ${tally.unavailable} × 503)`);
    if (err.code === 'reactor_unavailable') {
      t.not(runtime.hostPid, pidBefore, `${name}: the host was replaced`);
      tookHostDown.push(name);
    } else t.equal(runtime.hostPid, pidBefore, `${name}: the host survived`);
  }
});

t.test('escape attempts throw inside the sandbox', async (t) => {
  for (const [name] of escapes) {
    const err = await serviceError(runtime.invoke(`h/escape-${name}`, { args: null }));
    t.equal(err.code, 'reactor_runtime_error', `${name}: ${err.errors?.error?.[0] ?? err.message}`);
  }
  t.same(await runtime.invoke('h/normal', { args: { n: 1 } }), { raw: { double: 2 } });
});

// Whether a heap bomb takes the host down is isolated-vm's choice (see above), so a run may have no
// restart at all: then the log must hold none; when this run did restart the host, every restart
// is logged, naming the reactor that caused it (issue 30: the check used to need a crash that
// happens only sometimes). On isolated-vm 6.2 array-1e8-fill's thread used to run on after its
// 504, and isolated-vm's abort came seconds later, during the next bomb: the log named
// array-1e8-fill while array-1e8-returned got the 503 (a CI failure). The host now ends itself
// when a thread does not stop (src/reactors/isolate.ts STUCK_GRACE_MS), so the call that gets the
// 503 is the one whose reactor is named.
t.test('the host restarts are in the log, with the reactor that caused them', async (t) => {
  const entries = cap.entries();
  const catastrophic = entries.filter((e) => typeof e.msg === 'string' && e.msg.startsWith('catastrophic isolate error'));
  const restarted = entries.filter((e) => e.msg === 'reactor host restarted');
  t.comment(`this run: ${tookHostDown.length} host restart(s)${tookHostDown.length ? ` (${tookHostDown.join(', ')})` : ''}`);
  t.same(catastrophic.map((e) => e.reactor), tookHostDown.map((name) => `h/${name}`), 'one catastrophic error per host taken down, naming its reactor, in order');
  t.equal(restarted.length, tookHostDown.length, 'one "reactor host restarted" per host taken down');
  t.ok(restarted.every((e) => typeof e.reactorHost === 'number'), 'each names the new host');
});
