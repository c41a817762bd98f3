/**
 * Tokens in PostgreSQL: insertMany, get, getMany, update, delete, list, purgeCvc.
 *
 * A batch is all or nothing: with no deduplicating record, one multi-row INSERT shared with
 * concurrent batches (insert-batcher.ts); one deduplicating record, its match and its insert as
 * statements of their own; otherwise one transaction. Deduplication is a constraint: the token written by a
 * deduplicating insert holds its tenant's slot for (type, container, fingerprint)
 * (`dedupe_slot`, unique index tokens_dedupe), so of N concurrent identical inserts one writes and
 * the others wait on the index, then find its token. Before writing, the oldest live token of
 * that tenant, type, container and fingerprint (with or without the slot) is returned instead;
 * an expired slot holder gives the slot up first.
 *
 * The row is the compact format of schema version 2 (wire.ts, names.ts): the tenant and the
 * repeated names are numbers, ciphertext and digests bytea, the id a uuid (or custom_id), times
 * epoch ms; a query names its tenant, so rows carry no tenant id to decode.
 *
 * Lists are one query: every filter, the caller's container scope (first matching prefix
 * decides) and expiry in SQL, newest first by `seq`, size + 1 rows to know whether a page follows.
 */
import type pg from 'pg';
import { checkPage, decodeCursor, encodeCursor } from '../codec.js';
import { DuplicateTokenError, StoreUnavailableError, type InsertOptions, type Page, type PageResult, type StoredToken, type TokenFilter, type TokenPort } from '../types.js';
import { Names } from './names.js';
import { InsertBatcher, MAX_ROWS } from './insert-batcher.js';
import { isUniqueViolation, query, transaction } from './pool.js';
import {
  decodeDigest, decodeExpression, decodeMetadata, decodeSealed, decodeSearchIndexes, decodeTime, encodeDigest, encodeExpression, encodeMetadata,
  encodeSealed, encodeSearchIndexes, encodeTime, metadataFilter, splitId, splitIds,
} from './wire.js';

const T = 'tokenproxy.tokens';

const COLUMNS = `seq, id, custom_id, type, container, sealed, cvc_sealed, cvc_expires_ms, cvc_expires_text, metadata, search_indexes,
  index_hashes, fingerprint, fingerprint_expression, mask, created_by, created_ms, created_text, modified_by, modified_ms, modified_text,
  expires_ms, expires_text`;

interface Row {
  seq: string;
  id: string | null;
  custom_id: string | null;
  type: string;
  container: string;
  sealed: Buffer;
  cvc_sealed: Buffer | null;
  cvc_expires_ms: string | null;
  cvc_expires_text: string | null;
  /** An object, or the escaped form (wire.ts, decodeMetadata). */
  metadata: unknown;
  /** The list, or [null, its JSON text] (wire.ts, encodeSearchIndexes). */
  search_indexes: Array<string | null> | null;
  index_hashes: Buffer[] | null;
  fingerprint: Buffer | null;
  /** Names' numbers, negated for an escaped expression (wire.ts, encodeExpression). */
  fingerprint_expression: number | null;
  mask: number | null;
  created_by: number;
  created_ms: string;
  created_text: string | null;
  modified_by: number | null;
  modified_ms: string | null;
  modified_text: string | null;
  expires_ms: string | null;
  expires_text: string | null;
}

/** Live at `now` (the parameter's number): never expired, or expiring later. */
const live = (now: string): string => `(expires_ms IS NULL OR expires_ms > ${now})`;

/** A row's id condition: `$n` the uuid, `$m` the custom id (one of them null). */
const idIs = (uuid: string, custom: string): string => `(id = ${uuid}::uuid OR custom_id = ${custom}::text)`;

function nameOf(names: Map<number, string>, no: number | null): string | null {
  if (no === null) return null;
  const n = names.get(no);
  if (n === undefined) throw new StoreUnavailableError('a stored token record is corrupt');
  return n;
}

/** The name an expression is numbered under (its JSON text when PostgreSQL's text cannot hold it). */
const expressionName = (s: string | null): string | null => (s === null ? null : encodeExpression(s).name);

/** An expression's number as the row holds it: negated when the name is its escaped form. */
function expressionNo(dict: Map<string, number>, s: string | null): number | null {
  if (s === null) return null;
  const { name, escaped } = encodeExpression(s);
  const no = dict.get(name)!;
  return escaped ? -no : no;
}

