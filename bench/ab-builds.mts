/**
 * A/B of tokenproxy builds in one window (issue 25): on a shared machine, two runs of the same
 * bench minutes apart differ more than the changes under test. Each build runs in a process of
 * its own (built dist/main.js, embedded store, log level warn, metrics on); wrk (1 thread) loads
 * them in turn, round by round, the order reversed every other round; CPU per request of each
 * server's process tree from /proc over its window (warm-up included). The paired ratios (each
 * build against the first in the same round, median over rounds) are the figures to compare.
 *
 *   node --no-node-snapshot --import tsx bench/ab-builds.mts ROW ROUNDS label=/path/dist/main.js ...
 *
 * ROW `tokenize`: POST /tokenize with one string, 64 connections, rate limits off (as
 * tokenize.ts's row); `tokenize100`: a JSON array of 100 strings, 16 connections (req/s: x100 for
 * tokens/s; CPU per request: /100 per token); `tokenize-dedupe`: one deduplicating token, the
 * same each time (every request after the first matches it), 64 connections; `proxy`: POST /proxy/anything through a proxy without transforms to a
 * local upstream, 50 connections, rate limits on in memory and never refusing (as proxy.ts's
 * pass-through row); `proxy-tokenize`: the same through a proxy whose request transform tokenizes
 * a card and an SSN (leak guard at its default, `log`), as proxy.ts's tokenizing row. A build
 * given as `forwarder=forwarder` is the bare node:http + undici forwarder
 * (lib/reference-server.mjs) to the same upstream, measured the same way, for the ratio issue 25
 * states (session 13). AB_MS sets the measuring window (default 3000 ms). AB_STORE=postgres (issue 24):
 * the `tokenize` rows on the PostgreSQL store, a private cluster (test/helpers/postgres.ts, fsync and
 * synchronous_commit on) with a database per build, the store's default pool; the cluster's CPU
 * per request (the postmaster's process tree over the same window) is printed beside the
 * service's; AB_PG_LOG=1 logs every statement to the cluster's server.log (to count round trips,
 * not for timing). Build a baseline with
 * `git worktree add` or `git archive REV | tar -x -C DIR`, then `tsc -p tsconfig.build.json` in it.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { treeTicks, CLK_TCK } from './lib/procs.js';
import { startBenchRunner } from './lib/wrk.js';
import type { LoadOptions } from './lib/load.js';
import { benchConfig, BENCH_KEY } from './lib/service.js';
import { freePort } from '../test/helpers/redis.js';
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { startPostgres, type PostgresServer } from '../test/helpers/postgres.js';

const [row, roundsArg, ...specs] = process.argv.slice(2);
const rounds = Number(roundsArg);
// `label=path/dist/main.js` or `label=path/dist/main.js|--flag,--flag`: node flags for that build (session 13: the same build with other V8 heap flags).
const builds = specs.map((s) => {
  const [label, rest] = [s.slice(0, s.indexOf('=')), s.slice(s.indexOf('=') + 1)];
  const [main, flags] = rest.split('|');
  return { label, main: main!, flags: flags ? flags.split(',') : [] };
});

async function upstream(): Promise<string> {
  const srv = createServer((req, res) => { req.resume(); req.on('end', () => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"ok":true,"id":"abc-123-def-456"}'); }); });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
}

const proxyRow = row === 'proxy' || row === 'proxy-tokenize';
const up = proxyRow ? await upstream() : '';
const TOKENIZE_KEY = 'bench_proxy_key_tok_0123456789abcdef';
const CARD = { number: '4242424242424242', expiration_month: 12, expiration_year: 2030, cvc: '123' };

const onPostgres = process.env.AB_STORE === 'postgres';
let cluster: PostgresServer | null = null;
let postmaster = 0;
if (onPostgres) {
  cluster = await startPostgres({ own: true });
  postmaster = Number(readFileSync(join(cluster.dataDir!, 'postmaster.pid'), 'utf8').split('\n')[0]);
  if (process.env.AB_PG_LOG) {
    const c = new pg.Client({ connectionString: cluster.adminUrl });
    await c.connect();
    await c.query("ALTER SYSTEM SET log_statement = 'all'");
    await c.query('SELECT pg_reload_conf()');
    await c.end();
    console.log(`statements logged to ${join(cluster.dataDir!, '..', 'server.log')}`);
  }
}
async function startForwarder(): Promise<{ url: string; pid: number; child: ReturnType<typeof spawn> }> {
  const script = new URL('./lib/reference-server.mjs', import.meta.url).pathname;
  const child = spawn(process.execPath, ['--no-node-snapshot', ...(process.env.AB_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.AB_PROF}/forwarder`] : []), script, 'forwarder', up], { env: { ...process.env, NODE_OPTIONS: '' }, stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise<string>((res) => child.stdout!.once('data', (d: Buffer) => res(d.toString())));
  return { url: `http://127.0.0.1:${(JSON.parse(line) as { port: number }).port}`, pid: child.pid!, child };
}

async function start(main: string, name: string, flags: string[]) {
  if (main === 'forwarder') return startForwarder();
  const dir = mkdtempSync(join(tmpdir(), `tp-ab-${name}-`));
  const port = await freePort();
  const raw = benchConfig(proxyRow ? { tenant: {
    custom_rate_limits: { proxy_endpoint: { points: 100000000, duration_seconds: 60 }, private_key: { points: 100000000, duration_seconds: 60 } },
    proxies: [{ id: 'bench-pass', name: 'p', key: 'bench_proxy_key_0123456789abcdef', destination_url: up, require_auth: false, leak_guard: 'off' },
      { id: 'bench-tokenize', name: 't', key: TOKENIZE_KEY, destination_url: up, require_auth: false,
        request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/card', token: { type: 'card' } }, { pointer: '/ssn', token: { type: 'token' } }] }] }] } } : {});
  const config = { ...raw, server: { host: '127.0.0.1', port }, log: { level: 'warn' }, store: onPostgres ? { kind: 'postgres', url: (await cluster!.database({ teardown: () => {} })).url } : { kind: 'embedded', path: join(dir, 'tokens.db') },
    ...(proxyRow ? { rate_limits: { enabled: true, store: 'memory' } } : {}) };
  writeFileSync(join(dir, 'c.json'), JSON.stringify(config));
  const child = spawn(process.execPath, ['--no-node-snapshot', ...flags, ...(process.env.AB_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.AB_PROF}/${name}`] : []), main, '--config', join(dir, 'c.json')], { env: { ...process.env, TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64'), NODE_OPTIONS: '' }, stdio: ['ignore', 'ignore', 'inherit'] });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    const ok = await request(`${url}/healthz`, { reset: true }).then((r) => r.body.dump().then(() => r.statusCode === 200), () => false);
    if (ok) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  return { url, pid: child.pid!, child };
}

type Server = { label: string; main: string; flags: string[]; url: string; pid: number; child: ReturnType<typeof spawn> };
const servers: Server[] = [];
for (const b of builds) servers.push({ ...b, ...(await start(b.main, b.label, b.flags)) });
const runner = await startBenchRunner({ install: false, log: () => {} });
/** tokenize.ts's 100-strings body. */
const STRINGS_BODY = JSON.stringify(Array.from({ length: 100 }, (_, i) => `customer-${i}-value`));
/** One deduplicating token, the same every time: after the first request, every one matches it. */
const DEDUPE_BODY = JSON.stringify({ type: 'token', data: 'customer-1-value', fingerprint_expression: '{{ data }}', deduplicate_token: true });
const opts = (s: Server): LoadOptions => {
  const url = s.main === 'forwarder' ? `${s.url}/anything` : `${s.url}/proxy/anything`;
  const tokenize = (body: string, connections: number): LoadOptions => ({ url: `${s.url}/tokenize`, method: 'POST' as const, headers: { 'content-type': 'application/json', 'svc-api-key': BENCH_KEY }, body, connections });
  return row === 'proxy'
    ? { url, method: 'POST' as const, headers: { 'content-type': 'application/json', 'svc-proxy-key': 'bench_proxy_key_0123456789abcdef' }, body: JSON.stringify({ order: 'o-1', amount: 100, currency: 'usd', items: [{ sku: 'a', qty: 1 }] }), connections: 50 }
    : row === 'proxy-tokenize'
    ? { url, method: 'POST' as const, headers: { 'content-type': 'application/json', 'svc-proxy-key': TOKENIZE_KEY }, body: JSON.stringify({ card: CARD, ssn: '123-45-6789', amount: 100, currency: 'usd' }), connections: 50 }
    : row === 'tokenize-dedupe' ? tokenize(DEDUPE_BODY, 64)
    : row === 'tokenize100' ? tokenize(STRINGS_BODY, 16)
    : tokenize('"customer-1-value"', 64);
};
const results: Record<string, { rps: number[]; cpu: number[]; p99: number[]; db: number[] }> = {};
for (const s of servers) {
  results[s.label] = { rps: [], cpu: [], p99: [], db: [] };
  await runner.run({ ...opts(s), durationMs: 2000, warmupMs: 500 });
}
for (let r = 0; r < rounds; r++) {
  const order = r % 2 === 0 ? servers : [...servers].reverse();
  for (const s of order) {
    const t0 = treeTicks(s.pid);
    const d0 = onPostgres ? treeTicks(postmaster) : 0;
    const res = await runner.run({ ...opts(s), durationMs: Number(process.env.AB_MS ?? 3000), warmupMs: 300 });
    const t1 = treeTicks(s.pid);
    const d1 = onPostgres ? treeTicks(postmaster) : 0;
    if (res.errors) console.log(`${s.label}: ${res.errors} errors ${JSON.stringify(res.statuses)}`);
    results[s.label]!.rps.push(res.rps);
    results[s.label]!.p99.push(res.p99);
    results[s.label]!.cpu.push(((t1 - t0) / CLK_TCK) * 1e6 / (res.requests + res.warmupRequests));
    results[s.label]!.db.push(((d1 - d0) / CLK_TCK) * 1e6 / (res.requests + res.warmupRequests));
  }
}
const med = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
console.log(`row ${row}${onPostgres ? ' (PostgreSQL store)' : ''}, ${rounds} rounds, node ${process.version}, load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
for (const s of servers) {
  const x = results[s.label]!;
  console.log(`${s.label.padEnd(8)} req/s median ${med(x.rps).toFixed(0)} [${Math.min(...x.rps).toFixed(0)}-${Math.max(...x.rps).toFixed(0)}]  cpu us/req median ${med(x.cpu).toFixed(1)} [${Math.min(...x.cpu).toFixed(1)}-${Math.max(...x.cpu).toFixed(1)}]  p99 ${med(x.p99).toFixed(1)} ms${onPostgres ? `  PostgreSQL cpu us/req median ${med(x.db).toFixed(1)}` : ''}`);
}
const base = results[servers[0]!.label]!;
for (const s of servers.slice(1)) {
  const x = results[s.label]!;
  const ratios = x.rps.map((v, i) => v / base.rps[i]!);
  const cpuRatios = x.cpu.map((v, i) => v / base.cpu[i]!);
  console.log(`${s.label} vs ${servers[0]!.label}: req/s ratio median ${med(ratios).toFixed(3)}, cpu/req ratio median ${med(cpuRatios).toFixed(3)} (paired by round)`);
}
await runner.close();
for (const s of servers) s.child.kill('SIGTERM');
await Promise.all(servers.map((s) => new Promise((r) => s.child.once('exit', r))));
if (process.env.AB_PG_LOG) console.log(`statements logged to ${join(cluster!.dataDir!, '..', 'server.log')} (the cluster is left running: stop it with pg_ctl)`);
else await cluster?.stop();
process.exit(0);
