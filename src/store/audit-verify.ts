/**
 * `tokenproxy verify-audit --tenant <id>` (README "Audit trail"): walks a tenant's audit events
 * in the configured store, oldest first, and checks the chain (store/audit.ts verifyChain).
 */
import type { LoadedConfig } from '../config/load.js';
import { verifyChain, type AuditEvent, type ChainCheck } from './audit.js';
import { createStore } from './factory.js';
import type { TokenStore } from './types.js';

/** A tenant's stored events, oldest first, through auditRange's pages (null: an entry that does not decode). */
export async function* storedEvents(store: TokenStore, tenantId: string, pageSize = 1000): AsyncGenerator<AuditEvent | null> {
  let after: string | null = null;
  do {
    const page: { items: Array<AuditEvent | null>; next: string | null } = await store.auditRange(tenantId, after, pageSize);
    yield* page.items;
    after = page.next;
  } while (after !== null);
}

/** Checks a tenant's chain in an open store. */
export async function checkStoredChain(store: TokenStore, tenantId: string, pageSize?: number): Promise<ChainCheck> {
  return verifyChain(storedEvents(store, tenantId, pageSize), await store.auditHead(tenantId), tenantId);
}

/** Prints the outcome; resolves to 0 when the chain is intact, 1 when it is broken or unreadable. */
export async function verifyTenantAudit(config: LoadedConfig, tenantId: string, io: { out(s: string): void; err(s: string): void }): Promise<number> {
  let store: TokenStore;
  try {
    store = await createStore(config.store);
  } catch (err) {
    io.err(`tokenproxy verify-audit: cannot open the store: ${(err as Error).message}\n`);
    return 1;
  }
  try {
    const result = await checkStoredChain(store, tenantId);
    if (result.ok) {
      io.out(`tenant ${tenantId}: ${result.events} audit event(s), chain intact\n`);
      return 0;
    }
    io.out(`tenant ${tenantId}: chain BROKEN at event ${result.position}: ${result.reason}\n`);
    return 1;
  } catch (err) {
    io.err(`tokenproxy verify-audit: ${(err as Error).message}\n`);
    return 1;
  } finally {
    await store.close();
  }
}
