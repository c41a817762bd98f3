/**
 * Reactor runtime benchmark (issue 4): what the host process costs on top of isolated-vm.
 *
 *   node --no-node-snapshot --import tsx bench/reactors-runtime.ts [--calls N]
 *
 * Baseline, in this process: a warm call into an isolate through the same harness the host uses
 * (src/reactors/pool.ts), and a bare `Reference.apply` on a trivial function. Then through the
 * host: warm calls (p50/p99) with a 1 KB payload, with JSON and with the 'advanced' IPC
 * serialization, a 1 MB payload, 32 concurrent calls (throughput), and cold starts (p50): a
 * fresh isolate built and called, in-process and as seen through the host. Prints ratios against
 * the in-process baseline from the same run.
 *
 * This process imports isolated-vm for the baseline on purpose; the service's main process never
 * does (it talks to the host).
 */
import { loadIsolatedVm, type Reference } from '../src/reactors/ivm.js';
import { pino } from 'pino';
import { ReactorPool } from '../src/reactors/pool.js';
import { Sandbox } from '../src/reactors/isolate.js';
import type { HostReactorDef } from '../src/reactors/protocol.js';
import { ReactorRuntime } from '../src/reactors/runtime.js';

const argv = process.argv.slice(2);
const CALLS = Number(argv[argv.indexOf('--calls') + 1]) || 5000;
const WARMUP = 500;

const CODE = `module.exports = async function ({ args, configuration }) {
  return { raw: { n: args.items.length, first: args.items[0], region: configuration.region } };
};`;

const def = (key: string, over: Partial<HostReactorDef> = {}): HostReactorDef => ({
  key,
  name: key,
  code: CODE,
  configuration: { region: 'eu' },
  timeout_ms: 5000,
  warm_concurrency: 1,
  max_concurrency: 64,
  queue_limit: 1000,
  memory_limit_mb: 64,
  ...over,
});

/** ~1 KB of JSON args (and a bigger variant). */
function payload(bytes: number): { items: string[] } {
  const item = 'x'.repeat(40);
  const items: string[] = [];
  while (JSON.stringify({ items }).length + item.length + 3 <= bytes) items.push(item);
  return { items };
}
const ARGS_1K = payload(1024);
const ARGS_1M = payload(1024 * 1024);

interface Stats {
  p50: number;
  p99: number;
  mean: number;
}

function stats(samples: number[]): Stats {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q: number): number => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
  return { p50: at(0.5), p99: at(0.99), mean: s.reduce((a, b) => a + b, 0) / s.length };
}

async function measure(n: number, fn: () => Promise<unknown>): Promise<Stats> {
  for (let i = 0; i < Math.min(WARMUP, n); i++) await fn();
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    samples.push(performance.now() - t0);
  }
  return stats(samples);
}

const us = (ms: number): string => `${(ms * 1000).toFixed(1).padStart(8)} µs`;
const rows: Array<[string, Stats, string?]> = [];
function report(name: string, s: Stats, note?: string): void {
  rows.push([name, s, note]);
  console.log(`${name.padEnd(44)} p50 ${us(s.p50)}   p99 ${us(s.p99)}${note ? `   ${note}` : ''}`);
}

const loaded = loadIsolatedVm();
const silent = pino({ level: 'silent' });
console.log(`node ${process.version}, ${loaded.name} ${loaded.version}, ${CALLS} calls per row (after ${WARMUP} warm-up calls)\n`);

// ---- baseline: in-process isolated-vm ----
const bare = new loaded.ivm.Isolate({ memoryLimit: 64 });
const bareCtx = await bare.createContext();
const bareFn = (await bareCtx.eval('(function (s) { return s.length; })', { reference: true })) as Reference;
const json1k = JSON.stringify(ARGS_1K);
const bareStats = await measure(CALLS, () => bareFn.apply(undefined, [json1k], { timeout: 5000, result: { copy: true } }));
report('in-process: bare Reference.apply (1 KB string)', bareStats);
bare.dispose();

const events = { onCatastrophicError: (): void => undefined, log: (): void => undefined };
const pool = new ReactorPool(def('bench/inproc'), 10_000, events);
await pool.init();
const rtJson = await ReactorRuntime.start({ log: silent, serialization: 'json' });
const rtAdv = await ReactorRuntime.start({ log: silent, serialization: 'advanced' });
for (const rt of [rtJson, rtAdv]) await rt.register([def('bench/warm'), def('bench/big', { memory_limit_mb: 128 })]);

/**
 * The three warm paths run interleaved in small rounds, rotating their order, so a noisy
 * neighbour on the machine (other test runs, other benchmarks) hits them all alike.
 */
async function interleaved(calls: number, round: number, paths: Record<string, () => Promise<unknown>>): Promise<Record<string, Stats>> {
  const names = Object.keys(paths);
  const samples: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  for (const n of names) for (let i = 0; i < Math.min(WARMUP, calls); i++) await paths[n]!();
  for (let done = 0, r = 0; done < calls; done += round, r++) {
    for (let k = 0; k < names.length; k++) {
      const n = names[(k + r) % names.length]!;
      for (let i = 0; i < round; i++) {
        const t0 = performance.now();
        await paths[n]!();
        samples[n]!.push(performance.now() - t0);
      }
    }
  }
  return Object.fromEntries(names.map((n) => [n, stats(samples[n]!)]));
}

