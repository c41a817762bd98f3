/**
 * What rate limiting costs a request: the same single-token POST /tokenize load with limits off,
 * in memory, and on Redis (limits set high enough never to trigger), in one run, each as a ratio
 * to "off". Targets: memory costs at most 5% of throughput, Redis at most 15%. On PostgreSQL
 * (issue 24) against "off" on the same PostgreSQL token store, informative (no target).
 *
 *   node --no-node-snapshot --import tsx bench/rate-limit.ts [--rounds 5] [--duration 2000]
 *        [--warmup 500] [--connections 32] [--keys 64] [--data-dir DIR] [--no-redis] [--no-postgres]
 *
 * Rows (each a tokenproxy started here, all with the same embedded token store settings):
 *   off              rate_limits.enabled: false
 *   memory           rate_limits.store: memory
 *   redis            rate_limits.store: redis, a redis-server without persistence
 *   redis (fsync)    rate_limits.store: redis, a redis-server with appendfsync always (as when the
 *                    counters share the token store's durable Redis)
 *   off (pg store)   a PostgreSQL token store (a private cluster: lib/postgres.ts; the store's
 *                    default pool of 10), rate_limits.enabled: false: the baseline of the next row
 *   postgres         the same store, rate_limits.store: postgres (the counters on its pool, in
 *                    an UNLOGGED table), as a ratio to "off (pg store)" in the same round
 * Every rule is overridden to 1e9 points per 60 s, so a private key's /tokenize is counted by its
 * two rules (private_key, creating_tokens) and never refused. The load cycles through `--keys`
 * API keys of one application, so the counters are many, as in real traffic.
 *
 * The token store is SQLite in `--data-dir`, by default on tmpfs (/dev/shm): an fsync there costs
 * nothing, so the request path is CPU-bound and the limiter's cost is not hidden behind disk
 * waits (on a disk, every row waits on the same fsync per request and the ratios say little).
 *
 * The load generator (lib/load.ts) runs in a child process, so this process's CPU time is the
 * servers' alone ("srv cpu us/req"; redis-server's own CPU is not in it). The rows run in several
 * interleaved rounds; medians are printed. Speed is reported, never asserted: the exit code is
 * non-zero only when a response was not 200.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { buildConfig } from '../src/config/load.js';
import { createLogger } from '../src/log.js';
import { RULE_NAMES } from '../src/rate-limit/rules.js';
import { startService, type RunningService } from '../src/server.js';
import { startLoadRunner, type LoadOptions, type LoadResult, type LoadRunner } from './lib/load.js';
import { startBenchRedis, type BenchRedis } from './lib/redis.js';
import { startBenchPostgres } from './lib/postgres.js';
import pg from 'pg';
import { machine, num, ratio, table } from './lib/report.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    duration: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '500' },
    connections: { type: 'string', default: '32' },
    keys: { type: 'string', default: '64' },
    'data-dir': { type: 'string' },
    'no-redis': { type: 'boolean', default: false },
    'no-postgres': { type: 'boolean', default: false },
  },
});
const ROUNDS = Math.max(1, Number(args.rounds));
const DURATION_MS = Number(args.duration);
const WARMUP_MS = Number(args.warmup);
const CONNECTIONS = Number(args.connections);
const KEY_COUNT = Math.max(1, Number(args.keys));
const DATA_ROOT = args['data-dir'] ?? (existsSync('/dev/shm') ? '/dev/shm' : tmpdir());
/** Throughput ratio to "off" each row must reach (1 - the allowed cost). */
const TARGETS: Record<string, number> = { memory: 0.95, redis: 0.85, 'redis (fsync)': 0.85 };

const TENANT = randomUUID();
const APP = randomUUID();
const KEYS = Array.from({ length: KEY_COUNT }, (_, i) => `bench_rl_${i}_${randomBytes(8).toString('hex')}`);
/** The tokenize benchmark's single-token body: one card definition. */
const BODY = JSON.stringify({ type: 'card', data: { number: '4242424242424242', expiration_month: 12, expiration_year: 2030, cvc: '123' } });
const NEVER = Object.fromEntries(RULE_NAMES.map((n) => [n, { points: 1_000_000_000, duration_seconds: 60 }]));

