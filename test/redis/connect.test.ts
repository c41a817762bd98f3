/**
 * src/redis/connect.ts against real servers: one client per topology (a 3-master Cluster, a
 * Sentinel setup) reaches every key, and the config loader refuses two topologies at once or a
 * braced key prefix on a Cluster.
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { clusterForFile, sentinelForFile } from '../helpers/redis-topology.js';
import { redisForFile } from '../helpers/redis.js';
import { RedisStore } from '../../src/store/redis/index.js';
import { StoreUnavailableError } from '../../src/store/types.js';
import { createRedisClient, type RedisClient } from '../../src/redis/connect.js';
import { buildConfig, ConfigError } from '../../src/config/load.js';

// disconnect, not quit: a teardown may run after the servers are gone (quit would wait for them).
const close = (c: RedisClient) => c.disconnect();

t.test('config: one topology per section, no braces in a Cluster key prefix', async (t) => {
  const problems = (raw: unknown): string[] => {
    try {
      buildConfig(raw);
      return [];
    } catch (err) {
      if (err instanceof ConfigError) return err.problems;
      throw err;
    }
  };
  t.match(problems({ store: { kind: 'redis', url: 'redis://a:1', cluster: { nodes: ['redis://a:1'] } } }), [/^store: give one of url, cluster and sentinel, not url and cluster/]);
  t.match(problems({ rate_limits: { store: 'redis', cluster: { nodes: ['a:1'] }, sentinel: { sentinels: ['a:2'], name: 'm' } } }), [/^rate_limits: give one of/]);
  t.match(problems({ store: { kind: 'redis', cluster: { nodes: ['a:1'] }, key_prefix: '{tp}:' } }), [/^store\.key_prefix: must not contain \{ or \}/]);
  t.match(problems({ rate_limits: { store: 'redis', cluster: { nodes: ['a:1'] }, key_prefix: 'rl{x}' } }), [/^rate_limits\.key_prefix: must not contain/]);
  t.same(problems({ store: { kind: 'redis', key_prefix: '{tp}:' } }), [], 'a braced prefix on one node is allowed (as before)');
  t.same(problems({ store: { kind: 'redis', sentinel: { sentinels: ['a:1'], name: 'm' }, password: { file: '/x' } }, rate_limits: { store: 'redis', cluster: { nodes: ['a:1'] } } }), []);
  t.match(problems({ rate_limits: { store: 'redis' } }), [/rate_limits\.url: required \(or cluster or sentinel\)/]);
});

t.test('a password file that cannot be read fails without printing anything but its path', async (t) => {
  const err = (() => {
    try {
      createRedisClient({ url: 'redis://127.0.0.1:1', password: { file: '/nonexistent/redis-pass' } }, { lazyConnect: true });
      return null;
    } catch (e) {
      return e as Error;
    }
  })();
  t.match(err?.message, /cannot read the Redis password file \/nonexistent\/redis-pass \(ENOENT\)/);
  t.throws(() => createRedisClient({ url: 'redis://a:1', sentinel: { sentinels: ['a:1'], name: 'm' } }), /give one of url, cluster and sentinel/);
});

t.test('Cluster: one client reaches keys on every master', async (t) => {
  const cluster = await clusterForFile(t);
  if (!cluster) return;
  const client = createRedisClient({ cluster: { nodes: [cluster.nodes[0]!] } }, { lazyConnect: true, commandTimeout: 2000, maxRetriesPerRequest: 0 });
  t.teardown(() => close(client));
  await client.connect();
  const keys = Array.from({ length: 30 }, (_, i) => `${cluster.prefix}k${i}`);
  for (const k of keys) await client.set(k, k);
  t.same(await Promise.all(keys.map((k) => client.get(k))), keys, 'every key read back');
  const perNode = await Promise.all(cluster.ports.map(async (p) => {
    const c = createRedisClient({ url: `redis://127.0.0.1:${p}` });
    try {
      return Number(await c.dbsize());
    } finally {
      close(c);
    }
  }));
  t.ok(perNode.every((n) => n > 0), `keys on every master: ${perNode.join(', ')}`);
});

t.test('Sentinel: the client finds the primary through the sentinels', async (t) => {
  const sentinel = await sentinelForFile(t);
  if (!sentinel) return;
  const client = createRedisClient({ sentinel: { sentinels: sentinel.sentinels, name: sentinel.name } }, { lazyConnect: true, commandTimeout: 2000 });
  t.teardown(() => close(client));
  await client.connect();
  await client.set(`${sentinel.prefix}x`, '1');
  const port = await sentinel.primaryPort();
  const direct = createRedisClient({ url: `redis://127.0.0.1:${port}` });
  t.teardown(() => close(direct));
  t.equal(await direct.get(`${sentinel.prefix}x`), '1', 'written on the primary the sentinels name');
});

t.test('a password from a file reaches a server that requires it; a wrong one fails without showing it', async (t) => {
  const redis = await redisForFile(t);
  if (!redis) return;
  const password = randomBytes(16).toString('hex');
  const admin = new Redis(redis.url, { lazyConnect: true });
  await admin.config('SET', 'requirepass', password);
  admin.disconnect();
  const dir = mkdtempSync(join(tmpdir(), 'tp-connect-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'right'), `${password}\n`);
  writeFileSync(join(dir, 'wrong'), `${password}x\n`);
  const store = await RedisStore.connect({ url: redis.url, password: { file: join(dir, 'right') }, keyPrefix: redis.prefix });
  t.teardown(() => store.close());
  await store.ping();
  t.pass('connected with the password from the file (trailing newline dropped)');
  const err = await RedisStore.connect({ url: redis.url, password: { file: join(dir, 'wrong') }, keyPrefix: redis.prefix }).then(() => null, (e: unknown) => e);
  t.ok(err instanceof StoreUnavailableError, 'StoreUnavailableError');
  const text = `${String(err)} ${String((err as Error).cause)}`;
  t.notMatch(text, password, 'the password appears in no message');
});
