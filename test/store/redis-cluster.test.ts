/**
 * RedisStore on a real 3-master Redis Cluster: the Store contract (with the audit and
 * idempotency parts), and tenants spread over the shards while each tenant's lists and searches
 * work (every key of a tenant shares its hash tag, so every script touches one slot).
 */
import t from 'tap';
import type { Test } from 'tap';
import { Cluster, Redis } from 'ioredis';
import { clusterForFile } from '../helpers/redis-topology.js';
import { runContract, makeRecord } from './contract.js';
import { RedisStore } from '../../src/store/redis/index.js';
import { createStore } from '../../src/store/factory.js';
import { StoreFormatError, StoreUnavailableError, type StoredToken } from '../../src/store/types.js';
import { loadRedisFixture, redisFixtureExpected } from '../helpers/redis-fixture.js';
import { baseConfig, startTestService, TENANT_B, KEYS } from '../helpers/service.js';

const cluster = await clusterForFile(t);
if (cluster) {
  let n = 0;
  const open = async (t: Test, keyPrefix = `${cluster.prefix}${++n}:`): Promise<RedisStore> => {
    // One seed node: the client discovers the others.
    const store = await RedisStore.connect({ cluster: { nodes: [cluster.nodes[n % 3]!] }, keyPrefix });
    t.teardown(() => store.close());
    return store;
  };

  runContract(t, (t) => open(t));

  t.test('50 tenants land on all three shards; list and search work per tenant', async (t) => {
    const prefix = `${cluster.prefix}spread:`;
    const store = await open(t, prefix);
    const tenants = Array.from({ length: 50 }, (_, i) => `tenant-${i}`);
    const written = new Map<string, string[]>();
    for (const tenant of tenants) {
      const recs = [makeRecord({ tenant_id: tenant, metadata: { k: tenant } }), makeRecord({ tenant_id: tenant, fingerprint: `fp-${tenant}`, container: '/pci/high/' })];
      await store.tokens.insertMany(recs);
      written.set(tenant, recs.map((r) => r.id));
    }
    const perNode = await Promise.all(cluster.ports.map(async (port) => {
      const c = new Redis(port, '127.0.0.1', { lazyConnect: true });
      try {
        let count = 0;
        let cursor = '0';
        do {
          const [next, keys] = await c.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
          count += keys.length;
          cursor = next;
        } while (cursor !== '0');
        return count;
      } finally {
        c.disconnect();
      }
    }));
    t.ok(perNode.every((c) => c > 0), `keys on every master: ${perNode.join(', ')}`);
    for (const tenant of tenants) {
      const [plain, card] = written.get(tenant)!;
      const page = await store.tokens.list(tenant, {}, { size: 10, after: null });
      if (page.items.map((r) => r.id).join() !== [card, plain].join()) t.fail(`list of ${tenant}`);
      const byMeta = await store.tokens.list(tenant, { metadata: { k: tenant } }, { size: 10, after: null });
      const byFp = await store.tokens.list(tenant, { fingerprint: `fp-${tenant}`, scope: [{ prefix: '/pci/', allow: true }] }, { size: 10, after: null });
      if (byMeta.items.map((r) => r.id).join() !== plain || byFp.items.map((r) => r.id).join() !== card) t.fail(`search of ${tenant}`);
    }
    t.pass('every tenant lists and searches its own two tokens');
  });

  t.test('a batch spanning tenants is refused before anything is written', async (t) => {
    const store = await open(t);
    const a = makeRecord({ tenant_id: 'ta' });
    const err = await store.tokens.insertMany([a, makeRecord({ tenant_id: 'tb' })]).then(() => null, (e: unknown) => e);
    t.match(err, { name: 'TypeError', message: /share a tenant/ });
    t.equal(await store.tokens.get('ta', a.id), null, 'nothing written');
  });

  t.test('factory builds a Cluster store from the store config', async (t) => {
    const store = await createStore({ kind: 'redis', path: '', cluster: { nodes: cluster.nodes }, key_prefix: `${cluster.prefix}factory:` });
    t.teardown(() => store.close());
    const r = makeRecord();
    await store.tokens.insertMany([r]);
    t.same(await store.tokens.get(r.tenant_id, r.id), r);
  });

  t.test('the durability check reads every master, and names the one that falls short', async (t) => {
    const production = { mode: 'production', setting: 'require_aof' } as const;
    const keyPrefix = `${cluster.prefix}durability:`;
    const store = await RedisStore.connect({ cluster: { nodes: [cluster.nodes[0]!] }, keyPrefix, durability: production });
    t.teardown(() => store.close());
    t.same(store.durability, { appendonly: 'yes', appendfsync: 'always', accepted_loss: false }, 'three masters with appendfsync always');
    // One master weakened at a time (set back at the end: the next tests run on the same Cluster).
    const last = new Redis(cluster.ports[2]!, '127.0.0.1');
    t.teardown(async () => {
      await last.config('SET', 'appendonly', 'yes');
      await last.config('SET', 'appendfsync', 'always');
      last.disconnect();
    });
    const named = `127.0.0.1:${cluster.ports[2]}`;
    await last.config('SET', 'appendfsync', 'everysec');
    const logged: string[] = [];
    const log = { warn: (_: unknown, msg: string) => void logged.push(msg) } as never;
    const weaker = await RedisStore.connect({ cluster: { nodes: [cluster.nodes[0]!] }, keyPrefix, durability: production, log });
    t.teardown(() => weaker.close());
    t.same(weaker.durability, { appendonly: 'yes', appendfsync: 'everysec', accepted_loss: false }, 'the weakest master is reported');
    t.match(logged, [new RegExp(`appendfsync everysec on master ${named.replace(/\./g, '\\.')}\\)`)], 'the warning names that master');
    await last.config('SET', 'appendonly', 'no');
    const err = await RedisStore.connect({ cluster: { nodes: [cluster.nodes[0]!] }, keyPrefix, durability: production }).then(() => null, (e: unknown) => e);
    t.match(err, { name: 'StoreDurabilityError', message: `the Redis store has no append-only file (appendonly no on master ${named})` });
  });

  // issue 24: tokenproxy migrate walks every master of a Cluster (migrate-v4.ts keeps a SCAN cursor per node).
  t.test('the layout 3 fixture on a Cluster: refused by a service start, converted by the migrator, every token there', async (t) => {
    const prefix = `${cluster.prefix}fixture:`;
    const client = new Cluster(cluster.nodes.map((u) => { const x = new URL(u); return { host: x.hostname, port: Number(x.port) }; }));
    t.teardown(() => client.disconnect());
    await loadRedisFixture(client, prefix);
    const refused = await RedisStore.connect({ cluster: { nodes: cluster.nodes }, keyPrefix: prefix }).then(() => null, (e: unknown) => e);
    t.ok(refused instanceof StoreFormatError, 'StoreFormatError');
    const migrating = await RedisStore.connect({ cluster: { nodes: cluster.nodes }, keyPrefix: prefix, forMigration: true });
    t.teardown(() => migrating.close());
    const m = migrating.migrator();
    t.same(await m.status(), { from: 3, to: 4, pending: 23, total: 23 });
    let steps = 0;
    while (!(await m.step(4)).done) if (++steps > 100) throw new Error('the migration does not end');
    t.same(await m.status(), { from: 4, to: 4, pending: 0, total: 23 }, `converted in ${steps + 1} steps`);
    const store = await open(t, prefix);
    const expected = redisFixtureExpected().tokens;
    const got = await Promise.all(expected.map((e) => store.tokens.get(e.tenant, e.id)));
    t.same(got.map((r) => r !== null), expected.map((e) => !e.expired), 'every live token is there, the expired one reads as missing');
    t.same(got.filter((r) => r !== null).map((r) => [r.id, r.container, r.metadata]), expected.filter((e) => !e.expired).map((e) => [e.id, e.containers[0], e.metadata]));
  });

  // Last: it moves a slot between the masters.
  t.test('a tenant\'s slot migrating to another master: every answer is right or store_unavailable, nothing half-written', async (t) => {
    const store = await open(t);
    const tenant = 'mover';
    const direct = (port: number) => {
      const c = new Redis(port, '127.0.0.1', { lazyConnect: true });
      t.teardown(() => c.disconnect());
      return c;
    };
    const nodes = cluster.ports.map(direct);
    const kept: StoredToken[] = [];
    for (let i = 0; i < 20; i++) kept.push(makeRecord({ tenant_id: tenant, fingerprint: `fp-${i % 5}`, metadata: { i: String(i) } }));
    for (let i = 0; i < 20; i += 5) await store.tokens.insertMany(kept.slice(i, i + 5));
    const slot = Number(await nodes[0]!.cluster('KEYSLOT', `x{${tenant}}`));
    const ids = await Promise.all(nodes.map((c) => c.cluster('MYID') as Promise<string>));
    const owns = await Promise.all(nodes.map(async (c) => Number(await c.cluster('COUNTKEYSINSLOT', slot)) > 0));
    const from = owns.indexOf(true);
    const to = (from + 1) % 3;
    t.ok(from >= 0, `slot ${slot} is on master ${from}, moving to ${to}`);
    await nodes[to]!.cluster('SETSLOT', slot, 'IMPORTING', ids[from]!);
    await nodes[from]!.cluster('SETSLOT', slot, 'MIGRATING', ids[to]!);
    const keys = (await nodes[from]!.cluster('GETKEYSINSLOT', slot, 1000)) as string[];
    t.ok(keys.length > 20, `${keys.length} keys in the slot`);
    // Half of them move: the slot is split between two masters, as in a resharding's middle.
    await nodes[from]!.call('MIGRATE', '127.0.0.1', String(cluster.ports[to]), '', '0', '5000', 'KEYS', ...keys.slice(0, keys.length / 2));

    const wrong: string[] = [];
    const unavailable: string[] = [];
    const served: string[] = [];
    const attempt = async <T>(what: string, op: () => Promise<T>, right: (v: T) => boolean): Promise<T | undefined> => {
      try {
        const v = await op();
        if (!right(v)) wrong.push(what);
        served.push(what.split(' ')[0]!);
        return v;
      } catch (err) {
        if (err instanceof StoreUnavailableError) unavailable.push(what.split(' ')[0]!);
        else wrong.push(`${what}: ${String(err)}`);
        return undefined;
      }
    };
    const added: StoredToken[] = [];
    const deleted = new Set<string>();
    for (let round = 0; round < 3; round++) {
      for (const r of kept) await attempt(`get ${r.id}`, () => store.tokens.get(tenant, r.id), (v) => deleted.has(r.id) ? v === null : JSON.stringify(v) === JSON.stringify(r));
      await attempt('list by metadata', () => store.tokens.list(tenant, { metadata: { i: '3' } }, { size: 10, after: null }), (p) => p.items.map((x) => x.id).join() === kept[3]!.id);
      const fresh = makeRecord({ tenant_id: tenant });
      if (await attempt('insert', () => store.tokens.insertMany([fresh]), (v) => v.length === 1 && v[0] === null)) added.push(fresh);
      await attempt('deduplicating insert', () => store.tokens.insertMany([makeRecord({ tenant_id: tenant, fingerprint: 'fp-1' })], { dedupe: [true] }),
        (v) => v[0]?.id === kept[1]!.id);
      const changed = { ...kept[round]!, metadata: { i: `changed-${round}` } };
      if (await attempt('update', () => store.tokens.update(changed), (v) => v === true)) kept[round] = changed;
      const victim = kept[10 + round]!;
      if (await attempt('delete', () => store.tokens.delete(tenant, victim.id), (v) => v === true)) deleted.add(victim.id);
    }
    t.same(wrong, [], `no wrong answer during the migration (store_unavailable: ${unavailable.join(', ') || 'none'})`);
    // issue 30: README "Storage and durability" promises reads are served while the slot migrates
    // (only writes may answer 503); "every answer right or 503" alone passed with no read served
    const reads = (ops: string[]) => ops.filter((o) => o === 'get' || o === 'list');
    t.comment(`during the migration: served ${served.join(', ')}`);
    t.ok(reads(served).length > 0, `reads were served during the migration (${reads(served).length})`);
    t.same(reads(unavailable), [], 'no read answered store_unavailable');

    const rest = (await nodes[from]!.cluster('GETKEYSINSLOT', slot, 1000)) as string[];
    if (rest.length > 0) await nodes[from]!.call('MIGRATE', '127.0.0.1', String(cluster.ports[to]), '', '0', '5000', 'KEYS', ...rest);
    for (const c of nodes) await c.cluster('SETSLOT', slot, 'NODE', ids[to]!);

    // Afterwards: whatever was answered as written is there with all its indexes, nothing else.
    const live = [...kept.filter((r) => !deleted.has(r.id)), ...added];
    const listed = await store.tokens.list(tenant, {}, { size: 100, after: null });
    t.same(listed.items.map((r) => r.id).sort(), live.map((r) => r.id).sort(), 'the list holds exactly the tokens answered as written');
    for (const r of live) {
      const byMeta = await store.tokens.list(tenant, { metadata: r.metadata }, { size: 10, after: null });
      if (!byMeta.items.some((x) => x.id === r.id)) t.fail(`${r.id} missing from its metadata index`);
    }
    t.equal((await store.tokens.insertMany([makeRecord({ tenant_id: tenant, fingerprint: 'fp-1' })], { dedupe: [true] }))[0]?.id, kept[1]!.id, 'dedupe after the move');
    t.equal(Number(await nodes[from]!.cluster('COUNTKEYSINSLOT', slot)), 0, 'nothing of the slot is left on the old master');
    t.ok(Number(await nodes[to]!.cluster('COUNTKEYSINSLOT', slot)) > 20, 'the slot lives on the new master');
  });

  t.test('a service on the Cluster: every slot a write touches carries the store marker, and a flushed Cluster runs no write', async (t) => {
    const key_prefix = `${cluster.prefix}identity:`;
    const svc = await startTestService(t, { config: { ...baseConfig(), store: { kind: 'redis', cluster: { nodes: cluster.nodes }, key_prefix } } });
    t.equal((await svc.call('POST', '/tokenize', { body: { v: 'a' } })).status, 200);
    t.equal((await svc.call('POST', '/tokenize', { key: KEYS.tenantB, body: { v: 'b' } })).status, 200, 'a second tenant (another slot)');
    const nodes = cluster.ports.map((port) => new Redis(port, '127.0.0.1'));
    t.teardown(() => nodes.forEach((c) => c.disconnect()));
    const sids = (await Promise.all(nodes.map((c) => c.keys(`${key_prefix}*:sid`)))).flat();
    t.ok(sids.some((k) => k.includes(encodeURIComponent(TENANT_B))), `the slots' copies of the marker (${sids.length})`);
    await Promise.all(nodes.map((c) => c.flushall()));
    const after = await svc.call('POST', '/tokenize', { body: { v: 'c' } });
    t.equal(after.status, 503, 'the first write after the flush is refused');
    const keys = (await Promise.all(nodes.map((c) => c.keys(`${key_prefix}*`)))).flat();
    t.ok(keys.every((k) => k.endsWith('{dk}:store')), `nothing but the tombstone marker is written (${keys.length} key(s))`);
  });
}
