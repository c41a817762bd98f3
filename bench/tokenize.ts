/**
 * POST /tokenize throughput, as ratios against the two baselines issue 12's targets name, both
 * measured in the same run:
 *
 *   the ceiling        bare node:http answering a constant body as long as tokenproxy's answer to
 *                      one string (lib/reference-server.mjs `constant`: plain Node, no loader, a
 *                      process of its own), after reading the request body;
 *   the crypto limit   what one token costs in crypto on one core: KeyRing.seal of the string's
 *                      JSON (AES-256-GCM) + one HMAC fingerprint + one crypto.randomUUID, in a loop
 *                      in this process, tokens/s.
 *
 * The rows (tokenproxy built, `dist/main.js`, as `npm start` runs it, in a process of its own per
 * store: lib/tokenproxy-process.ts, dist/ rebuilt first when src/ is newer; log level warn, rate
 * limits off, metrics on; the embedded store in a fresh directory under --data-dir, Redis under a
 * key prefix unique to the run):
 *
 *   /tokenize, one string          body `"customer-1-value"`, 64 connections, embedded, Redis and
 *                                  PostgreSQL: req/s as a ratio to the ceiling (target >= 0.3x);
 *                                  PostgreSQL also as a ratio to the embedded row of the same round
 *                                  (issue 24: target >= 0.5x);
 *   /tokenize, 100 strings         body a JSON array of 100 plain strings, 16 connections, embedded,
 *                                  Redis and PostgreSQL: tokens/s as a ratio to the crypto limit
 *                                  (target >= 0.5x);
 *   /tokenize, one card definition embedded only, informative (no target);
 *   server.workers 1 and 2         the one-string body on tokenproxy started with `server.workers: 1`
 *                                  and `2`, at log level warn and info (info: an access line a
 *                                  request, which with 2 workers goes through the primary), a
 *                                  process each, and the ratio 2 vs 1 (no target: the machine's
 *                                  cores are shared with the load generator). --no-workers skips them.
 *
 * Bytes per token (issue 24), after the rounds, on services of their own: 20,000 tokens (--size-tokens)
 * through /tokenize in bodies of 50 card definitions (random Luhn-valid numbers, with a cvc) and 50
 * strings, 8 requests at a time, and what the store grew by: embedded, the database file and its
 * WAL after a clean stop, against a service started and stopped with no tokens; Redis, INFO
 * `used_memory` before and after; PostgreSQL, pg_database_size of the service's database, each
 * after a CHECKPOINT. Targets: embedded <= 250, Redis <= 400, PostgreSQL <= 350 bytes a token.
 * Not load-sensitive.
 *
 *   npm run bench -- tokenize [--rounds 3] [--duration 3000] [--warmup 500] [--connections 64]
 *                             [--bulk-connections 16] [--crypto-ms 2000] [--data-dir DIR]
 *                             [--load wrk|process|worker|inline] [--no-install] [--no-redis] [--no-postgres]
 *                             [--no-workers] [--size-tokens 20000]
 *
 * The load generator is wrk (lib/wrk.ts, 1 thread; the Node generator with --load). Ratios are
 * paired by round: each row against its reference measured in the same round (the crypto loop runs
 * at the start of every round, with no load), median over rounds; after one discarded 2 s pass over
 * every row, the rows run in interleaved rounds, the order reversed every other round. CPU µs per request (per token in the 100-string
 * rows): the CPU time of the row's server process and its descendants (a cluster's workers; the
 * embedded store's writer thread is in its process's figure) read from /proc over the row's
 * windows (warm-up + measurement), per request served; redis-server's and PostgreSQL's CPU is not
 * in the Redis and PostgreSQL rows' figures. The PostgreSQL rows use a private cluster the bench
 * starts (lib/postgres.ts) and the store's default pool of 10 connections. wrk, redis-server and every server share the machine's cores. Results also go to
 * bench/results/tokenize.json. Speed is reported, never asserted: the exit code is non-zero only
 * when a response was not 2xx (such a row is INVALID).
 *
 * TOKENPROXY_BENCH_METRICS=off runs tokenproxy without the Prometheus registry;
 * TOKENPROXY_BENCH_CPU_PROF=DIR profiles the tokenproxy processes (lib/tokenproxy-process.ts).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { KeyRing } from '../src/crypto/keyring.js';
import { createStore } from '../src/store/factory.js';
import { runLoad, startLoadRunner, type LoadOptions, type LoadResult, type LoadRunner } from './lib/load.js';
import { CLK_TCK, isTmpfs, machineTicks, treeTicks } from './lib/procs.js';
import { startBenchRedis, type BenchRedis } from './lib/redis.js';
import { startBenchPostgres, type BenchPostgres } from './lib/postgres.js';
import { measureBytesPerToken, type BytesPerToken } from './lib/store-size.js';
import { machine, num, ratio, table } from './lib/report.js';
import { BENCH_KEY, BENCH_TENANT, benchConfig } from './lib/service.js';
import { ensureBuilt, startReferenceServer, startTokenproxyProcess, type StoreChoice, type TokenproxyProcess } from './lib/tokenproxy-process.js';
import { startBenchRunner } from './lib/wrk.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    duration: { type: 'string', default: '3000' },
    warmup: { type: 'string', default: '500' },
    connections: { type: 'string', default: '64' },
    'bulk-connections': { type: 'string', default: '16' },
    'crypto-ms': { type: 'string', default: '2000' },
    'data-dir': { type: 'string' },
    load: { type: 'string', default: 'wrk' },
    'no-install': { type: 'boolean', default: false },
    'no-redis': { type: 'boolean', default: false },
    'no-postgres': { type: 'boolean', default: false },
    'size-tokens': { type: 'string', default: '20000' },
    'no-workers': { type: 'boolean', default: false },
  },
});
const ROUNDS = Math.max(1, Number(args.rounds));
const DURATION_MS = Number(args.duration);
const WARMUP_MS = Number(args.warmup);
const SINGLE_CONNECTIONS = Number(args.connections);
const BULK_CONNECTIONS = Number(args['bulk-connections']);
const CRYPTO_MS = Number(args['crypto-ms']);
/** The token store's parent directory: the normal disk by default (os.tmpdir()), not tmpfs. */
const DATA_ROOT = resolve(args['data-dir'] ?? tmpdir());
const LOAD_MODES = ['wrk', 'process', 'worker', 'inline'] as const;
const isLoadMode = (v: string): v is (typeof LOAD_MODES)[number] => (LOAD_MODES as readonly string[]).includes(v);
if (!isLoadMode(args.load)) throw new Error('--load must be wrk, process, worker or inline');
const LOAD_MODE = args.load;
/** The discarded first pass over every row (not counted). */
const DISCARD_MS = 2000;
const BULK_TARGET = 0.5;
const SINGLE_TARGET = 0.3;
/** Issue 24: one string on PostgreSQL against the same row on the embedded store. */
const POSTGRES_VS_EMBEDDED_TARGET = 0.5;
const SIZE_TOKENS = Math.max(100, Math.round(Number(args['size-tokens']) / 100) * 100);

