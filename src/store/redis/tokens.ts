/**
 * The Redis store's token port (issue 24 item 5): records in hashes, sorted sets per index (all,
 * type, container, fingerprint, metadata pair, search hash), every write one Lua script, so a
 * batch and its indexes appear at once and concurrent instances stay consistent (layout: index.ts).
 */
import { checkPage, cvcVisible, decodeCursor, decodeRecord, encodeCursor, encodeRecord, isLive, scopeAllows, timeMs } from '../codec.js';
import type { InsertOptions, Page, PageResult, StoredToken, TokenFilter, TokenPort } from '../types.js';
import { DuplicateTokenError, StoreUnavailableError } from '../types.js';
import { CAS_ATTEMPTS, type RedisConnection } from './connection.js';

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

const PURGE_BATCH = 500;

interface Found {
  record: StoredToken;
  seq: number;
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

/** What the write scripts need for one record; index zsets are computed here, not in Lua (also the migration: migrate.ts). */
export function recordPayload(c: RedisConnection, r: StoredToken) {
  const zsets = [c.t(r.tenant_id, 'all'), c.t(r.tenant_id, 'type', r.type), c.t(r.tenant_id, 'ct', r.container)];
  const dd = r.fingerprint === null ? undefined : c.t(r.tenant_id, 'dd', r.type, r.container, r.fingerprint);
  if (r.fingerprint !== null) zsets.push(c.t(r.tenant_id, 'fp', r.fingerprint), dd!);
  for (const [k, v] of Object.entries(r.metadata)) zsets.push(c.t(r.tenant_id, 'md', k, v));
  for (const h of new Set(r.index_hashes)) zsets.push(c.t(r.tenant_id, 'ix', h));
  const expires = timeMs(r.expires_at, 'expires_at');
  const cvcExp = timeMs(r.cvc_expires_at, 'cvc_expires_at');
  return {
    key: c.t(r.tenant_id, 'rec', r.id),
    id: r.id,
    dd,
    r: encodeRecord(r),
    k: JSON.stringify(zsets),
    e: expires === null ? '' : String(expires),
    cvcKey: c.t(r.tenant_id, 'cvc', r.id),
    cvc: r.cvc_sealed ?? undefined,
    exp: cvcExp === null ? undefined : String(cvcExp),
  };
}

export class RedisTokens implements TokenPort {
  readonly #c: RedisConnection;
  /** Tenants this instance has added to `P tenants` (the set never shrinks). */
  readonly #tenantsKnown = new Set<string>();

  constructor(connection: RedisConnection) {
    this.#c = connection;
  }

