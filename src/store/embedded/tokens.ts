/**
 * The embedded store's token port (issue 24 item 5). Columns hold what is filtered on; the record
 * itself is JSON, the cvc a separate column so purgeCvc can clear it without rewriting the record.
 * Side tables index search hashes and metadata pairs so a search is an index lookup, not a scan.
 * Reads run on this thread's connection, writes on the writer thread (connection.ts).
 */
import type Database from 'better-sqlite3';
import { checkPage, cvcVisible, decodeCursor, decodeRecord, encodeCursor, encodeRecord, timeMs } from '../codec.js';
import type { InsertOptions, Page, PageResult, ScopeRule, StoredToken, TokenFilter, TokenPort } from '../types.js';
import type { EmbeddedConnection } from './connection.js';
import { encodeOp } from './wire.js';
import { LIVE, type Params, type StoredRow, type WriteRow } from './writer.js';

const COLUMNS = 'seq, record, cvc_sealed, cvc_expires_ms';

type Row = StoredRow;

/** The deduplication slot of a record: its type, container and fingerprint (null without one). */
function dedupeKey(r: StoredToken): string | null {
  return r.fingerprint === null ? null : JSON.stringify([r.type, r.container, r.fingerprint]);
}

/** Optional list conditions; a statement is prepared once per combination present. */
const LIST_CONDITIONS: ReadonlyArray<[keyof TokenFilter | 'after', string]> = [
  ['after', 'seq < @after'],
  ['type', 'type = @type'],
  ['container', 'substr(container, 1, length(@container)) = @container'],
  ['fingerprint', 'fingerprint = @fingerprint'],
  [
    'metadata',
    `seq IN (SELECT m.seq FROM token_metadata m JOIN json_each(@metadata) j ON m.key = j.key AND m.value = j.value
      WHERE m.tenant_id = @tenant GROUP BY m.seq HAVING count(*) = @metadata_count)`,
  ],
  [
    'index_hashes',
    `seq IN (SELECT h.seq FROM token_index_hashes h WHERE h.tenant_id = @tenant
      AND h.hash IN (SELECT value FROM json_each(@hashes)) GROUP BY h.seq HAVING count(*) = @hashes_count)`,
  ],
  ['ids', 'id IN (SELECT value FROM json_each(@ids))'],
];

/** An encoded batch this long (about 1 MB) is posted to the writer on the next turn. */
const LARGE_FRAME = 1 << 20;

export class EmbeddedTokens implements TokenPort {
  readonly #c: EmbeddedConnection;
  readonly #listStatements = new Map<number, Database.Statement<[Params], Row>>();
  readonly #get: Database.Statement<[Params], Row>;
  readonly #getMany: Database.Statement<[Params], Row & { id: string }>;

