/**
 * store/service-errors.ts (issue 24 item 5): the one place where the store's failures become the
 * service's errors, on a real EmbeddedStore (':memory:', in-thread writes). The HTTP answers
 * themselves (503 store_unavailable, 400 invalid_cursor, 409 token_conflict) are covered end to
 * end by test/server/store-down.test.ts and the integration suites.
 */
import t from 'tap';
import type { Test } from 'tap';
import { ServiceError } from '../../src/errors.js';
import { InvalidCursorError } from '../../src/store/codec.js';
import { EmbeddedStore } from '../../src/store/embedded/index.js';
import { servicePorts, storeErrorName } from '../../src/store/service-errors.js';
import { DuplicateTokenError, StoreUnavailableError } from '../../src/store/types.js';
import { AUDIT_TENANT, auditInput, SIGN } from './audit-contract.js';
import { makeRecord, TENANT_A } from './contract.js';

async function caught(p: Promise<unknown>): Promise<unknown> {
  return p.then(() => null, (err: unknown) => err);
}

function open(t: Test): EmbeddedStore {
  const store = new EmbeddedStore(':memory:');
  t.teardown(() => store.close());
  return store;
}

t.test('answers pass through; a duplicate id and a bug stay the store\'s own errors', async (t) => {
  const store = open(t);
  const ports = servicePorts(store);
  const r = makeRecord();
  t.same(await ports.tokens.insertMany([r]), [null]);
  t.same(await ports.tokens.get(TENANT_A, r.id), r);
  t.equal((await ports.audit.appendAudit(AUDIT_TENANT, [auditInput()], SIGN)).length, 1);
  t.equal((await ports.dataKeys.listDataKeys()).length, 0);
  t.same(await ports.idempotency.claimIdempotencyKey({ tenant_id: TENANT_A, key: 'k' }, 'o', 's', 60_000), { state: 'claimed' });
  const dup = await caught(ports.tokens.insertMany([r]));
  t.ok(dup instanceof DuplicateTokenError, 'DuplicateTokenError passes (the vault answers it as 409 token_conflict)');
  const bug = await caught(ports.tokens.purgeCvc(new Date(Number.NaN)));
  t.ok(bug instanceof TypeError, 'a TypeError passes (500 internal_error)');
});

t.test('a cursor the store cannot read: 400 invalid_cursor, for tokens and audit events', async (t) => {
  const ports = servicePorts(open(t));
  for (const err of [await caught(ports.tokens.list(TENANT_A, {}, { size: 10, after: '!!' })), await caught(ports.audit.listAudit(TENANT_A, {}, { size: 10, after: '!!' }))]) {
    t.ok(err instanceof ServiceError, 'a ServiceError');
    t.match(err, { code: 'invalid_cursor', status: 400, detail: 'Pass the pagination.next value of a previous page as start' });
  }
  t.ok(await caught(open(t).tokens.list(TENANT_A, {}, { size: 10, after: '!!' })) instanceof InvalidCursorError, 'the store itself throws InvalidCursorError');
});

t.test('a failing store: 503 store_unavailable on every port, the store error as its cause and name in logs', async (t) => {
  const store = open(t);
  const ports = servicePorts(store);
  await store.close();
  const failures = {
    tokens: await caught(ports.tokens.get(TENANT_A, 'x')),
    audit: await caught(ports.audit.auditHead(AUDIT_TENANT)),
    dataKeys: await caught(ports.dataKeys.listDataKeys()),
    idempotency: await caught(ports.idempotency.releaseIdempotencyKey({ tenant_id: TENANT_A, key: 'k' }, 'o')),
    reactorResults: await caught(ports.reactorResults.getReactorResult(TENANT_A, 'r')),
  };
  for (const [port, err] of Object.entries(failures)) {
    t.ok(err instanceof ServiceError, `${port}: a ServiceError`);
    t.match(err, { code: 'store_unavailable', status: 503 }, port);
    t.ok((err as Error).cause instanceof StoreUnavailableError, `${port}: the store's error is the cause`);
    t.equal(storeErrorName(err), 'StoreUnavailableError', `${port}: logs name the store's error`);
  }
  t.ok(await caught(store.tokens.get(TENANT_A, 'x')) instanceof StoreUnavailableError, 'the store itself still throws StoreUnavailableError');
});

t.test('every method of every port is wrapped, and looked up at each call (ports instrumented in place)', async (t) => {
  const store = open(t);
  const ports = servicePorts(store);
  const methods = (o: object) => Object.getOwnPropertyNames(Object.getPrototypeOf(o)).filter((m) => m !== 'constructor').sort();
  for (const port of ['tokens', 'audit', 'dataKeys', 'idempotency', 'reactorResults'] as const) {
    t.same(Object.keys(ports[port]).sort(), methods(store[port]), `${port}: the backend's methods, no more, no fewer`);
  }
  const calls: string[] = [];
  const get = store.tokens.get.bind(store.tokens);
  store.tokens.get = async (tenantId, id) => {
    calls.push(id);
    return get(tenantId, id);
  };
  t.equal(await ports.tokens.get(TENANT_A, 'late'), null);
  t.same(calls, ['late'], 'a method replaced after wrapping is the one called');
});
