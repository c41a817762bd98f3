/**
 * Layout 3 → 4, run by `tokenproxy migrate` through RedisStore.migrator():
 * each layout 3 record (`P t:{T}:rec:<id>`, its cvc key, its index zset entries) becomes a layout 4
 * record in its tenant's hash with its entries in the layout 4 indexes (index.ts), in one script per
 * record: the record is written and its layout 3 keys deleted at once, so a record is in exactly
 * one layout at every moment, and what is left to convert is what layout 3 keys are left. The
 * ciphertext is copied as it is (nothing is decrypted). A layout 4 record that already exists under
 * the id (written by a layout 4 instance meanwhile) is kept: only the layout 3 copy goes.
 *
 * Progress lives in the keyspace: `P meta` holds each node's SCAN cursor (`m4:<node>`, 'done' at
 * the end of its pass), saved after every page, so a migration killed with -9 goes on from the page
 * it was on. When every node has finished its pass, a count of what is left decides: nothing, and
 * `P meta` says version 4; else (an old instance still wrote layout 3) another pass.
 */
import { Cluster } from 'ioredis';
import { decodeRecord as decodeLayout3 } from '../codec.js';
import type { FormatMigrator } from '../types.js';
import { StoreUnavailableError } from '../types.js';
import { CAS_ATTEMPTS, type RedisConnection } from './connection.js';
import { encodeRecord, fingerprintField, packId } from './record.js';
import { SCRIPT_LIB } from './scripts.js';
import { bucketOf, cvcDueArg, keysOf, zsetsOf } from './tokens.js';

export const LAYOUT_VERSION = 4;

/**
 * KEYS: the layout 3 record, its cvc key, the tenant's layout 3 cvc due zset, the layout 4
 * records hash, fingerprint hash, cvc due zset, containers set, then the zsets. ARGV: the layout 3
 * record JSON read (0, nothing done, when it changed or went), the id, the layout 4 record, its
 * fingerprint ('' none), the cvc's purge time ('' none), the container, the layout 3 id, n, n
 * layout 4 search zsets, the container's bucket directory. 1: converted; 2: a layout 4 record was there already (kept; the old one dropped).
 */
const CONVERT = `${SCRIPT_LIB}
local cur = redis.call('HGET', KEYS[1], 'r')
if cur ~= ARGV[1] then return 0 end
local old = redis.call('HGET', KEYS[1], 'k')
local id = ARGV[2]
local result = 2
if redis.call('HEXISTS', KEYS[4], id) == 0 then
  local seq = u48(ARGV[3], 14)
  redis.call('HSET', KEYS[4], id, ARGV[3])
  for j = 1, tonumber(ARGV[8]) do redis.call('ZADD', ARGV[8 + j], seq, id) end
  oAdd(ARGV[9 + tonumber(ARGV[8])], seq, id)
  if ARGV[4] ~= '' then fpAdd(KEYS[5], ARGV[4], id) end
  if ARGV[5] ~= '' then dueAdd(KEYS[6], seq, ARGV[5], id) end
  redis.call('SADD', KEYS[7], ARGV[6])
  result = 1
end
if old then
  for _, z in ipairs(cjson.decode(old)) do redis.call('ZREM', z, ARGV[7]) end
end
redis.call('ZREM', KEYS[3], KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2])
return result`;

/** A layout 3 record key (relative to the prefix): `t:{T}:rec:<id>`, components encoded. */
const isLayout3Record = (rel: string): boolean => {
  const parts = rel.split(':');
  return parts.length === 4 && parts[2] === 'rec' && parts[1]!.startsWith('{') && parts[1]!.endsWith('}');
};
/** A layout 4 records hash: `t:{T}:r`. */
const isLayout4Records = (rel: string): boolean => {
  const parts = rel.split(':');
  return parts.length === 3 && parts[2] === 'r' && parts[1]!.startsWith('{');
};

export class RedisMigratorV4 implements FormatMigrator {
  readonly #c: RedisConnection;

  constructor(connection: RedisConnection) {
    this.#c = connection;
  }

