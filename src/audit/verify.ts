/**
 * `tokenproxy verify-audit --tenant <id>` (docs/detokenization.md "Audit trail"): walks a tenant's audit events
 * in the configured store, oldest first, and checks the chain, the head, the head's anchor under
 * the master key (crypto/audit-anchor.ts) and, with `--expect-head`, that the trail still
 * passes through a head the operator kept. It reads: a store, a tenant or a head that is missing
 * is reported, never created.
 */
import { anchorSigner, formatHead } from '../crypto/audit-anchor.js';
import type { LoadedConfig } from '../config/load.js';
import type { KeyEncryptionKey } from '../crypto/kek.js';
import { groupEntries, missingUnder, vaultRoot } from '../crypto/keyring.js';
import { masterKeyHint, openMasterKey } from '../crypto/open.js';
import { AuditTrail } from './trail.js';
import type { AuditHead } from '../store/audit.js';
import { assertStoreExists, createStore } from '../store/factory.js';
import type { Store } from '../store/types.js';

export interface VerifyAuditRequest {
  tenantId: string;
  expect?: AuditHead;
  allowUnanchored?: boolean;
}

type VerifyIo = { out(s: string): void; err(s: string): void };

/** Prints the outcome; resolves to 0 when the trail is intact, 1 when it is broken or unreadable, 2 for a tenant without a trail. */
export async function verifyTenantAudit(config: LoadedConfig, req: VerifyAuditRequest, io: VerifyIo): Promise<number> {
  const { tenantId } = req;
  const fail = (msg: string, code = 1) => {
    io.err(`tokenproxy verify-audit: ${msg}\n`);
    return code;
  };
  if (!config.tenants.some((t) => t.id === tenantId)) {
    return fail(`tenant ${JSON.stringify(tenantId)} is not in the configuration${config.source ? ` ${config.source}` : ''}`, 2);
  }
  try {
    // The store first: a missing one is named before a development master key beside it is looked for.
    assertStoreExists(config.store);
  } catch (err) {
    return fail((err as Error).message);
  }
  let kek: KeyEncryptionKey;
  try {
    kek = openMasterKey(config, (msg) => io.err(`tokenproxy verify-audit: ${msg}\n`), { createDevKey: false });
  } catch (err) {
    return fail(`${(err as Error).message}; the anchor of the trail cannot be checked without the service's master key`);
  }
  let store: Store;
  try {
    store = await createStore(config.store, { mustExist: true });
  } catch (err) {
    kek.close();
    return fail(`cannot open the store: ${(err as Error).message}`);
  }
  try {
    const keys = await store.dataKeys.listDataKeys();
    if (groupEntries(keys).keys.size === 0) return fail(`the ${config.store.kind} store holds no data keys: no tokenproxy service has used it (check the store section of the config)`);
    // Each data key must be wrapped by this master key: a wrong one would fail every anchor, say so plainly.
    if (missingUnder(keys, kek.id, kek.kind === 'raw')) {
      return fail(`the master key (id ${kek.id}) is not the one this store's data keys were wrapped with. ${masterKeyHint(config)}`);
    }
    // The anchors are under the root secret: the raw key itself, or the one the HSM key unwraps.
    const root = await vaultRoot(kek, store.dataKeys, { create: false, entries: keys });
    const sign = anchorSigner(root);
    root.fill(0);
    const head = await store.audit.auditHead(tenantId);
    if (head === null && (await store.audit.auditRange(tenantId, null, 1)).items.length === 0) {
      return fail(`tenant ${tenantId} has no audit chain head in the store: no event was ever written for it (or its whole trail was removed)`, 2);
    }
    const result = await new AuditTrail(store.audit, sign).verify(tenantId, { expect: req.expect, allowUnanchored: req.allowUnanchored });
    if (!result.ok) {
      io.out(`tenant ${tenantId}: chain BROKEN at event ${result.position}: ${result.reason}\n`);
      return 1;
    }
    if (result.unanchored) {
      io.err(`tokenproxy verify-audit: WARNING: the chain head of tenant ${tenantId} carries no anchor, so events removed at the end or a rewritten head cannot be detected, and the service appends nothing onto it: tokenproxy migrate anchors it\n`);
    }
    const shown = formatHead(head!);
    io.out(`tenant ${tenantId}: ${result.events} audit event(s), chain intact, head ${shown}${result.unanchored ? ' (not anchored)' : ' (anchored)'}${req.expect ? `, passes through ${formatHead(req.expect)}` : ''}\n`);
    return 0;
  } catch (err) {
    return fail((err as Error).message);
  } finally {
    kek.close();
    await store.close();
  }
}
