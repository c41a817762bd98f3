/**
 * /proxy/* throughput, latency and CPU against references measured in the same run, on one
 * upstream, every server in a process of its own:
 *
 *   direct                     the load straight at the upstream (no proxy)
 *   nginx, 1 worker            keep-alive upstream (lib/nginx.ts): the native reference; installed
 *                              with apt-get (nginx-light) when missing and root
 *   bare forwarder             node:http + undici Pool.stream (lib/reference-server.mjs): the Node
 *                              baseline the pass-through is held to
 *   constant body ceiling      bare node:http answering a constant body after reading the request
 *                              (lib/reference-server.mjs): what one Node process answering by
 *                              itself reaches (the /tokenize ceiling)
 *   tokenproxy pass-through    POST /proxy/anything, a proxy with no transforms: SVC-PROXY-KEY
 *                              checked, rate limits on (memory store) and counted, never refusing,
 *                              metrics on, log level warn (no access line)
 *   access log on              the same on a second instance at log level info: one access line
 *                              per request, written as in production (standard output, to a file)
 *   tokenizing 2 fields        the first instance, a proxy whose request transform tokenizes two
 *                              JSON fields (/card as a card token, /ssn as a string token) on the
 *                              embedded store
 *   workers: 2                 the pass-through on a third instance with server.workers: 2, as a
 *                              ratio to the workers: 1 row of the same round
 *
 * tokenproxy runs built (dist/, rebuilt first when src/ is newer: lib/tokenproxy-process.ts), as
 * `npm start` runs it. Then a memory section: the pass-through instance's RSS (/proc/<pid>/status)
 * before, with 10,000 idle keep-alive connections open (lib/idle-connections.mjs), and at its
 * peak while the load runs beside them (target: under 300 MB).
 *
 *   npm run bench -- proxy [--rounds 5] [--duration 3000] [--warmup 500] [--connections 50]
 *                          [--idle 10000] [--data-dir DIR] [--no-nginx] [--no-install]
 *
 * Targets (issue 12): pass-through >= 1.0x the bare forwarder; access log on <= 5% below off;
 * tokenizing >= 0.5x the forwarder with p99 <= 10 ms at 50 connections. Ratios are req/s, paired
 * by round (each row against the reference measured seconds before or after it), median over
 * rounds. CPU µs/request: the CPU time of the row's server process and its descendants (threads
 * included) over the row's windows, per request served.
 *
 * The load generator is wrk (lib/wrk.ts; 1 thread). It, the upstream, nginx and the servers under
 * test share the machine's cores. The upstream checks every body for the test card number:
 * plaintext reaching it fails the benchmark. Results also go to bench/results/proxy.json. Speed is
 * reported, never asserted: the exit code is non-zero only when a response was not 2xx or
 * plaintext reached the upstream.
 *
 * TOKENPROXY_BENCH_METRICS=off runs tokenproxy without the Prometheus registry;
 * TOKENPROXY_BENCH_CPU_PROF=DIR profiles the tokenproxy processes (lib/tokenproxy-process.ts).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import type { LoadOptions, LoadResult, LoadRunner } from './lib/load.js';
import { startBenchRunner } from './lib/wrk.js';
import { findNginx, startNginx } from './lib/nginx.js';
import { CLK_TCK, isTmpfs, machineTicks, openFilesLimit, treeRss, treeTicks } from './lib/procs.js';
import { machine, num, ratio, table } from './lib/report.js';
import { ensureBuilt, startReferenceServer, startTokenproxyProcess, type TokenproxyProcess } from './lib/tokenproxy-process.js';
import { startUpstream, type Upstream, type UpstreamSample } from './lib/upstream.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    duration: { type: 'string', default: '3000' },
    warmup: { type: 'string', default: '500' },
    connections: { type: 'string', default: '50' },
    idle: { type: 'string', default: '10000' },
    'data-dir': { type: 'string' },
    'no-nginx': { type: 'boolean', default: false },
    'no-install': { type: 'boolean', default: false },
  },
});
const ROUNDS = Math.max(1, Number(args.rounds));
const DURATION_MS = Number(args.duration);
const WARMUP_MS = Number(args.warmup);
const CONNECTIONS = Number(args.connections);
const IDLE_CONNECTIONS = Number(args.idle);
/** The token store's parent directory: the normal disk by default (os.tmpdir()), not tmpfs. */
const DATA_ROOT = resolve(args['data-dir'] ?? tmpdir());

