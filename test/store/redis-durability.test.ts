/**
 * The Redis store's durability check (src/store/redis/durability.ts) on real redis-servers,
 * each started with the persistence under test: what it reads (CONFIG GET; INFO persistence where
 * CONFIG is renamed away or denied to the user; unknown where INFO is denied too), what production
 * and development make of it, and that a refused connect writes nothing.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { Redis } from 'ioredis';
import { redisSkip, startRedis, type RedisHandle } from '../helpers/redis.js';
import { RedisConnection } from '../../src/store/redis/connection.js';
import { durabilityVerdict, readDurability, type NodeDurability } from '../../src/store/redis/durability.js';
import { RedisStore } from '../../src/store/redis/index.js';
import { StoreDurabilityError } from '../../src/store/types.js';

const skip = redisSkip();
if (skip) {
  t.plan(0, skip);
} else {
  // Servers of their own, whatever REDIS_URL says: the persistence is what is tested.
  const server = async (args: string[]): Promise<RedisHandle> => {
    const r = await startRedis({ own: true, args });
    t.teardown(() => r.stop());
    return r;
  };
  const read = async (r: RedisHandle, auth: { username?: string; password?: string } = {}): Promise<NodeDurability[]> => {
    const c = await RedisConnection.open({ url: r.url, keyPrefix: r.prefix, ...auth });
    try {
      return await readDurability(c);
    } finally {
      await c.close();
    }
  };
  const production = { mode: 'production', setting: 'require_aof' } as const;
  const keysOf = async (r: RedisHandle): Promise<number> => {
    const c = new Redis(r.port, '127.0.0.1');
    try {
      return await c.dbsize();
    } finally {
      c.disconnect();
    }
  };

  const none = await server(['--appendonly', 'no', '--save', '']);
  const always = await server(['--appendonly', 'yes', '--appendfsync', 'always']);
  const everysec = await server(['--appendonly', 'yes', '--appendfsync', 'everysec']);
  const noConfig = await server(['--appendonly', 'yes', '--appendfsync', 'always', '--rename-command', 'CONFIG', '']);
  const noConfigNoAof = await server(['--appendonly', 'no', '--rename-command', 'CONFIG', '']);

  t.test('no append-only file: production refuses, naming what it found and both ways out; accept_loss and development warn', async (t) => {
    const nodes = await read(none);
    t.same(nodes, [{ node: null, appendonly: 'no', appendfsync: 'everysec', source: 'config' }], 'read with CONFIG GET (appendfsync as configured, unused)');
    const refused = durabilityVerdict(nodes, production);
    t.match(refused.refusal, /^the Redis store has no append-only file \(appendonly no on the Redis primary\): a Redis restart after a crash loses every token/);
    t.match(refused.refusal, /turn it on \(appendonly yes, appendfsync always\), or set store\.durability: accept_loss/, 'the two ways out');
    t.same(refused.warnings, []);

    const accepted = durabilityVerdict(nodes, { mode: 'production', setting: 'accept_loss' });
    t.equal(accepted.refusal, null, 'accept_loss: no refusal');
    t.equal(accepted.warnings.length, 1, 'but one warning');
    t.match(accepted.warnings[0]!.msg, /^store\.durability: accept_loss: the Redis store has no append-only file/);
    t.match(accepted.warnings[0]!.fields, { mode: 'production', store: 'redis', appendonly: 'no', durability: 'accept_loss' });

    const dev = durabilityVerdict(nodes, { mode: 'development', setting: 'require_aof' });
    t.equal(dev.refusal, null, 'development never refuses');
    t.match(dev.warnings, [{ fields: { mode: 'development', would_refuse: [refused.refusal] }, msg: /^development mode: production mode .* would refuse to start on this Redis$/ }]);
    t.same(durabilityVerdict(nodes, { mode: 'development', setting: 'accept_loss' }), { refusal: null, warnings: [] }, 'development with accept_loss: silent');
  });

  t.test('appendfsync always: nothing to say; everysec: a production warning about an OS crash', async (t) => {
    const good = await read(always);
    t.same(good, [{ node: null, appendonly: 'yes', appendfsync: 'always', source: 'config' }]);
    t.same(durabilityVerdict(good, production), { refusal: null, warnings: [] });

    const second = await read(everysec);
    t.same(second, [{ node: null, appendonly: 'yes', appendfsync: 'everysec', source: 'config' }]);
    const verdict = durabilityVerdict(second, production);
    t.equal(verdict.refusal, null, 'everysec starts');
    t.equal(verdict.warnings.length, 1);
    t.match(verdict.warnings[0]!.msg, /appendfsync everysec .*an OS crash or power loss of the Redis host can lose about the last second of acknowledged tokens; a Redis process crash loses none/);
    t.same(durabilityVerdict(second, { mode: 'development', setting: 'require_aof' }), { refusal: null, warnings: [] }, 'development says nothing of fsync');
  });

  t.test('CONFIG renamed away: INFO persistence says whether there is an append-only file, not its fsync policy', async (t) => {
    const nodes = await read(noConfig);
    t.same(nodes, [{ node: null, appendonly: 'yes', appendfsync: 'unknown', source: 'info' }]);
    const verdict = durabilityVerdict(nodes, production);
    t.equal(verdict.refusal, null, 'an append-only file: production starts');
    t.match(verdict.warnings, [{ msg: /fsync policy could not be read/ }], 'and says the fsync policy is unknown');

    const without = await read(noConfigNoAof);
    t.same(without, [{ node: null, appendonly: 'no', appendfsync: 'unknown', source: 'info' }]);
    t.match(durabilityVerdict(without, production).refusal, /has no append-only file/, 'no append-only file, read from INFO: refused');
  });

  t.test('CONFIG and INFO both denied to the user: unknown, and production refuses to assume', async (t) => {
    const acl = spawnSync('redis-cli', ['-p', String(always.port), 'ACL', 'SETUSER', 'limited', 'on', '>limited-password', '~*', '+@all', '-config', '-info'], { encoding: 'utf8' });
    t.equal(acl.stdout.trim(), 'OK', acl.stderr);
    const nodes = await read(always, { username: 'limited', password: 'limited-password' });
    t.same(nodes, [{ node: null, appendonly: 'unknown', appendfsync: 'unknown', source: 'none' }]);
    const refusal = durabilityVerdict(nodes, production).refusal;
    t.match(refusal, /^the Redis store's persistence could not be read \(neither CONFIG GET nor INFO persistence said whether there is an append-only file on the Redis primary\)/);
    t.match(refusal, /or set store\.durability: accept_loss/);
    t.notOk(refusal!.includes('limited-password'), 'no password in the message');
  });

  t.test('a refused connect writes nothing; a tool (no policy) and accept_loss connect', async (t) => {
    t.equal(await keysOf(none), 0);
    await t.rejects(RedisStore.connect({ url: none.url, keyPrefix: none.prefix, durability: production }), StoreDurabilityError);
    t.equal(await keysOf(none), 0, 'not even the layout marker was written');

    const accepted = await RedisStore.connect({ url: none.url, keyPrefix: none.prefix, durability: { mode: 'production', setting: 'accept_loss' } });
    t.same(accepted.durability, { appendonly: 'no', appendfsync: 'everysec', accepted_loss: true });
    await accepted.close();

    const tool = await RedisStore.connect({ url: none.url, keyPrefix: `${none.prefix}tool:` });
    t.equal(tool.durability, undefined, 'opened without a policy: not read');
    await tool.close();

    const good = await RedisStore.connect({ url: always.url, keyPrefix: always.prefix, durability: production });
    t.same(good.durability, { appendonly: 'yes', appendfsync: 'always', accepted_loss: false });
    await good.close();
  });
}
