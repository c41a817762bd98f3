/**
 * The Redis store's migration from layouts 1 and 2 to layout 3 (index.ts "Migration"), run by
 * RedisStore.connect when the store is opened for `tokenproxy migrate`; migrate-v4.ts then
 * converts layout 3 to layout 4.
 */
import { decodeRecord } from '../codec.js';
import { StoreUnavailableError } from '../types.js';
import type { RedisConnection } from './connection.js';
import type { StoredToken } from '../types.js';

/**
 * Migration to layout 3's index zsets, one record: KEYS[1] the record, KEYS[2] the containers
 * set; ARGV: the record JSON the new zset list was computed from, that list, the container.
 * Skipped (0) when the record changed or went away since: whoever wrote it wrote the new layout.
 */
const MIGRATE_RECORD = `
local cur = redis.call('HMGET', KEYS[1], 'r', 's', 'k')
if cur[1] ~= ARGV[1] then return 0 end
local id = cjson.decode(cur[1]).id
for _, z in ipairs(cjson.decode(ARGV[2])) do redis.call('ZADD', z, cur[2], id) end
redis.call('HSET', KEYS[1], 'k', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return 1`;

/** The layout this file's migration brings layouts 1 and 2 to (migrate-v4.ts goes on from it). */
export const LAYOUT_3 = 3;

/** Layout 3's index zsets of a record (what its `k` field lists). */
function layout3Zsets(c: RedisConnection, r: StoredToken): string {
  const zsets = [c.t(r.tenant_id, 'all'), c.t(r.tenant_id, 'type', r.type), c.t(r.tenant_id, 'ct', r.container)];
  if (r.fingerprint !== null) zsets.push(c.t(r.tenant_id, 'fp', r.fingerprint), c.t(r.tenant_id, 'dd', r.type, r.container, r.fingerprint));
  for (const [k, v] of Object.entries(r.metadata)) zsets.push(c.t(r.tenant_id, 'md', k, v));
  for (const h of new Set(r.index_hashes)) zsets.push(c.t(r.tenant_id, 'ix', h));
  return JSON.stringify(zsets);
}

/**
 * Brings keys written by layouts 1 and 2 to layout 3 (file header); returns how many keys and
 * records changed. Idempotent; a no-op once `P meta` says version 3.
 */
export async function migrate(c: RedisConnection): Promise<number> {
  const meta = `${c.prefix}meta`;
  if (Number(await c.call(() => c.client.hget(meta, 'version'))) >= LAYOUT_3) return 0;
  let changed = await moveToTenantSlots(c);
  // Only P t:{T}:rec:<id> (components are encoded: no ':' inside one), not an md zset named "rec".
  for await (const recs of c.scan('t:{*}:rec:*', (k) => k.split(':').length === 4 && k.split(':')[2] === 'rec')) {
    // One command per key, no pipeline: on a Cluster the keys of a SCAN page span slots.
    const raw = await Promise.all(recs.map((k) => c.call(() => c.client.hmget(k, 'r', 'k'))));
    for (let i = 0; i < recs.length; i++) {
      const v = raw[i]!;
      if (typeof v[0] !== 'string') continue;
      const record = decodeRecord(v[0], null);
      const k = layout3Zsets(c, record);
      if (k === v[1]) continue;
      const keysOf = [recs[i]!, c.t(record.tenant_id, 'containers')];
      changed += Number(await c.eval(MIGRATE_RECORD, keysOf, [v[0], k, record.container]));
    }
  }
  await c.call(() => c.client.hset(meta, 'version', String(LAYOUT_3)));
  return changed;
}

/**
 * Layouts 1-2 to 3's key names: `P t:T:…` → `P t:{T}:…`, `P dk` → `P {dk}`, `P cvc:due` → one
 * `P t:{T}:cvcdue` per tenant. A key is copied (DUMP/RESTORE keeps its type, content and TTL)
 * before the old one is deleted, so an interruption loses nothing; a new name that already
 * exists was copied by an earlier or concurrent run and is kept.
 */
async function moveToTenantSlots(c: RedisConnection): Promise<number> {
  let moved = 0;
  const move = async (from: string, to: string): Promise<void> => {
    const [dump, pttl] = await Promise.all([c.call(() => c.client.dumpBuffer(from)), c.call(() => c.client.pttl(from))]);
    if (dump === null) return;
    try {
      await c.call(() => c.client.restore(to, Math.max(0, pttl), dump));
    } catch (err) {
      if (!(err instanceof StoreUnavailableError && /BUSYKEY/.test(err.message))) throw err;
    }
    await c.call(() => c.client.del(from));
    moved++;
  };
  const old = (k: string): boolean => k.startsWith('t:') && !k.startsWith('t:{') && k.split(':').length >= 3;
  for await (const keys of c.scan('t:*', old)) {
    for (const k of keys) {
      const rest = k.slice(c.prefix.length + 2);
      const cut = rest.indexOf(':');
      await move(k, `${c.prefix}t:{${rest.slice(0, cut)}}${rest.slice(cut)}`);
    }
  }
  await move(`${c.prefix}dk`, c.dk());
  await move(`${c.prefix}dk:order`, c.dk('order'));
  const due = `${c.prefix}cvc:due`;
  for (;;) {
    const page = await c.call(() => c.client.zrange(due, '0', '499', 'WITHSCORES'));
    if (page.length === 0) break;
    for (let i = 0; i < page.length; i += 2) {
      const member = page[i]!;
      const rest = member.startsWith(`${c.prefix}t:`) ? member.slice(c.prefix.length + 2) : '';
      const cut = rest.indexOf(':');
      if (cut > 0 && !rest.startsWith('{')) {
        const tenant = decodeURIComponent(rest.slice(0, cut));
        await c.call(() => c.client.sadd(c.tenantsKey(), tenant));
        await c.call(() => c.client.zadd(c.t(tenant, 'cvcdue'), page[i + 1]!, `${c.prefix}t:{${rest.slice(0, cut)}}${rest.slice(cut)}`));
      }
      await c.call(() => c.client.zrem(due, member));
      moved++;
    }
  }
  return moved;
}
