/**
 * The Redis store's audit port: each tenant's events in a list, its chain head
 * (and the head's anchor) in a string, an append a compare-and-set on the head (layout: index.ts).
 */
import type { AuditAnchorSigner } from '../audit.js';
import {
  AuditHeadRefusedError, auditMatches, chainAnchored, decodeEvent, encodeEvent, TenantSerialAppender,
  type AuditEvent, type AuditEventInput, type AuditFilter, type AuditHead, type AuditPageResult, type StoredAuditHead,
} from '../audit.js';
import { checkPage, decodeCursor, encodeCursor } from '../codec.js';
import type { AuditPage, AuditPort } from '../types.js';
import { StoreUnavailableError } from '../types.js';
import { CAS_ATTEMPTS, type RedisConnection } from './connection.js';

function parseHead(raw: string | null): StoredAuditHead | null {
  if (raw === null) return null;
  const [seq, hash, anchor] = raw.split(' ');
  return { seq: Number(seq), hash: hash ?? '', anchor: anchor ?? null };
}
/**
 * Audit append as a compare-and-set on the chain head (Redis' Lua has no SHA-256, so the chain is
 * computed by the caller from the head it read): ARGV[1] the head it read ('' for none), ARGV[2]
 * the new head, ARGV[3..] the events. Answers 0, writing nothing, when the head moved meanwhile;
 * -1, writing nothing, when there is no head but there are events (the head was removed).
 */
const APPEND_AUDIT = `
local head = redis.call('GET', KEYS[2])
if (head or '') ~= ARGV[1] then return 0 end
if not head and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
for i = 3, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('SET', KEYS[2], ARGV[2])
return 1`;

export class RedisAudit implements AuditPort {
  readonly #c: RedisConnection;
  /** Appends of one tenant from this process go one batch at a time (no CAS conflicts among them). */
  readonly #audit = new TenantSerialAppender((tenantId, inputs, sign) => this.#appendAudit(tenantId, inputs, sign));

  constructor(connection: RedisConnection) {
    this.#c = connection;
  }

  appendAudit(tenantId: string, events: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    if (events.length === 0) return Promise.resolve([]);
    return this.#audit.append(tenantId, events, sign);
  }

  async #appendAudit(tenantId: string, inputs: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    const keys = [this.#c.t(tenantId, 'audit'), this.#c.t(tenantId, 'audithead')];
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const raw = await this.#c.call(() => this.#c.client.get(keys[1]!));
      // The head read is checked against its anchor before anything is chained onto it (store/audit.ts).
      const { events, head } = chainAnchored(tenantId, parseHead(raw), inputs, sign);
      const ok = await this.#c.eval(APPEND_AUDIT, keys, [raw ?? '', `${head.seq} ${head.hash} ${head.anchor}`, ...events.map(encodeEvent)], true);
      if (Number(ok) === 1) return events;
      if (Number(ok) === -1) throw new AuditHeadRefusedError(tenantId, 'missing');
    }
    throw new StoreUnavailableError('the audit chain head kept moving; the append was not written');
  }

  async anchorAuditHead(tenantId: string, head: AuditHead, sign: AuditAnchorSigner): Promise<boolean> {
    const keys = [this.#c.t(tenantId, 'audit'), this.#c.t(tenantId, 'audithead')];
    const raw = await this.#c.call(() => this.#c.client.get(keys[1]!));
    const current = parseHead(raw);
    if (current === null || current.anchor !== null || current.seq !== head.seq || current.hash !== head.hash) return false;
    // The append's compare-and-set with no event: the head stays, its anchor is added.
    const ok = await this.#c.eval(APPEND_AUDIT, keys, [raw ?? '', `${head.seq} ${head.hash} ${sign(tenantId, head)}`], true);
    return Number(ok) === 1;
  }

  async listAudit(tenantId: string, filter: AuditFilter, page: AuditPage): Promise<AuditPageResult> {
    checkPage(page);
    const key = this.#c.t(tenantId, 'audit');
    // Positions are 1-based list indexes; the cursor is the position of the last event returned.
    let pos = page.after === null ? Number(await this.#c.call(() => this.#c.client.llen(key))) : decodeCursor(page.after) - 1;
    const items: AuditEvent[] = [];
    let last = 0;
    // Matches passed over before the page starts (GET /logs?page=N): counted in the same walk, or,
    // without a filter (every entry matches; one that does not decode counts too), a jump of that
    // many list positions, with no decoding.
    let skip = page.skip ?? 0;
    if (skip > 0 && filter.entity_id === undefined && filter.start_ms === undefined && filter.end_ms === undefined) {
      pos = Math.max(0, pos - skip);
      skip = 0;
    }
    const chunk = Math.max(200, page.size * 4);
    while (pos > 0) {
      const from = Math.max(1, pos - chunk + 1);
      const raw = await this.#c.call(() => this.#c.client.lrange(key, from - 1, pos - 1));
      for (let i = raw.length - 1; i >= 0; i--) {
        const p = from + i;
        const e = decodeEvent(raw[i]!);
        if (!e || !auditMatches(e, filter)) continue;
        if (skip > 0) {
          skip--;
          continue;
        }
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
    const raw = await this.#c.call(() => this.#c.client.lrange(this.#c.t(tenantId, 'audit'), start, start + limit - 1));
    return { items: raw.map((r) => decodeEvent(r)), next: raw.length === limit ? encodeCursor(start + limit) : null };
  }

  async auditHead(tenantId: string): Promise<StoredAuditHead | null> {
    return parseHead(await this.#c.call(() => this.#c.client.get(this.#c.t(tenantId, 'audithead'))));
  }
}
