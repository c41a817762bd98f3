/**
 * The audit chain in PostgreSQL.
 *
 * An append is one transaction: the tenant's head row is locked (SELECT … FOR UPDATE; a tenant's
 * first append creates it at seq 0 first, so there is always a row to lock), its anchor is
 * checked, the events are chained from it and anchored, then the events and the new head are written. Appends from any
 * number of processes queue on that row lock and form one chain; within a process they are also
 * batched per tenant (TenantSerialAppender), so the lock is taken once per batch.
 *
 * Events are stored field by field (hashes as bytea); a row rebuilds the event the chain hashed.
 */
import type pg from 'pg';
import type { AuditAnchorSigner } from '../audit.js';
import {
  AuditHeadRefusedError, chainAnchored, GENESIS_HASH, TenantSerialAppender, type AuditAction, type AuditEvent, type AuditEventInput, type AuditFilter,
  type AuditHead, type AuditPageResult, type StoredAuditHead,
} from '../audit.js';
import { checkPage, decodeCursor, encodeCursor } from '../codec.js';
import type { AuditPage, AuditPort } from '../types.js';
import { query, transaction } from './pool.js';

const EVENT_COLUMNS = 'seq, prev_hash, tenant_id, application_id, action, token_ids, destination, request_id, created_at';

interface EventRow {
  seq: string;
  prev_hash: Buffer;
  tenant_id: string;
  application_id: string;
  action: string;
  token_ids: string[];
  destination: string | null;
  request_id: string;
  created_at: string;
}

/** The event a row holds, or null when it cannot be one (an edited row). */
function decode(r: EventRow): AuditEvent | null {
  const seq = Number(r.seq);
  if (!Number.isSafeInteger(seq) || !Buffer.isBuffer(r.prev_hash) || r.prev_hash.length !== 32 || !Array.isArray(r.token_ids)) return null;
  return {
    seq, prev_hash: r.prev_hash.toString('hex'), tenant_id: r.tenant_id, application_id: r.application_id,
    action: r.action as AuditAction, token_ids: r.token_ids, destination: r.destination, request_id: r.request_id, created_at: r.created_at,
  };
}

export class PostgresAudit implements AuditPort {
  readonly #appender = new TenantSerialAppender((tenantId, inputs, sign) => this.#append(tenantId, inputs, sign));

  constructor(private readonly pool: pg.Pool) {}

  appendAudit(tenantId: string, events: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    if (events.length === 0) return Promise.resolve([]);
    return this.#appender.append(tenantId, events, sign);
  }

