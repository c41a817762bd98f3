/**
 * The Redis token store, shared by many tokenproxy instances (ioredis).
 *
 * DURABILITY: run Redis with `appendonly yes` and `appendfsync always`. A resolved insert then
 * survives a tokenproxy kill -9 (Redis already has it) AND a Redis crash: with `always` Redis
 * fsyncs the AOF before it replies. With the default `everysec` a Redis crash can lose the last
 * second of tokens that clients already hold. Replicas do not change this (replication is async).
 *
 * Layout (P = key_prefix, T = tenant, every component URI-encoded so ':' never appears inside one):
 *   P t:T:rec:<id>     hash {r: record JSON without cvc, k: JSON list of its index zsets, s: seq, e: expires ms}
 *   P t:T:cvc:<id>     the cvc ciphertext, PEXPIREAT cvc_expires_at (Redis drops it by itself)
 *   P t:T:seq          per-tenant sequence (INCR); zset scores, newest-first cursors
 *   P t:T:all | type:<type> | fp:<fingerprint> | md:<key>:<value> | ix:<hash>   zsets id → seq
 *   P t:T:ct:<container>                        zset id → seq: the tokens of one container
 *   P t:T:dd:<type>:<container>:<fingerprint>   zset id → seq: what a deduplicating insert matches
 *   P t:T:containers   set of the tenant's containers (a container is never removed from it)
 *   P cvc:due          zset cvc key → cvc expiry ms (purgeCvc)
 *   P dk, P dk:order   data keys: hash kid → JSON, list of kids oldest first
 *   P meta             hash {version}: the layout version (2), migrated on connect
 * Writes are Lua scripts, so a batch and its index entries appear atomically and search serves
 * them at once. Scripts touch keys they compute (the insert script also derives record keys of
 * the ids in a dd zset); on Redis Cluster use a hash-tagged prefix such as `{tp}:` so every key
 * lives in one slot.
 *
 * Deduplication is a compare-and-set inside the insert script: it looks for the oldest live member
 * of the record's dd zset and returns it instead of writing, in the same atomic step as the write,
 * so N concurrent identical inserts leave one token.
 *
 * Layout version 2 (the ct and dd zsets, the containers set) is built for existing records on
 * connect (migrate): every record gets the zsets it lacks, record by record, each a check-and-set
 * against the record it was computed from. Upgrade every instance sharing a prefix together: a
 * version 1 instance still writing would add records without them.
 */
import { createHash } from 'node:crypto';
import { Redis, type ChainableCommander } from 'ioredis';
import type { Logger } from '../log.js';
import type { InsertOptions, Page, PageResult, StoredToken, TokenFilter, TokenStore, WrappedDataKey } from './types.js';
import { DuplicateTokenError, StoreUnavailableError } from './types.js';
import {
  checkPage, cvcVisible, decodeCursor, decodeDataKey, decodeRecord, encodeCursor, encodeRecord, InvalidCursorError, isLive, scopeAllows, timeMs,
} from './codec.js';

/** Lua: stores record b's sealed cvc (if any) with its purge deadline (KEYS[1]: the cvc due zset). */
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
      if rec[1] and (rec[2] == '' or tonumber(rec[2]) > now) then return rec[1] end
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
 * Migration to layout 2, one record: KEYS[1] the record, KEYS[2] the containers set; ARGV: the
 * record JSON the new zset list was computed from, that list, the container. Skipped (0) when the
 * record changed or went away since: whoever wrote it wrote the new layout.
 */
const MIGRATE_RECORD = `
local cur = redis.call('HMGET', KEYS[1], 'r', 's', 'k')
if cur[1] ~= ARGV[1] then return 0 end
local id = cjson.decode(cur[1]).id
for _, z in ipairs(cjson.decode(ARGV[2])) do redis.call('ZADD', z, cur[2], id) end
redis.call('HSET', KEYS[1], 'k', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return 1`;

const LAYOUT_VERSION = 2;