  constructor(connection: EmbeddedConnection) {
    this.#c = connection;
    this.#get = connection.db.prepare<[Params], Row>(`SELECT ${COLUMNS} FROM tokens WHERE tenant_id = @tenant AND id = @id AND ${LIVE}`);
    this.#getMany = connection.db.prepare<[Params], Row & { id: string }>(
      `SELECT id, ${COLUMNS} FROM tokens WHERE tenant_id = @tenant AND id IN (SELECT value FROM json_each(@ids)) AND ${LIVE}`,
    );
  }

  /** One write of the next group commit (connection.ts writeFrame), like every write. */
  insertMany(records: StoredToken[], options: InsertOptions = {}): Promise<Array<StoredToken | null>> {
    let frame: string;
    try {
      const rows = records.map((r, i) => {
        const dedupe = options.dedupe?.[i] === true;
        const row = this.#row(r, dedupe);
        if (dedupe) row.dedupe = true;
        return row;
      });
      frame = encodeOp({ op: 'insert', rows });
    } catch (err) {
      return Promise.reject(err);
    }
    const write = () => this.#c.writeFrame(frame, (v) => {
      const now = Date.now();
      return records.map((_, i) => {
        const hit = Array.isArray(v) ? (v[i] as Row | null | undefined) : null;
        return hit ? this.#decode(hit, now) : null;
      });
    });
    // A large batch took tens of milliseconds to encode, and posting it to the writer copies it:
    // other requests run between the two (event-loop.test).
    return frame.length > LARGE_FRAME ? new Promise<void>((resolve) => setImmediate(resolve)).then(write) : write();
  }

  async get(tenantId: string, id: string): Promise<StoredToken | null> {
    const now = Date.now();
    const row = this.#c.run(() => this.#get.get({ tenant: tenantId, id, now }));
    return row ? this.#decode(row, now) : null;
  }

  async getMany(tenantId: string, ids: string[]): Promise<StoredToken[]> {
    if (ids.length === 0) return [];
    const now = Date.now();
    const rows = this.#c.run(() => this.#getMany.all({ tenant: tenantId, ids: JSON.stringify(ids), now }));
    const byId = new Map(rows.map((r) => [r.id, r]));
    const out: StoredToken[] = [];
    for (const id of new Set(ids)) {
      const row = byId.get(id);
      if (row) out.push(this.#decode(row, now));
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
    const params: Params = { tenant: tenantId, now, limit: page.size + 1 };
    const present = new Set<string>();
    const set = (name: string, values: Params): void => {
      present.add(name);
      Object.assign(params, values);
    };
    if (page.after !== null) set('after', { after: decodeCursor(page.after) });
    if (filter.type !== undefined) set('type', { type: filter.type });
    if (filter.container !== undefined) set('container', { container: filter.container });
    if (filter.fingerprint !== undefined) set('fingerprint', { fingerprint: filter.fingerprint });
    const pairs = Object.keys(filter.metadata ?? {}).length;
    if (pairs > 0) set('metadata', { metadata: JSON.stringify(filter.metadata), metadata_count: pairs });
    const hashes = [...new Set(filter.index_hashes ?? [])];
    if (hashes.length > 0) set('index_hashes', { hashes: JSON.stringify(hashes), hashes_count: hashes.length });
    if (filter.ids) set('ids', { ids: JSON.stringify(filter.ids) });
    const scope = filter.scope;
    if (scope !== undefined) {
      if (!scope.some((r) => r.allow)) return { items: [], next: null };
      scope.forEach((r, i) => Object.assign(params, { [`sp${i}`]: r.prefix, [`sa${i}`]: r.allow ? 1 : 0 }));
    }
    const rows = this.#c.run(() => this.#listStatement(present, scope).all(params));
    const items = rows.slice(0, page.size).map((r) => this.#decode(r, now));
    const next = rows.length > page.size ? encodeCursor(rows[page.size - 1].seq) : null;
    return { items, next };
  }

  async purgeCvc(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeCvc: invalid date');
    return this.#c.write({ op: 'purgeCvc', now: ms }, (v) => (typeof v === 'number' ? v : 0));
  }

  /**
   * The list query for the conditions present; prepared once per combination and scope length.
   * The scope (the caller's permission filter) is a CASE over its prefixes in order: the first
   * that starts the container decides, so SQLite skips what the caller may not see and a page
   * is full.
   */
  #listStatement(present: Set<string>, scope: readonly ScopeRule[] | undefined): Database.Statement<[Params], Row> {
    let mask = 0;
    LIST_CONDITIONS.forEach(([name], i) => {
      if (present.has(name)) mask |= 1 << i;
    });
    const cacheKey = mask + (scope === undefined ? 0 : (scope.length + 1) * (1 << LIST_CONDITIONS.length));
    let stmt = this.#listStatements.get(cacheKey);
    if (!stmt) {
      const where = ['tenant_id = @tenant', LIVE, ...LIST_CONDITIONS.filter(([name]) => present.has(name)).map(([, sql]) => sql)];
      if (scope !== undefined) {
        const arms = scope.map((_, i) => `WHEN substr(container, 1, length(@sp${i})) = @sp${i} THEN @sa${i}`);
        where.push(`(CASE ${arms.join(' ')} ELSE 0 END) = 1`);
      }
      stmt = this.#c.db.prepare<[Params], Row>(`SELECT ${COLUMNS} FROM tokens WHERE ${where.join(' AND ')} ORDER BY seq DESC LIMIT @limit`);
      this.#listStatements.set(cacheKey, stmt);
    }
    return stmt;
  }

  /** Encoded and validated here, so a bad date is a TypeError for this caller alone. */
  /** `withDedupeKey`: an insert without deduplication stores no slot, so its key is not built. */
  #row(r: StoredToken, withDedupeKey = true): WriteRow {
    const params: Params = {
      tenant: r.tenant_id,
      id: r.id,
      type: r.type,
      container: r.container,
      fingerprint: r.fingerprint,
      expires_ms: timeMs(r.expires_at, 'expires_at'),
      cvc_sealed: r.cvc_sealed,
      cvc_expires_ms: timeMs(r.cvc_expires_at, 'cvc_expires_at'),
      record: encodeRecord(r),
      dedupe_key: withDedupeKey ? dedupeKey(r) : null,
    };
    return { tenant_id: r.tenant_id, id: r.id, index_hashes: r.index_hashes, metadata: r.metadata, params };
  }

  #decode(row: Row, now: number): StoredToken {
    return decodeRecord(row.record, cvcVisible(row.cvc_expires_ms, now) ? row.cvc_sealed : null);
  }
}
