/**
 * The Redis token store, shared by many tokenproxy instances (ioredis): one node, a Redis Cluster
 * or a Sentinel-managed primary (src/redis/connect.ts).
 *
 * DURABILITY: run every primary with `appendonly yes` and `appendfsync always`. A resolved insert
 * then survives a tokenproxy kill -9 (Redis already has it) AND a Redis crash: with `always` Redis
 * fsyncs the AOF before it replies. With the default `everysec` a Redis crash can lose the last
 * second of tokens that clients already hold. Replication is asynchronous: a failover (Sentinel
 * or Cluster promoting a replica) can lose the last writes the primary acknowledged, unless
 * `waitReplicas` is set: then every write script is followed by `WAIT n timeout` on the same
 * connection, and fewer acknowledgements answer StoreUnavailableError (503 store_unavailable;
 * the write did happen on the primary and may or may not survive a failover).
 *
 * Layout 3 (P = key_prefix, T = tenant id; every component URI-encoded, so ':' '{' '}' never
 * appear inside one). Every key of one tenant carries `{T}` as its Redis Cluster hash tag, so
 * each script touches one slot, tenants spread over the shards, and one tenant lives on one shard:
 *   P t:{T}:rec:<id>     hash {r: record JSON without cvc, k: JSON list of its index zsets, s: seq, e: expires ms}
 *   P t:{T}:cvc:<id>     the cvc ciphertext, PEXPIREAT cvc_expires_at (Redis drops it by itself)
 *   P t:{T}:cvcdue       zset cvc key → cvc expiry ms (purgeCvc)
 *   P t:{T}:seq          per-tenant sequence (INCR); zset scores, newest-first cursors
 *   P t:{T}:all | type:<type> | fp:<fingerprint> | md:<key>:<value> | ix:<hash>   zsets id → seq
 *   P t:{T}:ct:<container>                        zset id → seq: the tokens of one container
 *   P t:{T}:dd:<type>:<container>:<fingerprint>   zset id → seq: what a deduplicating insert matches
 *   P t:{T}:containers   set of the tenant's containers (a container is never removed from it)
 *   P t:{T}:idem:<key>   hash {s, o, v}: an idempotency entry, expiring by itself (redis-idempotency.ts)
 *   P t:{T}:audit        list of the tenant's audit events (JSON), oldest first (store/audit.ts)
 *   P t:{T}:audithead    "<seq> <hash> <anchor>": the tenant's audit chain head and its anchor
 *                        (crypto/audit-anchor.ts; "<seq> <hash>" when written before anchoring, issue 23)
 *   P tenants            set of tenant ids with a cvc to purge (purgeCvc walks it; plain SADD, no script)
 *   P {dk}, P {dk}:order data keys: hash kid → JSON, list of kids oldest first (one slot of their own)
 *   P meta               hash {version}: the layout version (3), migrated on connect
 * On a Cluster the prefix must not contain '{' or '}' (the config refuses it): Redis hashes the
 * first {…} of a key, which must be the tenant's. Writes are Lua scripts, so a batch and its index
 * entries appear atomically and search serves them at once. A script's KEYS[1] is always a key
 * of the tenant (it routes the script to the tenant's shard); the keys it computes (the insert
 * script derives record keys of the ids in a dd zset) share that hash tag. One insert batch holds
 * records of one tenant.
 *
 * Deduplication is a compare-and-set inside the insert script: it looks for the oldest live member
 * of the record's dd zset and returns it instead of writing, in the same atomic step as the write,
 * so N concurrent identical inserts leave one token.
 *
 * Migration on connect (`migrate`), from layout 1 (no ct/dd zsets, no containers set) or 2 (keys
 * `P t:T:…` without the hash tag, one `P cvc:due` zset, `P dk`, `P dk:order`): every key is copied
 * to its layout 3 name (DUMP/RESTORE with its TTL, then the old one deleted; a key already there is
 * kept), the cvc due entries are split per tenant, and every record gets the zsets it lacks and a
 * zset list naming the new keys, each a check-and-set against the record it was computed from.
 * Idempotent: an interrupted migration resumes on the next connect. Upgrade every instance sharing
 * a prefix together: an older instance still writing would write the old names.
 */
import { createHash } from 'node:crypto';
import type { ChainableCommander } from 'ioredis';
import { Cluster } from 'ioredis';
import { createRedisClient, type RedisClient, type RedisTopology } from '../../redis/connect.js';
import type { Logger } from '../../log.js';
import type { InsertOptions, Page, PageResult, StoredToken, TokenFilter, TokenPort, WrappedDataKey, AuditPort, DataKeyPort, Store } from '../types.js';
import { DuplicateTokenError, StoreUnavailableError } from '../types.js';
import type { IdempotencyClaim, IdempotencyPort, IdempotencySlot } from '../idempotency.js';
import * as idem from './idempotency-scripts.js';
import type { AuditAnchorSigner } from '../../crypto/audit-anchor.js';
import {
  auditMatches, chain, decodeEvent, encodeEvent, TenantSerialAppender,
  type AuditEvent, type AuditEventInput, type AuditFilter, type AuditPageResult, type StoredAuditHead,
} from '../audit.js';

function parseHead(raw: string | null): StoredAuditHead | null {
  if (raw === null) return null;
  const [seq, hash, anchor] = raw.split(' ');
  return { seq: Number(seq), hash: hash ?? '', anchor: anchor ?? null };
}
import {
  checkPage, cvcVisible, decodeCursor, decodeDataKey, decodeRecord, encodeCursor, encodeRecord, InvalidCursorError, isLive, scopeAllows, timeMs,
} from '../codec.js';

