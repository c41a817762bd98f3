/**
 * The outbound proxy (`/proxy` with SVC-PROXY-URL) against references measured in the same run,
 * on one local upstream (lib/upstream.ts, its own process):
 *
 *   node forwarder             node:http + undici Pool.stream (lib/forwarder.ts): the bare forwarder
 *   tokenproxy pass-through    POST /proxy/charges with SVC-PROXY-KEY, a proxy with no transforms
 *   outbound, no expressions   the same route and body without expressions (no token read, no
 *                              audit write): the cost of the outbound plumbing alone
 *   outbound x2                POST /proxy/charges with SVC-PROXY-URL: a JSON body with 2
 *                              expressions of one card token, detokenized (token:use, audit event)
 *   outbound x2, no audit      the same with the audit trail switched off, when the service can
 *                              (otherwise skipped, and said so)
 *
 *   npm run bench -- outbound [--rounds 3] [--duration 3000] [--warmup 500] [--connections 50] [--no-install]
 *
 * Targets (issue 11): outbound >= 0.5x the bare forwarder, p99 <= 10 ms at 50 connections; the
 * audit trail costs <= 10%. Ratios are req/s paired by round, median over rounds. The upstream
 * counts the bodies that carry the card number: every outbound request must (it proves the
 * detokenization ran), no forwarder or pass-through request may. Speed is reported, never
 * asserted: the exit code is non-zero only for non-2xx answers or a wrong plaintext count.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { startForwarder } from './lib/forwarder.js';
import type { LoadResult } from './lib/load.js';
import { machine, num, ratio, table } from './lib/report.js';
import { startUpstream } from './lib/upstream.js';
import { startBenchRunner } from './lib/wrk.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    duration: { type: 'string', default: '3000' },
    warmup: { type: 'string', default: '500' },
    connections: { type: 'string', default: '50' },
    'no-install': { type: 'boolean', default: false },
  },
});
const ROUNDS = Math.max(1, Number(args.rounds));
const DURATION_MS = Number(args.duration);
const WARMUP_MS = Number(args.warmup);
const CONNECTIONS = Number(args.connections);

const CARD_NUMBER = '4242424242424242';
const UPSTREAM_BODY = JSON.stringify({ id: 'ch_0001', status: 'succeeded' });
const TENANT = randomUUID();
const API_KEY = `bench_outbound_${randomBytes(8).toString('hex')}`;
const PASS_KEY = `bench_outbound_pass_${randomBytes(8).toString('hex')}`;
const NEVER_POINTS = 100_000_000;
const TARGETS = { vsForwarder: 0.5, p99Ms: 10, auditCost: 0.1 };

type RowId = 'forwarder' | 'pass' | 'plainout' | 'outbound' | 'noaudit';
const TITLES: Record<RowId, string> = {
  forwarder: 'node forwarder (bare)',
  pass: 'tokenproxy pass-through',
  plainout: 'outbound, no expressions',
  outbound: 'outbound x2 expressions',
  noaudit: 'outbound x2, audit off',
};

interface Row {
  id: RowId;
  url: string;
  headers: Record<string, string>;
  body: string;
  skipped?: string;
  rounds: LoadResult[];
  /** CPU of this process (the forwarder and tokenproxy run here) per request, µs, per round. */
  cpuUs: number[];
  /** Upstream requests, and of those with the card in plaintext, over the row's windows. */
  upstream: { requests: number; plaintext: number };
}

const median = (xs: number[]) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

function orderBody(card: unknown): string {
  return JSON.stringify({ card, amount: 8997, currency: 'usd', order: { id: 'ord_8c1f2e7a', items: [{ sku: 'SKU-1001', qty: 2 }] } });
}