const CARD_NUMBER = '4242424242424242';
/** The pass-through rows: an order without a card number (nothing a leak guard would flag), ~200 bytes. */
const PASS_BODY = JSON.stringify({
  order: { id: 'ord_8c1f2e7a', items: [{ sku: 'SKU-1001', qty: 2, price: 1999 }, { sku: 'SKU-2002', qty: 1, price: 4999 }] },
  customer: { id: 'cus_4f9a01', email: 'jane@example.com' },
  amount: 8997,
  currency: 'usd',
});
/** The tokenizing row: a card and an SSN at the configured pointers, ~150 bytes. */
const CARD = { number: CARD_NUMBER, expiration_month: 12, expiration_year: 2030, cvc: '123' };
const TOKENIZE_BODY = JSON.stringify({ card: CARD, ssn: '123-45-6789', amount: 100, currency: 'usd' });
const UPSTREAM_BODY = JSON.stringify({ id: 'evt_0001', status: 'accepted' });
const SUFFIX = '/anything';
/** A first pass over every row, not counted: JIT, connection pools, SQLite's page cache. */
const DISCARD_MS = 2000;

const TENANT = randomUUID();
const LIMIT_TENANT = randomUUID();
const READ_APP = randomUUID();
const READ_KEY = `bench_proxy_read_${randomBytes(8).toString('hex')}`;
const PASS_KEY = 'bench_proxy_key_pass_0123456789';
const TOKENIZE_KEY = 'bench_proxy_key_tok_0123456789';
const LIMIT_KEY = 'bench_proxy_key_limit_0123456789';
/** Every rule far above what the run can send in its window: counted, never refusing. */
const NEVER_POINTS = 100_000_000;

const TARGETS = {
  passVsForwarder: 1.0,
  /** The access line on costs at most 5% of the pass-through's req/s. */
  accessLogCost: 0.05,
  tokenizeVsForwarder: 0.5,
  tokenizeP99Ms: 10,
  rssMb: 300,
};

type RowId = 'direct' | 'nginx' | 'forwarder' | 'constant' | 'pass' | 'logged' | 'tokenize' | 'workers2';
const TITLES: Record<RowId, string> = {
  direct: 'direct to the upstream',
  nginx: 'nginx, 1 worker',
  forwarder: 'bare forwarder (node:http + undici)',
  constant: 'bare node:http, constant body (ceiling)',
  pass: 'tokenproxy pass-through',
  logged: 'pass-through, access log on',
  tokenize: 'tokenizing 2 fields, embedded store',
  workers2: 'pass-through, server.workers: 2',
};

interface Measured extends LoadResult {
  /** Requests the upstream received during this row's warm-up + window. */
  upstreamRequests: number;
  /** Of those, bodies containing the card number in plaintext. */
  upstreamPlaintext: number;
  /** CPU used by processes outside this benchmark's process tree, in cores (NaN: unknown). */
  otherCores: number;
  /** CPU µs per request of the row's server process and its descendants (NaN: unknown). */
  cpuUs: number;
}

interface Row {
  id: RowId;
  url: string;
  /** The process serving the row (its descendants count too), for CPU figures. */
  pid: number;
  headers: Record<string, string>;
  body: string;
  /** Why the row was not measured (unavailable); absent when it runs. */
  skipped?: string;
  /** A failed probe: the row is not measured and the run fails. */
  failed?: string;
  rounds: Measured[];
  upstreamSample?: UpstreamSample | null;
}

const median = (xs: number[]) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const mb = (bytes: number) => (Number.isFinite(bytes) ? `${(bytes / 1048576).toFixed(0)} MB` : '-');


function serviceConfig(upstream: string): Record<string, unknown> {
  return {
    rate_limits: { enabled: true, store: 'memory' },
    // TOKENPROXY_BENCH_METRICS=off: without the Prometheus registry, for a before/after.
    metrics: { enabled: process.env.TOKENPROXY_BENCH_METRICS !== 'off' },
    tenants: [
      {
        id: TENANT,
        name: 'bench',
        custom_rate_limits: { proxy_endpoint: { points: NEVER_POINTS, duration_seconds: 60 }, private_key: { points: NEVER_POINTS, duration_seconds: 60 } },
        applications: [{ id: READ_APP, name: 'bench-reader', type: 'private', keys: [READ_KEY], permissions: ['token:read'] }],
        proxies: [
          { id: 'bench-pass', name: 'bench pass', key: PASS_KEY, destination_url: upstream, require_auth: false, leak_guard: 'off' },
          {
            id: 'bench-tokenize',
            name: 'bench tokenize',
            key: TOKENIZE_KEY,
            destination_url: upstream,
            require_auth: false,
            // leak_guard left at its default ('log'): the outgoing body is scanned, as configured in real use.
            request_transforms: [
              {
                type: 'tokenize',
                fields: [
                  { pointer: '/card', token: { type: 'card' } },
                  { pointer: '/ssn', token: { type: 'token' } },
                ],
              },
            ],
          },
        ],
      },
      {
        // A second tenant whose proxy limit is 2 requests a minute: shows the limits really are on
        // and counted by proxy key in the service under test (its third request must be 429).
        id: LIMIT_TENANT,
        name: 'bench-limit-check',
        custom_rate_limits: { proxy_endpoint: { points: 2, duration_seconds: 60 } },
        proxies: [{ id: 'bench-limit', name: 'bench limit check', key: LIMIT_KEY, destination_url: upstream, require_auth: false, leak_guard: 'off' }],
      },
    ],
  };
}

