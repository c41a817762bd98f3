/**
 * Bytes per token of each token store (issue 24's table), measured the same way for every store:
 * `tokens` tokens through POST /tokenize on a tokenproxy service of its own, in bodies of 50 card
 * definitions (a random Luhn-valid number each, with expiry and cvc) and 50 strings, 8 requests in
 * flight; then what the store grew by:
 *
 *   embedded     the database file and its WAL (tokens.db*) after a clean stop (SIGTERM), less
 *                the same files of a service started and stopped with no tokens (its schema and
 *                first data key);
 *   Redis        INFO `used_memory` after, less before (the service already started: its data key
 *                is in both);
 *   PostgreSQL   pg_database_size of the service's own database after, less before, each after a
 *                CHECKPOINT (the service already started: schema and data key in both).
 *
 * Every answer must be 200 with 100 tokens, or the measurement throws.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { randomCard, randomCvc } from '../../test/helpers/secrets.js';
import type { BenchPostgres } from './postgres.js';
import type { BenchRedis } from './redis.js';
import type { StoreChoice, TokenproxyProcess } from './tokenproxy-process.js';

export interface BytesPerToken {
  store: 'embedded' | 'redis' | 'postgres';
  measured: string;
  tokens: number;
  before: number;
  after: number;
  bytesPerToken: number;
  /** Issue 24's target, bytes a token. */
  target: number;
}

export interface SizeOptions {
  tokens: number;
  start: (name: string, logLevel: string, workers: number, store?: StoreChoice) => Promise<TokenproxyProcess>;
  headers: Record<string, string>;
  redis: BenchRedis | null;
  postgres: BenchPostgres | null;
  log: (line: string) => void;
}

const TARGETS = { embedded: 250, redis: 400, postgres: 350 } as const;
const IN_FLIGHT = 8;

/** One body: 50 card definitions and 50 strings, every value new. */
function body(n: number): string {
  const defs: unknown[] = [];
  for (let i = 0; i < 50; i++) {
    defs.push({ type: 'card', data: { number: randomCard(), expiration_month: 1 + (i % 12), expiration_year: 2030 + (i % 5), cvc: randomCvc() } });
    defs.push(`customer-${n * 50 + i}-value`);
  }
  return JSON.stringify(defs);
}

async function tokenize(url: string, headers: Record<string, string>, tokens: number): Promise<void> {
  const requests = tokens / 100;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < requests) {
      const n = next++;
      const res = await request(`${url}/tokenize`, { method: 'POST', headers, body: body(n) });
      const text = await res.body.text();
      if (res.statusCode !== 200) throw new Error(`size measurement: /tokenize answered ${res.statusCode}: ${text.slice(0, 300)}`);
      const parsed: unknown = JSON.parse(text);
      if (!Array.isArray(parsed) || parsed.length !== 100) throw new Error('size measurement: expected 100 tokens in the answer');
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
}

/** tokens.db and its -wal / -shm files, as left in the directory. */
function embeddedBytes(dir: string): number {
  return readdirSync(dir).filter((f) => f.startsWith('tokens.db')).reduce((n, f) => n + statSync(join(dir, f)).size, 0);
}

async function usedMemory(url: string): Promise<number> {
  const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await r.connect();
    const info = await r.info('memory');
    const m = /^used_memory:(\d+)/m.exec(info);
    if (!m) throw new Error('INFO memory has no used_memory');
    return Number(m[1]);
  } finally {
    r.disconnect();
  }
}

export async function measureBytesPerToken(o: SizeOptions): Promise<BytesPerToken[]> {
  const out: BytesPerToken[] = [];
  const row = (store: BytesPerToken['store'], measured: string, before: number, after: number): void => {
    const r = { store, measured, tokens: o.tokens, before, after, bytesPerToken: (after - before) / o.tokens, target: TARGETS[store] };
    out.push(r);
    o.log(`bytes per token, ${store}: ${r.bytesPerToken.toFixed(0)} (${measured})`);
  };

  const empty = await o.start('size-embedded-empty', 'warn', 1);
  await empty.stop();
  const loaded = await o.start('size-embedded', 'warn', 1);
  await tokenize(loaded.url, o.headers, o.tokens);
  await loaded.stop();
  row('embedded', 'tokens.db + WAL after a clean stop, vs an empty store', embeddedBytes(empty.dataDir), embeddedBytes(loaded.dataDir));

  if (o.redis) {
    const tp = await o.start('size-redis', 'warn', 1, { kind: 'redis', url: o.redis.url, key_prefix: `bench-size-${randomBytes(4).toString('hex')}:` });
    const before = await usedMemory(o.redis.url);
    await tokenize(tp.url, o.headers, o.tokens);
    row('redis', 'INFO used_memory growth', before, await usedMemory(o.redis.url));
    await tp.close();
  }

  if (o.postgres) {
    const db = await o.postgres.database();
    const tp = await o.start('size-postgres', 'warn', 1, { kind: 'postgres', url: db.url });
    const before = await o.postgres.databaseSize(db.name);
    await tokenize(tp.url, o.headers, o.tokens);
    row('postgres', 'pg_database_size growth, each after CHECKPOINT', before, await o.postgres.databaseSize(db.name));
    await tp.close();
  }
  return out;
}
