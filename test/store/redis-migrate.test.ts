/**
 * Layout 2 → 3 → 4, on a real redis-server: a store written with layout 2's key names (raw
 * commands, as a version 2 instance wrote them: `P t:T:…`, one `P cvc:due`, `P dk`, `P dk:order`)
 * is refused by a service start (StoreFormatError naming `tokenproxy migrate`), brought to layout 3
 * when opened for the migration, converted to layout 4 by its migrator, and read back whole
 * (records, cvc, every index, data keys, audit chain, idempotency entries, the cvc purge); no key
 * of the old names is left.
 */
import t from 'tap';
import { Redis } from 'ioredis';
import { redisForFile } from '../helpers/redis.js';
import { makeRecord, TENANT_A, TENANT_B } from './contract.js';
import { auditInput, SIGN } from './audit-contract.js';
import { checkStoredChain } from '../../src/audit/trail.js';
import { RedisStore } from '../../src/store/redis/index.js';
import { packId } from '../../src/store/redis/record.js';
import { StoreFormatError } from '../../src/store/types.js';
import { encodeRecord } from '../../src/store/codec.js';
import { chain, encodeEvent } from '../../src/store/audit.js';
import type { StoredToken } from '../../src/store/types.js';

const redis = await redisForFile(t);
if (redis) {
  t.test('a layout 2 store is migrated to layout 3 on connect and reads back whole', async (t) => {
    const prefix = `${redis.prefix}v2:`;
    const client = new Redis(redis.url, { lazyConnect: true });
    t.teardown(() => client.disconnect());
    const e = encodeURIComponent;
    const v2 = (tenant: string, ...parts: string[]) => `${prefix}t:${e(tenant)}:${parts.map(e).join(':')}`;
    const v3 = (tenant: string, ...parts: string[]) => `${prefix}t:{${e(tenant)}}:${parts.map(e).join(':')}`;
    const hour = 3_600_000;
    const cvcAt = Date.now() + hour;
    const records: StoredToken[] = [
      makeRecord({ fingerprint: 'fp-1', metadata: { order: '42' }, index_hashes: ['ih-1'], cvc_sealed: 'v1.k1.cvc-sealed', cvc_expires_at: new Date(cvcAt).toISOString() }),
      makeRecord({ container: '/pci/high/', type: 'card' }),
      makeRecord({ tenant_id: TENANT_B, fingerprint: 'fp-b', expires_at: new Date(Date.now() + 10 * hour).toISOString() }),
    ];
    // As layout 2 wrote them (the INSERT script of that version): hash, every index zset, the
    // containers set, the sequence, the cvc with its deadline in the one global due zset.
    for (const [i, r] of records.entries()) {
      const T = r.tenant_id;
      const zsets = [v2(T, 'all'), v2(T, 'type', r.type), v2(T, 'ct', r.container)];
      if (r.fingerprint) zsets.push(v2(T, 'fp', r.fingerprint), v2(T, 'dd', r.type, r.container, r.fingerprint));
      for (const [k, v] of Object.entries(r.metadata)) zsets.push(v2(T, 'md', k, v));
      for (const h of r.index_hashes) zsets.push(v2(T, 'ix', h));
      const e2 = r.expires_at ? String(Date.parse(r.expires_at)) : '';
      await client.hset(v2(T, 'rec', r.id), 'r', encodeRecord(r), 'k', JSON.stringify(zsets), 's', String(i + 1), 'e', e2);
      for (const z of zsets) await client.zadd(z, i + 1, r.id);
      await client.sadd(v2(T, 'containers'), r.container);
      await client.set(v2(T, 'seq'), String(i + 1));
      if (r.cvc_sealed) {
        await client.set(v2(T, 'cvc', r.id), r.cvc_sealed);
        await client.pexpireat(v2(T, 'cvc', r.id), cvcAt);
        await client.zadd(`${prefix}cvc:due`, cvcAt, v2(T, 'cvc', r.id));
      }
    }
    const keys = [{ kid: 'k1', wrapped: 'wrapped-1', created_at: new Date().toISOString() }, { kid: 'k2', wrapped: 'wrapped-2', created_at: new Date().toISOString() }];
    for (const k of keys) {
      await client.hset(`${prefix}dk`, k.kid, JSON.stringify(k));
      await client.rpush(`${prefix}dk:order`, k.kid);
    }
    const { events, head } = chain(null, [auditInput({ tenant_id: TENANT_A }), auditInput({ tenant_id: TENANT_A, action: 'proxy.outbound', destination: 'https://x.example' })]);
    await client.rpush(v2(TENANT_A, 'audit'), ...events.map(encodeEvent));
    await client.set(v2(TENANT_A, 'audithead'), `${head.seq} ${head.hash}`);
    await client.hset(v2(TENANT_A, 'idem', 'slot-1'), 's', 'done', 'o', 'owner-1', 'v', 'sealed-answer');
    await client.pexpire(v2(TENANT_A, 'idem', 'slot-1'), 10 * hour);
    await client.hset(`${prefix}meta`, 'version', '2');

    const refused = await RedisStore.connect({ url: redis.url, keyPrefix: prefix }).then(() => null, (e: unknown) => e);
    t.ok(refused instanceof StoreFormatError, 'a service start is refused');
    t.match((refused as Error).message, /holds format 2, this version reads format 4: run `tokenproxy migrate`/);
    const migrating = await RedisStore.connect({ url: redis.url, keyPrefix: prefix, forMigration: true });
    t.teardown(() => migrating.close());
    t.equal(await client.hget(`${prefix}meta`, 'version'), '3', 'layout 3 recorded');
    const m = migrating.migrator();
    for (let i = 0; i < 10 && !(await m.step(2)).done; i++);
    t.equal(await client.hget(`${prefix}meta`, 'version'), '4', 'layout 4 recorded');
    const store = await RedisStore.connect({ url: redis.url, keyPrefix: prefix });
    t.teardown(() => store.close());
    const left: string[] = [];
    let cursor = '0';
    do {
      const [next, page] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      left.push(...page.filter((k) => (!k.startsWith(`${prefix}t:{`) || /:(rec|cvc|all|cvcdue):?/.test(k)) && ![`${prefix}meta`, `${prefix}tenants`, `${prefix}{dk}`, `${prefix}{dk}:order`].includes(k)));
      cursor = next;
    } while (cursor !== '0');
    t.same(left, [], 'no key of the old names is left');

    const [a, card, b] = records as [StoredToken, StoredToken, StoredToken];
    t.same(await store.tokens.get(TENANT_A, a.id), a, 'a record with its cvc');
    t.same(await store.tokens.get(TENANT_A, card.id), card);
    t.same(await store.tokens.get(TENANT_B, b.id), b, 'another tenant');
    const ids = async (tenant: string, filter: Parameters<RedisStore['tokens']['list']>[1]) => (await store.tokens.list(tenant, filter, { size: 10, after: null })).items.map((r) => r.id);
    t.same(await ids(TENANT_A, {}), [card.id, a.id], 'newest first');
    t.same(await ids(TENANT_A, { fingerprint: 'fp-1' }), [a.id], 'by fingerprint');
    t.same(await ids(TENANT_A, { metadata: { order: '42' } }), [a.id], 'by metadata');
    t.same(await ids(TENANT_A, { index_hashes: ['ih-1'] }), [a.id], 'by search index');
    t.same(await ids(TENANT_A, { type: 'card' }), [card.id], 'by type');
    t.same(await ids(TENANT_A, { scope: [{ prefix: '/pci/', allow: true }] }), [card.id], 'by scope (containers set)');
    const [hit] = await store.tokens.insertMany([makeRecord({ tenant_id: TENANT_B, fingerprint: 'fp-b' })], { dedupe: [true] });
    t.equal(hit?.id, b.id, 'deduplication finds the migrated token');
    const fresh = makeRecord();
    await store.tokens.insertMany([fresh]);
    t.same((await store.tokens.list(TENANT_A, {}, { size: 1, after: null })).items.map((r) => r.id), [fresh.id], 'the sequence continues above the migrated ones');
    t.same((await store.dataKeys.listDataKeys()).map((k) => k.kid), ['k1', 'k2'], 'data keys, in order');
    t.same(await store.audit.auditHead(TENANT_A), { ...head, anchor: null }, 'audit head (written before anchoring: none)');
    t.same(await checkStoredChain(store.audit, TENANT_A, { sign: SIGN, allowUnanchored: true }), { ok: true, events: 2, unanchored: true }, 'audit chain verifies, flagged unanchored');
    t.same(await store.idempotency.claimIdempotencyKey({ tenant_id: TENANT_A, key: 'slot-1' }, 'owner-2', 'x', 60_000), { state: 'done', sealed: 'sealed-answer' }, 'idempotency entry');
    t.ok((await client.pttl(v3(TENANT_A, 'idem', 'slot-1'))) > 9 * hour, 'its expiry moved with it');
    t.equal(Number(await client.zscore(`${v3(TENANT_A, 'd')}:0`, packId(a.id))), cvcAt, 'the cvc keeps its deadline (sequence number 1: due bucket 0)');
    t.equal(await store.tokens.purgeCvc(new Date(cvcAt + 1)), 1, 'the cvc due entry moved to its tenant: the purge finds it');
    t.equal((await store.tokens.get(TENANT_A, a.id))?.cvc_sealed, null, 'purged');
    t.same(await m.step(100), { converted: 0, done: true }, 'a second migration has nothing to do');
  });
}