async function startTokenproxy(upstream: string, audit: boolean) {
  const dataDir = mkdtempSync(join(tmpdir(), 'tp-bench-outbound-'));
  const { buildConfig } = await import('../src/config/load.js');
  const { createLogger } = await import('../src/log.js');
  const { startService } = await import('../src/server.js');
  const perms = ['token:create', 'token:read', 'proxy:invoke', 'token:use'];
  const raw: Record<string, unknown> = {
    server: { host: '127.0.0.1', port: 0 },
    log: { level: 'silent' },
    store: { kind: 'embedded', path: join(dataDir, 'tokens.db') },
    rate_limits: { enabled: true, store: 'memory' },
    tenants: [
      {
        id: TENANT,
        name: 'bench',
        custom_rate_limits: { proxy_endpoint: { points: NEVER_POINTS, duration_seconds: 60 }, private_key: { points: NEVER_POINTS, duration_seconds: 60 } },
        applications: [
          { id: randomUUID(), name: 'bench', type: 'private', keys: [API_KEY], permissions: perms, rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: perms }] },
        ],
        outbound: { allowed_destinations: [upstream] },
        proxies: [{ id: 'bench-pass', name: 'bench pass', key: PASS_KEY, destination_url: upstream, require_auth: false, leak_guard: 'off' }],
      },
    ],
  };
  // The audit switch, where the service has one (README "Audit trail").
  if (!audit) raw.audit = { enabled: false };
  const config = buildConfig(raw, { env: { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') } });
  const svc = await startService(config, { log: createLogger('silent') });
  return {
    url: svc.url,
    close: async () => {
      await svc.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

async function post(url: string, headers: Record<string, string>, body: string) {
  const res = await request(url, { method: 'POST', headers, body });
  return { status: res.statusCode, text: await res.body.text(), headers: res.headers };
}

async function main(): Promise<number> {
  const log = (line: string) => console.log(line);
  const env = machine();
  log(`machine: ${env.cpu}, ${env.cores} cores, node ${env.node}; load average at start ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  const cleanups: Array<() => Promise<unknown>> = [];
  const rows: Row[] = [];
  const failures: string[] = [];
  try {
    const upstream = await startUpstream({ responseBody: UPSTREAM_BODY, watch: CARD_NUMBER });
    cleanups.push(() => upstream.close());
    const fwd = await startForwarder(upstream.url, { connections: 64 });
    cleanups.push(() => fwd.close());
    const tp = await startTokenproxy(upstream.url, true);
    cleanups.push(() => tp.close());
    const json = { 'content-type': 'application/json' };
    const created = await post(`${tp.url}/tokens`, { ...json, 'svc-api-key': API_KEY }, JSON.stringify({ type: 'card', data: { number: CARD_NUMBER, expiration_month: 12, expiration_year: 2030 } }));
    if (created.status !== 201) throw new Error(`creating the card token answered ${created.status}: ${created.text.slice(0, 200)}`);
    const id = (JSON.parse(created.text) as { id: string }).id;
    const exprBody = orderBody({ number: `{{ token: ${id} | json: '$.data.number' }}`, exp: `{{ ${id} | json: '$.expiration_month' }}` });
    const plainBody = orderBody({ number: 'tok_0000000000000000', exp: '12' });
    const outboundHeaders = { ...json, 'svc-api-key': API_KEY, 'svc-proxy-url': upstream.url };
    const add = (id: RowId, url: string, headers: Record<string, string>, body: string, skipped?: string) =>
      rows.push({ id, url, headers, body, rounds: [], cpuUs: [], upstream: { requests: 0, plaintext: 0 }, ...(skipped ? { skipped } : {}) });
    add('forwarder', `${fwd.url}/charges`, json, plainBody);
    add('pass', `${tp.url}/proxy/charges`, { ...json, 'svc-proxy-key': PASS_KEY }, plainBody);
    // The outbound path without detokenizing (no token read, no audit write): what the plumbing costs.
    add('plainout', `${tp.url}/proxy/charges`, outboundHeaders, plainBody);
    add('outbound', `${tp.url}/proxy/charges`, outboundHeaders, exprBody);
    try {
      const quiet = await startTokenproxy(upstream.url, false);
      cleanups.push(() => quiet.close());
      const again = await post(`${quiet.url}/tokens`, { ...json, 'svc-api-key': API_KEY }, JSON.stringify({ type: 'card', data: { number: CARD_NUMBER, expiration_month: 12, expiration_year: 2030 } }));
      const qid = (JSON.parse(again.text) as { id: string }).id;
      add('noaudit', `${quiet.url}/proxy/charges`, outboundHeaders, exprBody.replaceAll(id, qid));
    } catch (err) {
      add('noaudit', '', {}, '', `the audit trail cannot be switched off in this build (${(err as Error).message.split('\n').slice(0, 2).join(' / ')})`);
    }

    for (const row of rows) {
      if (row.skipped) continue;
      const p = await post(row.url, row.headers, row.body);
      if (p.status !== 200 || p.text !== UPSTREAM_BODY) failures.push(`${TITLES[row.id]}: probe answered ${p.status}: ${p.text.slice(0, 300)}`);
    }
    if (failures.length > 0) return 1;
    const sample = (await upstream.stats(true)).watchSample;
    log(`sample outbound body at the upstream: ${sample?.body.slice(0, 200) ?? '(none)'}`);

    const runner = await startBenchRunner({ install: !args['no-install'], log });
    cleanups.push(() => runner.close());
    log(`load generator: ${runner.describe}; ${CONNECTIONS} connections; ${ROUNDS} interleaved rounds of ${WARMUP_MS} ms warm-up + ${DURATION_MS} ms\n`);
    const live = rows.filter((r) => !r.skipped);
    // A first pass, discarded: JIT, pools, SQLite's page cache.
    // Requests still in flight when wrk stops reach the upstream a little later: wait until its
    // count stops moving before reading (and resetting) a row's figures.
    const settled = async () => {
      let last = -1;
      for (;;) {
        const now = (await upstream.stats(false)).requests;
        if (now === last) return upstream.stats(true);
        last = now;
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    for (const row of live) await runner.run({ url: row.url, method: 'POST', headers: row.headers, body: row.body, connections: CONNECTIONS, durationMs: 1000, warmupMs: 0 });
    await settled();
    for (let round = 0; round < ROUNDS; round++) {
      for (const row of live) {
        const cpu0 = process.cpuUsage();
        const r = await runner.run({ url: row.url, method: 'POST', headers: row.headers, body: row.body, connections: CONNECTIONS, durationMs: DURATION_MS, warmupMs: WARMUP_MS });
        const cpu = process.cpuUsage(cpu0);
        const st = await settled();
        row.cpuUs.push((cpu.user + cpu.system) / Math.max(1, st.requests));
        row.rounds.push(r);
        row.upstream.requests += st.requests;
        row.upstream.plaintext += st.watchHits;
      }
    }
    const forwarder = rows.find((r) => r.id === 'forwarder')!;
    const outbound = rows.find((r) => r.id === 'outbound')!;
    const noaudit = rows.find((r) => r.id === 'noaudit')!;
    const paired = (row: Row, ref: Row) => median(row.rounds.map((r, i) => r.rps / (ref.rounds[i]?.rps ?? NaN)));
    log(table(
      ['row', 'req/s', 'p50 ms', 'p99 ms', 'non-2xx/errors', 'x forwarder', 'cpu us/req', 'upstream plaintext'],
      rows.map((row) =>
        row.skipped
          ? [TITLES[row.id], 'skipped', '', '', '', '', '', '']
          : [
              TITLES[row.id], num(median(row.rounds.map((r) => r.rps))), median(row.rounds.map((r) => r.p50)).toFixed(2), median(row.rounds.map((r) => r.p99)).toFixed(2),
              `${row.rounds.reduce((n, r) => n + r.errors, 0)}/${row.rounds.reduce((n, r) => n + r.requests, 0)}`,
              ratio(paired(row, forwarder)), median(row.cpuUs).toFixed(0), `${row.upstream.plaintext}/${row.upstream.requests}`,
            ],
      ),
    ));
    const outRatio = paired(outbound, forwarder);
    const outP99 = median(outbound.rounds.map((r) => r.p99));
    const auditCost = noaudit.skipped ? NaN : 1 - paired(outbound, noaudit);
    const verdict = (ok: boolean, value: number) => (Number.isFinite(value) ? (ok ? 'met' : 'NOT met') : 'n/a');
    log('');
    log(table(['target', 'measured', ''], [
      [`outbound >= ${TARGETS.vsForwarder}x the bare forwarder`, ratio(outRatio), verdict(outRatio >= TARGETS.vsForwarder, outRatio)],
      [`outbound p99 <= ${TARGETS.p99Ms} ms at ${CONNECTIONS} connections`, `${outP99.toFixed(2)} ms`, verdict(outP99 <= TARGETS.p99Ms, outP99)],
      [`audit trail costs <= ${TARGETS.auditCost * 100}%`, Number.isFinite(auditCost) ? `${(auditCost * 100).toFixed(1)}%` : '-', noaudit.skipped ? `n/a (${noaudit.skipped})` : verdict(auditCost <= TARGETS.auditCost, auditCost)],
    ]));
    log('cpu us/req: CPU of this process (the forwarder and tokenproxy both run in it; wrk and the upstream do not) per upstream request, median over rounds');
    log(`\nload average now ${loadavg().map((x) => x.toFixed(2)).join(' ')} on ${env.cores} cores (shared: not quiet-machine figures)`);
    for (const row of live) {
      const errors = row.rounds.reduce((n, r) => n + r.errors, 0);
      if (errors > 0) failures.push(`${TITLES[row.id]}: ${errors} non-2xx or transport errors ${row.rounds.flatMap((r) => r.errorSamples).slice(0, 3).join(' | ')}`);
      const expectPlain = row.id === 'outbound' || row.id === 'noaudit';
      if (expectPlain && row.upstream.plaintext !== row.upstream.requests) failures.push(`${TITLES[row.id]}: only ${row.upstream.plaintext} of ${row.upstream.requests} bodies at the upstream were detokenized`);
      if (!expectPlain && row.upstream.plaintext > 0) failures.push(`${TITLES[row.id]}: ${row.upstream.plaintext} bodies carried the card number`);
    }
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => {});
  }
  for (const f of failures) log(`FAILED: ${f}`);
  if (failures.length === 0) log('every response was 200; every outbound body reached the upstream detokenized, no other did');
  return failures.length === 0 ? 0 : 1;
}

process.exitCode = await main();