const warm = await interleaved(CALLS, 50, {
  inproc: async () => {
    const r = await pool.invoke(JSON.stringify(ARGS_1K));
    if (!r.ok) throw new Error('in-process call failed');
    return JSON.parse(r.output);
  },
  json: () => rtJson.invoke('bench/warm', { args: ARGS_1K }),
  advanced: () => rtAdv.invoke('bench/warm', { args: ARGS_1K }),
});
const baseline = warm.inproc!;
const jsonWarm = warm.json!;
const advWarm = warm.advanced!;
report('in-process: warm call via harness (1 KB) [baseline]', baseline);
report('host (json): warm call (1 KB)', jsonWarm, `${(jsonWarm.p50 / baseline.p50).toFixed(1)}× baseline p50`);
report('host (advanced): warm call (1 KB)', advWarm, `${(advWarm.p50 / baseline.p50).toFixed(1)}× baseline p50`);

const big = await interleaved(Math.max(50, Math.floor(CALLS / 50)), 5, {
  inproc: async () => {
    const r = await pool.invoke(JSON.stringify(ARGS_1M));
    if (!r.ok) throw new Error('in-process call failed');
    return JSON.parse(r.output);
  },
  json: () => rtJson.invoke('bench/big', { args: ARGS_1M }),
  advanced: () => rtAdv.invoke('bench/big', { args: ARGS_1M }),
});
report('in-process: warm call (1 MB)', big.inproc!);
report('host (json): warm call (1 MB)', big.json!, `${(big.json!.p50 / big.inproc!.p50).toFixed(1)}× in-process`);
report('host (advanced): warm call (1 MB)', big.advanced!, `${(big.advanced!.p50 / big.inproc!.p50).toFixed(1)}× in-process`);
pool.close();
await rtJson.close();
await rtAdv.close();

// Cold start in-process: build an isolate (code cache warm, as in the host) and call it once.
const compiled = {};
const coldInproc: number[] = [];
for (let i = 0; i < 200; i++) {
  const t0 = performance.now();
  const sb = await Sandbox.create(def('bench/cold'), compiled, () => undefined);
  await sb.run(json1k);
  coldInproc.push(performance.now() - t0);
  sb.dispose();
}
const coldInprocStats = stats(coldInproc.slice(20));
report('in-process: cold start (new isolate + first call)', coldInprocStats);

// Throughput at 32 concurrent calls, and cold starts as seen through the host.
{
  const runtime = await ReactorRuntime.start({ log: silent });
  try {
    await runtime.register([def('bench/warm', { warm_concurrency: 1, max_concurrency: 32 })]);
    const total = Math.max(CALLS, 2000);
    for (const concurrency of [1, 32]) {
      let next = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next++ < total) await runtime.invoke('bench/warm', { args: ARGS_1K });
        }),
      );
      const secs = (performance.now() - t0) / 1000;
      console.log(`${`host: throughput, ${concurrency} concurrent`.padEnd(44)} ${Math.round(total / secs)} calls/s`);
    }
  } catch (err) {
    console.log('throughput rows failed:', err instanceof Error ? err.message : err);
  } finally {
    await runtime.close();
  }
}
{
  // Hold the warm isolate with a slow call; a second call then cold-starts an extra isolate.
  // idleMs 1 disposes that extra right after, so every round is a true cold start.
  const HOLD = `module.exports = async function ({ args }) {
    if (args.hold) { const e = Date.now() + args.hold; while (Date.now() < e) {} }
    return { raw: args.n };
  };`;
  const runtime = await ReactorRuntime.start({ log: silent, idleMs: 1 });
  try {
    await runtime.register([def('bench/hold', { code: HOLD, max_concurrency: 2 })]);
    const samples: number[] = [];
    for (let i = 0; i < 200; i++) {
      const holder = runtime.invoke('bench/hold', { args: { hold: 30, n: i } });
      await new Promise((r) => setTimeout(r, 2));
      const t0 = performance.now();
      await runtime.invoke('bench/hold', { args: { n: i } });
      samples.push(performance.now() - t0);
      await holder;
      await new Promise((r) => setTimeout(r, 5));
    }
    const cold = stats(samples.slice(20));
    report('host: cold start (extra isolate, end to end)', cold, `${(cold.p50 / baseline.p50).toFixed(0)}× baseline p50`);
  } finally {
    await runtime.close();
  }
}

console.log('\nratios (p50):');
console.log(`  host json warm / in-process warm      ${(jsonWarm.p50 / baseline.p50).toFixed(2)}×  (+${us(jsonWarm.p50 - baseline.p50).trim()} IPC)`);
console.log(`  host advanced warm / in-process warm  ${(advWarm.p50 / baseline.p50).toFixed(2)}×  (+${us(advWarm.p50 - baseline.p50).trim()} IPC)`);
console.log(`  json / advanced serialization         ${(jsonWarm.p50 / advWarm.p50).toFixed(2)}×`);
console.log(`  in-process cold start / warm call     ${(coldInprocStats.p50 / baseline.p50).toFixed(0)}×`);
