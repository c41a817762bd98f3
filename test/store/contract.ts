/**
 * The Store contract (store/types.ts, issue 24 item 5): one suite per port (tokens-contract.ts,
 * audit-contract.ts, data-keys-contract.ts, idempotency-contract.ts, reactor-results-contract.ts) and the lifecycle below, run
 * against every backend by embedded.test.ts, redis.test.ts and postgres.test.ts.
 * `makeStore(t)` returns a fresh, empty store and registers its own teardown on `t`.
 */
import type { Test } from 'tap';
import { StoreUnavailableError, type Store } from '../../src/store/types.js';
import { AUDIT_TENANT, auditInput, runAuditContract, SIGN } from './audit-contract.js';
import { runDataKeysContract } from './data-keys-contract.js';
import { runIdempotencyContract } from './idempotency-contract.js';
import { runMarkerContract } from './marker-contract.js';
import { runReactorResultsContract } from './reactor-results-contract.js';
import { makeRecord, runTokensContract, TENANT_A, TENANT_B } from './tokens-contract.js';

export { makeRecord, TENANT_A, TENANT_B } from './tokens-contract.js';

export type MakeStore = (t: Test) => Promise<Store>;

async function caught(p: Promise<unknown>): Promise<unknown> {
  return p.then(() => null, (err: unknown) => err);
}

export function runContract(t: Test, makeStore: MakeStore): void {
  runIdempotencyContract(t, makeStore, [TENANT_A, TENANT_B]);
  runReactorResultsContract(t, makeStore, [TENANT_A, TENANT_B]);
  runAuditContract(t, makeStore);
  runTokensContract(t, makeStore);
  runDataKeysContract(t, makeStore);
  runMarkerContract(t, makeStore);
  t.test('ping, and failures after close are StoreUnavailableError', async (t) => {
    const s = await makeStore(t);
    await s.ping();
    t.pass('ping resolved');
    await s.close();
    t.ok((await caught(s.ping())) instanceof StoreUnavailableError);
    t.ok((await caught(s.tokens.get(TENANT_A, 'x'))) instanceof StoreUnavailableError);
    // Every port of every backend (issue 24 item 5): what store/service-errors.ts answers as 503.
    t.ok((await caught(s.tokens.insertMany([makeRecord()]))) instanceof StoreUnavailableError, 'tokens: a write');
    t.ok((await caught(s.audit.auditHead(AUDIT_TENANT))) instanceof StoreUnavailableError, 'audit: a read');
    t.ok((await caught(s.audit.appendAudit(AUDIT_TENANT, [auditInput()], SIGN))) instanceof StoreUnavailableError, 'audit: an append');
    t.ok((await caught(s.dataKeys.listDataKeys())) instanceof StoreUnavailableError, 'data keys: a read');
    t.ok((await caught(s.idempotency.claimIdempotencyKey({ tenant_id: TENANT_A, key: 'k' }, 'o', 's', 60_000))) instanceof StoreUnavailableError, 'idempotency: a claim');
    t.ok((await caught(s.reactorResults.getReactorResult(TENANT_A, 'r'))) instanceof StoreUnavailableError, 'reactor results: a read');
    t.ok((await caught(s.reactorResults.putReactorResult({ tenant_id: TENANT_A, id: 'r', sealed: 's', expires_ms: Date.now() + 60_000 }))) instanceof StoreUnavailableError, 'reactor results: a write');
  });
}
