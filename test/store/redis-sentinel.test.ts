/**
 * RedisStore through Redis Sentinel (a real primary, replica and 3 sentinels): the Store
 * contract (with the audit and idempotency parts) with `waitReplicas: 1`, so every write also
 * runs WAIT; and a WAIT that cannot be satisfied answers StoreUnavailableError. Failover is
 * test/store/redis-sentinel-failover.test.ts.
 */
import t from 'tap';
import type { Test } from 'tap';
import { Redis } from 'ioredis';
import { sentinelForFile } from '../helpers/redis-topology.js';
import { runContract, makeRecord } from './contract.js';
import { RedisStore } from '../../src/store/redis/index.js';
import { StoreUnavailableError } from '../../src/store/types.js';

const sentinel = await sentinelForFile(t);
if (sentinel) {
  let n = 0;
  const open = async (t: Test, opts: { waitReplicas?: number; waitTimeoutMs?: number } = {}): Promise<RedisStore> => {
    const store = await RedisStore.connect({
      sentinel: { sentinels: sentinel.sentinels, name: sentinel.name }, keyPrefix: `${sentinel.prefix}${++n}:`, waitReplicas: 1, ...opts,
    });
    t.teardown(() => store.close());
    return store;
  };

  runContract(t, (t) => open(t));

  t.test('a write the replicas do not acknowledge in time answers StoreUnavailableError (it is on the primary)', async (t) => {
    // Two replicas asked for, one exists.
    const store = await open(t, { waitReplicas: 2, waitTimeoutMs: 100 });
    const r = makeRecord();
    const err = await store.tokens.insertMany([r]).then(() => null, (e: unknown) => e);
    t.ok(err instanceof StoreUnavailableError, 'StoreUnavailableError');
    t.match((err as Error).message, /acknowledged by 1 of 2 Redis replicas/);
    t.notMatch((err as Error).message, r.id, 'no values in the message');
    t.same(await store.tokens.get(r.tenant_id, r.id), r, 'the write itself happened on the primary');
    const replicaOf = new Redis(await sentinel.primaryPort(), '127.0.0.1', { lazyConnect: true });
    t.teardown(() => replicaOf.disconnect());
    t.match(await replicaOf.info('replication'), /connected_slaves:1/, 'one replica, as the setup says');
  });

  t.test('the durability check reads the primary the sentinels name', async (t) => {
    const store = await RedisStore.connect({
      sentinel: { sentinels: sentinel.sentinels, name: sentinel.name }, keyPrefix: `${sentinel.prefix}${++n}:`,
      durability: { mode: 'production', setting: 'require_aof' },
    });
    t.teardown(() => store.close());
    t.same(store.durability, { appendonly: 'yes', appendfsync: 'always', accepted_loss: false });
  });
}
