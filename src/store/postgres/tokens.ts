/**
 * Tokens in PostgreSQL (issue 24): insertMany, get, getMany, update, delete, list, purgeCvc.
 *
 * A batch is one transaction. Deduplication is a constraint: the token written by a
 * deduplicating insert holds its tenant's slot for (type, container, fingerprint)
 * (`dedupe_slot`, unique index tokens_dedupe), so of N concurrent identical inserts one writes and
 * the others wait on the index, then find its token. Before writing, the oldest live token of
 * that tenant, type, container and fingerprint (with or without the slot) is returned instead;
 * an expired slot holder gives the slot up first.
 *
 * Lists are one query: every filter, the caller's container scope (first matching prefix
 * decides) and expiry in SQL, newest first by `seq`, size + 1 rows to know whether a page follows.
 */
import type pg from 'pg';
import { checkPage, decodeCursor, encodeCursor, timeMs } from '../codec.js';
import { DuplicateTokenError, StoreUnavailableError, type InsertOptions, type Page, type PageResult, type StoredToken, type TokenFilter, type TokenPort } from '../types.js';
import { isUniqueViolation, query, transaction } from './pool.js';

const T = 'tokenproxy.tokens';

const COLUMNS = `seq, tenant_id, id, type, container, sealed, cvc_sealed, cvc_expires_at, cvc_expires_ms, metadata, search_indexes,
  index_hashes, fingerprint, fingerprint_expression, mask, created_by, created_at, modified_by, modified_at, expires_at`;

interface Row {
  seq: string;
  tenant_id: string;
  id: string;
  type: string;
  container: string;
  sealed: string;
  cvc_sealed: string | null;
  cvc_expires_at: string | null;
  cvc_expires_ms: string | null;
  metadata: Record<string, string>;
  search_indexes: string[];
  index_hashes: string[];
  fingerprint: string | null;
  fingerprint_expression: string | null;
  mask: string | null;
  created_by: string;
  created_at: string;
  modified_by: string | null;
  modified_at: string | null;
  expires_at: string | null;
}

/** Live at `now` (the parameter's number): never expired, or expiring later. */
const live = (now: string): string => `(expires_ms IS NULL OR expires_ms > ${now})`;

function decode(r: Row, now: number): StoredToken {
  if (typeof r.metadata !== 'object' || r.metadata === null || !Array.isArray(r.index_hashes)) {
    throw new StoreUnavailableError('a stored token record is corrupt');
  }
  // A cvc past cvc_expires_at is never returned, whether or not purgeCvc has run yet.
  const cvcLive = r.cvc_expires_ms === null || Number(r.cvc_expires_ms) > now;
  return {
    tenant_id: r.tenant_id, id: r.id, type: r.type, container: r.container, sealed: r.sealed,
    cvc_sealed: cvcLive ? r.cvc_sealed : null, cvc_expires_at: r.cvc_expires_at, metadata: r.metadata,
    search_indexes: r.search_indexes, index_hashes: r.index_hashes, fingerprint: r.fingerprint,
    fingerprint_expression: r.fingerprint_expression, mask: r.mask, created_by: r.created_by, created_at: r.created_at,
    modified_by: r.modified_by, modified_at: r.modified_at, expires_at: r.expires_at,
  };
}

/** The values of every column but seq and dedupe_slot, in INSERT_COLUMNS order; validates dates. */
function values(r: StoredToken): unknown[] {
  return [
    r.tenant_id, r.id, r.type, r.container, r.sealed, r.cvc_sealed, r.cvc_expires_at, timeMs(r.cvc_expires_at, 'cvc_expires_at'),
    JSON.stringify(r.metadata), r.search_indexes, r.index_hashes, r.fingerprint, r.fingerprint_expression, r.mask,
    r.created_by, r.created_at, r.modified_by, r.modified_at, r.expires_at, timeMs(r.expires_at, 'expires_at'),
  ];
}
const INSERT_COLUMNS = `tenant_id, id, type, container, sealed, cvc_sealed, cvc_expires_at, cvc_expires_ms, metadata, search_indexes,
  index_hashes, fingerprint, fingerprint_expression, mask, created_by, created_at, modified_by, modified_at, expires_at, expires_ms`;
const PLACEHOLDERS = Array.from({ length: 20 }, (_, i) => `$${i + 1}`).join(', ');

