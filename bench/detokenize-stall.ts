/**
 * The worst event-loop stall of POST /detokenize under the attack of issue 23, finding 2: a ~40 KB
 * body of expressions whose filters blow each value up. The service runs in this process; the
 * attacker and a client that polls GET /healthz run in a worker thread (their own event loop), so
 * monitorEventLoopDelay measures only the service's work.
 *
 *   node --no-node-snapshot --import tsx bench/detokenize-stall.ts [--rounds 3] [--only reveal-5mb]
 *
 * Cases:
 *   baseline         one expression: the machine's own noise floor
 *   mask-replace     the finding: a key with a `mask` rule, 40 KB of `replace` chains over the
 *                    masked number (before the fix: answered with about 55 MB)
 *   reveal-replace   the same shape for a key with `reveal` (filters allowed; the 5 MB bound)
 *   reveal-5mb       1,000 expressions of a 4,900-character value: 4.9 MB answered, just under
 *                    the bound (the success path's worst case)
 * Reported per case: the status, the answer's size, the request's duration, the worst event-loop
 * delay during it (target: about 50 ms or less) and the slowest /healthz answer. Reported, never
 * asserted.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { Worker } from 'node:worker_threads';
import { buildConfig } from '../src/config/load.js';
import { createLogger } from '../src/log.js';
import { startService } from '../src/server.js';

const { values: args } = parseArgs({ options: { rounds: { type: 'string', default: '3' }, only: { type: 'string' } } });
const ROUNDS = Number(args.rounds);

const TENANT = '11111111-1111-4111-8111-111111111111';
const REVEAL = 'bench_reveal_key_aaaaaaaaaaaaaaaaaa';
const MASK = 'bench_mask_key_bbbbbbbbbbbbbbbbbbbb';
const CARD = '4242424242424242';

const dir = mkdtempSync(join(tmpdir(), 'tp-stall-'));
const all = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search'];
const config = buildConfig({
  server: { host: '127.0.0.1', port: 0 },
  log: { level: 'error' },
  rate_limits: { enabled: false },
  store: { kind: 'embedded', path: join(dir, 'tokens.db') },
  tenants: [{
    id: TENANT, name: 'bench',
    applications: [
      { id: 'aaaaaaaa-0000-4000-8000-000000000001', name: 'reveal', type: 'private', keys: [REVEAL], permissions: all,
        rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: all }] },
      { id: 'aaaaaaaa-0000-4000-8000-000000000002', name: 'mask', type: 'private', keys: [MASK], permissions: ['token:read'] },
    ],
  }],
}, { env: { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') } });
const svc = await startService(config, { log: createLogger('error', new Writable({ write: (_c, _e, cb) => cb() }) as never) });

async function create(body: unknown): Promise<string> {
  const r = await fetch(`${svc.url}/tokens`, { method: 'POST', headers: { 'svc-api-key': REVEAL, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (r.status !== 201) throw new Error(`token not created: ${r.status} ${await r.text()}`);
  return ((await r.json()) as { id: string }).id;
}
const card = await create({ type: 'card', data: { number: CARD, expiration_month: 7, expiration_year: 2031 } });
const long = await create({ type: 'token', data: 'v'.repeat(4900) });

function fill(expr: string): Record<string, string> {
  const body: Record<string, string> = {};
  for (let i = 0; JSON.stringify(body).length < 40_000; i++) body[`k${i}`] = expr;
  return body;
}
const cases: Array<{ name: string; key: string; body: unknown }> = [
  { name: 'baseline', key: REVEAL, body: { pan: `{{ ${card} | json: '$.number' }}` } },
  { name: 'mask-replace', key: MASK, body: fill(`{{ ${card} | json: '$.number' | replace: 'X', '${'a'.repeat(300)}' | replace: 'a', '${'b'.repeat(250)}' }}`) },
  { name: 'reveal-replace', key: REVEAL, body: fill(`{{ ${card} | json: '$.number' | replace: '2', '${'a'.repeat(300)}' | replace: 'a', '${'b'.repeat(250)}' }}`) },
  { name: 'reveal-5mb', key: REVEAL, body: Array.from({ length: 1000 }, () => `{{ ${long} }}`) },
];

// The attacker and the /healthz poller, on their own event loop.
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const { url, key, body } = workerData;
let polling = true, worst = 0, polls = 0;
(async () => {
  while (polling) {
    const t0 = performance.now();
    const r = await fetch(url + '/healthz');
    await r.arrayBuffer();
    worst = Math.max(worst, performance.now() - t0);
    polls++;
  }
})();
(async () => {
  const t0 = performance.now();
  const r = await fetch(url + '/detokenize', { method: 'POST', headers: { 'svc-api-key': key, 'content-type': 'application/json' }, body });
  const size = (await r.arrayBuffer()).byteLength;
  const ms = performance.now() - t0;
  polling = false;
  parentPort.postMessage({ status: r.status, size, ms, worst, polls });
})();
`;

interface Outcome { status: number; size: number; ms: number; worst: number; polls: number }

function attack(key: string, body: unknown): Promise<Outcome> {
  const w = new Worker(WORKER, { eval: true, workerData: { url: svc.url, key, body: JSON.stringify(body) } });
  return new Promise((resolve, reject) => {
    w.once('message', (m: Outcome) => {
      void w.terminate();
      resolve(m);
    });
    w.once('error', reject);
  });
}

console.log(`POST /detokenize, ${ROUNDS} round(s) per case; body sizes: ${cases.map((c) => `${c.name} ${JSON.stringify(c.body).length} B`).join(', ')}`);
console.log('case            status  answer (bytes)  request ms  worst loop delay ms  slowest /healthz ms');
for (const c of cases) {
  if (args.only !== undefined && c.name !== args.only) continue;
  for (let round = 0; round < ROUNDS; round++) {
    const h = monitorEventLoopDelay({ resolution: 1 });
    h.enable();
    const o = await attack(c.key, c.body);
    h.disable();
    console.log(`${c.name.padEnd(16)}${String(o.status).padEnd(8)}${String(o.size).padStart(14)}  ${o.ms.toFixed(0).padStart(10)}  ${(h.max / 1e6).toFixed(1).padStart(19)}  ${o.worst.toFixed(1).padStart(19)}`);
  }
}
await svc.close();
rmSync(dir, { recursive: true, force: true });
