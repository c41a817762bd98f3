/**
 * POST /tokenize throughput, as ratios against baselines measured in the same run:
 *
 *   1. the single-core crypto limit: what one token costs in crypto (KeyRing.seal of a card's
 *      JSON with AES-256-GCM + one HMAC fingerprint), in-process, tokens/s;
 *   2. /tokenize with 100-token bodies (cards and strings) on the embedded store and on Redis,
 *      tokens/s as a ratio to (1) (target >= 0.5x);
 *   3. single-token /tokenize (one card definition) on both stores, req/s as a ratio to a bare
 *      node:http server answering a constant body of the same size (target >= 0.3x);
 *   4. the same single-token rows on tokenproxy run as its own process (the CLI) with
 *      `server.workers: 1` and `2`, at log level warn and info (info: an access line a request,
 *      which with 2 workers goes through the primary), and the ratio 2 vs 1 (no target: the
 *      machine's cores are shared with the load generator). --no-workers skips them.
 *
 *   npm run bench -- tokenize [--rounds 3] [--duration 3000] [--warmup 500] [--connections 64]
 *                             [--bulk-connections 16] [--crypto-ms 2000]
 *                             [--load process|worker|inline] [--no-redis]
 *
 * All servers (tokenproxy on each store, the bare server) run in this process; the load generator
 * (lib/load.ts) runs in a child process by default, so it has its own event loop and this
 * process's CPU time is the servers' alone ("srv cpu"). Everything shares the machine's cores with
 * redis-server and whatever else runs, so each row is measured in several interleaved rounds and
 * the median is printed with its range. Results also go to bench/results/tokenize.json. Speed is
 * reported, never asserted: the exit code is non-zero only when a response was not 200.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { KeyRing } from '../src/crypto/keyring.js';
import { createStore } from '../src/store/factory.js';
import { startBareServer, type BareServer } from './lib/bare.js';
import { startCliService } from './lib/cli-service.js';
import { runLoad, startLoadRunner, type LoadOptions, type LoadResult, type LoadRunner } from './lib/load.js';
import { startBenchRunner } from './lib/wrk.js';
import { startBenchRedis, type BenchRedis } from './lib/redis.js';
import { machine, num, ratio, table } from './lib/report.js';
import { BENCH_KEY, BENCH_TENANT, startBenchService, type BenchService } from './lib/service.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    duration: { type: 'string', default: '3000' },
    warmup: { type: 'string', default: '500' },
    connections: { type: 'string', default: '64' },
    'bulk-connections': { type: 'string', default: '16' },
    'crypto-ms': { type: 'string', default: '2000' },
    load: { type: 'string', default: 'wrk' },
    'no-install': { type: 'boolean', default: false },
    'no-redis': { type: 'boolean', default: false },
    'no-workers': { type: 'boolean', default: false },
  },
});
const ROUNDS = Math.max(1, Number(args.rounds));
const DURATION_MS = Number(args.duration);
const WARMUP_MS = Number(args.warmup);
const SINGLE_CONNECTIONS = Number(args.connections);
const BULK_CONNECTIONS = Number(args['bulk-connections']);
const CRYPTO_MS = Number(args['crypto-ms']);
const LOAD_MODES = ['wrk', 'process', 'worker', 'inline'] as const;
const isLoadMode = (v: string): v is (typeof LOAD_MODES)[number] => (LOAD_MODES as readonly string[]).includes(v);
if (!isLoadMode(args.load)) throw new Error('--load must be wrk, process, worker or inline');
const LOAD_MODE = args.load;
const BULK_TARGET = 0.5;
const SINGLE_TARGET = 0.3;

// Luhn-valid test numbers of several brands and lengths.
const NUMBERS = ['4242424242424242', '5555555555554444', '378282246310005', '6011111111111117', '3056930009020004', '4000056655665556'];
const cardDef = (i: number) => ({ type: 'card', data: { number: NUMBERS[i % NUMBERS.length], expiration_month: (i % 12) + 1, expiration_year: 2030, cvc: '123' } });
/** 100 tokens: 50 card definitions (with cvc) and 50 plain strings, interleaved. */
const BULK_CARDS = 50;
const BULK_STRINGS = 50;
const BULK_BODY = JSON.stringify(Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? cardDef(i) : `customer-${i}-value`)));
const SINGLE_BODY = JSON.stringify(cardDef(0));
const HEADERS = { 'content-type': 'application/json', 'svc-api-key': BENCH_KEY };

