/**
 * The embedded store's token port, over format 6 (format.ts: binary ids,
 * ciphertext and digests, numbers into `dict` for the repeated strings, JSON only for the optional
 * fields present). The cvc is a separate column so purgeCvc can clear it without rewriting the
 * record. Side tables index search hashes and metadata pairs so a search is an index lookup, not a
 * scan. Reads run on this thread's connection, writes on the writer thread (connection.ts).
 */
import type Database from 'better-sqlite3';
import { checkPage, cvcVisible, decodeCursor, encodeCursor } from '../codec.js';
import type { InsertOptions, Page, PageResult, ScopeRule, StoredToken, TokenFilter, TokenPort } from '../types.js';
import type { EmbeddedConnection } from './connection.js';
import { cvcOf, Dict, fromRow, packHex, packId, ROW_COLUMNS, toColumns, type TokenRow } from './format.js';
import { encodeOp } from './wire.js';
import { LIVE, type WriteRow } from './writer.js';

type Row = TokenRow;
type Bound = Record<string, unknown>;

/** The caller's tenant as its dict number (a tenant that never wrote has none: no rows). */
const TENANT = 'tenant = @tenant';

/** Optional list conditions; a statement is prepared once per combination present. */
const LIST_CONDITIONS: ReadonlyArray<[keyof TokenFilter | 'after', string]> = [
  ['after', 'seq < @after'],
  ['type', 'type = (SELECT n FROM dict WHERE s = @type)'],
  ['container', 'container IN (SELECT n FROM dict WHERE substr(s, 1, length(@container)) = @container)'],
  ['fingerprint', 'fingerprint = @fingerprint'],
  [
    'metadata',
    `seq IN (SELECT m.seq FROM vault_meta m JOIN json_each(@metadata) j ON m.key = j.key AND m.value = j.value
      WHERE m.tenant = @tenant GROUP BY m.seq HAVING count(*) = @metadata_count)`,
  ],
  [
    'index_hashes',
    `seq IN (SELECT h.seq FROM vault_hashes h WHERE h.tenant = @tenant
      AND h.hash IN (SELECT tp_hex(value) FROM json_each(@hashes)) GROUP BY h.seq HAVING count(*) = @hashes_count)`,
  ],
  ['ids', 'id IN (SELECT tp_id(value) FROM json_each(@ids))'],
];

/** An encoded batch this long (about 1 MB) is posted to the writer on the next turn. */
const LARGE_FRAME = 1 << 20;

interface Statements {
  dict: Dict;
  get: Database.Statement<[Bound], Row>;
  getMany: Database.Statement<[Bound], Row>;
}

export class EmbeddedTokens implements TokenPort {
  readonly #c: EmbeddedConnection;
  readonly #listStatements = new Map<number, Database.Statement<[Bound], Row>>();
  /** Prepared on first use: a store opened for `tokenproxy migrate` has no format 6 tables yet. */
  #s: Statements | null = null;

  constructor(connection: EmbeddedConnection) {
    this.#c = connection;
  }

