/**
 * The upgrade path of the audit trail's anchors (crypto/audit-anchor.ts), run by `tokenproxy
 * migrate`: a store written by a version without anchors holds chain heads that carry none, and
 * the service refuses to append onto such a head (store/audit.ts chainAnchored) rather than anchor
 * it silently, since a store writer can also strip an anchor. Here, run deliberately by the
 * operator, each configured tenant's unanchored head is anchored once its chain checks (every event
 * links to the next and to the head); a chain that does not check is reported and left as it is.
 */
import type { LoadedConfig } from '../config/load.js';
import { anchorSigner, type AuditAnchorSigner } from '../crypto/audit-anchor.js';
import type { KeyEncryptionKey } from '../crypto/kek.js';
import { missingUnder, vaultRoot } from '../crypto/keyring.js';
import { openMasterKey } from '../crypto/open.js';
import { createStore } from '../store/factory.js';
import type { Store } from '../store/types.js';
import { checkStoredChain } from './trail.js';

export interface AnchorOutcome {
  anchored: string[];
  /** Tenants whose unanchored chain does not check, with the reason: left unanchored. */
  broken: Array<{ tenant: string; reason: string }>;
}

/** Anchors the unanchored heads of `tenants` whose chains check. */
export async function anchorUnanchoredHeads(store: Store, tenants: readonly string[], sign: AuditAnchorSigner): Promise<AnchorOutcome> {
  const out: AnchorOutcome = { anchored: [], broken: [] };
  for (const tenant of tenants) {
    const head = await store.audit.auditHead(tenant);
    if (head === null || head.anchor !== null) continue;
    const check = await checkStoredChain(store.audit, tenant, { sign, allowUnanchored: true });
    if (!check.ok) {
      out.broken.push({ tenant, reason: `event ${check.position}: ${check.reason}` });
      continue;
    }
    if (await store.audit.anchorAuditHead(tenant, head, sign)) out.anchored.push(tenant);
    else out.broken.push({ tenant, reason: 'the chain head moved while it was checked (stop the service while migrating)' });
  }
  return out;
}

/**
 * The step `tokenproxy migrate` runs once the store is at this version's format: 0 when every
 * configured tenant's head is anchored (or has no trail), 1 when a chain did not check or the
 * step failed. Prints a line only when it anchored or refused something.
 */
export async function anchorStep(config: LoadedConfig, io: { out(s: string): void; err(s: string): void }): Promise<number> {
  const fail = (msg: string): number => {
    io.err(`tokenproxy migrate: ${msg}\n`);
    return 1;
  };
  let kek: KeyEncryptionKey;
  try {
    // The conversion step before this one read the same key and reported its warnings.
    kek = openMasterKey(config, () => {}, { createDevKey: false });
  } catch (err) {
    return fail(`${(err as Error).message}; the audit chain heads cannot be anchored without the service's master key`);
  }
  let store: Store;
  try {
    store = await createStore(config.store, { mustExist: true });
  } catch (err) {
    kek.close();
    return fail(`cannot open the store to anchor its audit chain heads: ${(err as Error).message}`);
  }
  try {
    // An anchor under another key than the store's would refuse every later append.
    const keys = await store.dataKeys.listDataKeys();
    if (missingUnder(keys, kek.id, kek.kind === 'raw')) return fail(`the master key (id ${kek.id}) is not the one this store's data keys were wrapped with; no audit chain head was anchored`);
    const root = await vaultRoot(kek, store.dataKeys, { create: false, entries: keys });
    const sign = anchorSigner(root);
    root.fill(0);
    const r = await anchorUnanchoredHeads(store, config.tenants.map((t) => t.id), sign);
    if (r.anchored.length > 0) {
      io.out(`anchored the audit chain head of ${r.anchored.length} tenant(s) written before anchoring (${r.anchored.join(', ')}); tokenproxy verify-audit checks them\n`);
    }
    for (const b of r.broken) {
      io.err(`tokenproxy migrate: the audit chain of tenant ${b.tenant} does not check (${b.reason}); its head was not anchored, and the service appends nothing onto it: run tokenproxy verify-audit --tenant ${b.tenant}\n`);
    }
    return r.broken.length === 0 ? 0 : 1;
  } catch (err) {
    return fail(`anchoring the audit chain heads failed: ${(err as Error).message}; run tokenproxy migrate again`);
  } finally {
    kek.close();
    await store.close();
  }
}