/** Issue 12's single-token body: one JSON string. */
const ONE_STRING = 'customer-1-value';
const ONE_STRING_BODY = JSON.stringify(ONE_STRING);
/** Issue 12's 100-token body: a JSON array of 100 plain strings. */
const STRINGS_BODY = JSON.stringify(Array.from({ length: 100 }, (_, i) => `customer-${i}-value`));
/** The informative row: one card definition (a Luhn-valid test number, with a cvc). */
const CARD_BODY = JSON.stringify({ type: 'card', data: { number: '4242424242424242', expiration_month: 1, expiration_year: 2030, cvc: '123' } });
const HEADERS = { 'content-type': 'application/json', 'svc-api-key': BENCH_KEY };

const median = (xs: number[]) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};


// ---- the crypto limit -------------------------------------------------------------------------

interface CryptoSample {
  tokensPerSec: number;
  /** CPU time of this process per token (steadier than wall time on a busy machine). */
  cpuUsPerToken: number;
}

/** Calls `op` (one call = one token) for about `ms` on this thread. */
function timeLoop(ms: number, op: () => void): CryptoSample {
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
  return { tokensPerSec: (ops / (now - start)) * 1000, cpuUsPerToken: (cpu.user + cpu.system) / ops };
}

/** What the vault does in crypto for one plain string: a fresh id, the seal of its JSON (AAD tenant:id), one HMAC fingerprint. */
async function cryptoBench(store: Awaited<ReturnType<typeof createStore>>): Promise<() => CryptoSample> {
  const ring = await KeyRing.open(randomBytes(32), store.dataKeys);
  let sink = 0;
  const perRound = CRYPTO_MS / ROUNDS;
  return () => {
    const sample = timeLoop(perRound, () => {
      const id = randomUUID();
      sink += ring.seal(ONE_STRING_BODY, `${BENCH_TENANT}:${id}`).length + ring.fingerprint(BENCH_TENANT, 'token', ONE_STRING).length;
    });
    if (sink < 0) throw new Error('unreachable');
    return sample;
  };
}