/** The first id that repeats in the batch, or null. */
function repeatedId(records: readonly StoredToken[]): string | null {
  const seen = new Set<string>();
  for (const r of records) {
    const k = `${r.tenant_id}\u0000${r.id}`;
    if (seen.has(k)) return r.id;
    seen.add(k);
  }
  return null;
}

export class PostgresTokens implements TokenPort {
  constructor(private readonly pool: pg.Pool) {}

  async insertMany(records: StoredToken[], options: InsertOptions = {}): Promise<Array<StoredToken | null>> {
    if (records.length === 0) return [];
    const rows = records.map(values); // a bad date: TypeError, before anything is sent
    const twice = repeatedId(records);
    if (twice !== null) throw new DuplicateTokenError(twice);
    try {
      return await transaction(this.pool, async (c) => {
        const out: Array<StoredToken | null> = [];
        for (const [i, r] of records.entries()) {
          const dedupe = options.dedupe?.[i] === true && r.fingerprint !== null;
          out.push(dedupe ? await this.#insertDeduplicated(c, r, rows[i]!) : await this.#insert(c, rows[i]!, false));
        }
        return out;
      });
    } catch (err) {
      if (err instanceof StoreUnavailableError && isUniqueViolation(err.cause, 'tokens_tenant_id')) {
        // Which id: asked after the rollback (pg's detail quotes it, but is not parsed).
        const taken = await query<{ id: string }>(this.pool, `SELECT id FROM ${T} WHERE tenant_id = $1 AND id = ANY($2::text[]) LIMIT 1`,
          [records[0]!.tenant_id, records.filter((r) => r.tenant_id === records[0]!.tenant_id).map((r) => r.id)]);
        throw new DuplicateTokenError(taken.rows[0]?.id ?? records[0]!.id);
      }
      throw err;
    }
  }

  async #insert(c: pg.PoolClient, row: unknown[], slot: boolean): Promise<null> {
    await c.query(`INSERT INTO ${T} (${INSERT_COLUMNS}, dedupe_slot) VALUES (${PLACEHOLDERS}, ${slot})`, row);
    return null;
  }

