/**
 * The audit trail (docs/detokenization.md "Audit trail"), one module for its three uses: appending (the vault
 * and the detokenizer call it themselves for every reveal and use), listing (GET /logs) and
 * verifying (`tokenproxy verify-audit`). Every append goes through
 * here, anchored (crypto/audit-anchor.ts), and each new chain head is logged at info (`audit chain head`,
 * `audit_head: <seq>:<hash>`, no value and no key) after each append batch, and once more at
 * shutdown, so an operator can keep the latest head outside the store and catch a rollback with
 * `tokenproxy verify-audit --expect-head`.
 */
import type { Logger } from '../log.js';
import { AuditHeadRefusedError, eventHash, verifyChain, type AuditEvent, type AuditEventInput, type AuditFilter, type AuditHead, type ChainCheck } from '../store/audit.js';
import type { AuditPage, AuditPort } from '../store/types.js';
import { anchorMatches, formatHead, type AuditAnchorSigner } from '../crypto/audit-anchor.js';

/** A tenant's stored events, oldest first, through auditRange's pages (null: an entry that does not decode). */
export async function* storedEvents(store: AuditPort, tenantId: string, pageSize = 1000): AsyncGenerator<AuditEvent | null> {
  let after: string | null = null;
  do {
    const page: { items: Array<AuditEvent | null>; next: string | null } = await store.auditRange(tenantId, after, pageSize);
    yield* page.items;
    after = page.next;
  } while (after !== null);
}

export interface StoredChainOptions {
  /** The anchor signer under the service's master key; null: the anchor is not checked (store contract tests). */
  sign: AuditAnchorSigner | null;
  expect?: AuditHead;
  allowUnanchored?: boolean;
  pageSize?: number;
}

/** Checks a tenant's chain in an open store. */
export async function checkStoredChain(store: AuditPort, tenantId: string, opts: StoredChainOptions): Promise<ChainCheck> {
  const sign = opts.sign;
  return verifyChain(storedEvents(store, tenantId, opts.pageSize), await store.auditHead(tenantId), tenantId, {
    anchor: sign === null ? null : (tenant, head, anchor) => anchorMatches(sign, tenant, head, anchor),
    expect: opts.expect,
    allowUnanchored: opts.allowUnanchored,
  });
}

/** The store's refusal of a tenant's head behind `err` (the request path's ports wrap it as a cause), or null. */
function headRefusal(err: unknown): AuditHeadRefusedError | null {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e instanceof AuditHeadRefusedError) return e;
  }
  return null;
}

export class AuditTrail {
  /** The newest head this process wrote, per tenant (the last append's, even when lower: a store rolled back shows in the log). */
  readonly #heads = new Map<string, string>();
  /** Tenants whose new head is not logged yet (one line per batch: the appends that resolve together). */
  readonly #unlogged = new Set<string>();

  constructor(
    private readonly store: AuditPort,
    private readonly sign: AuditAnchorSigner,
    private readonly log?: Logger,
  ) {}

  /**
   * Appends one tenant's events, anchored; resolves once they are stored (throws what the store
   * throws). A head the store refused to chain onto (its anchor does not check: store/audit.ts
   * AuditHeadRefusedError) is an alert at error level: someone wrote the store, or it is another
   * key's; the request fails as any audit write failure does.
   */
  async append(tenantId: string, inputs: AuditEventInput[]): Promise<AuditEvent[]> {
    let events: AuditEvent[];
    try {
      events = await this.store.appendAudit(tenantId, inputs, this.sign);
    } catch (err) {
      const refused = headRefusal(err);
      if (refused) {
        const why = {
          mismatch: 'it does not match its anchor (rewritten in the store, or another master key); no event is appended for this tenant, and its reveals and uses fail, until the trail is restored',
          unanchored: 'it carries no anchor (a store from before anchoring: run tokenproxy migrate, which anchors it; or the anchor was removed); no event is appended for this tenant until then',
          missing: 'the tenant\'s events are in the store but its chain head is not (removed); no event is appended for this tenant, and its reveals and uses fail, until the trail is restored',
        }[refused.reason];
        this.log?.error({ tenant_id: tenantId, audit_refused: refused.reason }, `audit chain head refused: ${why}. Run tokenproxy verify-audit --tenant ${tenantId}`);
      }
      throw err;
    }
    const last = events.at(-1);
    if (last) {
      this.#heads.set(tenantId, formatHead({ seq: last.seq, hash: eventHash(last) }));
      if (this.#unlogged.size === 0) queueMicrotask(() => this.#logHeads('audit chain head'));
      this.#unlogged.add(tenantId);
    }
    return events;
  }

  /** One page of a tenant's events, newest first as the store lists them (GET /logs). */
  list(tenantId: string, filter: AuditFilter, page: AuditPage): ReturnType<AuditPort['listAudit']> {
    return this.store.listAudit(tenantId, filter, page);
  }

  /** Checks a tenant's chain, its head and the head's anchor (and `expect`, a head kept earlier). */
  verify(tenantId: string, opts: { expect?: AuditHead; allowUnanchored?: boolean } = {}): Promise<ChainCheck> {
    return checkStoredChain(this.store, tenantId, { sign: this.sign, ...opts });
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