const UPDATE = `${SET_CVC}
local b = cjson.decode(ARGV[1])
local old = redis.call('HMGET', b.key, 'k', 's', 'e')
if not old[1] or (old[3] ~= '' and tonumber(old[3]) <= tonumber(ARGV[2])) then return 0 end
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

export interface RedisStoreOptions {
  url: string;
  keyPrefix: string;
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

export class RedisStore implements TokenStore {
  readonly kind = 'redis' as const;
  readonly #client: Redis;
  readonly #p: string;
  readonly #scripts = new Map<string, string>();

  private constructor(client: Redis, prefix: string) {
    this.#client = client;
    this.#p = prefix;
  }

  /** Connects (failing fast with StoreUnavailableError when Redis does not answer). */
  static async connect(opts: RedisStoreOptions): Promise<RedisStore> {
    const client = new Redis(opts.url, {
      lazyConnect: true,
      connectTimeout: opts.connectTimeoutMs ?? 2000,
      commandTimeout: opts.commandTimeoutMs ?? 1500,
      // 0: a command whose connection drops fails instead of being re-sent after a reconnect
      // (a re-sent insert script that had already run would report its own ids as duplicates).
      maxRetriesPerRequest: 0,
      // Queued while reconnecting, bounded by commandTimeout, so a blip is absorbed, an outage is not.
      enableOfflineQueue: true,
      retryStrategy: (times: number) => Math.min(times * 100, 1000),
    });
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
    const store = new RedisStore(client, opts.keyPrefix);
    try {
      const migrated = await store.migrate();
      if (migrated > 0) opts.log?.info({ records: migrated }, 'redis token store migrated to layout 2');
    } catch (err) {
      client.disconnect();
      throw err instanceof StoreUnavailableError ? err : new StoreUnavailableError('cannot migrate the Redis token store', { cause: sanitize(err) });
    }
    return store;
  }

  /**
   * Brings records written by layout 1 to layout 2 (the ct and dd zsets, the containers set);
   * returns how many records changed. Idempotent; a no-op once `P meta` says version 2.
   */
  async migrate(): Promise<number> {
    const meta = `${this.#p}meta`;
    if (Number(await this.#call(() => this.#client.hget(meta, 'version'))) >= LAYOUT_VERSION) return 0;
    const pattern = `${this.#p.replace(/[*?[\]\\]/g, '\\$&')}t:*:rec:*`;
    let cursor = '0';
    let changed = 0;
    do {
      const [next, keys] = await this.#call(() => this.#client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000));
      cursor = next;
      // Only P t:<tenant>:rec:<id> (components are encoded: no ':' inside one), not an md zset named "rec".
      const recs = keys.filter((k) => k.slice(this.#p.length).split(':').length === 4 && k.slice(this.#p.length).split(':')[2] === 'rec');
      if (recs.length === 0) continue;
      const raw = await this.#pipeline((p) => recs.forEach((k) => p.hmget(k, 'r', 'k')));
      for (let i = 0; i < recs.length; i++) {
        const v = raw[i];
        if (!Array.isArray(v) || typeof v[0] !== 'string') continue;
        const record = decodeRecord(v[0], null);
        const { k } = this.#payload(record);
        if (k === v[1]) continue;
        const keysOf = [recs[i]!, this.#t(record.tenant_id, 'containers')];
        changed += Number(await this.#eval(MIGRATE_RECORD, keysOf, [v[0], k, record.container]));
      }
    } while (cursor !== '0');
    await this.#call(() => this.#client.hset(meta, 'version', String(LAYOUT_VERSION)));
    return changed;
  }

  async insertMany(records: StoredToken[], options: InsertOptions = {}): Promise<Array<StoredToken | null>> {
    if (records.length === 0) return [];
    const batch = records.map((r, i) => ({
      ...this.#payload(r),
      seq: this.#t(r.tenant_id, 'seq'),
      cs: this.#t(r.tenant_id, 'containers'),
      container: r.container,
      recBase: `${this.#t(r.tenant_id, 'rec')}:`,
      dedupe: options.dedupe?.[i] === true,
    }));
    const out = await this.#eval(INSERT, [this.#cvcDue()], [JSON.stringify(batch), String(Date.now())]);
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

  async update(record: StoredToken): Promise<boolean> {
    const payload = JSON.stringify(this.#payload(record));
    return (await this.#eval(UPDATE, [this.#cvcDue()], [payload, String(Date.now())])) === 1;
  }

  async delete(tenantId: string, id: string): Promise<boolean> {
    const keys = [this.#t(tenantId, 'rec', id), this.#t(tenantId, 'cvc', id), this.#cvcDue()];
    return (await this.#eval(DELETE, keys, [id, String(Date.now())])) === 1;
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
    for (;;) {
      const n = Number(await this.#eval(PURGE_CVC, [this.#cvcDue()], [String(ms), String(PURGE_BATCH)]));
      total += n;
      if (n < PURGE_BATCH) return total;
    }
  }

  async listDataKeys(): Promise<WrappedDataKey[]> {
    return this.#decodeKeys(await this.#eval(LIST_KEYS, [`${this.#p}dk`, `${this.#p}dk:order`], []));
  }

  async addDataKey(key: WrappedDataKey): Promise<WrappedDataKey[]> {
    const value = JSON.stringify({ kid: key.kid, wrapped: key.wrapped, created_at: key.created_at });
    return this.#decodeKeys(await this.#eval(ADD_KEY, [`${this.#p}dk`, `${this.#p}dk:order`], [key.kid, value]));
  }

  async ping(): Promise<void> {
    await this.#call(() => this.#client.ping());
  }

  async close(): Promise<void> {
    if (this.#client.status === 'ready') {
      try {
        await this.#client.quit();
        return;
      } catch {
        // fall through: drop the connection
      }
    }
    this.#client.disconnect();
  }

  #t(tenantId: string, ...parts: string[]): string {
    return `${this.#p}t:${enc(tenantId)}:${parts.map(enc).join(':')}`;
  }

  #cvcDue(): string {
    return `${this.#p}cvc:due`;
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

  /** EVALSHA, falling back to EVAL once when the server has not cached the script (NOSCRIPT). */
  async #eval(script: string, keys: string[], args: string[]): Promise<unknown> {
    let sha = this.#scripts.get(script);
    if (!sha) this.#scripts.set(script, (sha = createHash('sha1').update(script).digest('hex')));
    const evalsha = sha;
    return this.#call(async () => {
      try {
        return await this.#client.evalsha(evalsha, keys.length, ...keys, ...args);
      } catch (err) {
        if (!(err instanceof Error && err.message.startsWith('NOSCRIPT'))) throw err;
        return this.#client.eval(script, keys.length, ...keys, ...args);
      }
    });
  }

  async #call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw this.#mapError(err);
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