// ---- HTTP rows --------------------------------------------------------------------------------

interface Measured extends LoadResult {
  /** CPU µs per request of the row's server process and its descendants (NaN: unknown). */
  cpuUsPerRequest: number;
  /** That CPU time / wall time: 1.00 = one core busy. */
  cores: number;
  /** CPU used by processes outside this benchmark's process tree, in cores (NaN: unknown). */
  otherCores: number;
}

type Target = 'ceiling' | 'crypto' | null;

interface Row {
  name: string;
  store: string;
  tokensPerRequest: number;
  /** The process serving the row (its descendants count too), for CPU figures. */
  pid: number;
  opts: LoadOptions;
  target: Target;
  rounds: Measured[];
  /** A `server.workers` row: compared with its pair, no target of its own. */
  workers?: { n: number; logLevel: string };
  /** The service's warn/error log lines (to explain a row with errors). */
  problems?: () => string[];
}

/** One request outside the measurement: proves the route answers 2xx with the expected shape. */
async function probe(url: string, body: string, expectTokens: number): Promise<Buffer> {
  const res = await request(`${url}/tokenize`, { method: 'POST', headers: HEADERS, body });
  const buf = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== 200) throw new Error(`probe: ${url}/tokenize answered ${res.statusCode}: ${buf.toString('utf8').slice(0, 300)}`);
  const parsed: unknown = JSON.parse(buf.toString('utf8'));
  const n = Array.isArray(parsed) ? parsed.length : 1;
  if (n !== expectTokens) throw new Error(`probe: expected ${expectTokens} tokens, got ${n}`);
  return buf;
}

function loadOpts(url: string, body: string, connections: number): LoadOptions {
  return { url, method: 'POST', headers: HEADERS, body, connections, durationMs: DURATION_MS, warmupMs: WARMUP_MS };
}

async function measure(runner: LoadRunner | null, row: Row): Promise<Measured> {
  const c0 = machineTicks();
  const t0 = performance.now();
  const r = runner ? await runner.run(row.opts) : await runLoad(row.opts);
  const c1 = machineTicks();
  const seconds = (performance.now() - t0) / 1000;
  // The CPU window covers warm-up and measurement: divided by every request of both.
  const served = r.requests + r.warmupRequests;
  const ticks = c0 && c1 ? treeTicks(row.pid, c1.procs) - treeTicks(row.pid, c0.procs) : NaN;
  const cpuSeconds = ticks / CLK_TCK;
  return {
    ...r,
    cpuUsPerRequest: served > 0 ? (cpuSeconds * 1e6) / served : NaN,
    cores: cpuSeconds / seconds,
    otherCores: c0 && c1 ? Math.max(0, c1.machine - c0.machine - (c1.ours - c0.ours)) / CLK_TCK / seconds : NaN,
  };
}