/**
 * Audit append as a compare-and-set on the chain head (Redis' Lua has no SHA-256, so the chain is
 * computed by the caller from the head it read): ARGV[1] the head it read ('' for none), ARGV[2]
 * the new head, ARGV[3..] the events. Answers 0, writing nothing, when the head moved meanwhile.
 */
const APPEND_AUDIT = `
local head = redis.call('GET', KEYS[2])
if (head or '') ~= ARGV[1] then return 0 end
for i = 3, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('SET', KEYS[2], ARGV[2])
return 1`;

/** How often a compare-and-set write (audit append, update, delete) retries against a value another instance moved. */
const CAS_ATTEMPTS = 100;

/** Lua: stores record b's sealed cvc (if any) with its purge deadline (KEYS[1]: the tenant's cvc due zset). */
const SET_CVC = `
local function setCvc(b)
  if b.cvc then
    redis.call('SET', b.cvcKey, b.cvc)
    if b.exp then
      redis.call('ZADD', KEYS[1], b.exp, b.cvcKey)
      redis.call('PEXPIREAT', b.cvcKey, b.exp)
    end
  end
end`;

/**
 * The batch (ARGV[1]) and now (ARGV[2], ms). Plans first, writing nothing: a record that
 * deduplicates takes the oldest live member of its dd zset, or an earlier record of the batch
 * with the same dd; any other record whose id exists fails the whole batch ({'dup', id}). Then
 * writes. Answers {'ok', per record: '' when written, else the JSON of the token it matched}.
 */
const INSERT = `${SET_CVC}
local batch = cjson.decode(ARGV[1])
local now = tonumber(ARGV[2])
local function enc(s)
  return (string.gsub(s, "[^%w%-_%.!~%*'%(%)]", function(c) return string.format('%%%02X', string.byte(c)) end))
end
local function liveMatch(b)
  local start = 0
  while true do
    local ids = redis.call('ZRANGE', b.dd, start, start + 49)
    if #ids == 0 then return nil end
    for _, id in ipairs(ids) do
      local rec = redis.call('HMGET', b.recBase .. enc(id), 'r', 'e')
      -- A dd member always has its record (written and deleted together): missing, it is still on
      -- the node this Cluster slot is migrating from. Nothing is written yet: the client retries.
      if not rec[1] then return redis.error_reply('TRYAGAIN a record of this slot is being migrated') end
      if rec[2] == '' or tonumber(rec[2]) > now then return rec[1] end
    end
    start = start + 50
  end
end
local seen = {}
local byDd = {}
local plan = {}
for i = 1, #batch do
  local b = batch[i]
  local hit = false
  if b.dedupe and b.dd then
    -- A stored token is older than any of the batch: it wins over an earlier record of the batch.
    hit = liveMatch(b) or byDd[b.dd] or false
  end
  if hit then
    plan[i] = hit
  else
    if seen[b.key] or redis.call('EXISTS', b.key) == 1 then return {'dup', b.id} end
    seen[b.key] = true
    plan[i] = ''
    if b.dd and not byDd[b.dd] then byDd[b.dd] = b.r end
  end
end
local out = {'ok'}
for i = 1, #batch do
  local b = batch[i]
  if plan[i] == '' then
    local seq = redis.call('INCR', b.seq)
    redis.call('HSET', b.key, 'r', b.r, 'k', b.k, 's', seq, 'e', b.e)
    for _, z in ipairs(cjson.decode(b.k)) do redis.call('ZADD', z, seq, b.id) end
    redis.call('SADD', b.cs, b.container)
    setCvc(b)
  end
  out[#out + 1] = plan[i]
end
return out`;

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

const LAYOUT_VERSION = 3;

const UPDATE = `${SET_CVC}
local b = cjson.decode(ARGV[1])
local old = redis.call('HMGET', b.key, 'k', 's', 'e')
if not old[1] or (old[3] ~= '' and tonumber(old[3]) <= tonumber(ARGV[2])) then return 0 end
if old[1] ~= ARGV[3] then return -1 end
for _, z in ipairs(cjson.decode(old[1])) do redis.call('ZREM', z, b.id) end
for _, z in ipairs(cjson.decode(b.k)) do redis.call('ZADD', z, old[2], b.id) end
redis.call('HSET', b.key, 'r', b.r, 'k', b.k, 'e', b.e)
redis.call('ZREM', KEYS[1], b.cvcKey)
redis.call('DEL', b.cvcKey)
setCvc(b)
return 1`;

const DELETE = `
local old = redis.call('HMGET', KEYS[1], 'k', 'e')
if not old[1] then return 0 end
if old[1] ~= ARGV[3] then return -1 end
for _, z in ipairs(cjson.decode(old[1])) do redis.call('ZREM', z, ARGV[1]) end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], KEYS[2])
if old[2] ~= '' and tonumber(old[2]) <= tonumber(ARGV[2]) then return 2 end
return 1`;

const PURGE_CVC = `
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #due == 0 then return 0 end
redis.call('DEL', unpack(due))
redis.call('ZREM', KEYS[1], unpack(due))
return #due`;

const ADD_KEY = `
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then redis.call('RPUSH', KEYS[2], ARGV[1]) end
local kids = redis.call('LRANGE', KEYS[2], 0, -1)
if #kids == 0 then return {} end
return redis.call('HMGET', KEYS[1], unpack(kids))`;

