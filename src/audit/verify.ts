/**
 * `tokenproxy verify-audit --tenant <id>` (docs/detokenization.md "Audit trail"): walks a tenant's audit events
 * in the configured store, oldest first, and checks the chain, the head, the head's anchor under
 * the master key (crypto/audit-anchor.ts) and, with `--expect-head`, that the trail still
 * passes through a head the operator kept. It reads: a store, a tenant or a head that is missing
 * is reported, never created.
 */
import { dirname } from 'node:path';
import { anchorSigner, formatHead } from '../crypto/audit-anchor.js';
import type { LoadedConfig } from '../config/load.js';
import { masterKeyId } from '../crypto/keyring.js';
import { loadMasterKey, masterKeyMismatchHint } from '../crypto/master-key.js';
import { storeSetting } from '../crypto/open.js';
import { AuditTrail } from './trail.js';
import type { AuditHead } from '../store/audit.js';
import { assertStoreExists, createStore, resolveStorePath } from '../store/factory.js';
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
  let master: Buffer;
  try {
    master = loadMasterKey({
      fromEnv: config.masterKeyFromEnv, file: config.secrets.master_key_file, storeKind: config.store.kind,
      dataDir: dirname(resolveStorePath(config.store)), warn: (msg) => io.err(`tokenproxy verify-audit: ${msg}\n`), createDevKey: false,
    });
  } catch (err) {
    return fail(`${(err as Error).message}; the anchor of the trail cannot be checked without the service's master key`);
  }
  const sign = anchorSigner(master);
  const masterId = masterKeyId(master);
  master.fill(0);
  let store: Store;
  try {
    store = await createStore(config.store, { mustExist: true });
  } catch (err) {
    return fail(`cannot open the store: ${(err as Error).message}`);
  }
  try {
    const keys = await store.dataKeys.listDataKeys();
    if (keys.length === 0) return fail(`the ${config.store.kind} store holds no data keys: no tokenproxy service has used it (check the store section of the config)`);
    // Data keys are wrapped as w1.<master key id>.…: a wrong master key would fail every anchor, say so plainly.
    if (!keys.every((k) => k.wrapped.split('.')[1] === masterId)) {
      const source = { fromEnv: config.masterKeyFromEnv, file: config.secrets.master_key_file, dataDir: dirname(resolveStorePath(config.store)) };
      return fail(`the master key (id ${masterId}) is not the one this store's data keys were wrapped with. ${masterKeyMismatchHint(source, storeSetting(config))}`);
    }
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
    await store.close();
  }
}