interface Row {
  name: string;
  svc: RunningService;
  /** The RateLimit-Limit a response must carry (undefined: none, limits off). */
  limitHeader: string | undefined;
  /** The row this one is a ratio to (default: the first, "off"). */
  baseline?: string;
  rounds: Array<LoadResult & { srvCpuUsPerRequest: number }>;
}

function rawConfig(rateLimits: Record<string, unknown>, dataDir: string, store?: Record<string, unknown>): Record<string, unknown> {
  return {
    server: { host: '127.0.0.1', port: 0 },
    log: { level: 'silent' },
    store: store ?? { kind: 'embedded', path: join(dataDir, 'tokens.db') },
    rate_limits: rateLimits,
    tenants: [
      {
        id: TENANT,
        name: 'bench',
        custom_rate_limits: NEVER,
        applications: [{ id: APP, name: 'bench-private', type: 'private', keys: KEYS, permissions: ['token:create', 'token:read'] }],
      },
    ],
  };
}

/** One request outside the measurement: 200, and the RateLimit-Limit header the row promises. */
async function probe(row: Row): Promise<void> {
  const res = await request(`${row.svc.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json', 'svc-api-key': KEYS[0] }, body: BODY });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`${row.name}: /tokenize answered ${res.statusCode}: ${text.slice(0, 300)}`);
  const limit = res.headers['ratelimit-limit'];
  if (limit !== row.limitHeader) throw new Error(`${row.name}: RateLimit-Limit is ${String(limit)}, expected ${String(row.limitHeader)}`);
}

async function measure(runner: LoadRunner, opts: LoadOptions): Promise<LoadResult & { srvCpuUsPerRequest: number }> {
  const cpu0 = process.cpuUsage();
  const r = await runner.run(opts);
  const cpu = process.cpuUsage(cpu0);
  return { ...r, srvCpuUsPerRequest: (cpu.user + cpu.system) / (r.requests + r.warmupRequests) };
}

const median = (xs: number[]) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function main(): Promise<number> {
  const started = performance.now();
  const env = machine();
  const load0 = loadavg()[0];
  console.log(`rate-limit benchmark: node ${env.node}, ${env.cores} x ${env.cpu}, load average ${load0.toFixed(2)} at start`);
  console.log(`load: POST /tokenize, single card token (${BODY.length} B), ${CONNECTIONS} keep-alive connections, ${KEY_COUNT} API keys in turn; load generator in a child process`);
  console.log(`token store: embedded SQLite in ${DATA_ROOT} (same for every row but the two on PostgreSQL); every rule at 1e9 points / 60 s (never refuses)`);
  console.log(`each row: one discarded 1 s pass, then ${ROUNDS} interleaved rounds of ${WARMUP_MS} ms warm-up + ${DURATION_MS} ms; medians shown\n`);

  const cleanups: Array<() => Promise<void> | void> = [];
  const rows: Row[] = [];
  let redisNote = '';
  let postgresNote = '';
  let counterNote = '';
  const postgresCounters: Array<{ name: string; url: string }> = [];
  const redisClients: Array<{ name: string; url: string; prefix: string }> = [];
  try {
    const add = async (name: string, rateLimits: Record<string, unknown>, limitHeader: string | undefined, store?: Record<string, unknown>, baseline?: string) => {
      const dir = mkdtempSync(join(DATA_ROOT, 'tp-bench-rl-'));
      cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
      const config = buildConfig(rawConfig(rateLimits, dir, store), { env: { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') } });
      const svc = await startService(config, { log: createLogger('silent') });
      cleanups.push(() => svc.close());
      rows.push({ name, svc, limitHeader, baseline, rounds: [] });
    };
    await add('off', { enabled: false }, undefined);
    await add('memory', { enabled: true, store: 'memory' }, '1000000000');
    if (args['no-redis']) redisNote = 'Redis rows skipped (--no-redis)';
    else {
      // Rate-limit counters need no persistence; the fsync row shows what durable Redis costs.
      const volatile = await startBenchRedis({ durable: false });
      const durable: BenchRedis | null = volatile ? await startBenchRedis() : null;
      if (!volatile || !durable) redisNote = 'Redis rows skipped: redis-server is not installed';
      else {
        cleanups.push(() => volatile.stop(), () => durable.stop());
        for (const [name, url] of [['redis', volatile.url], ['redis (fsync)', durable.url]] as const) {
          const prefix = `bench${randomBytes(3).toString('hex')}:rl:`;
          await add(name, { enabled: true, store: 'redis', url, key_prefix: prefix }, '1000000000');
          redisClients.push({ name, url, prefix });
        }
        redisNote = `redis: no persistence; redis (fsync): ${durable.settings}`;
      }
    }
    if (args['no-postgres']) postgresNote = 'PostgreSQL rows skipped (--no-postgres)';
    else {
      const p = await startBenchPostgres();
      if ('skipped' in p) postgresNote = `PostgreSQL rows skipped: ${p.skipped}`;
      else {
        cleanups.push(() => p.stop());
        const base = await p.database();
        const limited = await p.database();
        await add('off (pg store)', { enabled: false }, undefined, { kind: 'postgres', url: base.url }, 'off (pg store)');
        await add('postgres', { enabled: true, store: 'postgres' }, '1000000000', { kind: 'postgres', url: limited.url }, 'off (pg store)');
        postgresCounters.push({ name: 'postgres', url: limited.url });
        postgresNote = `${p.settings}; the token store's default pool (10 connections), shared by the counters in "postgres"`;
      }
    }
    for (const row of rows) await probe(row);

    const runner = await startLoadRunner('process');
    cleanups.push(() => runner.close());
    const opts = (row: Row): LoadOptions => ({
      url: `${row.svc.url}/tokenize`,
      method: 'POST',
      body: BODY,
      headers: { 'content-type': 'application/json' },
      variants: KEYS.map((k) => ({ headers: { 'svc-api-key': k } })),
      connections: CONNECTIONS,
      durationMs: DURATION_MS,
      warmupMs: WARMUP_MS,
    });
    // One discarded pass over every row first: JIT, SQLite page cache, Redis connections.
    for (const row of rows) await runner.run({ ...opts(row), durationMs: 1000, warmupMs: 0 });
    // The counters really are on Redis (checked now: a counter expires 60 s after its first request).
    for (const c of redisClients) {
      const r = new Redis(c.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
      await r.connect();
      const n = (await r.keys(`${c.prefix}*`)).length;
      r.disconnect();
      if (n === 0) throw new Error(`${c.name}: no rate-limit counters in Redis after the warm-up pass`);
      counterNote += `${counterNote ? ', ' : ''}${c.name}: ${n}`;
    }
    for (const c of postgresCounters) {
      const client = new pg.Client(c.url);
      await client.connect();
      const n = Number((await client.query<{ n: string }>('SELECT count(*) AS n FROM tokenproxy.rate_limits')).rows[0]!.n);
      await client.end();
      if (n === 0) throw new Error(`${c.name}: no rate-limit counters in PostgreSQL after the warm-up pass`);
      counterNote += `${counterNote ? ', ' : ''}${c.name}: ${n}`;
    }
    for (let round = 0; round < ROUNDS; round++) {
      // Alternate the order so a drift in the machine's load does not always hit the same row.
      const order = round % 2 === 0 ? rows : [...rows].reverse();
      for (const row of order) row.rounds.push(await measure(runner, opts(row)));
      console.log(`round ${round + 1}/${ROUNDS} done (${((performance.now() - started) / 1000).toFixed(0)} s)`);
    }
  } finally {
    for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => {});
  }

  const summary = rows.map((row) => {
    const pick = (f: (r: Row['rounds'][number]) => number) => median(row.rounds.map(f));
    return {
      name: row.name,
      rps: pick((r) => r.rps),
      rpsRange: [Math.min(...row.rounds.map((r) => r.rps)), Math.max(...row.rounds.map((r) => r.rps))],
      p50: pick((r) => r.p50),
      p99: pick((r) => r.p99),
      cpu: pick((r) => r.srvCpuUsPerRequest),
      requests: row.rounds.reduce((a, r) => a + r.requests, 0),
      errors: row.rounds.reduce((a, r) => a + r.errors, 0),
      rounds: row.rounds,
    };
  });
  // Ratios are paired by round: each row against "off" measured seconds before or after it in the
  // same round, then the median over rounds (steadier than a ratio of medians when the machine's
  // load drifts). The range of the per-round req/s ratios shows how much to trust a verdict.
  const off = summary[0];
  const baselineOf = (s: (typeof summary)[number]) => summary.find((b) => b.name === rows[summary.indexOf(s)].baseline) ?? off;
  const paired = (s: (typeof summary)[number], f: (r: Row['rounds'][number]) => number) => {
    const base = baselineOf(s);
    return s.rounds.map((r, i) => f(r) / f(base.rounds[i]));
  };
  const lines = summary.map((s) => {
    const target = TARGETS[s.name];
    const rpsRatios = paired(s, (r) => r.rps);
    const vsOff = median(rpsRatios);
    const spread = `[${ratio(Math.min(...rpsRatios))}-${ratio(Math.max(...rpsRatios))}]`;
    return {
      ...s,
      vsOff,
      vsOffRange: [Math.min(...rpsRatios), Math.max(...rpsRatios)],
      p50VsOff: median(paired(s, (r) => r.p50)),
      p99VsOff: median(paired(s, (r) => r.p99)),
      cpuVsOff: median(paired(s, (r) => r.srvCpuUsPerRequest)),
      cells: [
        s.name, num(s.rps), `[${num(s.rpsRange[0])}-${num(s.rpsRange[1])}]`, ratio(vsOff), baselineOf(s) === s ? '' : spread,
        s.p50.toFixed(2), ratio(median(paired(s, (r) => r.p50))), s.p99.toFixed(2), ratio(median(paired(s, (r) => r.p99))),
        s.cpu.toFixed(0), ratio(median(paired(s, (r) => r.srvCpuUsPerRequest))), `${s.errors}/${s.requests}`,
        target === undefined ? (baselineOf(s) === s ? 'baseline' : `none (x ${baselineOf(s).name})`) : `>= ${target.toFixed(2)}x req/s`,
        target === undefined ? '' : vsOff >= target ? 'met' : 'NOT met',
      ],
    };
  });
  console.log('');
  console.log(table(['limits', 'req/s', '[min-max]', 'x off', '[per round]', 'p50 ms', 'x off', 'p99 ms', 'x off', 'srv cpu us/req', 'x off', 'non-200', 'target', ''], lines.map((l) => l.cells)));
  console.log(`
x off: median over rounds of (row / its baseline in the same round: "off", or "off (pg store)" for the PostgreSQL row); [per round]: the range of those req/s ratios.`);
  console.log(`srv cpu: this process's CPU per request (all servers live here; the load generator does not; redis-server's and PostgreSQL's do not). ${redisNote}`);
  if (postgresNote) console.log(postgresNote);
  if (counterNote) console.log(`rate-limit counters found in the store after the warm-up pass (${KEY_COUNT} keys x 2 rules expected): ${counterNote}`);
  const offSpread = (off.rpsRange[1] - off.rpsRange[0]) / off.rps;
  if (offSpread > 0.1) {
    console.log(`note: "off" alone varied by ${(offSpread * 100).toFixed(0)}% between rounds (load average now ${loadavg()[0].toFixed(2)} on ${env.cores} cores): differences of a few percent are within the noise of this run`);
  }
  const failed = summary.filter((s) => s.errors > 0);
  for (const s of failed) {
    const statuses: Record<string, number> = {};
    for (const r of s.rounds) for (const [k, v] of Object.entries(r.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
    console.log(`errors in "${s.name}": ${JSON.stringify(statuses)} ${[...new Set(s.rounds.flatMap((r) => r.errorSamples))].slice(0, 3).join(' | ')}`);
  }
  console.log(failed.length === 0 ? 'every response was 200' : `${failed.length} row(s) had non-200 responses or transport errors`);

  const out = join(dirname(fileURLToPath(import.meta.url)), 'results', 'rate-limit.json');
  mkdirSync(dirname(out), { recursive: true });
  const report = {
    at: new Date().toISOString(), machine: { ...env, loadAverageAtStart: load0 },
    params: { rounds: ROUNDS, durationMs: DURATION_MS, warmupMs: WARMUP_MS, connections: CONNECTIONS, keys: KEY_COUNT, dataDir: DATA_ROOT, bodyBytes: BODY.length },
    targets: TARGETS,
    rows: lines.map(({ cells: _cells, ...l }) => l),
  };
  writeFileSync(out, JSON.stringify(report, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), 2) + '\n');
  console.log(`results: ${out} (total ${((performance.now() - started) / 1000).toFixed(1)} s)`);
  return failed.length === 0 ? 0 : 1;
}

process.exitCode = await main();