const unsigned = (no: number | null): number | null => (no === null ? null : Math.abs(no));

function expressionOf(names: Map<number, string>, no: number | null): string | null {
  if (no === null) return null;
  const s = decodeExpression(nameOf(names, unsigned(no))!, no < 0);
  if (s === null) throw new StoreUnavailableError('a stored token record is corrupt');
  return s;
}

/** The names a record's row refers to, for Names.numbers. */
const namesOf = (r: StoredToken): Array<string | null> =>
  [r.tenant_id, expressionName(r.fingerprint_expression), expressionName(r.mask), r.created_by, r.modified_by];

/** The rows' records (their names read in one go). */
async function decodeRows(names: Names, tenantId: string, rows: Row[], now: number): Promise<StoredToken[]> {
  const dict = await names.names(rows.flatMap((r) => [unsigned(r.fingerprint_expression), unsigned(r.mask), r.created_by, r.modified_by]));
  return rows.map((r) => {
    const id = r.id ?? r.custom_id;
    const searchIndexes = decodeSearchIndexes(r.search_indexes);
    if (id === null || !Buffer.isBuffer(r.sealed) || searchIndexes === null) throw new StoreUnavailableError('a stored token record is corrupt');
    // A cvc past cvc_expires_at is never returned, whether or not purgeCvc has run yet.
    const cvcLive = r.cvc_expires_ms === null || Number(r.cvc_expires_ms) > now;
    return {
      tenant_id: tenantId, id, type: r.type, container: r.container, sealed: decodeSealed(r.sealed),
      cvc_sealed: cvcLive && r.cvc_sealed !== null ? decodeSealed(r.cvc_sealed) : null,
      cvc_expires_at: decodeTime(r.cvc_expires_ms, r.cvc_expires_text), metadata: decodeMetadata(r.metadata),
      search_indexes: searchIndexes, index_hashes: (r.index_hashes ?? []).map(decodeDigest),
      fingerprint: r.fingerprint === null ? null : decodeDigest(r.fingerprint),
      fingerprint_expression: expressionOf(dict, r.fingerprint_expression), mask: expressionOf(dict, r.mask),
      created_by: nameOf(dict, r.created_by)!, created_at: decodeTime(r.created_ms, r.created_text)!,
      modified_by: nameOf(dict, r.modified_by), modified_at: decodeTime(r.modified_ms, r.modified_text), expires_at: decodeTime(r.expires_ms, r.expires_text),
    };
  });
}

/** The values of every column but seq and dedupe_slot, in INSERT_COLUMNS order; validates dates first. */
function values(r: StoredToken, tenant: number, dict: Map<string, number>): unknown[] {
  const created = encodeTime(r.created_at, 'created_at');
  const modified = encodeTime(r.modified_at, 'modified_at');
  const expires = encodeTime(r.expires_at, 'expires_at');
  const cvcExpires = encodeTime(r.cvc_expires_at, 'cvc_expires_at');
  const { uuid, custom } = splitId(r.id);
  const no = (n: string | null): number | null => (n === null ? null : dict.get(n)!);
  return [
    tenant, uuid, custom, r.type, r.container, encodeSealed(r.sealed), r.cvc_sealed === null ? null : encodeSealed(r.cvc_sealed),
    cvcExpires.ms, cvcExpires.text, encodeMetadata(r.metadata),
    encodeSearchIndexes(r.search_indexes), r.index_hashes.length === 0 ? null : r.index_hashes.map(encodeDigest),
    r.fingerprint === null ? null : encodeDigest(r.fingerprint), expressionNo(dict, r.fingerprint_expression), expressionNo(dict, r.mask), no(r.created_by),
    created.ms, created.text, no(r.modified_by), modified.ms, modified.text, expires.ms, expires.text,
  ];
}
const INSERT_COLUMNS = `tenant, id, custom_id, type, container, sealed, cvc_sealed, cvc_expires_ms, cvc_expires_text, metadata, search_indexes,
  index_hashes, fingerprint, fingerprint_expression, mask, created_by, created_ms, created_text, modified_by, modified_ms, modified_text,
  expires_ms, expires_text`;
const PLACEHOLDERS = Array.from({ length: 23 }, (_, i) => `$${i + 1}`).join(', ');