  #append(tenantId: string, inputs: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    const created = inputs.map((e) => Date.parse(e.created_at));
    if (created.some((ms) => !Number.isFinite(ms))) return Promise.reject(new TypeError('created_at is not a valid ISO 8601 date'));
    return this.#locked(tenantId, inputs, sign, created);
  }

  /**
   * The append's transaction. A head whose anchor does not check comes back as the refusal and is
   * thrown once the transaction (which wrote nothing) has committed: a refusal then neither
   * destroys the pooled connection nor holds the row lock.
   */
  async #locked(tenantId: string, inputs: AuditEventInput[], sign: AuditAnchorSigner, created: number[]): Promise<AuditEvent[]> {
    const out = await transaction(this.pool, async (c): Promise<AuditEvent[] | AuditHeadRefusedError> => {
      await c.query(
        'INSERT INTO tokenproxy.audit_heads (tenant_id, seq, hash) VALUES ($1, 0, $2) ON CONFLICT (tenant_id) DO NOTHING',
        [tenantId, Buffer.from(GENESIS_HASH, 'hex')],
      );
      const locked = await c.query<{ seq: string; hash: Buffer; anchor: string | null }>(
        'SELECT seq, hash, anchor FROM tokenproxy.audit_heads WHERE tenant_id = $1 FOR UPDATE', [tenantId],
      );
      const row = locked.rows[0]!;
      const current = Number(row.seq) === 0 ? null : { seq: Number(row.seq), hash: row.hash.toString('hex'), anchor: row.anchor };
      // The locked head's anchor is checked before anything is chained onto it (store/audit.ts).
      // No head: a tenant's first append (one query more, then only), unless its events are there (the head was removed).
      const orphans = current === null
        && (await c.query('SELECT 1 FROM tokenproxy.audit_events WHERE tenant_id = $1 LIMIT 1', [tenantId])).rows.length > 0;
      let chained: ReturnType<typeof chainAnchored>;
      try {
        chained = chainAnchored(tenantId, current, inputs, sign, orphans);
      } catch (err) {
        if (err instanceof AuditHeadRefusedError) return err;
        throw err;
      }
      const { events, head } = chained;
      const anchor = head.anchor;
      await c.query(
        `INSERT INTO tokenproxy.audit_events (tenant_id, seq, prev_hash, application_id, action, token_ids, destination, request_id, created_at, created_ms)
         SELECT $1, e.seq, decode(e.prev_hash, 'hex'), e.application_id, e.action, ARRAY(SELECT jsonb_array_elements_text(e.token_ids)),
           e.destination, e.request_id, e.created_at, e.created_ms
         FROM jsonb_to_recordset($2::jsonb) AS e(seq bigint, prev_hash text, application_id text, action text, token_ids jsonb,
           destination text, request_id text, created_at text, created_ms bigint)`,
        [tenantId, JSON.stringify(events.map((e, i) => ({ ...e, created_ms: created[i] })))],
      );
      await c.query('UPDATE tokenproxy.audit_heads SET seq = $2, hash = $3, anchor = $4 WHERE tenant_id = $1', [
        tenantId, head.seq, Buffer.from(head.hash, 'hex'), anchor,
      ]);
      return events;
    });
    if (out instanceof AuditHeadRefusedError) throw out;
    return out;
  }

  async anchorAuditHead(tenantId: string, head: AuditHead, sign: AuditAnchorSigner): Promise<boolean> {
    const r = await query(
      this.pool, 'UPDATE tokenproxy.audit_heads SET anchor = $4 WHERE tenant_id = $1 AND seq = $2 AND hash = $3 AND anchor IS NULL AND seq > 0',
      [tenantId, head.seq, Buffer.from(head.hash, 'hex'), sign(tenantId, head)],
    );
    return r.rowCount === 1;
  }

  async listAudit(tenantId: string, filter: AuditFilter, page: AuditPage): Promise<AuditPageResult> {
    checkPage(page);
    const after = page.after === null ? Number.MAX_SAFE_INTEGER : decodeCursor(page.after);
    const r = await query<EventRow>(
      this.pool,
      `SELECT ${EVENT_COLUMNS} FROM tokenproxy.audit_events WHERE tenant_id = $1 AND seq < $2 AND created_ms >= $3 AND created_ms <= $4
       AND ($5::text IS NULL OR $5::text = ANY(token_ids)) ORDER BY seq DESC LIMIT $6 OFFSET $7`,
      [tenantId, after, filter.start_ms ?? 0, filter.end_ms ?? Number.MAX_SAFE_INTEGER, filter.entity_id ?? null, page.size + 1, page.skip ?? 0],
    );
    const items: AuditEvent[] = [];
    for (const row of r.rows.slice(0, page.size)) {
      const e = decode(row);
      if (e) items.push(e);
    }
    return { items, next: r.rows.length > page.size ? encodeCursor(Number(r.rows[page.size - 1]!.seq)) : null };
  }

  async auditRange(tenantId: string, after: string | null, limit: number): Promise<{ items: Array<AuditEvent | null>; next: string | null }> {
    const r = await query<EventRow>(
      this.pool,
      `SELECT ${EVENT_COLUMNS} FROM tokenproxy.audit_events WHERE tenant_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
      [tenantId, after === null ? 0 : decodeCursor(after), limit],
    );
    return { items: r.rows.map(decode), next: r.rows.length === limit ? encodeCursor(Number(r.rows[r.rows.length - 1]!.seq)) : null };
  }

  async auditHead(tenantId: string): Promise<StoredAuditHead | null> {
    const r = await query<{ seq: string; hash: Buffer; anchor: string | null }>(
      this.pool, 'SELECT seq, hash, anchor FROM tokenproxy.audit_heads WHERE tenant_id = $1 AND seq > 0', [tenantId],
    );
    const row = r.rows[0];
    return row ? { seq: Number(row.seq), hash: row.hash.toString('hex'), anchor: row.anchor } : null;
  }
}
