/**
 * The Redis store's token port, layout 4 (index.ts): one hash of binary records
 * per tenant (record.ts), a sorted set per container (and per metadata pair and search hash) for
 * newest-first pages, a hash of fingerprints for deduplication and fingerprint search; every write
 * one Lua script (scripts.ts), so a batch and its indexes appear at once and concurrent instances
 * stay consistent.
 */
import { checkPage, cvcVisible, decodeCursor, encodeCursor, isLive, scopeAllows } from '../codec.js';
import type { InsertOptions, Page, PageResult, StoredToken, TokenFilter, TokenPort } from '../types.js';
import { DuplicateTokenError, StoreUnavailableError } from '../types.js';
import { CAS_ATTEMPTS, type RedisConnection } from './connection.js';
import { decodeRecord, dedupeKey, encodeRecord, fingerprintField, packDigest, packId, unpackId, type DecodedRecord } from './record.js';
import { DELETE, INSERT, PURGE_CVC, UPDATE } from './scripts.js';

/** Due buckets (of up to 128 cvcs each) one purge script clears. */
const PURGE_BUCKETS = 8;
/** Sequence numbers a container's order bucket holds (scripts.ts): at most 128 ids, a listpack. */
export const BUCKET = 128;

interface Found {
  record: StoredToken;
  seq: number;
  expiresMs: number | null;
}

type Key = string | Buffer;
/** What a list walks: a search zset, or a container's order buckets (its directory key). */
type Driver = { kind: 'zset'; key: Key } | { kind: 'buckets'; key: string };

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

/** The keys of a tenant's layout 4 (index.ts). */
export function keysOf(c: RedisConnection, tenantId: string) {
  return {
    records: c.t(tenantId, 'r'),
    seq: c.t(tenantId, 'seq'),
    fingerprints: c.t(tenantId, 'f'),
    /** The cvc due directory; its buckets are `<due>:<seq div 128>` (scripts.ts). */
    cvcDue: c.t(tenantId, 'd'),
    containers: c.t(tenantId, 'containers'),
    /** The container's bucket directory; its buckets are `<dir>:<seq div 128>` (bucketOf). */
    container: (container: string): string => c.t(tenantId, 'o', container),
    metadata: (k: string, v: string): string => c.t(tenantId, 'm', k, v),
    indexHash: (h: string): Buffer => c.tb(tenantId, 'x', packDigest(h)),
  };
}

export const bucketOf = (dir: string, seq: number): string => `${dir}:${Math.floor(seq / BUCKET)}`;

/** The search zsets a record is in: one per metadata pair, one per search hash. */
export function zsetsOf(c: RedisConnection, r: StoredToken): Key[] {
  const k = keysOf(c, r.tenant_id);
  const out: Key[] = [];
  for (const [mk, mv] of Object.entries(r.metadata)) out.push(k.metadata(mk, mv));
  for (const h of new Set(r.index_hashes)) out.push(k.indexHash(h));
  return out;
}