const median = (xs: number[]) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

// ---- 1. the crypto limit ----------------------------------------------------------------------

interface CryptoSample {
  tokensPerSec: number;
  /** CPU time of this process per token (steadier than wall time on a busy machine). */
  cpuUsPerToken: number;
}

/** Calls `op` (one call = `tokensPerOp` tokens) for about `ms` on this thread. */
function timeLoop(ms: number, tokensPerOp: number, op: () => void): CryptoSample {
  for (let i = 0; i < 500; i++) op(); // JIT and the per-tenant key cache
  let ops = 0;
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const end = start + ms;
  let now = start;
  while (now < end) {
    for (let i = 0; i < 64; i++) op();
    ops += 64;
    now = performance.now();
  }
  const cpu = process.cpuUsage(cpu0);
  const tokens = ops * tokensPerOp;
  return { tokensPerSec: (tokens / (now - start)) * 1000, cpuUsPerToken: (cpu.user + cpu.system) / tokens };
}

type CryptoBench = () => { limit: CryptoSample; bulkMix: CryptoSample };

async function cryptoBench(store: Awaited<ReturnType<typeof createStore>>): Promise<CryptoBench> {
  const ring = await KeyRing.open(randomBytes(32), store);
  const aad = `${BENCH_TENANT}:3f0c9a52-8d7e-4b1a-9c2d-5e6f7a8b9c0d`;
  const card = { number: NUMBERS[0], expiration_month: 12, expiration_year: 2030 };
  const cardJson = JSON.stringify(card); // what the vault seals: the card without its cvc
  const strJson = JSON.stringify('customer-1-value');
  let sink = 0;
  const perRound = CRYPTO_MS / ROUNDS;
  return () => {
    const limit = timeLoop(perRound, 1, () => {
      sink += ring.seal(cardJson, aad).length + ring.fingerprint(BENCH_TENANT, 'card', card.number).length;
    });
    // For comparison: the crypto the vault does for the 100-token body (a card seals its data and
    // its cvc and takes a fingerprint; a plain string seals its value only).
    const bulkMix = timeLoop(perRound / 2, 100, () => {
      for (let i = 0; i < BULK_CARDS; i++) {
        sink += ring.seal(cardJson, aad).length + ring.seal('123', `${aad}:cvc`).length + ring.fingerprint(BENCH_TENANT, 'card', card.number).length;
      }
      for (let i = 0; i < BULK_STRINGS; i++) sink += ring.seal(strJson, aad).length;
    });
    if (sink < 0) throw new Error('unreachable');
    return { limit, bulkMix };
  };
}

// ---- 2 and 3: HTTP rows -----------------------------------------------------------------------

interface RoundResult extends LoadResult {
  /** This process's CPU (the servers', when the load runs in a child process) per request, µs. */
  srvCpuUsPerRequest: number;
  /** This process's CPU time / wall time during the run: 1.0 = one core busy. */
  srvCoreBusy: number;
}

interface RowSpec {
  name: string;
  store: string;
  tokensPerRequest: number;
  opts: LoadOptions;
  rounds: RoundResult[];
  /** A `server.workers` row (4.): compared with its pair, no target of its own. */
  workers?: { n: number; logLevel: string; problems: () => string[] };
}

/** One request outside the measurement: proves the route answers 200 with the expected shape. */
async function probe(url: string, body: string, expectTokens: number): Promise<Buffer> {
  const res = await request(`${url}/tokenize`, { method: 'POST', headers: HEADERS, body });
  const buf = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== 200) throw new Error(`probe: /tokenize answered ${res.statusCode}: ${buf.toString('utf8').slice(0, 300)}`);
  const parsed: unknown = JSON.parse(buf.toString('utf8'));
  const n = Array.isArray(parsed) ? parsed.length : 1;
  if (n !== expectTokens) throw new Error(`probe: expected ${expectTokens} tokens, got ${n}`);
  return buf;
}

function loadOpts(url: string, body: string, connections: number): LoadOptions {
  return { url, method: 'POST', headers: HEADERS, body, connections, durationMs: DURATION_MS, warmupMs: WARMUP_MS };
}

