/**
 * Durability stated, not assumed: `tokenproxy start` in production mode on real redis-servers of
 * each persistence. Without an append-only file it refuses (exit 1, one line on stderr saying what
 * it found and both ways out) and writes nothing to Redis; with `store.durability: accept_loss` it
 * starts, warns once, and `/readyz` and `tokenproxy_store_durability` say so; on `appendonly yes`,
 * `appendfsync always` it starts without a word; where CONFIG is renamed away it reads INFO
 * persistence. Development mode starts on any Redis and warns.
 */
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import { join } from 'node:path';
import { redisSkip, startRedis, type RedisHandle } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { lines, MASTER_KEY, OWN_KEY, ownConfig, run as runIn, scratch, sha, type Proc } from '../helpers/first-hour.js';

const skip = redisSkip();
if (skip) {
  t.plan(0, skip);
} else {
  const base = scratch(t);
  const server = async (args: string[]): Promise<RedisHandle> => {
    const r = await startRedis({ own: true, args });
    t.teardown(() => r.stop());
    return r;
  };
  const none = await server(['--appendonly', 'no', '--save', '']);
  const always = await server(['--appendonly', 'yes', '--appendfsync', 'always']);
  const noConfig = await server(['--appendonly', 'yes', '--appendfsync', 'always', '--rename-command', 'CONFIG', '']);

  const production = { NODE_ENV: 'production', TOKENPROXY_MASTER_KEY: MASTER_KEY };
  let n = 0;
  /** `tokenproxy start` on `redis` with a clean production config (digests, /metrics on the admin listener). */
  const start = (redis: RedisHandle, env: Record<string, string>, store: Record<string, unknown> = {}): Proc => {
    const dir = join(base, `run-${++n}`);
    const config = ownConfig(dir, [{ sha256: sha(OWN_KEY) }], {
      server: { admin: { port: 0 } },
      store: { kind: 'redis', url: redis.url, key_prefix: redis.prefix, ...store },
    });
    return runIn(t, dir, ['--config', config], env);
  };
  const listening = (p: Proc) =>
    waitFor(() => lines(p.stdout()).find((l) => l.msg === 'tokenproxy listening'), { timeoutMs: 60_000, what: `listening:\n${p.stdout()}${p.stderr()}` });
  const stop = async (t: Test, p: Proc) => {
    process.kill(-p.child.pid!, 'SIGTERM');
    t.equal(await p.exited, 0, 'stops cleanly');
  };
  const keys = async (r: RedisHandle): Promise<number> => {
    const c = new Redis(r.port, '127.0.0.1');
    try {
      return await c.dbsize();
    } finally {
      c.disconnect();
    }
  };
  /** The readyz body and the durability gauge's one sample. */
  const reported = async (up: Record<string, unknown>) => {
    const ready = await fetch(`${up.url as string}/readyz`);
    const metrics = await (await fetch(`${up.metrics as string}/metrics`)).text();
    return { status: ready.status, body: await ready.json(), gauge: metrics.split('\n').filter((l) => l.startsWith('tokenproxy_store_durability{')) };
  };

  t.test('production on a Redis without an append-only file: refused, exit 1, one line, nothing written', async (t) => {
    const p = start(none, production);
    t.equal(await p.exited, 1, 'exit 1');
    const stderr = p.stderr().split('\n');
    t.same(stderr, [
      'tokenproxy: production mode refuses to start: the Redis store has no append-only file (appendonly no on the Redis primary): ' +
        'a Redis restart after a crash loses every token written since its last RDB snapshot, if there is one, and the tokens handed out for them stop resolving; ' +
        'turn it on (appendonly yes, appendfsync always), or set store.durability: accept_loss to start on it all the same (docs/storage.md, "Durability by store and setting")',
      '',
    ], 'exactly its line on stderr');
    t.match(lines(p.stdout()).find((l) => l.level === 60), { msg: 'start-up failed', error: { type: 'StoreDurabilityError' } }, 'and the fatal log line');
    t.equal(await keys(none), 0, 'nothing was written to Redis (no layout marker, no data key)');
  });

  t.test('production with store.durability: accept_loss starts, warns once, and reports it', async (t) => {
    const p = start(none, production, { durability: 'accept_loss' });
    const up = await listening(p);
    const warnings = lines(p.stdout()).filter((l) => l.level === 40);
    t.equal(warnings.length, 1, 'one warning');
    t.match(warnings[0], { mode: 'production', store: 'redis', appendonly: 'no', durability: 'accept_loss', msg: /^store\.durability: accept_loss: the Redis store has no append-only file/ });
    const r = await reported(up);
    t.equal(r.status, 200);
    t.same(r.body, { status: 'ready', store: 'redis', durability: { appendonly: 'no', appendfsync: 'everysec', accepted_loss: true } }, '/readyz says what was found and accepted');
    t.same(r.gauge, ['tokenproxy_store_durability{store="redis",appendonly="no",appendfsync="everysec",accepted_loss="true"} 1'], 'the gauge');
    await stop(t, p);
  });

  t.test('production on appendonly yes, appendfsync always: starts without a warning', async (t) => {
    const p = start(always, production);
    const up = await listening(p);
    t.same(lines(p.stdout()).filter((l) => (l.level ?? 0) >= 40), [], 'no warning');
    const r = await reported(up);
    t.same(r.body, { status: 'ready', store: 'redis', durability: { appendonly: 'yes', appendfsync: 'always', accepted_loss: false } });
    t.same(r.gauge, ['tokenproxy_store_durability{store="redis",appendonly="yes",appendfsync="always",accepted_loss="false"} 1']);
    await stop(t, p);
  });

  t.test('production where CONFIG is renamed away: INFO persistence shows the append-only file; the fsync policy is unknown, and said', async (t) => {
    const p = start(noConfig, production);
    const up = await listening(p);
    const warnings = lines(p.stdout()).filter((l) => l.level === 40);
    t.match(warnings, [{ mode: 'production', appendonly: 'yes', appendfsync: 'unknown', msg: /^the Redis store's fsync policy could not be read/ }]);
    t.equal(warnings.length, 1);
    const r = await reported(up);
    t.same(r.body.durability, { appendonly: 'yes', appendfsync: 'unknown', accepted_loss: false });
    await stop(t, p);
  });

  t.test('development on a Redis without an append-only file: starts and says what production would refuse', async (t) => {
    const p = start(none, { TOKENPROXY_MASTER_KEY: MASTER_KEY });
    const up = await listening(p);
    const warnings = lines(p.stdout()).filter((l) => l.level === 40);
    t.equal(warnings.length, 1);
    t.match(warnings[0], { mode: 'development', appendonly: 'no', would_refuse: [/^the Redis store has no append-only file/], msg: /would refuse to start on this Redis$/ });
    t.same((await reported(up)).body.durability, { appendonly: 'no', appendfsync: 'everysec', accepted_loss: false });
    await stop(t, p);
  });
}