  get #statements(): Statements {
    if (this.#s) return this.#s;
    const db = this.#c.db;
    // Binary columns compared with values from JSON arrays (ids, hashes): the same packing as writes.
    db.function('tp_id', { deterministic: true }, (v: unknown) => (typeof v === 'string' ? packId(v) : v));
    db.function('tp_hex', { deterministic: true }, (v: unknown) => (typeof v === 'string' ? packHex(v) : v));
    this.#s = {
      dict: new Dict(db),
      get: db.prepare<[Bound], Row>(`SELECT ${ROW_COLUMNS} FROM vault_tokens WHERE ${TENANT} AND id = @id AND ${LIVE}`),
      getMany: db.prepare<[Bound], Row>(`SELECT ${ROW_COLUMNS} FROM vault_tokens WHERE ${TENANT} AND id IN (SELECT tp_id(value) FROM json_each(@ids)) AND ${LIVE}`),
    };
    return this.#s;
  }

  /** The tenant's dict number, or null when it never wrote a token (nothing to read). */
  #tenant(tenantId: string): number | null {
    return this.#statements.dict.find(tenantId);
  }

  /** One write of the next group commit (connection.ts writeFrame), like every write. */
  insertMany(records: StoredToken[], options: InsertOptions = {}): Promise<Array<StoredToken | null>> {
    let frame: string;
    try {
      const rows = records.map((r, i) => {
        const row = this.#row(r);
        if (options.dedupe?.[i] === true) row.dedupe = true;
        return row;
      });
      frame = encodeOp({ op: 'insert', rows });
    } catch (err) {
      return Promise.reject(err);
    }
    const write = () => this.#c.writeFrame(frame, (v) => {
      const now = Date.now();
      return records.map((_, i) => {
        // A deduplicated insert: the writer answers the existing token, its cvc as stored.
        const hit = Array.isArray(v) ? (v[i] as StoredToken | null | undefined) : null;
        if (!hit) return null;
        const cvcMs = hit.cvc_expires_at === null ? null : Date.parse(hit.cvc_expires_at);
        return { ...hit, cvc_sealed: cvcVisible(cvcMs, now) ? hit.cvc_sealed : null };
      });
    });
    // A large batch took tens of milliseconds to encode, and posting it to the writer copies it:
    // other requests run between the two (event-loop.test).
    return frame.length > LARGE_FRAME ? new Promise<void>((resolve) => setImmediate(resolve)).then(write) : write();
  }

  async get(tenantId: string, id: string): Promise<StoredToken | null> {
    const now = Date.now();
    const row = this.#c.run(() => {
      const tenant = this.#tenant(tenantId);
      return tenant === null ? undefined : this.#statements.get.get({ tenant, id: packId(id), now });
    });
    return row ? this.#decode(row, now) : null;
  }

  async getMany(tenantId: string, ids: string[]): Promise<StoredToken[]> {
    if (ids.length === 0) return [];
    const now = Date.now();
    const records = this.#c.run(() => {
      const tenant = this.#tenant(tenantId);
      const rows = tenant === null ? [] : this.#statements.getMany.all({ tenant, ids: JSON.stringify(ids), now });
      return rows.map((r) => this.#decode(r, now));
    });
    const byId = new Map(records.map((r) => [r.id, r]));
    const out: StoredToken[] = [];
    for (const id of new Set(ids)) {
      const r = byId.get(id);
      if (r) out.push(r);
    }
    return out;
  }

  async update(record: StoredToken): Promise<boolean> {
    const row = this.#row(record);
    return this.#c.write({ op: 'update', row }, (v) => v === true);
  }

  /** Removes the record; true only when it was live (an expired token counts as missing). */
  async delete(tenantId: string, id: string): Promise<boolean> {
    return this.#c.write({ op: 'delete', tenant_id: tenantId, id }, (v) => v === true);
  }

  async list(tenantId: string, filter: TokenFilter, page: Page): Promise<PageResult> {
    checkPage(page);
    if (filter.ids && filter.ids.length === 0) return { items: [], next: null };
    const now = Date.now();
    const after = page.after !== null ? decodeCursor(page.after) : null;
    const scope = filter.scope;
    if (scope !== undefined && !scope.some((r) => r.allow)) return { items: [], next: null };
    return this.#c.run(() => {
      const tenant = this.#tenant(tenantId);
      if (tenant === null) return { items: [], next: null };
      const params: Bound = { tenant, now, limit: page.size + 1 };
      const present = new Set<string>();
      const set = (name: string, values: Bound): void => {
        present.add(name);
        Object.assign(params, values);
      };
      if (after !== null) set('after', { after });
      if (filter.type !== undefined) set('type', { type: filter.type });
      if (filter.container !== undefined) set('container', { container: filter.container });
      if (filter.fingerprint !== undefined) set('fingerprint', { fingerprint: packHex(filter.fingerprint) });
      const pairs = Object.keys(filter.metadata ?? {}).length;
      if (pairs > 0) set('metadata', { metadata: JSON.stringify(filter.metadata), metadata_count: pairs });
      const hashes = [...new Set(filter.index_hashes ?? [])];
      if (hashes.length > 0) set('index_hashes', { hashes: JSON.stringify(hashes), hashes_count: hashes.length });
      if (filter.ids) set('ids', { ids: JSON.stringify(filter.ids) });
      if (scope !== undefined) scope.forEach((r, i) => Object.assign(params, { [`sp${i}`]: r.prefix, [`sa${i}`]: r.allow ? 1 : 0 }));
      const rows = this.#listStatement(present, scope).all(params);
      const items = rows.slice(0, page.size).map((r) => this.#decode(r, now));
      const next = rows.length > page.size ? encodeCursor(rows[page.size - 1]!.seq) : null;
      return { items, next };
    });
  }

  async purgeCvc(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeCvc: invalid date');
    return this.#c.write({ op: 'purgeCvc', now: ms }, (v) => (typeof v === 'number' ? v : 0));
  }

  /**
   * The list query for the conditions present; prepared once per combination and scope length.
   * The scope (the caller's permission filter) is a CASE over its prefixes in order: the first
   * that starts the container decides. It is evaluated once over the dict's containers (a few),
   * so SQLite skips what the caller may not see and a page is full.
   */
  #listStatement(present: Set<string>, scope: readonly ScopeRule[] | undefined): Database.Statement<[Bound], Row> {
    let mask = 0;
    LIST_CONDITIONS.forEach(([name], i) => {
      if (present.has(name)) mask |= 1 << i;
    });
    const cacheKey = mask + (scope === undefined ? 0 : (scope.length + 1) * (1 << LIST_CONDITIONS.length));
    let stmt = this.#listStatements.get(cacheKey);
    if (!stmt) {
      const where = [TENANT, LIVE, ...LIST_CONDITIONS.filter(([name]) => present.has(name)).map(([, sql]) => sql)];
      if (scope !== undefined) {
        const arms = scope.map((_, i) => `WHEN substr(s, 1, length(@sp${i})) = @sp${i} THEN @sa${i}`);
        where.push(`container IN (SELECT n FROM dict WHERE (CASE ${arms.join(' ')} ELSE 0 END) = 1)`);
      }
      stmt = this.#c.db.prepare<[Bound], Row>(`SELECT ${ROW_COLUMNS} FROM vault_tokens WHERE ${where.join(' AND ')} ORDER BY seq DESC LIMIT @limit`);
      this.#listStatements.set(cacheKey, stmt);
    }
    return stmt;
  }

  /** Encoded and validated here, so a bad date is a TypeError for this caller alone. */
  #row(r: StoredToken): WriteRow {
    return { tenant_id: r.tenant_id, id: r.id, index_hashes: r.index_hashes, metadata: r.metadata, columns: toColumns(r) };
  }

  #decode(row: Row, now: number): StoredToken {
    return fromRow(row, this.#statements.dict, cvcVisible(row.cvc_expires_ms, now) ? cvcOf(row) : null);
  }
}