/** One request outside the measurement: 200 and the upstream's body; returns the response headers. */
async function probe(row: Pick<Row, 'url' | 'headers' | 'body'>): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }> {
  const res = await request(row.url, { method: 'POST', headers: row.headers, body: row.body });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text };
}

async function measure(runner: LoadRunner, upstream: Upstream, row: Row, durationMs: number, warmupMs: number): Promise<Measured> {
  await upstream.stats(true);
  const opts: LoadOptions = { url: row.url, method: 'POST', headers: row.headers, body: row.body, connections: CONNECTIONS, durationMs, warmupMs };
  const c0 = machineTicks();
  const t0 = performance.now();
  const r = await runner.run(opts);
  const c1 = machineTicks();
  const seconds = (performance.now() - t0) / 1000;
  const otherCores = c0 && c1 ? Math.max(0, c1.machine - c0.machine - (c1.ours - c0.ours)) / CLK_TCK / seconds : NaN;
  const s = await upstream.stats(true);
  if (s.watchHits > 0 && !row.upstreamSample) row.upstreamSample = s.watchSample;
  if (row.upstreamSample === undefined) row.upstreamSample = s.sample;
  // The CPU window covers warm-up and measurement: divided by every request of both.
  const served = r.requests + r.warmupRequests;
  const ticks = c0 && c1 ? treeTicks(row.pid, c1.procs) - treeTicks(row.pid, c0.procs) : NaN;
  const cpuUs = served > 0 ? ((ticks / CLK_TCK) * 1e6) / served : NaN;
  return { ...r, upstreamRequests: s.requests, upstreamPlaintext: s.watchHits, otherCores, cpuUs };
}

interface MemoryReport {
  idleTarget: number;
  idleOpen: number;
  idleFailed: number;
  idleStatuses: Record<string, number>;
  fdLimit: { soft: number; hard: number } | null;
  rssBefore: number;
  rssIdle: number;
  rssPeakUnderLoad: number;
  rssAfterLoad: number;
  load: { rps: number; p99: number; errors: number; requests: number } | null;
  skipped?: string;
}

/**
 * The memory section: `idle` keep-alive connections held open to the pass-through instance by a
 * helper process, then the pass-through load beside them; RSS of the instance (and any children)
 * before, with the idle connections, at its peak during the load (sampled every 100 ms), after.
 */