  #meta(): string {
    return `${this.#c.prefix}meta`;
  }

  async #version(): Promise<number> {
    return Number(await this.#c.call(() => this.#c.client.hget(this.#meta(), 'version'))) || 0;
  }

  async #count(keep: (rel: string) => boolean, each?: (key: string) => Promise<number>): Promise<number> {
    let n = 0;
    for await (const keys of this.#c.scan('t:{*', keep)) {
      for (const k of keys) n += each ? await each(k) : 1;
    }
    return n;
  }

  async status(): Promise<{ from: number; to: number; pending: number; total: number }> {
    const from = await this.#version();
    const pending = await this.#count(isLayout3Record);
    const converted = await this.#count(isLayout4Records, (k) => this.#c.call(() => this.#c.client.hlen(k)));
    return { from, to: LAYOUT_VERSION, pending, total: pending + converted };
  }

  /** The masters to scan and their names in `P meta` (a Cluster's, or the one server). */
  #nodes(): Array<{ name: string; node: { scan: RedisConnection['client']['scan'] } }> {
    const client = this.#c.client;
    if (!(client instanceof Cluster)) return [{ name: 'm4:server', node: client }];
    return client.nodes('master').map((n) => ({ name: `m4:${n.options.host}:${n.options.port}`, node: n }));
  }

  async step(batch: number): Promise<{ converted: number; done: boolean }> {
    if ((await this.#version()) >= LAYOUT_VERSION) return { converted: 0, done: true };
    const c = this.#c;
    const meta = this.#meta();
    const match = `${c.prefix.replace(/[*?[\]\\]/g, '\\$&')}t:{*}:rec:*`;
    let converted = 0;
    const nodes = this.#nodes();
    for (const { name, node } of nodes) {
      let cursor = (await c.call(() => c.client.hget(meta, name))) ?? '0';
      while (cursor !== 'done' && converted < batch) {
        const from = cursor;
        const [next, keys] = await c.call(() => node.scan(from, 'MATCH', match, 'COUNT', Math.max(10, batch)));
        for (const key of keys) {
          if (key.startsWith(c.prefix) && isLayout3Record(key.slice(c.prefix.length))) converted += await this.#convert(key);
        }
        cursor = next === '0' ? 'done' : next;
        const saved = cursor;
        await c.call(() => c.client.hset(meta, name, saved));
      }
      if (converted >= batch) return { converted, done: false };
    }
    // Every node finished its pass: done when nothing is left, else another pass.
    const names = nodes.map((n) => n.name);
    if ((await this.#count(isLayout3Record)) > 0) {
      await c.call(() => c.client.hdel(meta, ...names));
      return { converted, done: false };
    }
    await c.call(() => c.client.hset(meta, 'version', String(LAYOUT_VERSION)));
    await c.call(() => c.client.hdel(meta, ...names));
    return { converted, done: true };
  }

  /** One layout 3 record to layout 4 (CONVERT); 1 when it was converted or dropped for a newer copy. */
  async #convert(key: string): Promise<number> {
    const c = this.#c;
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const [json, seq] = await c.call(() => c.client.hmget(key, 'r', 's'));
      if (json === null || json === undefined) return 0;
      const v3 = decodeLayout3(json, null);
      const tenant = v3.tenant_id;
      const cvcKey = c.t(tenant, 'cvc', v3.id);
      const cvc = await c.call(() => c.client.get(cvcKey));
      const record = { ...v3, cvc_sealed: cvc };
      const k = keysOf(c, tenant);
      const zsets = zsetsOf(c, record);
      const oldZsets = JSON.parse((await c.call(() => c.client.hget(key, 'k'))) ?? '[]') as string[];
      const dir = k.container(v3.container);
      const keys = [key, cvcKey, c.t(tenant, 'cvcdue'), k.records, k.fingerprints, k.cvcDue, k.containers, dir, bucketOf(dir, Number(seq)), bucketOf(k.cvcDue, Number(seq)), ...zsets, ...oldZsets];
      const out = await c.eval(CONVERT, keys, [
        json, packId(v3.id), encodeRecord(record, Number(seq)), v3.fingerprint === null ? '' : fingerprintField(v3.fingerprint), cvcDueArg(record),
        v3.container, v3.id, String(zsets.length), ...zsets, dir,
      ], true);
      if (Number(out) > 0) return 1;
    }
    throw new StoreUnavailableError('a layout 3 record kept changing during the migration; run it again');
  }
}
