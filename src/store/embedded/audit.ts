/**
 * The embedded store's audit port: the audit trail (store/audit.ts), events and
 * each tenant's chain head in two tables, the append a compare-and-set on the head run by the
 * writer thread (connection.ts).
 */
import type Database from 'better-sqlite3';
import type { AuditAnchorSigner } from '../audit.js';
import {
  chainAnchored, decodeEvent, TenantSerialAppender, type AuditEvent, type AuditEventInput, type AuditFilter, type AuditHead, type AuditPageResult, type StoredAuditHead,
} from '../audit.js';
import { checkPage, decodeCursor, encodeCursor } from '../codec.js';
import type { AuditPage, AuditPort } from '../types.js';
import { StoreUnavailableError } from '../types.js';
import type { EmbeddedConnection } from './connection.js';
import type { Params } from './writer.js';

/** How often an audit append retries against a head another process moved. */
const CAS_ATTEMPTS = 100;

export class EmbeddedAudit implements AuditPort {
  readonly #c: EmbeddedConnection;
  readonly #list: Database.Statement<[Params], { event: string; seq: number }>;
  readonly #range: Database.Statement<[string, number, number], { event: string; seq: number }>;
  readonly #head: Database.Statement<[string], StoredAuditHead>;
  readonly #any: Database.Statement<[string], { one: number }>;
  /** One compare-and-set append per tenant at a time from this process (store/audit.ts). */
  readonly #audit = new TenantSerialAppender((tenantId, inputs, sign) => this.#appendAudit(tenantId, inputs, sign));

  constructor(connection: EmbeddedConnection) {
    this.#c = connection;
    const db = connection.db;
    this.#list = db.prepare<[Params], { event: string; seq: number }>(
      `SELECT seq, event FROM audit_events WHERE tenant_id = @tenant AND seq < @after AND created_ms >= @start AND created_ms <= @end
       AND (@entity IS NULL OR EXISTS (SELECT 1 FROM json_each(event, '$.token_ids') j WHERE j.value = @entity))
       ORDER BY seq DESC LIMIT @limit OFFSET @skip`,
    );
    this.#range = db.prepare<[string, number, number], { event: string; seq: number }>(
      'SELECT seq, event FROM audit_events WHERE tenant_id = ? AND seq > ? ORDER BY seq LIMIT ?',
    );
    this.#head = db.prepare<[string], StoredAuditHead>('SELECT seq, hash, anchor FROM audit_heads WHERE tenant_id = ?');
    this.#any = db.prepare<[string], { one: number }>('SELECT 1 AS one FROM audit_events WHERE tenant_id = ? LIMIT 1');
  }

  appendAudit(tenantId: string, events: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    if (events.length === 0) return Promise.resolve([]);
    return this.#audit.append(tenantId, events, sign);
  }

  /**
   * Chained and anchored here, on the main thread (the anchor's key never reaches the writer), from
   * the head this connection reads, once that head's anchor is checked (store/audit.ts
   * chainAnchored); the writer stores them only while that is still the head (in workers mode
   * another process may have appended meanwhile: then again from the new head, checked again).
   */
  async #appendAudit(tenantId: string, inputs: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const current = await this.auditHead(tenantId);
      // No head: a tenant's first append, unless its events are there (the head was removed).
      const orphans = current === null && this.#c.run(() => this.#any.get(tenantId)) !== undefined;
      const { events, head } = chainAnchored(tenantId, current, inputs, sign, orphans);
      const expect = current === null ? null : { seq: current.seq, hash: current.hash };
      const written = await this.#c.write({ op: 'audit', tenant_id: tenantId, expect, events, head }, (v) => v === true);
      if (written) return events;
    }
    throw new StoreUnavailableError('the audit chain head kept moving; the append was not written');
  }

  async anchorAuditHead(tenantId: string, head: AuditHead, sign: AuditAnchorSigner): Promise<boolean> {
    const current = await this.auditHead(tenantId);
    if (current === null || current.anchor !== null || current.seq !== head.seq || current.hash !== head.hash) return false;
    // The append's compare-and-set with no event: the head stays, its anchor is added.
    const expect = { seq: head.seq, hash: head.hash };
    return this.#c.write({ op: 'audit', tenant_id: tenantId, expect, events: [], head: { ...expect, anchor: sign(tenantId, expect) } }, (v) => v === true);
  }

  async listAudit(tenantId: string, filter: AuditFilter, page: AuditPage): Promise<AuditPageResult> {
    checkPage(page);
    const rows = this.#c.run(() => this.#list.all({
      tenant: tenantId, after: page.after === null ? Number.MAX_SAFE_INTEGER : decodeCursor(page.after),
      start: filter.start_ms ?? 0, end: filter.end_ms ?? Number.MAX_SAFE_INTEGER, entity: filter.entity_id ?? null, limit: page.size + 1, skip: page.skip ?? 0,
    }));
    const items: AuditEvent[] = [];
    for (const r of rows.slice(0, page.size)) {
      const e = decodeEvent(r.event);
      if (e) items.push(e);
    }
    return { items, next: rows.length > page.size ? encodeCursor(rows[page.size - 1]!.seq) : null };
  }

  async auditRange(tenantId: string, after: string | null, limit: number): Promise<{ items: Array<AuditEvent | null>; next: string | null }> {
    const rows = this.#c.run(() => this.#range.all(tenantId, after === null ? 0 : decodeCursor(after), limit));
    return { items: rows.map((r) => decodeEvent(r.event)), next: rows.length === limit ? encodeCursor(rows[rows.length - 1]!.seq) : null };
  }

  async auditHead(tenantId: string): Promise<StoredAuditHead | null> {
    return this.#c.run(() => this.#head.get(tenantId)) ?? null;
  }
}