// ---- main -------------------------------------------------------------------------------------

async function main(): Promise<number> {
  const started = performance.now();
  const env = machine();
  const load0 = loadavg();
  const log = (line: string) => console.log(line);
  const loadLabel = {
    wrk: 'wrk (C, its own process; falls back to the Node child process when wrk cannot be had)',
    process: 'the Node generator (lib/load.ts) in a child process',
    worker: 'the Node generator in a worker thread of this process',
    inline: 'the Node generator on this process\'s main thread',
  }[LOAD_MODE];
  log(`tokenize benchmark: node ${env.node}, ${env.cores} x ${env.cpu}, load average ${load0.map((l) => l.toFixed(2)).join(' ')} at start`);
  log(`tokenproxy: built (dist/main.js), a process of its own per store and per workers setting; log warn, rate limits off, ${process.env.TOKENPROXY_BENCH_METRICS === 'off' ? 'metrics OFF' : 'metrics on'}`);
  log(`load generator: ${loadLabel}`);
  log(`each row: ${ROUNDS} interleaved rounds of ${WARMUP_MS} ms warm-up + ${DURATION_MS} ms; medians shown, [min-max] of req/s beside`);
  log(`bodies: one string ${ONE_STRING_BODY} (${ONE_STRING_BODY.length} B, ${SINGLE_CONNECTIONS} connections); 100 strings, a JSON array of "customer-<i>-value" (${STRINGS_BODY.length} B, ${BULK_CONNECTIONS} connections); one card definition with cvc (${CARD_BODY.length} B, ${SINGLE_CONNECTIONS} connections)\n`);

  const cleanups: Array<() => Promise<void>> = [];
  const rows: Row[] = [];
  let redis: BenchRedis | null = null;
  let redisNote = '';
  let postgres: BenchPostgres | null = null;
  let postgresNote = '';
  let sizes: BytesPerToken[] = [];
  let storeNote = '';
  let ceilingBytes = 0;
  const cryptoSamples: CryptoSample[] = [];
  const start = async (name: string, logLevel: string, workers: number, store?: StoreChoice): Promise<TokenproxyProcess> => {
    const tp = await startTokenproxyProcess(benchConfig(), { dataRoot: DATA_ROOT, logLevel, workers, name, store });
    cleanups.push(() => tp.close());
    return tp;
  };
  try {
    ensureBuilt(log);
    const keyStore = await createStore({ kind: 'embedded', path: ':memory:', url: '', key_prefix: '' });
    cleanups.push(() => keyStore.close());
    const crypto = await cryptoBench(keyStore);

    const services: Array<{ tp: TokenproxyProcess; store: string }> = [];
    const embedded = await start('embedded', 'warn', 1);
    services.push({ tp: embedded, store: 'embedded' });
    storeNote = `embedded store: SQLite in ${embedded.dataDir} (${isTmpfs(embedded.dataDir) ? 'tmpfs' : 'not tmpfs: the normal disk'})`;
    if (args['no-redis']) redisNote = 'Redis rows skipped (--no-redis)';
    else {
      redis = await startBenchRedis();
      if (!redis) redisNote = 'Redis rows skipped: redis-server is not installed';
      else {
        const r = redis;
        cleanups.push(() => r.stop());
        const keyPrefix = `bench-tok-${randomBytes(4).toString('hex')}:`;
        services.push({ tp: await start('redis', 'warn', 1, { kind: 'redis', url: r.url, key_prefix: keyPrefix }), store: 'redis' });
        redisNote = `redis-server: ${r.settings} (durable, as the embedded store fsyncs every commit); key prefix ${keyPrefix}`;
      }
    }
    if (args['no-postgres']) postgresNote = 'PostgreSQL rows skipped (--no-postgres)';
    else {
      const p = await startBenchPostgres();
      if ('skipped' in p) postgresNote = `PostgreSQL rows skipped: ${p.skipped}`;
      else {
        postgres = p;
        cleanups.push(() => p.stop());
        const db = await p.database();
        services.push({ tp: await start('postgres', 'warn', 1, { kind: 'postgres', url: db.url }), store: 'postgres' });
        postgresNote = `${p.settings}; the store's default pool (10 connections); database ${db.name}`;
      }
    }
    for (const { tp } of services) {
      await probe(tp.url, STRINGS_BODY, 100);
      ceilingBytes = (await probe(tp.url, ONE_STRING_BODY, 1)).length;
    }
    await probe(embedded.url, CARD_BODY, 1);
    // The ceiling answers a body as long as tokenproxy's answer to one string.
    const ceiling = await startReferenceServer(['constant', `"${'x'.repeat(Math.max(0, ceilingBytes - 2))}"`]);
    cleanups.push(() => ceiling.close());

    const add = (row: Omit<Row, 'rounds'>) => rows.push({ ...row, rounds: [] });
    for (const { tp, store } of services) {
      add({ name: '/tokenize, one string', store, tokensPerRequest: 1, pid: tp.pid, opts: loadOpts(`${tp.url}/tokenize`, ONE_STRING_BODY, SINGLE_CONNECTIONS), target: 'ceiling', problems: tp.problems });
    }
    for (const { tp, store } of services) {
      add({ name: '/tokenize, 100 strings', store, tokensPerRequest: 100, pid: tp.pid, opts: loadOpts(`${tp.url}/tokenize`, STRINGS_BODY, BULK_CONNECTIONS), target: 'crypto', problems: tp.problems });
    }
    add({ name: '/tokenize, one card definition', store: 'embedded', tokensPerRequest: 1, pid: embedded.pid, opts: loadOpts(`${embedded.url}/tokenize`, CARD_BODY, SINGLE_CONNECTIONS), target: null, problems: embedded.problems });
    if (!args['no-workers']) {
      for (const logLevel of ['warn', 'info']) {
        for (const n of [1, 2]) {
          const tp = await start(`workers${n}-${logLevel}`, logLevel, n);
          await probe(tp.url, ONE_STRING_BODY, 1);
          add({
            name: `/tokenize, one string, workers ${n}, log ${logLevel}`, store: 'embedded', tokensPerRequest: 1, pid: tp.pid,
            opts: loadOpts(`${tp.url}/tokenize`, ONE_STRING_BODY, SINGLE_CONNECTIONS), target: null, workers: { n, logLevel }, problems: tp.problems,
          });
        }
      }
    }
    add({ name: `bare node:http, constant ${ceilingBytes} B body (ceiling)`, store: '-', tokensPerRequest: 0, pid: ceiling.pid, opts: loadOpts(`${ceiling.url}/`, ONE_STRING_BODY, SINGLE_CONNECTIONS), target: null });

    const runner = LOAD_MODE === 'inline' ? null
      : LOAD_MODE === 'wrk' ? await startBenchRunner({ install: !args['no-install'], log })
      : await startLoadRunner(LOAD_MODE);
    if (runner && 'describe' in runner) log(`load generator: ${runner.describe}`);
    if (runner) cleanups.push(() => runner.close());
    // One discarded pass over every row first (JIT, connection pools, SQLite's page cache), as in
    // the proxy bench: otherwise the first row of the first round is measured on a cold process.
    for (const row of rows) await measure(runner, { ...row, opts: { ...row.opts, durationMs: DISCARD_MS, warmupMs: 0 } });
    log(`discarded pass over every row done (${DISCARD_MS / 1000} s each)`);
    for (let round = 0; round < ROUNDS; round++) {
      cryptoSamples.push(crypto());
      // Alternate the order so a drift in the machine's load does not always hit the same row.
      const order = round % 2 === 0 ? rows : [...rows].reverse();
      for (const row of order) row.rounds.push(await measure(runner, row));
      log(`round ${round + 1}/${ROUNDS} done (${((performance.now() - started) / 1000).toFixed(0)} s, load average ${loadavg()[0].toFixed(2)})`);
    }
    sizes = await measureBytesPerToken({
      tokens: SIZE_TOKENS, start, headers: HEADERS, redis, postgres, log,
    });
  } finally {
    for (const c of cleanups.reverse()) await c().catch((err: unknown) => console.error(`cleanup: ${(err as Error).message}`));
  }

  // ---- report ----
  const limit = median(cryptoSamples.map((s) => s.tokensPerSec));
  const limitCpu = median(cryptoSamples.map((s) => s.cpuUsPerToken));
  const range = (xs: number[]) => `[${num(Math.min(...xs))}-${num(Math.max(...xs))}]`;
  log(`\ncrypto limit (1 core, in-process; per token: KeyRing.seal of the string's JSON + 1 HMAC fingerprint + 1 randomUUID): ${num(limit)} tokens/s ${range(cryptoSamples.map((s) => s.tokensPerSec))}, ${limitCpu.toFixed(1)} us CPU/token\n`);

  const ceilingRow = rows[rows.length - 1];
  /** Median over rounds of (row / reference of the same round). */
  const paired = (row: Row, ref: (i: number) => number, per: (m: Measured) => number) => median(row.rounds.map((m, i) => per(m) / ref(i)));
  const summary = rows.map((row) => {
    const rps = median(row.rounds.map((r) => r.rps));
    const tokensPerSec = row.tokensPerRequest ? median(row.rounds.map((r) => r.rps * row.tokensPerRequest)) : NaN;
    const vsCrypto = row.tokensPerRequest ? paired(row, (i) => cryptoSamples[i].tokensPerSec, (m) => m.rps * row.tokensPerRequest) : NaN;
    const vsCeiling = row.tokensPerRequest === 1 ? paired(row, (i) => ceilingRow.rounds[i].rps, (m) => m.rps) : row === ceilingRow ? 1 : NaN;
    const met = row.target === 'crypto' ? vsCrypto >= BULK_TARGET : row.target === 'ceiling' ? vsCeiling >= SINGLE_TARGET : null;
    const statuses: Record<string, number> = {};
    for (const r of row.rounds) for (const [k, v] of Object.entries(r.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
    return {
      name: row.name, store: row.store, connections: row.opts.connections ?? 0, tokensPerRequest: row.tokensPerRequest, bodyBytes: row.opts.body?.length ?? 0,
      rps, rpsRange: [Math.min(...row.rounds.map((r) => r.rps)), Math.max(...row.rounds.map((r) => r.rps))],
      tokensPerSec, p50: median(row.rounds.map((r) => r.p50)), p99: median(row.rounds.map((r) => r.p99)),
      requests: row.rounds.reduce((a, r) => a + r.requests, 0), errors: row.rounds.reduce((a, r) => a + r.errors, 0), statuses,
      errorSamples: [...new Set(row.rounds.flatMap((r) => r.errorSamples))].slice(0, 3),
      cpuUsPerRequest: median(row.rounds.map((r) => r.cpuUsPerRequest)),
      cpuUsPerToken: median(row.rounds.map((r) => r.cpuUsPerRequest)) / (row.tokensPerRequest || 1),
      cores: median(row.rounds.map((r) => r.cores)),
      otherCores: median(row.rounds.map((r) => r.otherCores)),
      otherCoresMax: Math.max(...row.rounds.map((r) => r.otherCores)),
      vsCrypto, vsCeiling, met,
      target: row.target === 'crypto' ? `>= ${BULK_TARGET}x crypto` : row.target === 'ceiling' ? `>= ${SINGLE_TARGET}x ceiling` : row.workers ? 'workers 2 vs 1' : row === ceilingRow ? 'baseline' : 'none',
      workers: row.workers ?? null,
      rounds: row.rounds,
      problems: row.problems?.() ?? [],
    };
  });
  const verdict = (m: boolean | null) => (m === null ? '' : m ? 'met' : 'NOT met');
  const cell = (n: number, digits: number) => (Number.isFinite(n) ? n.toFixed(digits) : '-');
  log(
    table(
      ['row', 'store', 'conns', 'req/s', '[min-max]', 'tokens/s', 'p50 ms', 'p99 ms', 'non-2xx/requests', 'cpu us/req', 'cpu us/tok', 'cores', 'other cpu', 'x crypto', 'x ceiling', 'target', ''],
      summary.map((s) => [
        s.name, s.store, String(s.connections), num(s.rps), `[${num(s.rpsRange[0])}-${num(s.rpsRange[1])}]`, num(s.tokensPerSec),
        s.p50.toFixed(2), s.p99.toFixed(2), `${s.errors}/${s.requests}${s.errors > 0 ? ' INVALID' : ''}`,
        cell(s.cpuUsPerRequest, 0), s.tokensPerRequest ? cell(s.cpuUsPerToken, 1) : '', cell(s.cores, 2), cell(s.otherCores, 2),
        s.tokensPerRequest ? ratio(s.vsCrypto) : '', Number.isFinite(s.vsCeiling) ? ratio(s.vsCeiling) : '', s.target, verdict(s.met),
      ]),
    ),
  );
  log(`\nx crypto, x ceiling: median over rounds of (row / reference of the same round); x crypto in tokens/s, x ceiling in req/s`);
  log(`cpu us/req (/tok): CPU time of the row's server process and its descendants (workers 2: the primary and both workers) over the row's windows (warm-up + measurement) from /proc, per request (per token); the crypto limit alone is ${limitCpu.toFixed(1)} us/token; redis-server's and PostgreSQL's CPU is not in the Redis and PostgreSQL rows`);
  log(`cores: that CPU / wall time (1.00 = one core busy); other cpu: cores used by processes outside this benchmark during the row's windows (median over rounds)`);
  log(`every server runs in its own process; wrk${redis ? ', redis-server' : ''}${postgres ? ', PostgreSQL' : ''} and the server under test share the machine's ${env.cores} cores; load average now ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  const busiest = Math.max(...summary.map((s) => s.otherCoresMax).filter(Number.isFinite));
  if (busiest > 0.2) log(`note: other processes used up to ${busiest.toFixed(2)} of ${env.cores} cores during some windows: those rounds are slower`);
  for (const logLevel of ['warn', 'info']) {
    const of = (n: number) => rows.find((r) => r.workers?.n === n && r.workers.logLevel === logLevel);
    const [one, two] = [of(1), of(2)];
    if (one && two) {
      const s1 = summary[rows.indexOf(one)];
      const s2 = summary[rows.indexOf(two)];
      const r = median(two.rounds.map((m, i) => m.rps / one.rounds[i].rps));
      log(`server.workers 2 vs 1 (log ${logLevel}): ${ratio(r)} (${num(s2.rps)} vs ${num(s1.rps)} req/s; p99 ${s2.p99.toFixed(2)} vs ${s1.p99.toFixed(2)} ms; CPU ${cell(s2.cpuUsPerRequest, 0)} vs ${cell(s1.cpuUsPerRequest, 0)} us/req)`);
    }
  }
  if (!args['no-workers']) log('(the workers 1, log warn row is the one-string embedded row\'s configuration on an instance of its own: the two differ by noise only)');
  const oneString = (store: string) => rows.find((r) => r.store === store && r.name === '/tokenize, one string');
  const [pgRow, embRow] = [oneString('postgres'), oneString('embedded')];
  const postgresVsEmbedded = pgRow && embRow ? median(pgRow.rounds.map((m, i) => m.rps / embRow.rounds[i].rps)) : NaN;
  if (pgRow && embRow) {
    const met = postgresVsEmbedded >= POSTGRES_VS_EMBEDDED_TARGET;
    log(`/tokenize, one string, PostgreSQL vs embedded (${SINGLE_CONNECTIONS} connections, paired by round): ${ratio(postgresVsEmbedded)} (target >= ${POSTGRES_VS_EMBEDDED_TARGET}x: ${met ? 'met' : 'NOT met'})`);
  }
  if (sizes.length) {
    log(`\nbytes per token: ${SIZE_TOKENS} tokens through /tokenize, bodies of 50 card definitions (with cvc) + 50 strings, on a service of its own per store`);
    log(table(['store', 'what is measured', 'before', 'after', 'grew', 'bytes/token', 'target', ''], sizes.map((z) => [
      z.store, z.measured, num(z.before), num(z.after), num(z.after - z.before), num(z.bytesPerToken), `<= ${z.target}`, z.bytesPerToken <= z.target ? 'met' : 'NOT met',
    ])));
  }
  log(storeNote);
  log(redisNote);
  log(postgresNote);

  const failed = summary.filter((s) => s.errors > 0);
  for (const s of failed) {
    log(`INVALID "${s.name}" (${s.store}): ${s.errors} non-2xx responses or transport errors ${JSON.stringify(s.statuses)} ${s.errorSamples.join(' | ')}`);
    for (const line of s.problems) log(`  its log: ${line}`);
  }
  log(failed.length === 0 ? 'every response was 2xx' : `${failed.length} row(s) had non-2xx responses or transport errors`);

  const out = join(dirname(fileURLToPath(import.meta.url)), 'results', 'tokenize.json');
  mkdirSync(dirname(out), { recursive: true });
  const report = {
    at: new Date().toISOString(), machine: { ...env, loadAverageAtStart: load0, loadAverageAtEnd: loadavg() }, loadGenerator: LOAD_MODE,
    params: {
      rounds: ROUNDS, durationMs: DURATION_MS, warmupMs: WARMUP_MS, singleConnections: SINGLE_CONNECTIONS, bulkConnections: BULK_CONNECTIONS, cryptoMs: CRYPTO_MS, dataRoot: DATA_ROOT,
      bodies: { oneString: { body: ONE_STRING_BODY, bytes: ONE_STRING_BODY.length }, strings100: { bytes: STRINGS_BODY.length }, cardDefinition: { bytes: CARD_BODY.length } },
      ceilingBodyBytes: ceilingBytes,
      tokenproxy: { build: 'dist/main.js', logLevel: 'warn', rateLimits: 'off', metrics: process.env.TOKENPROXY_BENCH_METRICS !== 'off' },
    },
    crypto: { per: 'KeyRing.seal(JSON of the string) + 1 HMAC fingerprint + 1 randomUUID', limitTokensPerSec: limit, limitCpuUsPerToken: limitCpu, rounds: cryptoSamples },
    store: storeNote,
    redis: redis ? { settings: redis.settings, note: redisNote } : { skipped: redisNote },
    postgres: postgres ? { settings: postgres.settings, note: postgresNote } : { skipped: postgresNote },
    postgresVsEmbedded: { oneString: postgresVsEmbedded, target: POSTGRES_VS_EMBEDDED_TARGET },
    bytesPerToken: sizes,
    rows: summary,
    targets: { strings100VsCrypto: BULK_TARGET, oneStringVsCeiling: SINGLE_TARGET },
  };
  writeFileSync(out, JSON.stringify(report, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), 2) + '\n');
  log(`results: ${out} (total ${((performance.now() - started) / 1000).toFixed(1)} s)`);
  return failed.length === 0 ? 0 : 1;
}

process.exitCode = await main();
