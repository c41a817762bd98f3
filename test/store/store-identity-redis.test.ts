/**
 * A Redis that forgets (store/identity.ts): restarted without persistence, flushed, or replaced by
 * another store under a running service. No write is answered 200 after the loss, /readyz says
 * what happened, nothing but the tombstone marker is written to the emptied store, the next start
 * names the loss, and `tokenproxy migrate` refuses it.
 */
import t, { type Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { baseConfig, startTestService, type TestService } from '../helpers/service.js';
import { redisForFile, withFreshPrefix, type RedisHandle } from '../helpers/redis.js';
import { runCli, writeConfig } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';

const redis = await redisForFile(t, { killable: true, durable: false });

async function keysUnder(r: RedisHandle): Promise<string[]> {
  const c = new Redis(r.port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 1 });
  await c.connect();
  try {
    return (await c.keys(`${r.prefix}*`)).map((k) => k.slice(r.prefix.length)).sort();
  } finally {
    c.disconnect();
  }
}

async function redisCommand(r: RedisHandle, ...args: string[]): Promise<unknown> {
  const c = new Redis(r.port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 1 });
  await c.connect();
  try {
    return await c.call(args[0]!, ...args.slice(1));
  } finally {
    c.disconnect();
  }
}

/** Tokenizes until the service answers something other than a store outage during reconnection; every answer is recorded. */
async function writesAfterLoss(svc: TestService, n: number): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < n; i++) {
    const r = await svc.call('POST', '/tokenize', { body: { v: `after-${i}` } });
    statuses.push(r.status);
    await new Promise((res) => setTimeout(res, 50));
  }
  return statuses;
}

async function expectLost(t: Test, svc: TestService, what: RegExp): Promise<void> {
  const statuses = await writesAfterLoss(svc, 8);
  t.notOk(statuses.includes(200), `no write is answered 200 after the loss (${statuses.join(' ')})`);
  const last = await svc.call('POST', '/tokenize', { body: { v: 'last' } });
  t.equal(last.status, 503);
  t.equal(last.body?.code, 'store_unavailable');
  t.match(last.body?.detail, /not the one the service opened/);
  const ready = await svc.call('GET', '/readyz', { key: null });
  t.equal(ready.status, 503, '/readyz reports it');
  t.match(ready.body?.detail, what, '/readyz names the cause');
  t.match(ready.body?.detail, /Restore the store from a backup/);
  t.match(svc.logs(), /"level":50[^\n]*is lost/, 'an error line in the log says what was found');
}

