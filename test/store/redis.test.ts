/**
 * RedisStore on a real redis-server: the contract, what is actually stored under the prefix,
 * two instances converging on one key ring, and Redis dying and coming back.
 */
import t from 'tap';
import type { Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { redisForFile } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { cvcPattern, randomCard, randomCvc } from '../helpers/secrets.js';
import { runContract, makeRecord, TENANT_A } from './contract.js';
import { RedisStore } from '../../src/store/redis/index.js';
import { encodeRecord } from '../../src/store/codec.js';
import { createStore } from '../../src/store/factory.js';
import { KeyRing } from '../../src/crypto/keyring.js';
import { StoreUnavailableError } from '../../src/store/types.js';

// killable: the last test kills and restarts the server.
const redis = await redisForFile(t, { killable: true });
if (redis) {
  let n = 0;
  const open = async (t: Test, keyPrefix = `${redis.prefix}${++n}:`): Promise<RedisStore> => {
    const store = await RedisStore.connect({ url: redis.url, keyPrefix });
    t.teardown(() => store.close());
    return store;
  };
  const raw = (t: Test): Redis => {
    const client = new Redis(redis.url, { lazyConnect: true });
    t.teardown(() => client.disconnect());
    return client;
  };

  runContract(t, (t) => open(t));

  t.test('nothing under the prefix holds the plaintext card number or cvc', async (t) => {
    const prefix = `${redis.prefix}scan:`;
    const store = await open(t, prefix);
    const ring = await KeyRing.open(randomBytes(32), store.dataKeys);
    // Drawn per run (issue 14): the dump holds base64 ciphertexts and millisecond timestamps, where
    // a fixed 4-digit cvc turned up by chance; the cvc is looked for only where it cannot collide.
    const number = randomCard();
    const cvc = randomCvc();
    const record = makeRecord({ type: 'card', container: '/pci/high/', index_hashes: [ring.indexHash(TENANT_A, number.slice(-4))] });
    record.sealed = ring.seal(JSON.stringify({ number, expiration_month: 12, expiration_year: 2031 }), `${TENANT_A}:${record.id}`);
    const cvcSealed = ring.seal(cvc, `${TENANT_A}:${record.id}:cvc`);
    record.cvc_sealed = cvcSealed;
    record.cvc_expires_at = new Date(Date.now() + 3_600_000).toISOString();
    record.fingerprint = ring.fingerprint(TENANT_A, 'card', number);
    await store.tokens.insertMany([record]);

    const client = raw(t);
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      keys.push(...batch);
      cursor = next;
    } while (cursor !== '0');
    // Every key, value, hash field, zset member and list element as a separate string.
    const dump: string[] = [];
    for (const key of keys) {
      dump.push(key);
      const type = await client.type(key);
      if (type === 'string') dump.push((await client.get(key)) ?? '');
      else if (type === 'hash') dump.push(...Object.entries(await client.hgetall(key)).flat());
      else if (type === 'zset') dump.push(...(await client.zrange(key, '0', '-1', 'WITHSCORES')));
      else if (type === 'list') dump.push(...(await client.lrange(key, 0, -1)));
      else if (type === 'set') dump.push(...(await client.smembers(key)));
      else t.fail(`unexpected key type ${type}`);
    }
    const text = dump.join('\n');
    t.ok(keys.length >= 8, `scanned ${keys.length} keys`);
    t.ok(text.includes(record.id) && text.includes(record.sealed) && text.includes(cvcSealed), 'the scan sees the record');
    t.notOk(text.includes(number), 'no card number');
    t.notOk(text.includes('"number"'), 'no card field names');
    t.notOk(dump.includes(cvc), 'no value, field or member is the cvc');
    t.notOk(cvcPattern(cvc).test(text), 'no cvc next to its field name (JSON, form or text)');
    const pttl = await client.pttl(`${prefix}t:{${TENANT_A}}:cvc:${encodeURIComponent(record.id)}`);
    t.ok(pttl > 3_500_000 && pttl <= 3_600_000, 'the cvc key expires at cvc_expires_at by itself');
  });

  t.test('two instances opening and rotating the key ring at once converge', async (t) => {
    const prefix = `${redis.prefix}ring:`;
    const [a, b] = await Promise.all([open(t, prefix), open(t, prefix)]);
    const master = randomBytes(32);
    const [ra, rb] = await Promise.all([KeyRing.open(master, a.dataKeys), KeyRing.open(master, b.dataKeys)]);
    t.equal(ra.activeKid, rb.activeKid);
    t.equal(rb.unseal(ra.seal('hello', 'aad'), 'aad'), 'hello');
    const [ka, kb] = await Promise.all([ra.rotate(), rb.rotate()]);
    t.equal(ka, kb, 'both rotations land on one new key');
    t.same((await a.dataKeys.listDataKeys()).map((k) => k.kid), ['k1', 'k2']);
    t.equal(ra.unseal(rb.seal('after', 'aad'), 'aad'), 'after');
    const rc = await KeyRing.open(master, (await open(t, prefix)).dataKeys);
    const sealed = rc.seal('x', 'y');
    t.equal(KeyRing.kidOf(sealed), 'k2');
    const err = await KeyRing.open(randomBytes(32), a.dataKeys).then(() => null, (e: unknown) => e);
    t.match(err, { name: 'MasterKeyMismatchError', message: /the master key does not match the store/ });
  });

  t.test('records of layout 1 are migrated on connect: scoped lists and deduplication find them', async (t) => {
    const prefix = `${redis.prefix}layout1:`;
    const client = raw(t);
    const tk = (...parts: string[]) => `${prefix}t:${encodeURIComponent(TENANT_A)}:${parts.map(encodeURIComponent).join(':')}`;
    const tk3 = (...parts: string[]) => `${prefix}t:{${encodeURIComponent(TENANT_A)}}:${parts.map(encodeURIComponent).join(':')}`;
    // Two tokens as layout 1 wrote them: a hash {r, k, s, e} and the zsets named in k (no ct, dd, containers).
    // md:rec:x (a metadata key "rec") matches SCAN's record pattern too: the migration must skip it.
    const old = [makeRecord({ fingerprint: 'fp-old', id: 'old:1' }), makeRecord({ fingerprint: 'fp-old', container: '/pci/high/', metadata: { rec: 'x' } })];
    for (const [i, r] of old.entries()) {
      const zsets = [tk('all'), tk('type', r.type), tk('fp', r.fingerprint!), ...Object.entries(r.metadata).map(([k, v]) => tk('md', k, v))];
      await client.hset(tk('rec', r.id), 'r', encodeRecord(r), 'k', JSON.stringify(zsets), 's', String(i + 1), 'e', '');
      for (const z of zsets) await client.zadd(z, i + 1, r.id);
    }
    await client.set(tk('seq'), '2');
    const store = await open(t, prefix);
    t.equal(await client.hget(`${prefix}meta`, 'version'), '3', 'layout version 3 recorded');
    t.same((await store.tokens.list(TENANT_A, { scope: [{ prefix: '/general/', allow: true }] }, { size: 10, after: null })).items.map((r) => r.id), [old[0]!.id], 'a scoped list finds the old token');
    t.same((await store.tokens.list(TENANT_A, { container: '/pci/' }, { size: 10, after: null })).items.map((r) => r.id), [old[1]!.id]);
    const [hit] = await store.tokens.insertMany([makeRecord({ fingerprint: 'fp-old' })], { dedupe: [true] });
    t.equal(hit?.id, old[0]!.id, 'deduplication matches the old token of its container');
    const zsets = JSON.parse((await client.hget(tk3('rec', old[0]!.id), 'k'))!) as string[];
    t.ok(zsets.includes(tk3('ct', '/general/high/')) && zsets.includes(tk3('dd', 'token', '/general/high/', 'fp-old')), 'its zset list was rewritten');
    t.equal(await client.exists(tk('rec', old[0]!.id), tk('all'), tk('seq')), 0, 'no key of the old names is left');
    t.equal(await store.migrate(), 0, 'a second migration has nothing to do');
    await client.hdel(`${prefix}meta`, 'version');
    t.equal(await store.migrate(), 0, 'and is idempotent even when forced');
  });

  t.test('a scoped list reads only the records of the containers it may show', async (t) => {
    const store = await open(t);
    const client = raw(t);
    const others = Array.from({ length: 400 }, () => makeRecord({ container: '/other/' }));
    for (let i = 0; i < others.length; i += 100) await store.tokens.insertMany(others.slice(i, i + 100));
    const mine = Array.from({ length: 5 }, () => makeRecord({ container: '/mine/' }));
    await store.tokens.insertMany(mine);
    await store.tokens.insertMany(Array.from({ length: 100 }, () => makeRecord({ container: '/other/' })));
    const hmgets = async () => Number(/cmdstat_hmget:calls=(\d+)/.exec(await client.info('commandstats'))?.[1] ?? 0);
    const before = await hmgets();
    const page = await store.tokens.list(TENANT_A, { scope: [{ prefix: '/mine/', allow: true }] }, { size: 20, after: null });
    const reads = (await hmgets()) - before;
    t.same(page.items.map((r) => r.id), mine.map((r) => r.id).reverse(), 'the whole page');
    t.ok(reads <= mine.length, `${reads} record reads for ${mine.length} records among ${others.length + 105}`);
  });

  t.test('factory builds a connected Redis store', async (t) => {
    const store = await createStore({ kind: 'redis', path: '', url: redis.url, key_prefix: `${redis.prefix}factory:` });
    t.teardown(() => store.close());
    t.equal(store.kind, 'redis');
    await store.ping();
    t.pass('ping answered');
  });

  // issue 30: a time bound is kept where time is the promise; it is generous (a loaded 2-core
  // machine delays timers), states what the store is built to do, and prints what was measured.
  const BOUND_MS = 3000;

  t.test(`connecting to nothing fails fast with StoreUnavailableError (connect timeout 2 s; asserted under ${BOUND_MS} ms)`, async (t) => {
    const started = Date.now();
    const err = await RedisStore.connect({ url: 'redis://127.0.0.1:1', keyPrefix: 'x:' }).then(() => null, (e: unknown) => e);
    const took = Date.now() - started;
    t.ok(err instanceof StoreUnavailableError, 'StoreUnavailableError');
    t.comment(`connect to a closed port failed in ${took} ms`);
    t.ok(took < BOUND_MS, `failed in ${took} ms`);
  });

  // Last: it kills the shared server.
  // README "Storage and durability": "within about 1.5 s, never hanging" (the 1.5 s command
  // timeout, and the store's own deadline 250 ms after it)
  t.test(`Redis killed: operations reject within about 1.5 s (asserted under ${BOUND_MS} ms), work again after restart, data survives`, async (t) => {
    const store = await open(t);
    const before = makeRecord();
    await store.tokens.insertMany([before]);
    await redis.kill();
    for (const op of [() => store.tokens.get(TENANT_A, before.id), () => store.tokens.insertMany([makeRecord()]), () => store.ping()]) {
      const started = Date.now();
      const err = await op().then(() => null, (e: unknown) => e);
      const took = Date.now() - started;
      t.ok(err instanceof StoreUnavailableError, 'StoreUnavailableError');
      t.comment(`Redis down: rejected in ${took} ms`);
      t.ok(took < BOUND_MS, `rejected in ${took} ms`);
      t.notMatch(err instanceof Error ? err.message : '', before.id, 'no values in the message');
    }
    await redis.restart();
    await waitFor(() => store.ping().then(() => true, () => false), { timeoutMs: 10_000, intervalMs: 100, what: 'the store answers after the restart' });
    t.same(await store.tokens.get(TENANT_A, before.id), before, 'the resolved insert survived kill -9 of Redis (appendfsync always)');
    const after = makeRecord();
    await store.tokens.insertMany([after]);
    t.same(await store.tokens.get(TENANT_A, after.id), after, 'writes work again');
  });
}