const LIST_KEYS = `
local kids = redis.call('LRANGE', KEYS[2], 0, -1)
if #kids == 0 then return {} end
return redis.call('HMGET', KEYS[1], unpack(kids))`;

const PURGE_BATCH = 500;

interface Found {
  record: StoredToken;
  seq: number;
}

export interface RedisStoreOptions extends RedisTopology {
  keyPrefix: string;
  /** After each write script, WAIT for this many replicas (default 0: no wait). */
  waitReplicas?: number | undefined;
  /** How long that WAIT may take (default 500 ms); fewer acknowledgements: StoreUnavailableError. */
  waitTimeoutMs?: number | undefined;
  /** Per command, including time spent waiting for a reconnect (default 1500 ms). */
  commandTimeoutMs?: number;
  connectTimeoutMs?: number;
  log?: Logger;
}

/**
 * Key-name encoding: encodeURIComponent, except that a lone UTF-16 surrogate (legal in a JSON
 * string, so possible in metadata, but not in UTF-8) is written as the three bytes of its code
 * point (WTF-8) where encodeURIComponent would throw URIError (a 500 found by the fuzz suite).
 * Distinct strings stay distinct key names.
 */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function enc(s: string): string {
  if (!LONE_SURROGATE.test(s)) return encodeURIComponent(s);
  let out = '';
  for (const ch of s) {
    const c = ch.charCodeAt(0);
    if (ch.length === 1 && c >= 0xd800 && c <= 0xdfff) {
      out += [0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f)].map((b) => `%${b.toString(16).toUpperCase()}`).join('');
    } else {
      out += encodeURIComponent(ch);
    }
  }
  return out;
}

/** Never carries the command's arguments (ioredis attaches them to reply errors). */
function sanitize(err: unknown): Error {
  const safe = new Error(err instanceof Error ? err.message.slice(0, 200) : 'unknown error');
  safe.name = err instanceof Error ? err.name : 'Error';
  return safe;
}

function matches(r: StoredToken, f: TokenFilter): boolean {
  if (!scopeAllows(f.scope, r.container)) return false;
  if (f.type !== undefined && r.type !== f.type) return false;
  if (f.container !== undefined && !r.container.startsWith(f.container)) return false;
  if (f.fingerprint !== undefined && r.fingerprint !== f.fingerprint) return false;
  for (const [k, v] of Object.entries(f.metadata ?? {})) if (!Object.hasOwn(r.metadata, k) || r.metadata[k] !== v) return false;
  for (const h of f.index_hashes ?? []) if (!r.index_hashes.includes(h)) return false;
  if (f.ids && !f.ids.includes(r.id)) return false;
  return true;
}

export class RedisStore implements Store, TokenPort, AuditPort, DataKeyPort, IdempotencyPort {
  readonly kind = 'redis' as const;
  readonly tokens: TokenPort = this;
  readonly audit: AuditPort = this;
  readonly dataKeys: DataKeyPort = this;
  readonly idempotency: IdempotencyPort = this;
  readonly #client: RedisClient;
  readonly #p: string;
  readonly #waitReplicas: number;
  readonly #waitTimeoutMs: number;
  /** Bound on one store call, whatever the topology queues or retries underneath. */
  readonly #deadlineMs: number;
  /** Tenants this instance has added to `P tenants` (the set never shrinks). */
  readonly #tenantsKnown = new Set<string>();
  readonly #scripts = new Map<string, string>();
  /** Appends of one tenant from this process go one batch at a time (no CAS conflicts among them). */
  readonly #audit = new TenantSerialAppender((tenantId, inputs, sign) => this.#appendAudit(tenantId, inputs, sign));

  private constructor(client: RedisClient, prefix: string, waitReplicas: number, waitTimeoutMs: number, deadlineMs: number) {
    this.#client = client;
    this.#p = prefix;
    this.#waitReplicas = waitReplicas;
    this.#waitTimeoutMs = waitTimeoutMs;
    this.#deadlineMs = deadlineMs;
  }

  /** Connects (failing fast with StoreUnavailableError when Redis does not answer). */
  static async connect(opts: RedisStoreOptions): Promise<RedisStore> {
    const waitReplicas = opts.waitReplicas ?? 0;
    const waitTimeoutMs = opts.waitTimeoutMs ?? 500;
    // A WAIT is one command of its own: it gets its timeout plus a margin for the round trip.
    const commandTimeout = Math.max(opts.commandTimeoutMs ?? 1500, waitReplicas > 0 ? waitTimeoutMs + 1000 : 0);
    let client: RedisClient;
    try {
      client = createRedisClient(opts, {
        lazyConnect: true,
        connectTimeout: opts.connectTimeoutMs ?? 2000,
        commandTimeout,
        // 0: a command whose connection drops fails instead of being re-sent after a reconnect
        // (a re-sent insert script that had already run would report its own ids as duplicates).
        maxRetriesPerRequest: 0,
        // Queued while reconnecting, bounded by commandTimeout, so a blip is absorbed, an outage is not.
        enableOfflineQueue: true,
        retryStrategy: (times: number) => Math.min(times * 100, 1000),
      });
    } catch (err) {
      throw new StoreUnavailableError('cannot configure the Redis token store client', { cause: sanitize(err) });
    }
    let down = false;
    client.on('error', (err: unknown) => {
      if (down) return;
      down = true; // once per outage, not once per reconnect attempt
      opts.log?.warn({ err: sanitize(err) }, 'redis token store connection error');
    });
    client.on('ready', () => {
      if (down) opts.log?.info('redis token store reconnected');
      down = false;
    });
    try {
      await client.connect();
    } catch (err) {
      client.disconnect();
      throw new StoreUnavailableError('cannot connect to the Redis token store', { cause: sanitize(err) });
    }
    const store = new RedisStore(client, opts.keyPrefix, waitReplicas, waitTimeoutMs, commandTimeout + 250);
    try {
      const migrated = await store.migrate();
      if (migrated > 0) opts.log?.info({ changes: migrated }, `redis token store migrated to layout ${LAYOUT_VERSION}`);
    } catch (err) {
      client.disconnect();
      throw err instanceof StoreUnavailableError ? err : new StoreUnavailableError('cannot migrate the Redis token store', { cause: sanitize(err) });
    }
    return store;
  }