if (redis) {
  t.test('a Redis restarted empty under a running service', async (t) => {
    const r = withFreshPrefix(redis);
    const dir = mkdtempSync(join(tmpdir(), 'tp-identity-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const svc = await startTestService(t, { redis: r, dataDir: dir });
    const before = await svc.call('POST', '/tokenize', { body: { v: 'before' } });
    t.equal(before.status, 200);
    t.ok((await keysUnder(r)).includes('{dk}:store'), 'the store carries its marker');

    await redis.kill();
    await redis.restart();
    await expectLost(t, svc, /no longer carries its marker/);
    t.same(await keysUnder(r), ['{dk}:store'], 'nothing but the tombstone marker is written to the emptied store');
    t.match(await redisCommand(r, 'HGET', `${r.prefix}{dk}:store`, 'lost_at'), /^\d{4}-/);
    await svc.svc.close();

    // The next start names the loss and writes nothing.
    await t.rejects(startTestService(t, { redis: r, dataDir: dir, masterKey: svc.masterKey }), /the store is lost: a running tokenproxy found it emptied/);
    t.same((await keysUnder(r)).filter((k) => k !== 'meta'), ['{dk}:store'], 'the refused start wrote no data key');

    // migrate refuses it too, and says why.
    const config = { ...baseConfig(), store: { kind: 'redis', url: r.url, key_prefix: r.prefix } };
    const path = writeConfig(dir, config);
    const migrate = await runCli(['migrate', '--config', path], { TOKENPROXY_MASTER_KEY: svc.masterKey });
    t.equal(migrate.code, 1, 'migrate exits 1');
    t.match(migrate.output, /the store is lost[^\n]*nothing was changed/);
    t.same((await keysUnder(r)).filter((k) => k !== 'meta'), ['{dk}:store'], 'migrate wrote no data key');

    // The operator chooses a new, empty vault there: init, then the service starts on it.
    const init = await runCli(['init', '--config', path], { TOKENPROXY_MASTER_KEY: svc.masterKey });
    t.equal(init.code, 0, `init exits 0 (${init.output.trim()})`);
    t.match(init.output, /a new, empty vault begins on the lost store: store [0-9a-f-]{36}, data key k1/);
    const again = await startTestService(t, { redis: r, dataDir: dir, masterKey: svc.masterKey });
    t.equal((await again.call('POST', '/tokenize', { body: { v: 'new vault' } })).status, 200, 'the service serves the new vault');
    const twice = await runCli(['init', '--config', path], { TOKENPROXY_MASTER_KEY: svc.masterKey });
    t.match(twice.output, /a tokenproxy store already/, 'a second init leaves it as it is');
  });

  t.test('FLUSHALL under a running service: the first write after it runs nothing', async (t) => {
    const r = withFreshPrefix(redis);
    const svc = await startTestService(t, { redis: r });
    t.equal((await svc.call('POST', '/tokenize', { body: { v: 'before' } })).status, 200);
    await redisCommand(r, 'FLUSHALL');
    // No reconnect and no timer: the write script finds its slot without the marker.
    const first = await svc.call('POST', '/tokenize', { body: { v: 'right after' } });
    t.equal(first.status, 503, 'the first write after the flush is refused');
    await expectLost(t, svc, /no longer carries its marker/);
    t.same(await keysUnder(r), ['{dk}:store'], 'nothing but the tombstone marker is written');
  });

  t.test('a Redis replaced by another store on the same address', async (t) => {
    const mine = withFreshPrefix(redis);
    const theirs = withFreshPrefix(redis);
    const svc = await startTestService(t, { redis: mine });
    t.equal((await svc.call('POST', '/tokenize', { body: { v: 'before' } })).status, 200);
    const other = await startTestService(t, { redis: theirs });
    t.equal((await other.call('POST', '/tokenize', { body: { v: 'other' } })).status, 200);
    await other.svc.close();
    // In one step, another vault's keys take the place of this one's (as when a different Redis
    // answers at the address).
    const c = new Redis(redis.port, '127.0.0.1');
    t.teardown(() => c.disconnect());
    const m = c.multi();
    for (const k of await c.keys(`${mine.prefix}*`)) m.del(k);
    for (const k of await c.keys(`${theirs.prefix}*`)) m.rename(k, mine.prefix + k.slice(theirs.prefix.length));
    await m.exec();
    const keysBefore = await keysUnder(mine);
    await expectLost(t, svc, /another store's marker/);
    t.same(await keysUnder(mine), keysBefore, 'nothing is written to the other store');
    t.notOk(await redisCommand(mine, 'HGET', `${mine.prefix}{dk}:store`, 'lost_at'), "the other store's marker is left as it is");
  });

  t.test('a store from before markers gets one; a store with tokens and no keys is refused', async (t) => {
    const r = withFreshPrefix(redis);
    const dir = mkdtempSync(join(tmpdir(), 'tp-identity-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const svc = await startTestService(t, { redis: r, dataDir: dir });
    t.equal((await svc.call('POST', '/tokenize', { body: { v: 'x' } })).status, 200);
    await svc.svc.close();
    // As an earlier version left it: no marker, no slot copies.
    const sids = (await keysUnder(r)).filter((k) => k.endsWith(':sid') || k === '{dk}:store');
    for (const k of sids) await redisCommand(r, 'DEL', `${r.prefix}${k}`);
    const again = await startTestService(t, { redis: r, dataDir: dir, masterKey: svc.masterKey });
    t.match(again.logs(), /the store had no marker \(an earlier version wrote it\): its marker is written/);
    t.equal((await again.call('POST', '/tokenize', { body: { v: 'y' } })).status, 200, 'and it serves');
    await again.svc.close();

    // Its data keys removed: the tokens cannot be opened; the start refuses and creates no key.
    await redisCommand(r, 'DEL', `${r.prefix}{dk}`, `${r.prefix}{dk}:order`, `${r.prefix}{dk}:store`);
    await t.rejects(startTestService(t, { redis: r, dataDir: dir, masterKey: svc.masterKey }), /holds tokens or audit events but neither its marker nor its data keys/);
    t.notOk((await keysUnder(r)).includes('{dk}'), 'no data key was made');
    const path = writeConfig(dir, { ...baseConfig(), store: { kind: 'redis', url: r.url, key_prefix: r.prefix } });
    const init = await runCli(['init', '--config', path], { TOKENPROXY_MASTER_KEY: svc.masterKey });
    t.equal(init.code, 1, 'init refuses a lost store that still holds tokens');
    t.match(init.output, /which init never removes/);
    t.notOk((await keysUnder(r)).includes('{dk}'), 'and makes no data key');
  });

  t.test('a Redis that comes back from its own backup is served again', async (t) => {
    const r = withFreshPrefix(redis);
    const svc = await startTestService(t, { redis: r });
    const made = await svc.call('POST', '/tokenize', { body: { v: 'kept' } });
    t.equal(made.status, 200);
    const marker = await redisCommand(r, 'HGETALL', `${r.prefix}{dk}:store`) as string[];
    t.ok(marker.includes('id'));
    // The marker alone goes and comes back (a restore of the same store, in miniature).
    await redisCommand(r, 'DEL', `${r.prefix}{dk}:store`);
    await waitFor(async () => (await svc.call('GET', '/readyz', { key: null })).status === 503, { timeoutMs: 10_000, what: 'the loss is noticed' });
    await redisCommand(r, 'DEL', `${r.prefix}{dk}:store`);
    await redisCommand(r, 'HSET', `${r.prefix}{dk}:store`, ...marker);
    await waitFor(async () => (await svc.call('GET', '/readyz', { key: null })).status === 200, { timeoutMs: 10_000, what: 'served again' });
    const read = await svc.call('GET', `/tokens/${made.body.v}`);
    t.equal(read.status, 200, 'the token made before is read');
  });
}