async function measure(runner: LoadRunner | null, opts: LoadOptions): Promise<RoundResult> {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const r = runner ? await runner.run(opts) : await runLoad(opts);
  const wallUs = (performance.now() - t0) * 1000;
  const cpu = process.cpuUsage(cpu0);
  const cpuUs = cpu.user + cpu.system;
  // wrk and the Node child process keep the generator's CPU out of this process's figures.
  const own = runner?.kind === 'process' || runner?.kind === 'wrk';
  return { ...r, srvCpuUsPerRequest: own ? cpuUs / (r.requests + r.warmupRequests) : NaN, srvCoreBusy: own ? cpuUs / wallUs : NaN };
}

// ---- main -------------------------------------------------------------------------------------

async function main(): Promise<number> {
  const started = performance.now();
  const env = machine();
  const load0 = loadavg()[0];
  const loadLabel = {
    wrk: 'wrk (C, its own process; falls back to the Node child process when wrk cannot be had)',
    process: 'child process (own event loop; this process\'s CPU = the servers\')',
    worker: 'worker thread (own event loop, same process; no server CPU figure)',
    inline: 'in-thread (shares the servers\' event loop; no server CPU figure)',
  }[LOAD_MODE];
  console.log(`tokenize benchmark: node ${env.node}, ${env.cores} x ${env.cpu}, load average ${load0.toFixed(2)} at start`);
  console.log(`load generator: ${loadLabel}`);
  console.log(`each row: ${ROUNDS} interleaved rounds of ${WARMUP_MS} ms warm-up + ${DURATION_MS} ms; medians shown, [min-max] of req/s beside`);
  console.log(`100-token body: ${BULK_CARDS} card definitions (with cvc) + ${BULK_STRINGS} strings, ${BULK_BODY.length} B; single-token body: one card definition, ${SINGLE_BODY.length} B\n`);

  const cleanups: Array<() => Promise<void>> = [];
  const rows: RowSpec[] = [];
  let redis: BenchRedis | null = null;
  let redisNote = '';
  const cryptoSamples: Array<ReturnType<CryptoBench>> = [];
  try {
    const keyStore = await createStore({ kind: 'embedded', path: ':memory:', url: '', key_prefix: '' });
    cleanups.push(() => keyStore.close());
    const crypto = await cryptoBench(keyStore);

    const services: BenchService[] = [];
    const embedded = await startBenchService({ kind: 'embedded' });
    cleanups.push(() => embedded.stop());
    services.push(embedded);
    if (args['no-redis']) redisNote = 'Redis rows skipped (--no-redis)';
    else {
      redis = await startBenchRedis();
      if (!redis) redisNote = 'Redis rows skipped: redis-server is not installed';
      else {
        const r = redis;
        cleanups.push(() => r.stop());
        const svc = await startBenchService({ kind: 'redis', url: r.url });
        cleanups.push(() => svc.stop());
        services.push(svc);
      }
    }
    let singleResponse = 0;
    for (const svc of services) {
      await probe(svc.url, BULK_BODY, 100);
      singleResponse = (await probe(svc.url, SINGLE_BODY, 1)).length;
    }
    const bare: BareServer = await startBareServer(Buffer.from(`"${'x'.repeat(Math.max(0, singleResponse - 2))}"`));
    cleanups.push(() => bare.close());

    const kind = (s: BenchService) => (s === embedded ? 'embedded' : 'redis');
    for (const svc of services) {
      rows.push({ name: '/tokenize, 100-token bodies', store: kind(svc), tokensPerRequest: 100, opts: loadOpts(`${svc.url}/tokenize`, BULK_BODY, BULK_CONNECTIONS), rounds: [] });
    }
    for (const svc of services) {
      rows.push({ name: '/tokenize, single token', store: kind(svc), tokensPerRequest: 1, opts: loadOpts(`${svc.url}/tokenize`, SINGLE_BODY, SINGLE_CONNECTIONS), rounds: [] });
    }
    if (!args['no-workers']) {
      for (const logLevel of ['warn', 'info']) {
        for (const n of [1, 2]) {
          const cli = await startCliService({ workers: n, logLevel });
          cleanups.push(() => cli.stop());
          await probe(cli.url, SINGLE_BODY, 1);
          rows.push({
            name: `/tokenize, single token, CLI process, workers ${n}, log ${logLevel}`, store: 'embedded', tokensPerRequest: 1,
            opts: loadOpts(`${cli.url}/tokenize`, SINGLE_BODY, SINGLE_CONNECTIONS), rounds: [], workers: { n, logLevel, problems: cli.problems },
          });
        }
      }
    }
    rows.push({ name: `bare node:http, ${singleResponse} B body`, store: '-', tokensPerRequest: 0, opts: loadOpts(`${bare.url}/`, SINGLE_BODY, SINGLE_CONNECTIONS), rounds: [] });

    const runner = LOAD_MODE === 'inline' ? null
      : LOAD_MODE === 'wrk' ? await startBenchRunner({ install: !args['no-install'], log: (l) => console.log(l) })
      : await startLoadRunner(LOAD_MODE);
    if (runner && 'describe' in runner) console.log(`load generator: ${runner.describe}`);
    if (runner) cleanups.unshift(() => runner.close());
    for (let round = 0; round < ROUNDS; round++) {
      cryptoSamples.push(crypto());
      // Alternate the order so a drift in the machine's load does not always hit the same row.
      const order = round % 2 === 0 ? rows : [...rows].reverse();
      for (const row of order) {
        const m = await measure(runner, row.opts);
        // A CLI process's CPU is not this process's: no figure rather than a wrong one.
        row.rounds.push(row.workers ? { ...m, srvCpuUsPerRequest: NaN, srvCoreBusy: NaN } : m);
      }
      process.stdout.write(`round ${round + 1}/${ROUNDS} done (${((performance.now() - started) / 1000).toFixed(0)} s)\n`);
    }
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => {});
  }

  // ---- report ----
  const limit = median(cryptoSamples.map((s) => s.limit.tokensPerSec));
  const limitCpu = median(cryptoSamples.map((s) => s.limit.cpuUsPerToken));
  const mix = median(cryptoSamples.map((s) => s.bulkMix.tokensPerSec));
  const mixCpu = median(cryptoSamples.map((s) => s.bulkMix.cpuUsPerToken));
  const range = (xs: number[]) => `[${num(Math.min(...xs))}-${num(Math.max(...xs))}]`;
  console.log(`\ncrypto limit (1 core, in-process; KeyRing.seal of a card's JSON + 1 HMAC fingerprint): ${num(limit)} tokens/s ${range(cryptoSamples.map((s) => s.limit.tokensPerSec))}, ${limitCpu.toFixed(1)} us CPU/token`);
  console.log(`  for comparison, the crypto of the 100-token body (cards: 2 seals + HMAC; strings: 1 seal): ${num(mix)} tokens/s, ${mixCpu.toFixed(1)} us CPU/token\n`);

  const bareRow = rows[rows.length - 1];
  const bareRps = median(bareRow.rounds.map((r) => r.rps));
  const summary = rows.map((row) => {
    const rps = median(row.rounds.map((r) => r.rps));
    const tokensPerSec = row.tokensPerRequest ? rps * row.tokensPerRequest : NaN;
    const vsCrypto = tokensPerSec / limit;
    const isBare = row === bareRow;
    const vsBare = row.tokensPerRequest === 1 ? rps / bareRps : isBare ? 1 : null;
    const met = row.workers ? null : row.tokensPerRequest === 100 ? vsCrypto >= BULK_TARGET : row.tokensPerRequest === 1 ? (vsBare ?? 0) >= SINGLE_TARGET : null;
    return {
      name: row.name, store: row.store, connections: row.opts.connections ?? 0, tokensPerRequest: row.tokensPerRequest,
      rps, rpsRange: [Math.min(...row.rounds.map((r) => r.rps)), Math.max(...row.rounds.map((r) => r.rps))],
      tokensPerSec, p50: median(row.rounds.map((r) => r.p50)), p99: median(row.rounds.map((r) => r.p99)),
      requests: row.rounds.reduce((a, r) => a + r.requests, 0), errors: row.rounds.reduce((a, r) => a + r.errors, 0),
      srvCpuUsPerToken: median(row.rounds.map((r) => r.srvCpuUsPerRequest)) / (row.tokensPerRequest || 1),
      srvCoreBusy: median(row.rounds.map((r) => r.srvCoreBusy)),
      vsCrypto, vsBare, met,
      target: row.workers ? 'workers 2 vs 1' : row.tokensPerRequest === 100 ? `>= ${BULK_TARGET}x crypto` : row.tokensPerRequest === 1 ? `>= ${SINGLE_TARGET}x bare` : 'baseline',
      rounds: row.rounds,
    };
  });
  const verdict = (m: boolean | null) => (m === null ? '' : m ? 'met' : 'NOT met');
  const cpuCell = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : '-');
  console.log(
    table(
      ['row', 'store', 'conns', 'req/s', '[min-max]', 'tokens/s', 'p50 ms', 'p99 ms', 'non-200', 'srv cpu us/tok', 'srv cores', 'x crypto', 'x bare', 'target', ''],
      summary.map((s) => [
        s.name, s.store, String(s.connections), num(s.rps), `[${num(s.rpsRange[0])}-${num(s.rpsRange[1])}]`, num(s.tokensPerSec),
        s.p50.toFixed(2), s.p99.toFixed(2), `${s.errors}/${s.requests}`,
        s.tokensPerRequest ? cpuCell(s.srvCpuUsPerToken) : cpuCell(s.srvCpuUsPerToken) + '/req', Number.isFinite(s.srvCoreBusy) ? s.srvCoreBusy.toFixed(2) : '-',
        ratio(s.vsCrypto), s.vsBare === null ? '' : ratio(s.vsBare), s.target, verdict(s.met),
      ]),
    ),
  );
  console.log(`\nsrv cpu: this process's CPU per token while serving (crypto alone: ${limitCpu.toFixed(1)} us/token for the limit, ${mixCpu.toFixed(1)} for the 100-token mix); srv cores: that CPU / wall time (1.00 = one core busy)`);
  for (const logLevel of ['warn', 'info']) {
    const of = (n: number) => summary.find((s) => s.name.endsWith(`workers ${n}, log ${logLevel}`));
    const [one, two] = [of(1), of(2)];
    if (one && two) console.log(`server.workers 2 vs 1 (log ${logLevel}): ${ratio(two.rps / one.rps)} (${num(two.rps)} vs ${num(one.rps)} req/s; p99 ${two.p99.toFixed(2)} vs ${one.p99.toFixed(2)} ms)`);
  }
  console.log(redisNote || `redis-server: ${redis?.settings} (durable, as the embedded store fsyncs every commit)`);

  const failed = summary.filter((s) => s.errors > 0);
  for (const s of failed) {
    const statuses: Record<string, number> = {};
    for (const r of s.rounds) for (const [k, v] of Object.entries(r.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
    console.log(`errors in "${s.name}" (${s.store}): ${JSON.stringify(statuses)} ${[...new Set(s.rounds.flatMap((r) => r.errorSamples))].slice(0, 3).join(' | ')}`);
    for (const line of rows.find((r) => r.name === s.name && r.store === s.store)?.workers?.problems() ?? []) console.log(`  its log: ${line}`);
  }
  console.log(failed.length === 0 ? 'every response was 200' : `${failed.length} row(s) had non-200 responses or transport errors`);

  const out = join(dirname(fileURLToPath(import.meta.url)), 'results', 'tokenize.json');
  mkdirSync(dirname(out), { recursive: true });
  const report = {
    at: new Date().toISOString(), machine: { ...env, loadAverageAtStart: load0 }, loadGenerator: LOAD_MODE,
    params: {
      rounds: ROUNDS, durationMs: DURATION_MS, warmupMs: WARMUP_MS, singleConnections: SINGLE_CONNECTIONS, bulkConnections: BULK_CONNECTIONS, cryptoMs: CRYPTO_MS,
      bulkBody: { cards: BULK_CARDS, strings: BULK_STRINGS, bytes: BULK_BODY.length }, singleBodyBytes: SINGLE_BODY.length,
    },
    crypto: { limitTokensPerSec: limit, limitCpuUsPerToken: limitCpu, bulkMixTokensPerSec: mix, bulkMixCpuUsPerToken: mixCpu, rounds: cryptoSamples },
    redis: redis ? { settings: redis.settings } : { skipped: redisNote },
    rows: summary,
    targets: { bulkVsCrypto: BULK_TARGET, singleVsBare: SINGLE_TARGET },
  };
  writeFileSync(out, JSON.stringify(report, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), 2) + '\n');
  console.log(`results: ${out} (total ${((performance.now() - started) / 1000).toFixed(1)} s)`);
  return failed.length === 0 ? 0 : 1;
}

process.exitCode = await main();