  async #oldestLive(c: pg.PoolClient, r: StoredToken): Promise<StoredToken | null> {
    const now = Date.now();
    const hit = await c.query<Row>(
      `SELECT ${COLUMNS} FROM ${T} WHERE tenant_id = $1 AND fingerprint = $2 AND type = $3 AND container = $4 AND ${live('$5')}
       ORDER BY seq LIMIT 1`,
      [r.tenant_id, r.fingerprint, r.type, r.container, now],
    );
    return hit.rows[0] ? decode(hit.rows[0], now) : null;
  }

  /** The oldest live match, or this record written holding the slot. */
  async #insertDeduplicated(c: pg.PoolClient, r: StoredToken, row: unknown[]): Promise<StoredToken | null> {
    for (let attempt = 0; attempt < 10; attempt++) {
      const hit = await this.#oldestLive(c, r);
      if (hit) return hit;
      // No live token: an expired slot holder gives the slot up. Only an expired one: this
      // statement sees what committed since the read above (READ COMMITTED), and a live holder
      // committed meanwhile by a concurrent insert keeps its slot (the insert below then finds it).
      await c.query(
        `UPDATE ${T} SET dedupe_slot = false WHERE tenant_id = $1 AND type = $2 AND container = $3 AND fingerprint = $4 AND dedupe_slot
         AND expires_ms <= $5`,
        [r.tenant_id, r.type, r.container, r.fingerprint, Date.now()],
      );
      // Waits on the unique index for a concurrent insert of the same slot; when that one
      // commits, nothing is written here and the next round returns its token.
      const written = await c.query(
        `INSERT INTO ${T} (${INSERT_COLUMNS}, dedupe_slot) VALUES (${PLACEHOLDERS}, true)
         ON CONFLICT (tenant_id, type, container, fingerprint) WHERE dedupe_slot DO NOTHING RETURNING seq`,
        row,
      );
      if (written.rowCount === 1) return null;
    }
    throw new StoreUnavailableError('the deduplication slot kept changing; nothing was written');
  }

  async get(tenantId: string, id: string): Promise<StoredToken | null> {
    const now = Date.now();
    const r = await query<Row>(this.pool, `SELECT ${COLUMNS} FROM ${T} WHERE tenant_id = $1 AND id = $2 AND ${live('$3')}`, [tenantId, id, now]);
    return r.rows[0] ? decode(r.rows[0], now) : null;
  }

  async getMany(tenantId: string, ids: string[]): Promise<StoredToken[]> {
    if (ids.length === 0) return [];
    const now = Date.now();
    const r = await query<Row>(this.pool, `SELECT ${COLUMNS} FROM ${T} WHERE tenant_id = $1 AND id = ANY($2::text[]) AND ${live('$3')}`, [tenantId, ids, now]);
    const byId = new Map(r.rows.map((row) => [row.id, row]));
    const out: StoredToken[] = [];
    for (const id of new Set(ids)) {
      const row = byId.get(id);
      if (row) out.push(decode(row, now));
    }
    return out;
  }

  /**
   * Replaces a live record in place (its seq, so its place in lists, stays). A token whose type,
   * container or fingerprint changes gives up its deduplication slot.
   */
  async update(record: StoredToken): Promise<boolean> {
    const v = values(record);
    const r = await query(
      this.pool,
      `UPDATE ${T} SET dedupe_slot = dedupe_slot AND type = $3 AND container = $4 AND fingerprint IS NOT DISTINCT FROM $12,
         type = $3, container = $4, sealed = $5, cvc_sealed = $6, cvc_expires_at = $7, cvc_expires_ms = $8, metadata = $9,
         search_indexes = $10, index_hashes = $11, fingerprint = $12, fingerprint_expression = $13, mask = $14, created_by = $15,
         created_at = $16, modified_by = $17, modified_at = $18, expires_at = $19, expires_ms = $20
       WHERE tenant_id = $1 AND id = $2 AND ${live('$21')}`,
      [...v, Date.now()],
    );
    return r.rowCount === 1;
  }

  /** True only when it was live (an expired token counts as missing); removed either way. */
  async delete(tenantId: string, id: string): Promise<boolean> {
    const r = await query<{ expires_ms: string | null }>(this.pool, `DELETE FROM ${T} WHERE tenant_id = $1 AND id = $2 RETURNING expires_ms`, [tenantId, id]);
    const row = r.rows[0];
    return row !== undefined && (row.expires_ms === null || Number(row.expires_ms) > Date.now());
  }

  async list(tenantId: string, filter: TokenFilter, page: Page): Promise<PageResult> {
    checkPage(page);
    if (filter.ids && filter.ids.length === 0) return { items: [], next: null };
    const scope = filter.scope;
    if (scope !== undefined && !scope.some((r) => r.allow)) return { items: [], next: null };
    const now = Date.now();
    const params: unknown[] = [tenantId, now];
    const p = (v: unknown): string => {
      params.push(v);
      return `$${params.length}`;
    };
    const where = ['tenant_id = $1', live('$2')];
    if (page.after !== null) where.push(`seq < ${p(decodeCursor(page.after))}`);
    if (filter.type !== undefined) where.push(`type = ${p(filter.type)}`);
    if (filter.container !== undefined) where.push(`starts_with(container, ${p(filter.container)})`);
    if (filter.fingerprint !== undefined) where.push(`fingerprint = ${p(filter.fingerprint)}`);
    if (filter.metadata && Object.keys(filter.metadata).length > 0) where.push(`metadata @> ${p(JSON.stringify(filter.metadata))}::jsonb`);
    const hashes = [...new Set(filter.index_hashes ?? [])];
    if (hashes.length > 0) where.push(`index_hashes @> ${p(hashes)}::text[]`);
    if (filter.ids) where.push(`id = ANY(${p(filter.ids)}::text[])`);
    if (scope !== undefined) {
      // The caller's permission filter: the first prefix that starts the container decides.
      const arms = scope.map((r) => `WHEN starts_with(container, ${p(r.prefix)}) THEN ${r.allow ? 'true' : 'false'}`);
      where.push(`(CASE ${arms.join(' ')} ELSE false END)`);
    }
    const r = await query<Row>(this.pool, `SELECT ${COLUMNS} FROM ${T} WHERE ${where.join(' AND ')} ORDER BY seq DESC LIMIT ${p(page.size + 1)}`, params);
    const items = r.rows.slice(0, page.size).map((row) => decode(row, now));
    const next = r.rows.length > page.size ? encodeCursor(Number(r.rows[page.size - 1]!.seq)) : null;
    return { items, next };
  }

  async purgeCvc(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeCvc: invalid date');
    const r = await query(this.pool, `UPDATE ${T} SET cvc_sealed = NULL WHERE cvc_sealed IS NOT NULL AND cvc_expires_ms <= $1`, [ms]);
    return r.rowCount ?? 0;
  }
}