  /**
   * Brings keys written by layouts 1 and 2 to layout 3 (file header); returns how many keys and
   * records changed. Idempotent; a no-op once `P meta` says version 3.
   */
  async migrate(): Promise<number> {
    const meta = `${this.#p}meta`;
    if (Number(await this.#call(() => this.#client.hget(meta, 'version'))) >= LAYOUT_VERSION) return 0;
    let changed = await this.#moveToTenantSlots();
    // Only P t:{T}:rec:<id> (components are encoded: no ':' inside one), not an md zset named "rec".
    for await (const recs of this.#scan('t:{*}:rec:*', (k) => k.split(':').length === 4 && k.split(':')[2] === 'rec')) {
      // One command per key, no pipeline: on a Cluster the keys of a SCAN page span slots.
      const raw = await Promise.all(recs.map((k) => this.#call(() => this.#client.hmget(k, 'r', 'k'))));
      for (let i = 0; i < recs.length; i++) {
        const v = raw[i]!;
        if (typeof v[0] !== 'string') continue;
        const record = decodeRecord(v[0], null);
        const { k } = this.#payload(record);
        if (k === v[1]) continue;
        const keysOf = [recs[i]!, this.#t(record.tenant_id, 'containers')];
        changed += Number(await this.#eval(MIGRATE_RECORD, keysOf, [v[0], k, record.container]));
      }
    }
    await this.#call(() => this.#client.hset(meta, 'version', String(LAYOUT_VERSION)));
    return changed;
  }

  /**
   * Layouts 1-2 to 3's key names: `P t:T:…` → `P t:{T}:…`, `P dk` → `P {dk}`, `P cvc:due` → one
   * `P t:{T}:cvcdue` per tenant. A key is copied (DUMP/RESTORE keeps its type, content and TTL)
   * before the old one is deleted, so an interruption loses nothing; a new name that already
   * exists was copied by an earlier or concurrent run and is kept.
   */
  async #moveToTenantSlots(): Promise<number> {
    let moved = 0;
    const move = async (from: string, to: string): Promise<void> => {
      const [dump, pttl] = await Promise.all([this.#call(() => this.#client.dumpBuffer(from)), this.#call(() => this.#client.pttl(from))]);
      if (dump === null) return;
      try {
        await this.#call(() => this.#client.restore(to, Math.max(0, pttl), dump));
      } catch (err) {
        if (!(err instanceof StoreUnavailableError && /BUSYKEY/.test(err.message))) throw err;
      }
      await this.#call(() => this.#client.del(from));
      moved++;
    };
    const old = (k: string): boolean => k.startsWith('t:') && !k.startsWith('t:{') && k.split(':').length >= 3;
    for await (const keys of this.#scan('t:*', old)) {
      for (const k of keys) {
        const rest = k.slice(this.#p.length + 2);
        const cut = rest.indexOf(':');
        await move(k, `${this.#p}t:{${rest.slice(0, cut)}}${rest.slice(cut)}`);
      }
    }
    await move(`${this.#p}dk`, this.#dk());
    await move(`${this.#p}dk:order`, this.#dk('order'));
    const due = `${this.#p}cvc:due`;
    for (;;) {
      const page = await this.#call(() => this.#client.zrange(due, '0', '499', 'WITHSCORES'));
      if (page.length === 0) break;
      for (let i = 0; i < page.length; i += 2) {
        const member = page[i]!;
        const rest = member.startsWith(`${this.#p}t:`) ? member.slice(this.#p.length + 2) : '';
        const cut = rest.indexOf(':');
        if (cut > 0 && !rest.startsWith('{')) {
          const tenant = decodeURIComponent(rest.slice(0, cut));
          await this.#call(() => this.#client.sadd(this.#tenantsKey(), tenant));
          await this.#call(() => this.#client.zadd(this.#t(tenant, 'cvcdue'), page[i + 1]!, `${this.#p}t:{${rest.slice(0, cut)}}${rest.slice(cut)}`));
        }
        await this.#call(() => this.#client.zrem(due, member));
        moved++;
      }
    }
    return moved;
  }

  /**
   * The keys under the prefix matching `pattern` (relative to it, glob) for which `keep` (given
   * the key without the prefix) holds, a SCAN page at a time; on a Cluster, every master's.
   */
  async *#scan(pattern: string, keep: (rel: string) => boolean): AsyncGenerator<string[]> {
    const match = `${this.#p.replace(/[*?[\]\\]/g, '\\$&')}${pattern}`;
    const nodes = this.#client instanceof Cluster ? this.#client.nodes('master') : [this.#client];
    for (const node of nodes) {
      let cursor = '0';
      do {
        const [next, keys] = await this.#call(() => node.scan(cursor, 'MATCH', match, 'COUNT', 1000));
        cursor = next;
        const kept = keys.filter((k) => k.startsWith(this.#p) && keep(k.slice(this.#p.length)));
        if (kept.length > 0) yield kept;
      } while (cursor !== '0');
    }
  }

  async insertMany(records: StoredToken[], options: InsertOptions = {}): Promise<Array<StoredToken | null>> {
    if (records.length === 0) return [];
    const tenant = records[0]!.tenant_id;
    // One script, one slot: a batch spanning tenants would be refused by a Cluster (the service
    // writes one tenant's batch per request).
    if (records.some((r) => r.tenant_id !== tenant)) throw new TypeError('insertMany: the records of one batch must share a tenant');
    if (records.some((r) => r.cvc_sealed && r.cvc_expires_at)) await this.#knowTenant(tenant);
    const batch = records.map((r, i) => ({
      ...this.#payload(r),
      seq: this.#t(r.tenant_id, 'seq'),
      cs: this.#t(r.tenant_id, 'containers'),
      container: r.container,
      recBase: `${this.#t(r.tenant_id, 'rec')}:`,
      dedupe: options.dedupe?.[i] === true,
    }));
    // Every key the script writes is declared (KEYS[1] first, the one it uses by name): on a
    // Cluster whose slot is migrating, Redis then answers TRYAGAIN (retried) unless they are all
    // on one node, instead of the script failing halfway on a key that moved.
    const declared = [this.#t(tenant, 'cvcdue'), this.#t(tenant, 'seq'), this.#t(tenant, 'containers'),
      ...batch.flatMap((b) => [b.key, b.cvcKey, ...(JSON.parse(b.k) as string[])])];
    const out = await this.#eval(INSERT, [...new Set(declared)], [JSON.stringify(batch), String(Date.now())], true);
    if (!Array.isArray(out)) throw new StoreUnavailableError('the Redis token store answered an insert unexpectedly');
    if (out[0] === 'dup') throw new DuplicateTokenError(String(out[1]));
    return records.map((_, i) => {
      const hit = out[i + 1];
      return typeof hit === 'string' && hit !== '' ? decodeRecord(hit, null) : null;
    });
  }

  async get(tenantId: string, id: string): Promise<StoredToken | null> {
    return (await this.getMany(tenantId, [id]))[0] ?? null;
  }

  async getMany(tenantId: string, ids: string[]): Promise<StoredToken[]> {
    return this.#fetch(tenantId, [...new Set(ids)], Date.now());
  }

  appendAudit(tenantId: string, events: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    if (events.length === 0) return Promise.resolve([]);
    return this.#audit.append(tenantId, events, sign);
  }

  async #appendAudit(tenantId: string, inputs: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    const keys = [this.#t(tenantId, 'audit'), this.#t(tenantId, 'audithead')];
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const raw = await this.#call(() => this.#client.get(keys[1]!));
      const { events, head } = chain(parseHead(raw), inputs);
      const ok = await this.#eval(APPEND_AUDIT, keys, [raw ?? '', `${head.seq} ${head.hash} ${sign(tenantId, head)}`, ...events.map(encodeEvent)], true);
      if (Number(ok) === 1) return events;
    }
    throw new StoreUnavailableError('the audit chain head kept moving; the append was not written');
  }

  async listAudit(tenantId: string, filter: AuditFilter, page: Page): Promise<AuditPageResult> {
    checkPage(page);
    const key = this.#t(tenantId, 'audit');
    // Positions are 1-based list indexes; the cursor is the position of the last event returned.
    let pos = page.after === null ? Number(await this.#call(() => this.#client.llen(key))) : decodeCursor(page.after) - 1;
    const items: AuditEvent[] = [];
    let last = 0;
    const chunk = Math.max(200, page.size * 4);
    while (pos > 0) {
      const from = Math.max(1, pos - chunk + 1);
      const raw = await this.#call(() => this.#client.lrange(key, from - 1, pos - 1));
      for (let i = raw.length - 1; i >= 0; i--) {
        const p = from + i;
        const e = decodeEvent(raw[i]!);
        if (!e || !auditMatches(e, filter)) continue;
        if (items.length === page.size) return { items, next: encodeCursor(last) };
        items.push(e);
        last = p;
      }
      pos = from - 1;
    }
    return { items, next: null };
  }

  async auditRange(tenantId: string, after: string | null, limit: number): Promise<{ items: Array<AuditEvent | null>; next: string | null }> {
    const start = after === null ? 0 : decodeCursor(after);
    const raw = await this.#call(() => this.#client.lrange(this.#t(tenantId, 'audit'), start, start + limit - 1));
    return { items: raw.map((r) => decodeEvent(r)), next: raw.length === limit ? encodeCursor(start + limit) : null };
  }

  async auditHead(tenantId: string): Promise<StoredAuditHead | null> {
    return parseHead(await this.#call(() => this.#client.get(this.#t(tenantId, 'audithead'))));
  }

  async update(record: StoredToken): Promise<boolean> {
    const b = this.#payload(record);
    if (record.cvc_sealed && record.cvc_expires_at) await this.#knowTenant(record.tenant_id);
    const keys = [this.#t(record.tenant_id, 'cvcdue'), b.key, b.cvcKey, ...(JSON.parse(b.k) as string[])];
    return (await this.#withOldZsets(b.key, (oldK, old) => this.#eval(UPDATE, [...new Set([...keys, ...old])], [JSON.stringify(b), String(Date.now()), oldK], true))) === 1;
  }

  async delete(tenantId: string, id: string): Promise<boolean> {
    const keys = [this.#t(tenantId, 'rec', id), this.#t(tenantId, 'cvc', id), this.#t(tenantId, 'cvcdue')];
    return (await this.#withOldZsets(keys[0]!, (oldK, old) => this.#eval(DELETE, [...keys, ...old], [id, String(Date.now()), oldK], true))) === 1;
  }

  /**
   * Runs an update or delete script with the record's current index zsets declared as keys (read
   * first, so a Cluster slot migration answers TRYAGAIN instead of failing the script halfway); the
   * script answers -1, writing nothing, when the record's zset list changed since: read again.
   */
  async #withOldZsets(recKey: string, run: (oldK: string, old: string[]) => Promise<unknown>): Promise<unknown> {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const oldK = await this.#call(() => this.#client.hget(recKey, 'k'));
      if (oldK === null) return 0;
      const out = await run(oldK, JSON.parse(oldK) as string[]);
      if (Number(out) !== -1) return out;
    }
    throw new StoreUnavailableError('the record kept changing; the write was not made');
  }

  async list(tenantId: string, filter: TokenFilter, page: Page): Promise<PageResult> {
    checkPage(page);
    if (filter.ids && filter.ids.length === 0) return { items: [], next: null };
    let max = page.after === null ? '+inf' : `(${decodeCursor(page.after)}`;
    const now = Date.now();
    const hits: Found[] = [];
    const keep = (found: Found | null): void => {
      if (found && isLive(timeMs(found.record.expires_at, 'expires_at'), now) && matches(found.record, filter)) hits.push(found);
    };
    if (filter.ids) {
      // An id list is its own index: fetch those records, newest first, below the cursor.
      const after = page.after === null ? Infinity : decodeCursor(page.after);
      (await this.#records(tenantId, [...new Set(filter.ids)])).forEach((f) => f && f.seq < after && keep(f));
      hits.sort((a, b) => b.seq - a.seq);
    } else {
      const drivers = await this.#drivers(tenantId, filter);
      const batch = Math.min(Math.max(page.size * 2, 50), 500);
      // Newest first over one zset, or merged over several (the containers the caller may see):
      // each round reads up to `batch` below the cursor from each, and takes every id at or above
      // the highest last-read score of a zset that had more (below it, a zset may hold ids not read yet).
      const emptyBelow = drivers.map(() => false);
      while (hits.length <= page.size && emptyBelow.includes(false)) {
        const open = drivers.filter((_, i) => !emptyBelow[i]);
        const chunks = await this.#pipeline((p) => open.forEach((z) => p.zrevrangebyscore(z, max, '-inf', 'WITHSCORES', 'LIMIT', 0, batch)));
        let bound = -Infinity;
        const round: { id: string; seq: number }[] = [];
        let o = 0;
        drivers.forEach((_, i) => {
          if (emptyBelow[i]) return;
          const chunk = chunks[o++] as string[];
          for (let j = 0; j < chunk.length; j += 2) round.push({ id: chunk[j]!, seq: Number(chunk[j + 1]) });
          if (chunk.length === 0) emptyBelow[i] = true;
          else if (chunk.length >= batch * 2) bound = Math.max(bound, Number(chunk[chunk.length - 1]));
        });
        // Every zset was short: this round read all that is left.
        const take = round.filter((x) => x.seq >= bound).sort((a, b) => b.seq - a.seq);
        (await this.#records(tenantId, take.map((x) => x.id))).forEach(keep);
        if (bound === -Infinity) break;
        max = `(${bound}`;
      }
    }
    const shown = hits.slice(0, page.size);
    const cvcs = await this.#cvcs(shown.map((h) => h.record), now);
    const items = shown.map((h, i) => ({ ...h.record, cvc_sealed: cvcs[i] }));
    return { items, next: hits.length > page.size ? encodeCursor(shown[shown.length - 1].seq) : null };
  }

  async purgeCvc(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeCvc: invalid date');
    let total = 0;
    // Per tenant (each tenant's cvc keys share its slot); the cvc keys also expire by themselves.
    const tenants = await this.#call(() => this.#client.smembers(this.#tenantsKey()));
    for (const tenant of tenants) {
      for (;;) {
        const n = Number(await this.#eval(PURGE_CVC, [this.#t(tenant, 'cvcdue')], [String(ms), String(PURGE_BATCH)]));
        total += n;
        if (n < PURGE_BATCH) break;
      }
    }
    return total;
  }

  async listDataKeys(): Promise<WrappedDataKey[]> {
    return this.#decodeKeys(await this.#eval(LIST_KEYS, [this.#dk(), this.#dk('order')], []));
  }

  async addDataKey(key: WrappedDataKey): Promise<WrappedDataKey[]> {
    const value = JSON.stringify({ kid: key.kid, wrapped: key.wrapped, created_at: key.created_at });
    return this.#decodeKeys(await this.#eval(ADD_KEY, [this.#dk(), this.#dk('order')], [key.kid, value], true));
  }

  async claimIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<IdempotencyClaim> {
    const v = await this.#eval(idem.CLAIM, [this.#t(slot.tenant_id, 'idem', slot.key)], [owner, sealed, String(Math.max(1, Math.ceil(ttlMs)))], true);
    if (!Array.isArray(v)) throw new StoreUnavailableError('a stored idempotency entry is corrupt');
    if (v[0] === 'claimed') return { state: 'claimed' };
    if ((v[0] === 'in_flight' || v[0] === 'done') && typeof v[1] === 'string') return { state: v[0], sealed: v[1] };
    throw new StoreUnavailableError('a stored idempotency entry is corrupt');
  }

  async completeIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<boolean> {
    const ttl = String(Math.max(1, Math.ceil(ttlMs)));
    return Number(await this.#eval(idem.COMPLETE, [this.#t(slot.tenant_id, 'idem', slot.key)], [owner, sealed, ttl], true)) === 1;
  }

  async releaseIdempotencyKey(slot: IdempotencySlot, owner: string): Promise<boolean> {
    return Number(await this.#eval(idem.RELEASE, [this.#t(slot.tenant_id, 'idem', slot.key)], [owner], true)) === 1;
  }

  /** Redis expires idempotency entries by itself (PEXPIRE): nothing to purge. */
  async purgeIdempotencyKeys(): Promise<number> {
    return 0;
  }

  async ping(): Promise<void> {
    await this.#call(() => this.#client.ping());
  }

  async close(): Promise<void> {
    if (this.#client.status === 'ready') {
      try {
        await this.#client.quit();
      } catch {
        // fall through: drop the connection
      }
    }
    // Also after QUIT: with Sentinel only disconnect() closes the failover detector's
    // connections to the sentinels (they would reconnect forever).
    this.#client.disconnect();
  }

  /** A key of the tenant: its hash tag is the encoded tenant id (no braces inside). */
  #t(tenantId: string, ...parts: string[]): string {
    return `${this.#p}t:{${enc(tenantId)}}:${parts.map(enc).join(':')}`;
  }

  /** The data keys' hash and order list, in one slot of their own. */
  #dk(part?: string): string {
    return `${this.#p}{dk}${part === undefined ? '' : `:${part}`}`;
  }

  #tenantsKey(): string {
    return `${this.#p}tenants`;
  }

  /** Adds the tenant to `P tenants` before its first cvc is written, once per instance. */
  async #knowTenant(tenantId: string): Promise<void> {
    if (this.#tenantsKnown.has(tenantId)) return;
    await this.#call(() => this.#client.sadd(this.#tenantsKey(), tenantId));
    this.#tenantsKnown.add(tenantId);
  }

  /** What the write scripts need for one record; index zsets are computed here, not in Lua. */
  #payload(r: StoredToken) {
    const zsets = [this.#t(r.tenant_id, 'all'), this.#t(r.tenant_id, 'type', r.type), this.#t(r.tenant_id, 'ct', r.container)];
    const dd = r.fingerprint === null ? undefined : this.#t(r.tenant_id, 'dd', r.type, r.container, r.fingerprint);
    if (r.fingerprint !== null) zsets.push(this.#t(r.tenant_id, 'fp', r.fingerprint), dd!);
    for (const [k, v] of Object.entries(r.metadata)) zsets.push(this.#t(r.tenant_id, 'md', k, v));
    for (const h of new Set(r.index_hashes)) zsets.push(this.#t(r.tenant_id, 'ix', h));
    const expires = timeMs(r.expires_at, 'expires_at');
    const cvcExp = timeMs(r.cvc_expires_at, 'cvc_expires_at');
    return {
      key: this.#t(r.tenant_id, 'rec', r.id),
      id: r.id,
      dd,
      r: encodeRecord(r),
      k: JSON.stringify(zsets),
      e: expires === null ? '' : String(expires),
      cvcKey: this.#t(r.tenant_id, 'cvc', r.id),
      cvc: r.cvc_sealed ?? undefined,
      exp: cvcExp === null ? undefined : String(cvcExp),
    };
  }

  /**
   * The zsets to walk: the smallest index zset every match must be in, or the container zsets of
   * the containers the filter admits (scope and container prefix) when together they are smaller.
   * So a key that may see few containers reads those, not the tenant's every token; whatever the
   * walk reads beyond a match is bounded by the smallest of these. No admitted container: none.
   */
  async #drivers(tenantId: string, f: TokenFilter): Promise<string[]> {
    const candidates = [this.#t(tenantId, 'all')];
    if (f.type !== undefined) candidates.push(this.#t(tenantId, 'type', f.type));
    if (f.fingerprint !== undefined) candidates.push(this.#t(tenantId, 'fp', f.fingerprint));
    for (const [k, v] of Object.entries(f.metadata ?? {})) candidates.push(this.#t(tenantId, 'md', k, v));
    for (const h of f.index_hashes ?? []) candidates.push(this.#t(tenantId, 'ix', h));
    let containers: string[] | null = null;
    if (f.scope !== undefined || f.container !== undefined) {
      const all = await this.#call(() => this.#client.smembers(this.#t(tenantId, 'containers')));
      const admitted = all.filter((c) => scopeAllows(f.scope, c) && (f.container === undefined || c.startsWith(f.container)));
      if (admitted.length === 0) return [];
      containers = admitted.sort().map((c) => this.#t(tenantId, 'ct', c));
    }
    if (candidates.length === 1 && containers === null) return candidates;
    const sized = [...candidates, ...(containers ?? [])];
    const sizes = (await this.#pipeline((p) => sized.forEach((k) => p.zcard(k)))).map(Number);
    let best = 0;
    for (let i = 1; i < candidates.length; i++) if (sizes[i]! < sizes[best]!) best = i;
    if (containers !== null) {
      const union = sizes.slice(candidates.length).reduce((a, b) => a + b, 0);
      if (union <= sizes[best]!) return containers;
    }
    return [candidates[best]!];
  }

  /** Records (and their sequence numbers) by id, null where missing; expiry is not checked. */
  async #records(tenantId: string, ids: string[]): Promise<(Found | null)[]> {
    if (ids.length === 0) return [];
    const raw = await this.#pipeline((p) => ids.forEach((id) => p.hmget(this.#t(tenantId, 'rec', id), 'r', 's')));
    return raw.map((v) => {
      if (!Array.isArray(v) || typeof v[0] !== 'string') return null;
      return { record: decodeRecord(v[0], null), seq: Number(v[1]) };
    });
  }

  async #cvcs(records: StoredToken[], now: number): Promise<(string | null)[]> {
    const withCvc = records.map((r) => cvcVisible(timeMs(r.cvc_expires_at, 'cvc_expires_at'), now));
    if (!withCvc.includes(true)) return records.map(() => null);
    const raw = await this.#pipeline((p) => records.forEach((r) => p.get(this.#t(r.tenant_id, 'cvc', r.id))));
    return raw.map((v, i) => (withCvc[i] && typeof v === 'string' ? v : null));
  }

  /** Live records by id, in the order given. */
  async #fetch(tenantId: string, ids: string[], now: number): Promise<StoredToken[]> {
    const live: StoredToken[] = [];
    for (const f of await this.#records(tenantId, ids)) {
      if (f && isLive(timeMs(f.record.expires_at, 'expires_at'), now)) live.push(f.record);
    }
    const cvcs = await this.#cvcs(live, now);
    return live.map((r, i) => ({ ...r, cvc_sealed: cvcs[i] }));
  }

  #decodeKeys(raw: unknown): WrappedDataKey[] {
    if (!Array.isArray(raw)) throw new StoreUnavailableError('a stored data key list is corrupt');
    return raw.map((v: unknown) => {
      if (typeof v !== 'string') throw new StoreUnavailableError('a stored data key is corrupt');
      let parsed: unknown;
      try {
        parsed = JSON.parse(v);
      } catch {
        throw new StoreUnavailableError('a stored data key is corrupt');
      }
      return decodeDataKey(parsed);
    });
  }

  async #pipeline(build: (p: ChainableCommander) => void): Promise<unknown[]> {
    const p = this.#client.pipeline();
    build(p);
    const results = await this.#call(() => p.exec());
    if (!results) throw new StoreUnavailableError('the Redis token store aborted a pipeline');
    return results.map(([err, value]) => {
      if (err) throw this.#mapError(err);
      return value;
    });
  }

  /**
   * EVALSHA, falling back to EVAL once when the server has not cached the script (NOSCRIPT).
   * `write` with waitReplicas > 0: the script and `WAIT n timeout` go in one pipeline, so the WAIT
   * runs on the connection (the node) that ran the script, right after it.
   */
  async #eval(script: string, keys: string[], args: string[], write = false): Promise<unknown> {
    let sha = this.#scripts.get(script);
    if (!sha) this.#scripts.set(script, (sha = createHash('sha1').update(script).digest('hex')));
    const evalsha = sha;
    const wait = write && this.#waitReplicas > 0;
    const run = async (cached: boolean): Promise<unknown> => {
      if (!wait) {
        return cached ? this.#client.evalsha(evalsha, keys.length, ...keys, ...args) : this.#client.eval(script, keys.length, ...keys, ...args);
      }
      const p = this.#client.pipeline();
      if (cached) p.evalsha(evalsha, keys.length, ...keys, ...args);
      else p.eval(script, keys.length, ...keys, ...args);
      p.wait(this.#waitReplicas, this.#waitTimeoutMs);
      const results = await p.exec();
      if (!results) throw new StoreUnavailableError('the Redis token store aborted a pipeline');
      const [[err, value], [waitErr, acked]] = results as [[Error | null, unknown], [Error | null, unknown]];
      if (err) throw err;
      if (waitErr) throw waitErr;
      if (Number(acked) < this.#waitReplicas) {
        throw new StoreUnavailableError(`the write was acknowledged by ${Number(acked)} of ${this.#waitReplicas} Redis replicas in time (it is on the primary)`);
      }
      return value;
    };
    return this.#call(async () => {
      try {
        return await run(true);
      } catch (err) {
        if (!(err instanceof Error && err.message.startsWith('NOSCRIPT'))) throw err;
        return run(false);
      }
    });
  }

  /** Every store call: bounded by the deadline (a Cluster may queue a command while it refreshes its slots). */
  async #call<T>(fn: () => Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('the store call timed out')), this.#deadlineMs);
    });
    try {
      return await Promise.race([fn(), deadline]);
    } catch (err) {
      throw this.#mapError(err);
    } finally {
      clearTimeout(timer);
    }
  }

  #mapError(err: unknown): Error {
    if (err instanceof DuplicateTokenError || err instanceof InvalidCursorError || err instanceof StoreUnavailableError) return err;
    const message = err instanceof Error ? err.message : '';
    if (err instanceof Error && err.name === 'ReplyError') {
      const kind = /^[A-Z]+/.exec(message)?.[0] ?? 'ERR';
      return new StoreUnavailableError(`the Redis token store refused the command (${kind})`, { cause: sanitize(err) });
    }
    if (/timed out/i.test(message)) return new StoreUnavailableError('the Redis token store did not answer in time', { cause: sanitize(err) });
    return new StoreUnavailableError('the Redis token store is unavailable', { cause: sanitize(err) });
  }
}