/** The INSERT of n plain rows (no deduplication slot), cached per row count. */
const insertTexts = new Map<number, string>();
function insertText(n: number): string {
  let text = insertTexts.get(n);
  if (text === undefined) {
    const tuples = Array.from({ length: n }, (_, r) => `(${Array.from({ length: 23 }, (_, i) => `$${r * 23 + i + 1}`).join(', ')}, false)`);
    text = `INSERT INTO ${T} (${INSERT_COLUMNS}, dedupe_slot) VALUES ${tuples.join(', ')}`;
    if (insertTexts.size < MAX_ROWS) insertTexts.set(n, text);
  }
  return text;
}

/** Validates the dates of every record before anything is sent (TypeError). */
function checkDates(records: readonly StoredToken[]): void {
  for (const r of records) {
    encodeTime(r.created_at, 'created_at');
    encodeTime(r.modified_at, 'modified_at');
    encodeTime(r.expires_at, 'expires_at');
    encodeTime(r.cvc_expires_at, 'cvc_expires_at');
  }
}

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
  readonly #names: Names;

  readonly #plain: InsertBatcher;

  constructor(private readonly pool: pg.Pool) {
    this.#names = new Names(pool);
    // Half the pool for plain inserts: batches queued behind them share the next
    // statement, and the other half stays free for reads and deduplicating writes.
    this.#plain = new InsertBatcher(pool, insertText, Math.max(1, Math.floor(pool.options.max / 2)));
  }

  async insertMany(records: StoredToken[], options: InsertOptions = {}): Promise<Array<StoredToken | null>> {
    if (records.length === 0) return [];
    checkDates(records); // a bad date: TypeError, before anything is sent
    const twice = repeatedId(records);
    if (twice !== null) throw new DuplicateTokenError(twice);
    // Numbered before the transaction (names.ts): a rolled-back batch leaves no stale cache entry.
    const dict = await this.#names.numbers(records.flatMap(namesOf));
    const rows = records.map((r) => values(r, dict.get(r.tenant_id)!, dict));
    const plain = !records.some((r, i) => options.dedupe?.[i] === true && r.fingerprint !== null);
    try {
      // No deduplication: one INSERT statement, its own transaction, shared with concurrent
      // batches (insert-batcher.ts): one round trip instead of BEGIN, INSERTs, COMMIT.
      if (plain && rows.length <= MAX_ROWS) {
        await this.#plain.insert(rows);
        return records.map(() => null);
      }
      // One deduplicating record: its statements on their own, no BEGIN/COMMIT. Each
      // is atomic, and with one record there is nothing to roll back with it: a match is a read,
      // giving up an expired slot is right whatever follows, and the insert is one statement.
      if (records.length === 1) return [await this.#insertDeduplicated(this.pool, records[0]!, rows[0]!)];
      return await transaction(this.pool, async (c) => {
        const out: Array<StoredToken | null> = [];
        for (const [i, r] of records.entries()) {
          const dedupe = options.dedupe?.[i] === true && r.fingerprint !== null;
          out.push(dedupe ? await this.#insertDeduplicated(c, r, rows[i]!) : await this.#insert(c, rows[i]!));
        }
        return out;
      });
    } catch (err) {
      if (err instanceof StoreUnavailableError && (isUniqueViolation(err.cause, 'tokens_tenant_id') || isUniqueViolation(err.cause, 'tokens_tenant_custom_id'))) {
        // Which id: asked after the rollback (pg's detail quotes it, but is not parsed).
        const first = records[0]!.tenant_id;
        const same = records.filter((r) => r.tenant_id === first).map((r) => r.id);
        const { uuids, customs } = splitIds(same);
        const taken = await query<{ id: string | null; custom_id: string | null }>(this.pool,
          `SELECT id, custom_id FROM ${T} WHERE tenant = $1 AND (id = ANY($2::uuid[]) OR custom_id = ANY($3::text[])) LIMIT 1`,
          [dict.get(first)!, uuids, customs]);
        const row = taken.rows[0];
        throw new DuplicateTokenError(row ? (row.id ?? row.custom_id)! : records[0]!.id);
      }
      throw err;
    }
  }

  async #insert(c: pg.PoolClient, row: unknown[]): Promise<null> {
    await c.query(`INSERT INTO ${T} (${INSERT_COLUMNS}, dedupe_slot) VALUES (${PLACEHOLDERS}, false)`, row);
    return null;
  }

  /**
   * One prepared statement (`name`: parsed and planned once per connection) on this transaction's
   * client, or on any pooled connection (its own transaction; failures become StoreUnavailableError).
   */
  async #run<R extends pg.QueryResultRow>(on: pg.PoolClient | pg.Pool, name: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    if (on !== this.pool) return on.query<R>({ name, text, values });
    return query<R>(this.pool, { name, text, values });
  }

  /**
   * The oldest live token of the record's tenant, type, container and fingerprint; when there is
   * none, an expired slot holder gives the slot up in the same statement (one round
   * trip, not two). Only an expired one: a live holder committed meanwhile by a concurrent insert
   * keeps its slot (the insert that follows then finds it). A data-modifying WITH runs whether or
   * not the query reads it.
   */
  async #oldestLiveOrRelease(on: pg.PoolClient | pg.Pool, r: StoredToken, tenant: number): Promise<StoredToken | null> {
    const now = Date.now();
    const hit = await this.#run<Row>(on, 'tokenproxy_dedupe_match',
      `WITH hit AS (
         SELECT ${COLUMNS} FROM ${T} WHERE tenant = $1 AND fingerprint = $2 AND type = $3 AND container = $4 AND ${live('$5')}
         ORDER BY seq LIMIT 1
       ), released AS (
         UPDATE ${T} SET dedupe_slot = false WHERE tenant = $1 AND type = $3 AND container = $4 AND fingerprint = $2 AND dedupe_slot
         AND expires_ms <= $5 AND NOT EXISTS (SELECT 1 FROM hit)
       )
       SELECT * FROM hit`,
      [tenant, encodeDigest(r.fingerprint!), r.type, r.container, now],
    );
    return hit.rows[0] ? (await decodeRows(this.#names, r.tenant_id, hit.rows, now))[0]! : null;
  }

  /** The oldest live match, or this record written holding the slot. */
  async #insertDeduplicated(on: pg.PoolClient | pg.Pool, r: StoredToken, row: unknown[]): Promise<StoredToken | null> {
    const tenant = row[0] as number;
    for (let attempt = 0; attempt < 10; attempt++) {
      const hit = await this.#oldestLiveOrRelease(on, r, tenant);
      if (hit) return hit;
      // Waits on the unique index for a concurrent insert of the same slot; when that one
      // commits, nothing is written here and the next round returns its token.
      const written = await this.#run(on, 'tokenproxy_dedupe_insert',
        `INSERT INTO ${T} (${INSERT_COLUMNS}, dedupe_slot) VALUES (${PLACEHOLDERS}, true)
         ON CONFLICT (tenant, type, container, fingerprint) WHERE dedupe_slot DO NOTHING RETURNING seq`,
        row,
      );
      if (written.rowCount === 1) return null;
    }
    throw new StoreUnavailableError('the deduplication slot kept changing; nothing was written');
  }

  async get(tenantId: string, id: string): Promise<StoredToken | null> {
    const tenant = await this.#names.find(tenantId);
    if (tenant === null) return null;
    const now = Date.now();
    const { uuid, custom } = splitId(id);
    const r = await query<Row>(this.pool, `SELECT ${COLUMNS} FROM ${T} WHERE tenant = $1 AND ${idIs('$2', '$3')} AND ${live('$4')}`, [tenant, uuid, custom, now]);
    return r.rows[0] ? (await decodeRows(this.#names, tenantId, r.rows, now))[0]! : null;
  }

  async getMany(tenantId: string, ids: string[]): Promise<StoredToken[]> {
    if (ids.length === 0) return [];
    const tenant = await this.#names.find(tenantId);
    if (tenant === null) return [];
    const now = Date.now();
    const { uuids, customs } = splitIds(ids);
    const r = await query<Row>(this.pool,
      `SELECT ${COLUMNS} FROM ${T} WHERE tenant = $1 AND (id = ANY($2::uuid[]) OR custom_id = ANY($3::text[])) AND ${live('$4')}`, [tenant, uuids, customs, now]);
    const records = await decodeRows(this.#names, tenantId, r.rows, now);
    const byId = new Map(records.map((rec) => [rec.id, rec]));
    const out: StoredToken[] = [];
    for (const id of new Set(ids)) {
      const rec = byId.get(id);
      if (rec) out.push(rec);
    }
    return out;
  }

  /**
   * Replaces a live record in place (its seq, so its place in lists, stays). A token whose type,
   * container or fingerprint changes gives up its deduplication slot.
   */
  async update(record: StoredToken): Promise<boolean> {
    checkDates([record]);
    const dict = await this.#names.numbers(namesOf(record));
    const v = values(record, dict.get(record.tenant_id)!, dict);
    const r = await query(
      this.pool,
      `UPDATE ${T} SET dedupe_slot = dedupe_slot AND type = $4 AND container = $5 AND fingerprint IS NOT DISTINCT FROM $13,
         type = $4, container = $5, sealed = $6, cvc_sealed = $7, cvc_expires_ms = $8, cvc_expires_text = $9, metadata = $10,
         search_indexes = $11, index_hashes = $12, fingerprint = $13, fingerprint_expression = $14, mask = $15, created_by = $16,
         created_ms = $17, created_text = $18, modified_by = $19, modified_ms = $20, modified_text = $21, expires_ms = $22, expires_text = $23
       WHERE tenant = $1 AND ${idIs('$2', '$3')} AND ${live('$24')}`,
      [...v, Date.now()],
    );
    return r.rowCount === 1;
  }

  /** True only when it was live (an expired token counts as missing); removed either way. */
  async delete(tenantId: string, id: string): Promise<boolean> {
    const tenant = await this.#names.find(tenantId);
    if (tenant === null) return false;
    const { uuid, custom } = splitId(id);
    const r = await query<{ expires_ms: string | null }>(this.pool, `DELETE FROM ${T} WHERE tenant = $1 AND ${idIs('$2', '$3')} RETURNING expires_ms`, [tenant, uuid, custom]);
    const row = r.rows[0];
    return row !== undefined && (row.expires_ms === null || Number(row.expires_ms) > Date.now());
  }

  async list(tenantId: string, filter: TokenFilter, page: Page): Promise<PageResult> {
    checkPage(page);
    const after = page.after === null ? null : decodeCursor(page.after);
    if (filter.ids && filter.ids.length === 0) return { items: [], next: null };
    const scope = filter.scope;
    if (scope !== undefined && !scope.some((r) => r.allow)) return { items: [], next: null };
    const tenant = await this.#names.find(tenantId);
    if (tenant === null) return { items: [], next: null };
    const now = Date.now();
    const params: unknown[] = [tenant, now];
    const p = (v: unknown): string => {
      params.push(v);
      return `$${params.length}`;
    };
    const where = ['tenant = $1', live('$2')];
    if (after !== null) where.push(`seq < ${p(after)}`);
    if (filter.type !== undefined) where.push(`type = ${p(filter.type)}`);
    if (filter.container !== undefined) where.push(`starts_with(container, ${p(filter.container)})`);
    if (filter.fingerprint !== undefined) where.push(`fingerprint = ${p(encodeDigest(filter.fingerprint))}`);
    if (filter.metadata && Object.keys(filter.metadata).length > 0) {
      where.push(`(${metadataFilter(filter.metadata).map((f) => `metadata @> ${p(f)}::jsonb`).join(' OR ')})`);
    }
    const hashes = [...new Set(filter.index_hashes ?? [])];
    if (hashes.length > 0) where.push(`index_hashes @> ${p(hashes.map(encodeDigest))}::bytea[]`);
    if (filter.ids) {
      const { uuids, customs } = splitIds(filter.ids);
      where.push(`(id = ANY(${p(uuids)}::uuid[]) OR custom_id = ANY(${p(customs)}::text[]))`);
    }
    if (scope !== undefined) {
      // The caller's permission filter: the first prefix that starts the container decides.
      const arms = scope.map((r) => `WHEN starts_with(container, ${p(r.prefix)}) THEN ${r.allow ? 'true' : 'false'}`);
      where.push(`(CASE ${arms.join(' ')} ELSE false END)`);
    }
    const r = await query<Row>(this.pool, `SELECT ${COLUMNS} FROM ${T} WHERE ${where.join(' AND ')} ORDER BY seq DESC LIMIT ${p(page.size + 1)}`, params);
    const items = await decodeRows(this.#names, tenantId, r.rows.slice(0, page.size), now);
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
