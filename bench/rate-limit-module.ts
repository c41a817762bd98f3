/**
 * RateLimitService.check() throughput: limits off, memory store, Redis store (limits set high so
 * they never trigger), in one run, with ratios against "off".
 *
 *   node --import tsx bench/rate-limit-module.ts [--ops 200000] [--concurrency 64] [--rounds 3]
 *
 * The subject is a POST /tokenize with a private key (two rules count it: private_key and
 * creating_tokens) over 4,096 key/IP pairs; the "legacy" rows add the legacy per-IP rules (four).
 * Each configuration runs `rounds` times, interleaved; the median round is printed, as wall-clock
 * checks/s and as node CPU time per check (the steadier figure on a shared machine).
 *
 * Redis: REDIS_URL, or two redis-servers started here: one without persistence, one with
 * `appendfsync always` (the test helper's setting), because fsync on every write is a deployment
 * choice that dominates Redis latency.
 */
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { createLogger } from '../src/log.js';
import { RateLimitService, RATE_LIMIT_REDIS_OPTIONS, type RateLimitConfig, type RateLimitSubject } from '../src/rate-limit/limiter.js';
import { resolveRules, RULE_NAMES } from '../src/rate-limit/rules.js';
import { freePort, redisAvailable, startRedis } from '../test/helpers/redis.js';

const { values } = parseArgs({
  options: {
    ops: { type: 'string', default: '200000' },
    concurrency: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '3' },
  },
});
const OPS = Number(values.ops);
const REDIS_OPS = Math.max(10_000, Math.floor(OPS / 5));
const CONCURRENCY = Number(values.concurrency);
const ROUNDS = Number(values.rounds);
const log = createLogger('warn');

const high = Object.fromEntries(RULE_NAMES.map((n) => [n, { points: 1e9, duration_seconds: 60 }]));
const tenant = { id: '6f1c1a9e-0000-4000-8000-000000000001', test: false, rateTable: resolveRules('default', high) };
const subjects = (legacy: boolean): RateLimitSubject[] =>
  Array.from({ length: 4096 }, (_, i) => ({
    tenant,
    route: 'tokenize',
    clientIp: `10.0.${(i >> 8) & 255}.${i & 255}`,
    apiKeyId: `key${(i % 1000).toString(16).padStart(8, '0')}`,
    keyKind: 'private',
    legacy,
  }));

interface Round {
  perSec: number;
  cpuUs: number;
}

async function round(service: RateLimitService, ops: number, list: RateLimitSubject[]): Promise<Round> {
  let next = 0;
  const worker = async () => {
    while (next < ops) {
      const i = next++;
      await service.check(list[i & 4095]);
    }
  };
  const cpu0 = process.cpuUsage();
  const start = process.hrtime.bigint();
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const us = Number(process.hrtime.bigint() - start) / 1e3;
  const cpu = process.cpuUsage(cpu0);
  return { perSec: (ops / us) * 1e6, cpuUs: (cpu.user + cpu.system) / ops };
}

interface Case {
  name: string;
  service: RateLimitService;
  ops: number;
  list: RateLimitSubject[];
  rounds: Round[];
  cleanup?: () => Promise<void> | void;
}

const base: RateLimitConfig = { enabled: true, store: 'memory', key_prefix: 'bench:rl:', on_store_error: 'reject', timeout_ms: 1000 };
const cases: Case[] = [
  { name: 'off (enabled: false)', service: await RateLimitService.create({ ...base, enabled: false }, { log }), ops: OPS, list: subjects(false), rounds: [] },
  { name: 'memory, 2 rules', service: await RateLimitService.create(base, { log }), ops: OPS, list: subjects(false), rounds: [] },
  { name: 'memory, 4 rules (legacy app)', service: await RateLimitService.create(base, { log }), ops: OPS, list: subjects(true), rounds: [] },
];

async function plainRedis(): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => 50 });
  for (let i = 0; i < 100; i++) {
    if (await probe.connect().then(() => true, () => false)) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  probe.disconnect();
  return {
    url: `redis://127.0.0.1:${port}`,
    stop: () => new Promise<void>((res) => (child.exitCode !== null ? res() : (child.once('exit', () => res()), child.kill('SIGKILL')))),
  };
}

const stops: (() => Promise<void>)[] = [];
if (process.env.REDIS_URL || redisAvailable()) {
  const targets: { label: string; url: string; prefix: string }[] = [];
  if (process.env.REDIS_URL) {
    targets.push({ label: 'REDIS_URL', url: process.env.REDIS_URL, prefix: `bench${process.pid}:` });
  } else {
    const plain = await plainRedis();
    stops.push(plain.stop);
    targets.push({ label: 'no persistence', url: plain.url, prefix: 'bench:' });
    const aof = await startRedis();
    stops.push(aof.stop);
    targets.push({ label: 'appendfsync always', url: aof.url, prefix: aof.prefix });
  }
  for (const target of targets) {
    const cfg: RateLimitConfig = { ...base, store: 'redis', url: target.url, key_prefix: `${target.prefix}rl:` };
    cases.push({ name: `redis (${target.label}), 2 rules`, service: await RateLimitService.create(cfg, { log }), ops: REDIS_OPS, list: subjects(false), rounds: [] });
    const piped = new Redis(target.url, { ...RATE_LIMIT_REDIS_OPTIONS, enableAutoPipelining: true });
    cases.push({
      name: `redis (${target.label}), 2 rules, auto-pipelining`,
      service: await RateLimitService.create(cfg, { log, redis: piped }),
      ops: REDIS_OPS,
      list: subjects(false),
      rounds: [],
      cleanup: () => piped.disconnect(),
    });
    cases.push({ name: `redis (${target.label}), 4 rules (legacy)`, service: await RateLimitService.create(cfg, { log }), ops: REDIS_OPS, list: subjects(true), rounds: [] });
  }
} else {
  console.log('redis-server not available: Redis rows skipped');
}

for (const c of cases) await round(c.service, Math.min(c.ops, 20_000), c.list); // warm-up (and first connection)
for (let r = 0; r < ROUNDS; r++) for (const c of cases) c.rounds.push(await round(c.service, c.ops, c.list));
for (const c of cases) {
  await c.service.close();
  await c.cleanup?.();
}
for (const stop of stops) await stop();

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rows = cases.map((c) => ({ name: c.name, perSec: median(c.rounds.map((r) => r.perSec)), cpuUs: median(c.rounds.map((r) => r.cpuUs)) }));
const off = rows[0];
console.log(`RateLimitService.check(): ${OPS} ops per round (Redis: ${REDIS_OPS}), concurrency ${CONCURRENCY}, median of ${ROUNDS}, node ${process.version}`);
console.log('configuration'.padEnd(52), 'checks/s'.padStart(11), 'vs off'.padStart(8), 'cpu µs/check'.padStart(13), 'added cpu µs'.padStart(13));
for (const r of rows) {
  console.log(
    r.name.padEnd(52),
    Math.round(r.perSec).toLocaleString('en-US').padStart(11),
    (r.perSec / off.perSec).toFixed(4).padStart(8),
    r.cpuUs.toFixed(2).padStart(13),
    (r.cpuUs - off.cpuUs).toFixed(2).padStart(13),
  );
}
console.log('"added cpu µs" is what a request pays on this process; divide by a request\'s own cost for the share.');