/** The cvc's purge time as the scripts take it ('' when there is nothing to purge). */
export function cvcDueArg(r: StoredToken): string {
  if (!r.cvc_sealed || r.cvc_expires_at === null) return '';
  return String(Math.max(1, Date.parse(r.cvc_expires_at)));
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
    const k = keysOf(this.#c, tenant);
    const perRecord: Key[] = [];
    const declared = new Map<string, Key>();
    const dirs = new Set<string>();
    for (const [i, r] of records.entries()) {
      const zsets = zsetsOf(this.#c, r);
      for (const z of zsets) declared.set(Buffer.from(z).toString('latin1'), z);
      const dir = k.container(r.container);
      dirs.add(dir);
      perRecord.push(packId(r.id), encodeRecord(r), r.fingerprint === null ? '' : fingerprintField(r.fingerprint), options.dedupe?.[i] === true ? '1' : '0',
        dedupeKey(r.type, r.container, r.fingerprint), dir, r.container, cvcDueArg(r), String(zsets.length), ...zsets);
    }
    let out: unknown = null;
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      // The order buckets the batch's sequence numbers will fall in are declared too: from the
      // sequence as read now, with room for 128 inserts of other instances meanwhile (else the
      // script answers 'retry', writing nothing).
      const cur = Number(await this.#c.call(() => this.#c.client.get(k.seq)));
      const lo = Math.floor((cur + 1) / BUCKET);
      const hi = Math.floor((cur + records.length + BUCKET) / BUCKET);
      const buckets: string[] = [];
      for (const dir of [...dirs, k.cvcDue]) for (let b = lo; b <= hi; b++) buckets.push(`${dir}:${b}`);
      // Every key the script writes is declared (KEYS[1] first): on a Cluster whose slot is
      // migrating, Redis then answers TRYAGAIN (retried) instead of the script failing halfway.
      const keys = [k.records, k.seq, k.fingerprints, k.cvcDue, k.containers, ...dirs, ...buckets, ...declared.values()];
      out = await this.#c.evalBuffer(INSERT, keys, [String(Date.now()), String(lo), String(hi), ...perRecord], true);
      if (!Array.isArray(out) || !Buffer.isBuffer(out[0])) throw new StoreUnavailableError('the Redis token store answered an insert unexpectedly');
      if (out[0].toString() !== 'retry') break;
    }
    if (!Array.isArray(out) || !Buffer.isBuffer(out[0]) || out[0].toString() === 'retry') throw new StoreUnavailableError('the token sequence kept moving; the insert was not made');
    if (out[0].toString() === 'dup') throw new DuplicateTokenError(unpackId(out[1] as Buffer));
    const reply = out as Buffer[];
    return records.map((_, i) => {
      const id = reply[1 + i * 2]!;
      const rec = reply[2 + i * 2]!;
      return id.length > 0 ? decodeRecord(tenant, unpackId(id), rec).record : null;
    });
  }

  async get(tenantId: string, id: string): Promise<StoredToken | null> {
    return (await this.getMany(tenantId, [id]))[0] ?? null;
  }

  async getMany(tenantId: string, ids: string[]): Promise<StoredToken[]> {
    const now = Date.now();
    const out: StoredToken[] = [];
    for (const f of await this.#records(tenantId, [...new Set(ids)].map(packId))) {
      if (f && isLive(f.expiresMs, now)) out.push(f.record);
    }
    return out;
  }

  async update(record: StoredToken): Promise<boolean> {
    if (record.cvc_sealed && record.cvc_expires_at) await this.#knowTenant(record.tenant_id);
    const k = keysOf(this.#c, record.tenant_id);
    const id = packId(record.id);
    const next = encodeRecord(record);
    const newZsets = zsetsOf(this.#c, record);
    const fp = record.fingerprint === null ? '' : fingerprintField(record.fingerprint);
    const newDir = k.container(record.container);
    return (await this.#withCurrent(record.tenant_id, id, (raw, { record: old, seq }) => {
      const oldZsets = zsetsOf(this.#c, old);
      const oldFp = old.fingerprint === null ? '' : fingerprintField(old.fingerprint);
      const oldDir = k.container(old.container);
      const orderKeys = [oldDir, bucketOf(oldDir, seq), newDir, bucketOf(newDir, seq), bucketOf(k.cvcDue, seq)];
      return this.#c.eval(UPDATE, [k.records, k.fingerprints, k.cvcDue, k.containers, ...oldZsets, ...newZsets, ...orderKeys],
        [String(Date.now()), id, raw, next, oldFp, fp, record.container, cvcDueArg(record), String(oldZsets.length), ...oldZsets, String(newZsets.length), ...newZsets, oldDir, newDir], true);
    })) === 1;
  }

  async delete(tenantId: string, id: string): Promise<boolean> {
    const k = keysOf(this.#c, tenantId);
    const bin = packId(id);
    return (await this.#withCurrent(tenantId, bin, (raw, { record: old, seq }) => {
      const zsets = zsetsOf(this.#c, old);
      const dir = k.container(old.container);
      return this.#c.eval(DELETE, [k.records, k.fingerprints, k.cvcDue, dir, bucketOf(dir, seq), bucketOf(k.cvcDue, seq), ...zsets],
        [String(Date.now()), bin, raw, old.fingerprint === null ? '' : fingerprintField(old.fingerprint), dir, String(zsets.length), ...zsets], true);
    })) === 1;
  }

  /**
   * Runs an update or delete script against the record as read (its index keys come from it, and
   * are declared, so a Cluster slot migration answers TRYAGAIN instead of failing the script
   * halfway); the script answers -1, writing nothing, when the record changed since: read again.
   */
  async #withCurrent(tenantId: string, id: Buffer, run: (raw: Buffer, old: DecodedRecord) => Promise<unknown>): Promise<unknown> {
    const recordsKey = keysOf(this.#c, tenantId).records;
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const raw = await this.#c.call(() => this.#c.client.hgetBuffer(recordsKey, id));
      if (raw === null) return 0;
      const out = await run(raw, decodeRecord(tenantId, unpackId(id), raw));
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
      if (found && isLive(found.expiresMs, now) && matches(found.record, filter)) hits.push(found);
    };
    const idList = await this.#idList(tenantId, filter);
    if (idList) {
      // An id list (or a fingerprint's tokens) is its own index: fetch those records, newest
      // first, below the cursor.
      const after = page.after === null ? Infinity : decodeCursor(page.after);
      (await this.#records(tenantId, idList)).forEach((f) => f && f.seq < after && keep(f));
      hits.sort((a, b) => b.seq - a.seq);
    } else {
      const drivers = await this.#drivers(tenantId, filter);
      const batch = Math.min(Math.max(page.size * 2, 50), 500);
      // Newest first over one source, or merged over several (the containers the caller may see):
      // each round reads at least `batch` below the cursor from each (or all it has), and takes
      // every id at or above the highest last-read score of a source that may have more (below
      // it, a source may hold ids not read yet).
      const emptyBelow = drivers.map(() => false);
      while (hits.length <= page.size && emptyBelow.includes(false)) {
        const open = drivers.filter((_, i) => !emptyBelow[i]);
        const below = max;
        const chunks = await Promise.all(open.map((d) => this.#below(d, below, batch)));
        let bound = -Infinity;
        const round: { id: Buffer; seq: number }[] = [];
        let o = 0;
        drivers.forEach((_, i) => {
          if (emptyBelow[i]) return;
          const chunk = chunks[o++]!;
          round.push(...chunk.entries);
          if (chunk.entries.length === 0) emptyBelow[i] = true;
          else if (chunk.more) bound = Math.max(bound, chunk.entries[chunk.entries.length - 1]!.seq);
        });
        // No source may have more: this round read all that is left.
        const take = round.filter((x) => x.seq >= bound).sort((a, b) => b.seq - a.seq);
        (await this.#records(tenantId, take.map((x) => x.id))).forEach(keep);
        if (bound === -Infinity) break;
        max = `(${bound}`;
      }
    }
    const shown = hits.slice(0, page.size);
    return { items: shown.map((h) => h.record), next: hits.length > page.size ? encodeCursor(shown[shown.length - 1]!.seq) : null };
  }

  async purgeCvc(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeCvc: invalid date');
    let total = 0;
    // Per tenant (each tenant's keys share its slot).
    const tenants = await this.#c.call(() => this.#c.client.smembers(this.#c.tenantsKey()));
    for (const tenant of tenants) {
      const k = keysOf(this.#c, tenant);
      for (;;) {
        // The buckets whose earliest cvc is due; the script moves each bucket's entry on to its next.
        const buckets = await this.#c.call(() => this.#c.client.zrangebyscore(k.cvcDue, '-inf', String(ms), 'LIMIT', 0, PURGE_BUCKETS));
        if (buckets.length === 0) break;
        total += Number(await this.#c.eval(PURGE_CVC, [k.cvcDue, k.records, ...buckets.map((b) => `${k.cvcDue}:${b}`)], [String(ms), ...buckets], true));
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

  /** The ids a filter names (its id list, its fingerprint's tokens, or both), packed; null: none named. */
  async #idList(tenantId: string, f: TokenFilter): Promise<Buffer[] | null> {
    let ids = f.ids ? [...new Set(f.ids)].map(packId) : null;
    if (f.fingerprint !== undefined) {
      const k = keysOf(this.#c, tenantId);
      // The ids under the fingerprint's field; the records' own fingerprints are compared (matches).
      const packed = await this.#c.call(() => this.#c.client.hgetBuffer(k.fingerprints, fingerprintField(f.fingerprint!)));
      const byFp: Buffer[] = [];
      for (let i = 0; packed && i + 2 <= packed.length; ) {
        const n = packed.readUInt16BE(i);
        byFp.push(packed.subarray(i + 2, i + 2 + n));
        i += 2 + n;
      }
      ids = ids === null ? byFp : ids.filter((x) => byFp.some((y) => y.equals(x)));
    }
    return ids;
  }

  /**
   * Up to about `batch` ids of a source below `max` (a ZRANGE score bound), newest first, and
   * whether it may hold more below the last. A container is read a bucket at a time, whole
   * buckets, so what it returns is everything it has down to the last id returned.
   */
  async #below(d: Driver, max: string, batch: number): Promise<{ entries: { id: Buffer; seq: number }[]; more: boolean }> {
    const pairs = (flat: Buffer[]) => {
      const out: { id: Buffer; seq: number }[] = [];
      for (let j = 0; j < flat.length; j += 2) out.push({ id: flat[j]!, seq: Number(flat[j + 1]!.toString()) });
      return out;
    };
    if (d.kind === 'zset') {
      const flat = await this.#c.call(() => this.#c.client.zrevrangebyscoreBuffer(d.key, max, '-inf', 'WITHSCORES', 'LIMIT', 0, batch));
      return { entries: pairs(flat), more: flat.length >= batch * 2 };
    }
    const top = max === '+inf' ? '+inf' : String(Math.floor((Number(max.slice(1)) - 1) / BUCKET));
    let dirMax = top;
    const entries: { id: Buffer; seq: number }[] = [];
    const per = 8;
    while (entries.length < batch) {
      const from = dirMax;
      const buckets = await this.#c.call(() => this.#c.client.zrevrangebyscore(d.key, from, '-inf', 'LIMIT', 0, per));
      if (buckets.length === 0) return { entries, more: false };
      const chunks = await this.#c.pipeline((p) => buckets.forEach((b) => p.zrevrangebyscoreBuffer(`${d.key}:${b}`, max, '-inf', 'WITHSCORES')));
      for (const c of chunks) entries.push(...pairs(c as Buffer[]));
      if (buckets.length < per) return { entries, more: false };
      dirMax = `(${buckets[buckets.length - 1]}`;
    }
    return { entries, more: true };
  }

  /**
   * The sources to walk: the smallest search zset every match must be in (a metadata pair, a
   * search hash), or the containers the filter admits (scope and container prefix) when together
   * they are smaller (estimated from their bucket counts). So a key that may see few containers
   * reads those, not the tenant's every token. No admitted container: none. A type filter is
   * checked on the records.
   */
  async #drivers(tenantId: string, f: TokenFilter): Promise<Driver[]> {
    const k = keysOf(this.#c, tenantId);
    const candidates: Key[] = [];
    for (const [mk, mv] of Object.entries(f.metadata ?? {})) candidates.push(k.metadata(mk, mv));
    for (const h of f.index_hashes ?? []) candidates.push(k.indexHash(h));
    const all = await this.#c.call(() => this.#c.client.smembers(k.containers));
    const admitted = all.filter((c) => scopeAllows(f.scope, c) && (f.container === undefined || c.startsWith(f.container)));
    if (admitted.length === 0) return [];
    const containers: Driver[] = admitted.sort().map((c) => ({ kind: 'buckets', key: k.container(c) }));
    if (candidates.length === 0) return containers;
    const sized = [...candidates, ...containers.map((d) => d.key)];
    const sizes = (await this.#c.pipeline((p) => sized.forEach((z) => p.zcard(z)))).map(Number);
    let best = 0;
    for (let i = 1; i < candidates.length; i++) if (sizes[i]! < sizes[best]!) best = i;
    const union = sizes.slice(candidates.length).reduce((a, b) => a + b * BUCKET, 0);
    return union <= sizes[best]! ? containers : [{ kind: 'zset', key: candidates[best]! }];
  }

  /** Records (and their sequence numbers) by packed id, null where missing; expiry is not checked. */
  async #records(tenantId: string, ids: Buffer[]): Promise<(Found | null)[]> {
    if (ids.length === 0) return [];
    const k = keysOf(this.#c, tenantId);
    const raw = await this.#c.call(() => this.#c.client.hmgetBuffer(k.records, ...ids));
    const now = Date.now();
    return raw.map((v, i) => {
      if (!v) return null;
      const d = decodeRecord(tenantId, unpackId(ids[i]!), v);
      // A cvc past cvc_expires_at is never returned, whether or not purgeCvc has run yet.
      const record = d.record.cvc_sealed !== null && !cvcVisible(d.cvcExpiresMs, now) ? { ...d.record, cvc_sealed: null } : d.record;
      return { record, seq: d.seq, expiresMs: d.expiresMs };
    });
  }
}