  async insertMany(records: StoredToken[], options: InsertOptions = {}): Promise<Array<StoredToken | null>> {
    if (records.length === 0) return [];
    const tenant = records[0]!.tenant_id;
    // One script, one slot: a batch spanning tenants would be refused by a Cluster (the service
    // writes one tenant's batch per request).
    if (records.some((r) => r.tenant_id !== tenant)) throw new TypeError('insertMany: the records of one batch must share a tenant');
    if (records.some((r) => r.cvc_sealed && r.cvc_expires_at)) await this.#knowTenant(tenant);
    const batch = records.map((r, i) => ({
      ...recordPayload(this.#c, r),
      seq: this.#c.t(r.tenant_id, 'seq'),
      cs: this.#c.t(r.tenant_id, 'containers'),
      container: r.container,
      recBase: `${this.#c.t(r.tenant_id, 'rec')}:`,
      dedupe: options.dedupe?.[i] === true,
    }));
    // Every key the script writes is declared (KEYS[1] first, the one it uses by name): on a
    // Cluster whose slot is migrating, Redis then answers TRYAGAIN (retried) unless they are all
    // on one node, instead of the script failing halfway on a key that moved.
    const declared = [this.#c.t(tenant, 'cvcdue'), this.#c.t(tenant, 'seq'), this.#c.t(tenant, 'containers'),
      ...batch.flatMap((b) => [b.key, b.cvcKey, ...(JSON.parse(b.k) as string[])])];
    const out = await this.#c.eval(INSERT, [...new Set(declared)], [JSON.stringify(batch), String(Date.now())], true);
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
    const b = recordPayload(this.#c, record);
    if (record.cvc_sealed && record.cvc_expires_at) await this.#knowTenant(record.tenant_id);
    const keys = [this.#c.t(record.tenant_id, 'cvcdue'), b.key, b.cvcKey, ...(JSON.parse(b.k) as string[])];
    return (await this.#withOldZsets(b.key, (oldK, old) => this.#c.eval(UPDATE, [...new Set([...keys, ...old])], [JSON.stringify(b), String(Date.now()), oldK], true))) === 1;
  }

  async delete(tenantId: string, id: string): Promise<boolean> {
    const keys = [this.#c.t(tenantId, 'rec', id), this.#c.t(tenantId, 'cvc', id), this.#c.t(tenantId, 'cvcdue')];
    return (await this.#withOldZsets(keys[0]!, (oldK, old) => this.#c.eval(DELETE, [...keys, ...old], [id, String(Date.now()), oldK], true))) === 1;
  }

  /**
   * Runs an update or delete script with the record's current index zsets declared as keys (read
   * first, so a Cluster slot migration answers TRYAGAIN instead of failing the script halfway); the
   * script answers -1, writing nothing, when the record's zset list changed since: read again.
   */
  async #withOldZsets(recKey: string, run: (oldK: string, old: string[]) => Promise<unknown>): Promise<unknown> {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const oldK = await this.#c.call(() => this.#c.client.hget(recKey, 'k'));
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
        const chunks = await this.#c.pipeline((p) => open.forEach((z) => p.zrevrangebyscore(z, max, '-inf', 'WITHSCORES', 'LIMIT', 0, batch)));
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
    const tenants = await this.#c.call(() => this.#c.client.smembers(this.#c.tenantsKey()));
    for (const tenant of tenants) {
      for (;;) {
        const n = Number(await this.#c.eval(PURGE_CVC, [this.#c.t(tenant, 'cvcdue')], [String(ms), String(PURGE_BATCH)]));
        total += n;
        if (n < PURGE_BATCH) break;
      }
    }
    return total;
  }

  /** Adds the tenant to `P tenants` before its first cvc is written, once per instance. */
  async #knowTenant(tenantId: string): Promise<void> {
    if (this.#tenantsKnown.has(tenantId)) return;
    await this.#c.call(() => this.#c.client.sadd(this.#c.tenantsKey(), tenantId));
    this.#tenantsKnown.add(tenantId);
  }

  /**
   * The zsets to walk: the smallest index zset every match must be in, or the container zsets of
   * the containers the filter admits (scope and container prefix) when together they are smaller.
   * So a key that may see few containers reads those, not the tenant's every token; whatever the
   * walk reads beyond a match is bounded by the smallest of these. No admitted container: none.
   */
  async #drivers(tenantId: string, f: TokenFilter): Promise<string[]> {
    const candidates = [this.#c.t(tenantId, 'all')];
    if (f.type !== undefined) candidates.push(this.#c.t(tenantId, 'type', f.type));
    if (f.fingerprint !== undefined) candidates.push(this.#c.t(tenantId, 'fp', f.fingerprint));
    for (const [k, v] of Object.entries(f.metadata ?? {})) candidates.push(this.#c.t(tenantId, 'md', k, v));
    for (const h of f.index_hashes ?? []) candidates.push(this.#c.t(tenantId, 'ix', h));
    let containers: string[] | null = null;
    if (f.scope !== undefined || f.container !== undefined) {
      const all = await this.#c.call(() => this.#c.client.smembers(this.#c.t(tenantId, 'containers')));
      const admitted = all.filter((c) => scopeAllows(f.scope, c) && (f.container === undefined || c.startsWith(f.container)));
      if (admitted.length === 0) return [];
      containers = admitted.sort().map((c) => this.#c.t(tenantId, 'ct', c));
    }
    if (candidates.length === 1 && containers === null) return candidates;
    const sized = [...candidates, ...(containers ?? [])];
    const sizes = (await this.#c.pipeline((p) => sized.forEach((k) => p.zcard(k)))).map(Number);
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
    const raw = await this.#c.pipeline((p) => ids.forEach((id) => p.hmget(this.#c.t(tenantId, 'rec', id), 'r', 's')));
    return raw.map((v) => {
      if (!Array.isArray(v) || typeof v[0] !== 'string') return null;
      return { record: decodeRecord(v[0], null), seq: Number(v[1]) };
    });
  }

  async #cvcs(records: StoredToken[], now: number): Promise<(string | null)[]> {
    const withCvc = records.map((r) => cvcVisible(timeMs(r.cvc_expires_at, 'cvc_expires_at'), now));
    if (!withCvc.includes(true)) return records.map(() => null);
    const raw = await this.#c.pipeline((p) => records.forEach((r) => p.get(this.#c.t(r.tenant_id, 'cvc', r.id))));
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
}
