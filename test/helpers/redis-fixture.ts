/**
 * Loads test/fixtures/redis-v3/keyspace.json (a layout 3 keyspace written by the code of that
 * layout: test/fixtures/redis-v3/make.ts) into a redis-server under a prefix of the test's own:
 * every key, its contents and its expiry, with @@PREFIX@@ in key names and values replaced.
 */
import { readFileSync } from 'node:fs';
import { Cluster, Redis } from 'ioredis';

const DIR = new URL('../fixtures/redis-v3/', import.meta.url);

interface FixtureKey {
  key: string;
  type: 'string' | 'hash' | 'zset' | 'list' | 'set';
  pexpireat: number | null;
  value: unknown;
}

export interface ExpectedToken {
  tenant: string;
  id: string;
  type: string;
  data: unknown;
  containers: string[];
  metadata: Record<string, string>;
  search_indexes: string[];
  fingerprint_expression: string | null;
  expires_at: string | null;
  cvc: string | null;
  search?: string;
  expired?: boolean;
  read: Record<string, unknown>;
}

export interface RedisFixture {
  master_key: string;
  idempotency_key: string;
  tokens: ExpectedToken[];
}

export function redisFixtureExpected(): RedisFixture {
  return JSON.parse(readFileSync(new URL('expected.json', DIR), 'utf8')) as RedisFixture;
}

/** Writes the fixture's keys under `prefix` (to one server's URL, or through a Cluster client); returns how many. */
export async function loadRedisFixture(target: string | Cluster, prefix: string): Promise<number> {
  const { keys, made_at: madeAt } = JSON.parse(readFileSync(new URL('keyspace.json', DIR), 'utf8')) as { keys: FixtureKey[]; made_at: number };
  // Expiry times are as of the fixture's making: restored as they were, the 24 h idempotency
  // record expired the day after. Each keeps the time it had left then.
  const shift = Date.now() - madeAt;
  const P = (s: string): string => s.split('@@PREFIX@@').join(prefix);
  const client = typeof target === 'string' ? new Redis(target) : target;
  try {
    for (const k of keys) {
      const key = prefix + P(k.key);
      if (k.type === 'string') await client.set(key, P(k.value as string));
      else if (k.type === 'hash') await client.hset(key, Object.fromEntries(Object.entries(k.value as Record<string, string>).map(([f, v]) => [P(f), P(v)])));
      else if (k.type === 'zset') await client.zadd(key, ...(k.value as Array<[string, number]>).flatMap(([m, s]) => [s, P(m)]));
      else if (k.type === 'list') await client.rpush(key, ...(k.value as string[]).map(P));
      else await client.sadd(key, ...(k.value as string[]).map(P));
      if (k.pexpireat !== null) await client.pexpireat(key, k.pexpireat + shift);
    }
    return keys.length;
  } finally {
    if (typeof target === 'string') client.disconnect();
  }
}