async function memorySection(runner: LoadRunner, tp: TokenproxyProcess, row: Row, idle: number, log: (line: string) => void): Promise<MemoryReport> {
  const fdLimit = openFilesLimit(tp.pid);
  const report: MemoryReport = {
    idleTarget: idle, idleOpen: 0, idleFailed: 0, idleStatuses: {}, fdLimit,
    rssBefore: treeRss(tp.pid), rssIdle: NaN, rssPeakUnderLoad: NaN, rssAfterLoad: NaN, load: null,
  };
  if (fdLimit && fdLimit.soft < idle + 256) {
    report.skipped = `the service's open-files limit is ${fdLimit.soft} (hard ${fdLimit.hard}), under ${idle} connections + 256`;
    return report;
  }
  const port = new URL(tp.url).port;
  const entry = fileURLToPath(new URL('./lib/idle-connections.mjs', import.meta.url));
  // Raise the helper's soft open-files limit to its hard one: it holds every idle socket.
  const helper = spawn('sh', ['-c', 'ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$0" "$@"', process.execPath, entry, port, String(idle), '/healthz'], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  try {
    const opened = await new Promise<{ open: number; failed: number; statuses: Record<string, number> }>((res, rej) => {
      let buf = '';
      helper.stdout!.setEncoding('utf8').on('data', (d: string) => {
        buf += d;
        const line = /\{"open".*\}/.exec(buf)?.[0];
        if (line) res(JSON.parse(line) as { open: number; failed: number; statuses: Record<string, number> });
      });
      helper.once('exit', (code) => rej(new Error(`the idle-connections helper exited (${code}) before it reported`)));
    });
    report.idleOpen = opened.open;
    report.idleFailed = opened.failed;
    report.idleStatuses = opened.statuses;
    log(`memory: ${opened.open} idle keep-alive connections open to the pass-through instance (${opened.failed} failed)`);
    await new Promise((r) => setTimeout(r, 1000));
    report.rssIdle = treeRss(tp.pid);
    let peak = report.rssIdle;
    const sampler = setInterval(() => (peak = Math.max(peak, treeRss(tp.pid))), 100);
    try {
      const r = await runner.run({ url: row.url, method: 'POST', headers: row.headers, body: row.body, connections: CONNECTIONS, durationMs: DURATION_MS * 2, warmupMs: 0 });
      report.load = { rps: r.rps, p99: r.p99, errors: r.errors, requests: r.requests };
    } finally {
      clearInterval(sampler);
    }
    report.rssPeakUnderLoad = Math.max(peak, treeRss(tp.pid));
    report.rssAfterLoad = treeRss(tp.pid);
  } finally {
    helper.stdin!.end();
    helper.kill('SIGTERM');
  }
  return report;
}

async function main(): Promise<number> {
  const started = performance.now();
  const env = machine();
  const load0 = loadavg();
  const notes: string[] = [];
  const problems: string[] = [];
  const log = (line: string) => console.log(line);
  log(`proxy benchmark: node ${env.node}, ${env.cores} x ${env.cpu}, load average ${load0.map((l) => l.toFixed(2)).join(' ')} at start`);

  const cleanups: Array<() => Promise<void> | void> = [];
  const rows: Row[] = [];
  let nginxInfo: Record<string, unknown> = { available: false };
  let storeInfo: Record<string, unknown> | null = null;
  let limitCheck = 'not run';
  let tokenReadBack = 'not run';
  let accessLogFile: string | null = null;
  let accessLines = NaN;
  let memory: MemoryReport | null = null;
  let passInstance: TokenproxyProcess | null = null;
  const instances: TokenproxyProcess[] = [];
  const json = { 'content-type': 'application/json' };
  const add = (id: RowId, url: string, pid: number, extra: Partial<Row> = {}) => {
    const row: Row = { id, url: url ? `${url}${SUFFIX}` : '', pid, headers: json, body: PASS_BODY, rounds: [], ...extra };
    rows.push(row);
    return row;
  };
  /** A tokenproxy instance, or the rows it would serve marked skipped with the reason. */
  const instance = async (name: string, logLevel: string, workers: number, ids: RowId[]): Promise<TokenproxyProcess | null> => {
    try {
      const tp = await startTokenproxyProcess(serviceConfig(upstreamUrl), { dataRoot: DATA_ROOT, logLevel, workers, name });
      cleanups.push(() => tp.close());
      instances.push(tp);
      return tp;
    } catch (err) {
      for (const id of ids) add(id, '', 0, { skipped: `tokenproxy (${name}) did not start: ${(err as Error).message.split('\n').slice(0, 3).join(' / ')}` });
      return null;
    }
  };
  let upstreamUrl = '';
  try {
    ensureBuilt(log);
    const upstream = await startUpstream({ responseBody: UPSTREAM_BODY, watch: CARD_NUMBER });
    upstreamUrl = upstream.url;
    cleanups.push(() => upstream.close());

    add('direct', upstream.url, upstream.pid);

    if (args['no-nginx']) add('nginx', '', 0, { skipped: 'nginx rows skipped (--no-nginx)' });
    else {
      const found = findNginx({ install: !args['no-install'], log });
      if (found.bin === null) add('nginx', '', 0, { skipped: `nginx unavailable: ${found.reason}` });
      else {
        try {
          const ng = await startNginx(found.bin, upstream.url);
          cleanups.push(() => ng.close());
          add('nginx', ng.url, ng.pid);
          nginxInfo = { available: true, bin: found.bin, version: found.version, installedNow: found.installed, pid: ng.pid, config: ng.config };
        } catch (err) {
          add('nginx', '', 0, { skipped: `nginx unavailable: it did not start: ${(err as Error).message}` });
        }
      }
    }

    const fwd = await startReferenceServer(['forwarder', upstream.url]);
    cleanups.push(() => fwd.close());
    add('forwarder', fwd.url, fwd.pid);
    const constant = await startReferenceServer(['constant', UPSTREAM_BODY]);
    cleanups.push(() => constant.close());
    add('constant', constant.url, constant.pid);

    // tokenproxy: the pass-through and tokenizing rows on one instance (log level warn: no access
    // line), the access-log row on a second (info), the workers: 2 row on a third.
    const tp = await instance('pass', 'warn', 1, ['pass', 'tokenize']);
    if (tp) {
      passInstance = tp;
      const tmpfs = isTmpfs(tp.dataDir);
      storeInfo = { kind: 'embedded', dataDir: tp.dataDir, tmpfs };
      add('pass', `${tp.url}/proxy`, tp.pid, { headers: { ...json, 'svc-proxy-key': PASS_KEY } });
      add('tokenize', `${tp.url}/proxy`, tp.pid, { headers: { ...json, 'svc-proxy-key': TOKENIZE_KEY }, body: TOKENIZE_BODY });
      log(`token store: embedded SQLite in ${tp.dataDir} (${tmpfs ? 'tmpfs' : 'not tmpfs: the normal disk'})`);
    }
    const logged = await instance('logged', 'info', 1, ['logged']);
    if (logged) {
      add('logged', `${logged.url}/proxy`, logged.pid, { headers: { ...json, 'svc-proxy-key': PASS_KEY } });
      accessLogFile = logged.logFile;
    }
    const w2 = await instance('workers2', 'warn', 2, ['workers2']);
    if (w2) add('workers2', `${w2.url}/proxy`, w2.pid, { headers: { ...json, 'svc-proxy-key': PASS_KEY } });
    // The rows in the issue's order.
    const order: RowId[] = ['direct', 'nginx', 'forwarder', 'constant', 'pass', 'logged', 'tokenize', 'workers2'];
    rows.sort((a, b) => order.indexOf(a.id) - order.indexOf(b.id));

    for (const row of rows) {
      if (row.skipped) {
        log(`skipped: ${TITLES[row.id]}: ${row.skipped}`);
        continue;
      }
      const p = await probe(row);
      if (p.status !== 200) row.failed = `probe answered ${p.status}: ${p.text.slice(0, 300)}`;
      else if (p.text !== UPSTREAM_BODY) row.failed = `probe answered 200 with a body that is not the upstream's: ${p.text.slice(0, 300)}`;
      if (row.id === 'pass' || row.id === 'logged' || row.id === 'tokenize' || row.id === 'workers2') {
        const dest = p.headers['svc-proxy-destination-status'];
        const limit = p.headers['ratelimit-limit'] ?? p.headers['x-ratelimit-limit'];
        log(`probe ${TITLES[row.id]}: ${p.status}, SVC-PROXY-DESTINATION-STATUS ${String(dest ?? 'absent')}, RateLimit-Limit ${String(limit ?? 'absent')}`);
        if (dest === undefined) problems.push(`${TITLES[row.id]}: the response has no SVC-PROXY-DESTINATION-STATUS header`);
      }
      if (row.failed) log(`FAILED: ${TITLES[row.id]}: ${row.failed}`);
    }

    // Limits really on: the limit-check tenant's proxy refuses its third request.
    const tpRow = rows.find((r) => r.id === 'pass' && !r.skipped && !r.failed);
    if (tpRow) {
      const limitRow = { ...tpRow, headers: { ...tpRow.headers, 'svc-proxy-key': LIMIT_KEY } };
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++) statuses.push((await probe(limitRow)).status);
      limitCheck = `a proxy limited to 2 requests/min answered ${statuses.join(', ')}`;
      const ok = statuses[0] === 200 && statuses[1] === 200 && statuses[2] === 429;
      log(`rate limits: ${limitCheck} (${ok ? 'limits are on and counted by proxy key' : 'EXPECTED 200, 200, 429'})`);
      if (!ok) problems.push(`rate limits do not seem to be counted on /proxy/*: ${limitCheck}`);
    }

    const live = rows.filter((r) => !r.skipped && !r.failed);
    log(`load: POST ${SUFFIX} (tokenproxy: /proxy${SUFFIX}), ${CONNECTIONS} keep-alive connections; every server in its own process`);
    log(`bodies: an order without a card number (${PASS_BODY.length} B); the tokenizing row a card at /card and an SSN at /ssn (${TOKENIZE_BODY.length} B); the upstream answers ${UPSTREAM_BODY.length} B`);
    log(`each row: one discarded ${DISCARD_MS / 1000} s pass, then ${ROUNDS} interleaved rounds of ${WARMUP_MS} ms warm-up + ${DURATION_MS} ms; medians shown\n`);

    const runner = await startBenchRunner({ install: !args['no-install'], log });
    log(`load generator: ${runner.describe}`);
    cleanups.push(() => runner.close());
    for (const row of live) await measure(runner, upstream, row, DISCARD_MS, 0);
    for (const row of live) row.upstreamSample = undefined;
    for (let round = 0; round < ROUNDS; round++) {
      const inOrder = round % 2 === 0 ? live : [...live].reverse();
      for (const row of inOrder) row.rounds.push(await measure(runner, upstream, row, DURATION_MS, WARMUP_MS));
      log(`round ${round + 1}/${ROUNDS} done (${((performance.now() - started) / 1000).toFixed(0)} s, load average ${loadavg()[0].toFixed(2)})`);
    }

    if (accessLogFile) {
      try {
        accessLines = readFileSync(accessLogFile, 'utf8').split('\n').filter((l) => l.includes('"msg":"request"')).length;
      } catch {
        accessLines = NaN;
      }
    }

    // The tokens the upstream saw exist in the vault (read back with a private key).
    const tok = rows.find((r) => r.id === 'tokenize' && r.rounds.length > 0);
    if (tok && tpRow) {
      const sampleBody = tok.upstreamSample?.body ?? '';
      try {
        const parsed = JSON.parse(sampleBody) as { card?: unknown; ssn?: unknown };
        const origin = new URL(tpRow.url).origin;
        if (typeof parsed.card !== 'string' || typeof parsed.ssn !== 'string') tokenReadBack = `the upstream's sample body has no token ids at /card and /ssn: ${sampleBody.slice(0, 200)}`;
        else {
          const got: string[] = [];
          for (const [field, id] of [['card', parsed.card], ['ssn', parsed.ssn]] as const) {
            const res = await request(`${origin}/tokens/${encodeURIComponent(id)}`, { headers: { 'svc-api-key': READ_KEY } });
            const text = await res.body.text();
            got.push(`${field} ${id} -> GET /tokens/{id} ${res.statusCode}`);
            if (res.statusCode !== 200) problems.push(`token ${id} (the upstream's /${field}) read back ${res.statusCode}: ${text.slice(0, 200)}`);
          }
          tokenReadBack = got.join('; ');
        }
      } catch {
        tokenReadBack = `the upstream's sample body is not JSON: ${sampleBody.slice(0, 200)}`;
      }
      if (tok.upstreamSample?.headers['svc-proxy-key'] !== undefined) problems.push('the upstream received the SVC-PROXY-KEY header');
    }

    if (passInstance && tpRow && IDLE_CONNECTIONS > 0) {
      try {
        memory = await memorySection(runner, passInstance, tpRow, IDLE_CONNECTIONS, log);
      } catch (err) {
        problems.push(`memory section: ${(err as Error).message}`);
      }
    }
    // A row with errors: the services' warn/error lines say why.
    if (rows.some((r) => r.rounds.some((m) => m.errors > 0))) for (const inst of instances) for (const line of inst.problems()) notes.push(`service log: ${line}`);
  } finally {
    for (const c of cleanups.reverse()) await Promise.resolve(c()).catch((err: unknown) => console.error(`cleanup: ${(err as Error).message}`));
  }

  // ---- report --------------------------------------------------------------------------------
  const byId = (id: RowId) => rows.find((r) => r.id === id && r.rounds.length > 0);
  const forwarder = byId('forwarder');
  const nginx = byId('nginx');
  const pass = byId('pass');
  const paired = (row: Row, ref: Row | undefined) => (ref ? median(row.rounds.map((r, i) => r.rps / ref.rounds[i].rps)) : NaN);
  const summary = rows.map((row) => {
    const measured = row.rounds.length > 0;
    const sum = (f: (r: Measured) => number) => row.rounds.reduce((a, r) => a + f(r), 0);
    const statuses: Record<string, number> = {};
    for (const r of row.rounds) for (const [k, v] of Object.entries(r.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
    return {
      id: row.id,
      title: TITLES[row.id],
      url: row.url || null,
      skipped: row.skipped ?? null,
      failed: row.failed ?? null,
      rps: median(row.rounds.map((r) => r.rps)),
      rpsRange: measured ? [Math.min(...row.rounds.map((r) => r.rps)), Math.max(...row.rounds.map((r) => r.rps))] : null,
      p50: median(row.rounds.map((r) => r.p50)),
      p99: median(row.rounds.map((r) => r.p99)),
      max: measured ? Math.max(...row.rounds.map((r) => r.max)) : NaN,
      requests: sum((r) => r.requests),
      errors: sum((r) => r.errors),
      statuses,
      errorSamples: [...new Set(row.rounds.flatMap((r) => r.errorSamples))].slice(0, 3),
      upstreamRequests: sum((r) => r.upstreamRequests),
      loadRequests: sum((r) => r.requests + r.warmupRequests),
      upstreamPlaintext: sum((r) => r.upstreamPlaintext),
      otherCores: median(row.rounds.map((r) => r.otherCores)),
      cpuUs: median(row.rounds.map((r) => r.cpuUs)),
      otherCoresMax: measured ? Math.max(...row.rounds.map((r) => r.otherCores)) : NaN,
      vsNginx: measured ? paired(row, nginx) : NaN,
      vsForwarder: measured ? paired(row, forwarder) : NaN,
      vsPass: measured ? paired(row, pass) : NaN,
      rounds: row.rounds,
      upstreamSample: row.upstreamSample ?? null,
    };
  });
  const s = (id: RowId) => summary.find((x) => x.id === id)!;
  // The column "x other": the access-log and workers rows against the pass-through, the
  // tokenizing row against the constant-body ceiling is not a pairing the issue asks for.
  const other = (id: RowId, v: number) => (id === 'logged' || id === 'workers2' ? `${ratio(v)} pass` : '');

  console.log('');
  console.log(table(
    ['row', 'req/s', '[min-max]', 'p50 ms', 'p99 ms', 'non-2xx/errors', 'x nginx', 'x forwarder', 'x other', 'cpu us/req', 'other cpu'],
    summary.map((x) =>
      x.rpsRange
        ? [
            x.title, num(x.rps), `[${num(x.rpsRange[0])}-${num(x.rpsRange[1])}]`, x.p50.toFixed(2), x.p99.toFixed(2), `${x.errors}/${x.requests}${x.errors > 0 ? ' INVALID' : ''}`,
            ratio(x.vsNginx), ratio(x.vsForwarder), other(x.id, x.vsPass),
            Number.isFinite(x.cpuUs) ? x.cpuUs.toFixed(0) : '-',
            Number.isFinite(x.otherCores) ? x.otherCores.toFixed(2) : '-',
          ]
        : [x.title, x.failed ? 'FAILED' : 'skipped', '', '', '', '', '', '', '', '', ''],
    ),
  ));
  console.log(`\nx nginx, x forwarder, x other: req/s, median over rounds of (row / reference in the same round). p50/p99: median over rounds.`);
  console.log(`every server runs in its own process; wrk, the upstream, nginx and the server under test share the machine's ${env.cores} cores; load average now ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  console.log(`cpu us/req: CPU time of the row's server process and its descendants (all threads; nginx: master and worker; workers: 2: primary and both workers) over the row's windows, per request; the direct row is the upstream's`);
  console.log(`other cpu: cores used by user processes outside this benchmark (kernel threads excluded) during the row's windows (median over rounds; from /proc)`);
  const busiest = Math.max(...summary.map((x) => x.otherCoresMax).filter(Number.isFinite));
  if (busiest > 0.2) {
    notes.push(`other processes used up to ${busiest.toFixed(2)} of ${env.cores} cores during some windows: those rounds are slower, and the ranges wide; the paired ratios and medians absorb part of it`);
  }

  const logCost = s('logged').rpsRange && s('pass').rpsRange ? 1 - s('logged').vsPass : NaN;
  const measuredOr = (ok: boolean, v: string) => (ok ? v : '-');
  const verdict = (value: number, target: number, higherIsBetter: boolean) =>
    !Number.isFinite(value) ? 'n/a' : (higherIsBetter ? value >= target : value <= target) ? 'met' : 'NOT met';
  const rssPeak = memory?.rssPeakUnderLoad ?? NaN;
  const targets = [
    { target: `pass-through >= ${TARGETS.passVsForwarder.toFixed(1)}x the bare forwarder`, value: ratio(s('pass').vsForwarder), verdict: verdict(s('pass').vsForwarder, TARGETS.passVsForwarder, true) },
    { target: `access log on <= ${TARGETS.accessLogCost * 100}% below off`, value: measuredOr(Number.isFinite(logCost), `${(logCost * 100).toFixed(1)}%`), verdict: verdict(logCost, TARGETS.accessLogCost, false) },
    { target: `tokenizing >= ${TARGETS.tokenizeVsForwarder}x the bare forwarder`, value: ratio(s('tokenize').vsForwarder), verdict: verdict(s('tokenize').vsForwarder, TARGETS.tokenizeVsForwarder, true) },
    { target: `tokenizing p99 <= ${TARGETS.tokenizeP99Ms} ms at ${CONNECTIONS} connections`, value: measuredOr(Number.isFinite(s('tokenize').p99), `${s('tokenize').p99.toFixed(2)} ms`), verdict: verdict(s('tokenize').p99, TARGETS.tokenizeP99Ms, false) },
    { target: `server.workers: 2 vs 1 (no target: 2 cores, wrk takes one)`, value: ratio(s('workers2').vsPass), verdict: '' },
    { target: `RSS < ${TARGETS.rssMb} MB with ${num(IDLE_CONNECTIONS)} idle connections + load`, value: mb(rssPeak), verdict: verdict(rssPeak / 1048576, TARGETS.rssMb, false) },
  ];
  console.log('');
  console.log(table(['target', 'measured', ''], targets.map((t) => [t.target, t.value, t.verdict])));
  if (CONNECTIONS !== 50) console.log(`note: the targets are stated at 50 connections; this run used ${CONNECTIONS}`);
  // Little's law on a closed loop: mean latency = connections / throughput.
  console.log(`note: with ${CONNECTIONS} connections each keeping one request in flight, mean latency = ${CONNECTIONS} / req/s, so p99 <= ${TARGETS.tokenizeP99Ms} ms needs more than ${num(CONNECTIONS / (TARGETS.tokenizeP99Ms / 1000))} req/s`);
  console.log('');

  if (memory) {
    console.log(`memory (tokenproxy pass-through instance, VmRSS from /proc/<pid>/status):`);
    if (memory.skipped) console.log(`  skipped: ${memory.skipped}`);
    else {
      console.log(table(['', 'RSS'], [
        ['before (after the rows above)', mb(memory.rssBefore)],
        [`${num(memory.idleOpen)} idle keep-alive connections open`, mb(memory.rssIdle)],
        [`peak while the pass-through load runs beside them (${(DURATION_MS * 2) / 1000} s)`, mb(memory.rssPeakUnderLoad)],
        ['after that load, idle connections still open', mb(memory.rssAfterLoad)],
      ]));
      console.log(`  idle connections: ${memory.idleOpen} of ${memory.idleTarget} open (${memory.idleFailed} failed; answers ${JSON.stringify(memory.idleStatuses)}); the service's open-files limit ${memory.fdLimit ? `${memory.fdLimit.soft}/${memory.fdLimit.hard}` : 'unknown'}`);
      if (memory.load) console.log(`  the load beside them: ${num(memory.load.rps)} req/s, p99 ${memory.load.p99.toFixed(2)} ms, ${memory.load.errors} non-2xx/errors of ${memory.load.requests}`);
      if (memory.idleOpen < memory.idleTarget) problems.push(`memory section: only ${memory.idleOpen} of ${memory.idleTarget} idle connections stayed open`);
    }
    console.log('');
  }

  for (const row of summary) if (row.skipped) console.log(`skipped ${row.title}: ${row.skipped}`);
  if (storeInfo && s('tokenize').rpsRange) console.log(`tokenizing row: token store embedded SQLite in ${String(storeInfo.dataDir)} (${storeInfo.tmpfs ? 'tmpfs' : 'not tmpfs'})`);
  if (nginxInfo.available) console.log(`nginx: ${String(nginxInfo.version)} (${String(nginxInfo.bin)}${nginxInfo.installedNow ? `, installed now from Debian package ${String(nginxInfo.installedNow)}` : ''}), 1 worker, upstream keepalive 64`);
  console.log(`tokenproxy: built (dist/), ${process.env.TOKENPROXY_BENCH_METRICS === 'off' ? 'metrics OFF' : 'metrics on'}; rate limits in memory, proxy_endpoint at ${NEVER_POINTS.toLocaleString('en-US')} points / 60 s; check: ${limitCheck}`);
  for (const row of summary) {
    if (!row.rpsRange) continue;
    const lost = row.loadRequests - row.upstreamRequests;
    if (row.id !== 'direct' && row.id !== 'constant' && Math.abs(lost) > CONNECTIONS * ROUNDS * 2) notes.push(`${row.title}: the load sent ${row.loadRequests} requests, the upstream received ${row.upstreamRequests}`);
  }
  const tokSummary = s('tokenize');
  if (tokSummary.rpsRange) {
    console.log(`upstream received in the tokenizing row: ${tokSummary.upstreamRequests} requests, ${tokSummary.upstreamPlaintext} with the card number in plaintext`);
    if (tokSummary.upstreamSample) console.log(`  sample body at the upstream: ${tokSummary.upstreamSample.body.slice(0, 300)}`);
    console.log(`  tokens read back: ${tokenReadBack}`);
  }
  if (s('logged').rpsRange) console.log(`access log row: ${Number.isFinite(accessLines) ? num(accessLines) : 'unknown'} access lines written (its discarded pass, warm-ups, rounds and probe; ${num(s('logged').loadRequests)} in the rounds and warm-ups), standard output to a file on the data dir's disk`);
  for (const n of notes) console.log(`note: ${n}`);
  for (const p of problems) console.log(`PROBLEM: ${p}`);

  const failures: string[] = [];
  for (const row of summary) {
    if (row.failed) failures.push(`${row.title}: ${row.failed}`);
    if (row.errors > 0) failures.push(`${row.title}: ${row.errors} non-2xx responses or transport errors ${JSON.stringify(row.statuses)} ${row.errorSamples.join(' | ')}`);
    if (row.upstreamPlaintext > 0) failures.push(`${row.title}: the card number reached the upstream in plaintext in ${row.upstreamPlaintext} requests`);
  }
  if (memory?.load && memory.load.errors > 0) failures.push(`memory section: ${memory.load.errors} non-2xx responses or transport errors under load`);
  for (const f of failures) console.log(`FAILED: ${f}`);
  if (failures.length === 0) console.log('every response was 2xx; no plaintext card number reached the upstream');

  const out = join(dirname(fileURLToPath(import.meta.url)), 'results', 'proxy.json');
  mkdirSync(dirname(out), { recursive: true });
  const report = {
    at: new Date().toISOString(),
    machine: { ...env, loadAverageAtStart: load0, loadAverageAtEnd: loadavg() },
    params: { rounds: ROUNDS, durationMs: DURATION_MS, warmupMs: WARMUP_MS, connections: CONNECTIONS, idleConnections: IDLE_CONNECTIONS, dataRoot: DATA_ROOT, passBodyBytes: PASS_BODY.length, tokenizeBodyBytes: TOKENIZE_BODY.length, upstreamBodyBytes: UPSTREAM_BODY.length },
    nginx: nginxInfo,
    store: storeInfo,
    rateLimitCheck: limitCheck,
    tokenReadBack,
    targets,
    rows: summary,
    memory,
    notes,
    problems,
    failures,
  };
  writeFileSync(out, JSON.stringify(report, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), 2) + '\n');
  console.log(`results: ${out} (total ${((performance.now() - started) / 1000).toFixed(1)} s)`);
  return failures.length === 0 ? 0 : 1;
}

process.exitCode = await main();
