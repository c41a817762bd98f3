/**
 * The audit trail as the service writes it (README "Audit trail"): every append goes through
 * here, anchored (audit/anchor.ts), and each new chain head is logged at info (`audit chain head`,
 * `audit_head: <seq>:<hash>`, no value and no key) after each append batch, and once more at
 * shutdown, so an operator can keep the latest head outside the store and catch a rollback with
 * `tokenproxy verify-audit --expect-head` (issue 23).
 */
import type { Logger } from '../log.js';
import { eventHash, type AuditEvent, type AuditEventInput } from '../store/audit.js';
import type { TokenStore } from '../store/types.js';
import { formatHead, type AuditAnchorSigner } from './anchor.js';

export class AuditTrail {
  /** The newest head this process wrote, per tenant (the last append's, even when lower: a store rolled back shows in the log). */
  readonly #heads = new Map<string, string>();
  /** Tenants whose new head is not logged yet (one line per batch: the appends that resolve together). */
  readonly #unlogged = new Set<string>();

  constructor(
    private readonly store: TokenStore,
    private readonly sign: AuditAnchorSigner,
    private readonly log?: Logger,
  ) {}

  /** Appends one tenant's events, anchored; resolves once they are stored (throws what the store throws). */
  async append(tenantId: string, inputs: AuditEventInput[]): Promise<AuditEvent[]> {
    const events = await this.store.appendAudit(tenantId, inputs, this.sign);
    const last = events.at(-1);
    if (last) {
      this.#heads.set(tenantId, formatHead({ seq: last.seq, hash: eventHash(last) }));
      if (this.#unlogged.size === 0) queueMicrotask(() => this.#logHeads('audit chain head'));
      this.#unlogged.add(tenantId);
    }
    return events;
  }

  /** Logs the newest head of every tenant this process appended to (at shutdown). */
  close(): void {
    this.#unlogged.clear();
    for (const tenantId of this.#heads.keys()) this.#unlogged.add(tenantId);
    this.#logHeads('audit chain head at shutdown');
  }

  #logHeads(msg: string): void {
    for (const tenantId of this.#unlogged) this.log?.info({ tenant_id: tenantId, audit_head: this.#heads.get(tenantId) }, msg);
    this.#unlogged.clear();
  }
}
