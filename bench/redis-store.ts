/**
 * The Redis store's own figures (issue 24 item 2), for comparing its layouts:
 *
 *   bytes a token   20,000 tokens (--tokens) through POST /tokenize in bodies of 50 card
 *                   definitions (with cvc) and 50 strings, 8 in flight, on the service started in
 *                   this process: INFO `used_memory` after less before (as bench/lib/store-size.ts);
 *   CPU a token     RedisStore.tokens.insertMany of the same mix, 100 records a batch, records
 *                   sealed beforehand (crypto is not the store's): this process's CPU time
 *                   (encoding, ioredis) and redis-server's (INFO used_cpu_user + used_cpu_sys),
 *                   per token.
 *
 *   npx tsx bench/redis-store.ts [--tokens 20000]
 *
 * A redis-server of its own (no AOF: the figures are RAM and CPU, not fsync).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { KeyRing } from '../src/crypto/keyring.js';
import { RedisStore } from '../src/store/redis/index.js';
import type { StoredToken } from '../src/store/types.js';
import { randomCard, randomCvc } from '../test/helpers/secrets.js';
import { startBenchRedis } from './lib/redis.js';
import { BENCH_KEY, BENCH_TENANT, startBenchService } from './lib/service.js';

const { values: args } = parseArgs({ options: { tokens: { type: 'string', default: '20000' } } });
const TOKENS = Math.max(100, Math.round(Number(args.tokens) / 100) * 100);

const redis = await startBenchRedis({ durable: false });
if (!redis) throw new Error('redis-server is needed');
const client = new Redis(redis.url);

async function info(section: string, field: string): Promise<number> {
  const m = new RegExp(`^${field}:([0-9.]+)`, 'm').exec(await client.info(section));
  if (!m) throw new Error(`INFO ${section} has no ${field}`);
  return Number(m[1]);
}
const redisCpu = async (): Promise<number> => (await info('cpu', 'used_cpu_user')) + (await info('cpu', 'used_cpu_sys'));

function body(n: number): string {
  const defs: unknown[] = [];
  for (let i = 0; i < 50; i++) {
    defs.push({ type: 'card', data: { number: randomCard(), expiration_month: 1 + (i % 12), expiration_year: 2030 + (i % 5), cvc: randomCvc() } });
    defs.push(`customer-${n * 50 + i}-value`);
  }
  return JSON.stringify(defs);
}

try {
  // ---- bytes a token, through the service ----
  const svc = await startBenchService({ kind: 'redis', url: redis.url });
  const before = await info('memory', 'used_memory');
  let next = 0;
  const headers = { 'svc-api-key': BENCH_KEY, 'content-type': 'application/json' };
  await Promise.all(Array.from({ length: 8 }, async () => {
    while (next < TOKENS / 100) {
      const res = await request(`${svc.url}/tokenize`, { method: 'POST', headers, body: body(next++) });
      const text = await res.body.text();
      if (res.statusCode !== 200) throw new Error(`/tokenize answered ${res.statusCode}: ${text.slice(0, 200)}`);
    }
  }));
  const after = await info('memory', 'used_memory');
  await svc.stop();
  console.log(`bytes a token (used_memory growth, ${TOKENS} tokens through /tokenize): ${((after - before) / TOKENS).toFixed(0)}`);

  // ---- CPU a token, the store alone ----
  const store = await RedisStore.connect({ url: redis.url, keyPrefix: `cpu${randomBytes(4).toString('hex')}:` });
  const ring = await KeyRing.open(randomBytes(32), store.dataKeys);
  const now = new Date().toISOString();
  const batches: StoredToken[][] = [];
  for (let b = 0; b < TOKENS / 100; b++) {
    const batch: StoredToken[] = [];
    for (let i = 0; i < 50; i++) {
      for (const card of [true, false]) {
        const id = randomUUID();
        const number = randomCard();
        batch.push({
          tenant_id: BENCH_TENANT, id, type: card ? 'card' : 'token', container: card ? '/pci/high/' : '/general/high/',
          sealed: ring.seal(card ? JSON.stringify({ number, expiration_month: 1, expiration_year: 2030 }) : `customer-${b}-${i}-value`, `${BENCH_TENANT}:${id}`),
          cvc_sealed: card ? ring.seal(randomCvc(), `${BENCH_TENANT}:${id}:cvc`) : null,
          cvc_expires_at: card ? new Date(Date.now() + 3_600_000).toISOString() : null,
          metadata: {}, search_indexes: [], index_hashes: [],
          fingerprint: card ? ring.fingerprint(BENCH_TENANT, 'card', number) : null, fingerprint_expression: card ? '{{ data.number }}' : null,
          mask: null, created_by: BENCH_TENANT, created_at: now, modified_by: null, modified_at: null, expires_at: null,
        });
      }
    }
    batches.push(batch);
  }
  const cpu0 = process.cpuUsage();
  const r0 = await redisCpu();
  for (const batch of batches) await store.tokens.insertMany(batch, { dedupe: batch.map((r) => r.fingerprint !== null) });
  const cpu = process.cpuUsage(cpu0);
  const r1 = await redisCpu();
  await store.close();
  const us = (cpu.user + cpu.system) / TOKENS;
  console.log(`store CPU a token (insertMany, 100 a batch, dedupe on the cards): node ${us.toFixed(1)} us, redis-server ${(((r1 - r0) * 1e6) / TOKENS).toFixed(1)} us`);
} finally {
  client.disconnect();
  await redis.stop();
}
