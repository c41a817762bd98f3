/**
 * AsyncReactorCalls (src/api/reactor-results.ts, issue 28) on a real embedded store and key ring:
 * the bound on background runs, pending then done, what shutdown records, a run lost with its
 * instance, and that the store holds only ciphertext. Runs are gated by promises the test
 * resolves (events, not time). The HTTP routes: test/reactors/async.test.ts.
 */
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { AsyncReactorCalls } from '../../src/api/reactor-results.js';
import type { Principal } from '../../src/auth/keys.js';
import type { ReactorSummary } from '../../src/auth/tenancy.js';
import { KeyRing } from '../../src/crypto/keyring.js';
import { ServiceError } from '../../src/errors.js';
import { createLogger } from '../../src/log.js';
import { EmbeddedStore } from '../../src/store/embedded/index.js';
import { waitFor } from '../helpers/wait.js';

const TENANT = '28282828-2828-4828-8828-282828282828';
const principal = (app: string) => ({ tenant: { id: TENANT }, app: { id: app } }) as unknown as Principal;
const REACTOR = { id: 'r1', name: 'r1', key: 'k/r1', timeout_ms: 1000, warm_concurrency: 1, max_concurrency: 1, memory_limit_mb: 64, configuration_names: [] } satisfies ReactorSummary;
const DAY = 86_400_000;

async function setup(t: Test, maxRunning = 1000) {
  const store = new EmbeddedStore(':memory:');
  t.teardown(() => store.close());
  const ring = await KeyRing.open(randomBytes(32), store.dataKeys);
  const calls = new AsyncReactorCalls({ store: store.reactorResults, ring, log: createLogger('silent'), maxRunning });
  return { store, ring, calls };
}

function gate<T>() {
  let open!: (v: T) => void;
  const p = new Promise<T>((r) => (open = r));
  return { p, open };
}

const caught = (p: Promise<unknown>) => p.then(() => null, (e: unknown) => e);

t.test('pending until the run ends, then done; the store holds ciphertext only', async (t) => {
  const { store, calls } = await setup(t);
  const g = gate<{ raw: unknown; tokens: unknown }>();
  const id = await calls.start(principal('app-1'), REACTOR, DAY, () => g.p);
  t.match(await calls.read(principal('app-1'), 'r1', id), { state: 'pending' });
  g.open({ raw: { secret: 'visible-only-to-app-1' }, tokens: null });
  await waitFor(() => calls.running === 0, { what: 'the run ended' });
  t.match(await calls.read(principal('app-1'), 'r1', id), { state: 'done', body: { raw: { secret: 'visible-only-to-app-1' } } });
  const stored = await store.reactorResults.getReactorResult(TENANT, id);
  t.ok(stored, 'stored');
  t.notOk(stored!.sealed.includes('visible-only-to-app-1') || stored!.sealed.includes('app-1'), 'neither the result nor the application in clear');
  const other = await caught(calls.read(principal('app-2'), 'r1', id));
  t.match(other, { code: 'reactor_result_not_found', status: 404 }, 'another application');
});

t.test('at most maxRunning runs: the next is 503 reactor_busy at once, nothing stored; room again once one ends', async (t) => {
  const { calls } = await setup(t, 1);
  const g = gate<{ raw: unknown; tokens: unknown }>();
  await calls.start(principal('app-1'), REACTOR, DAY, () => g.p);
  let ran = false;
  const busy = await caught(calls.start(principal('app-1'), REACTOR, DAY, async () => {
    ran = true;
    return { raw: null, tokens: null };
  }));
  t.ok(busy instanceof ServiceError && busy.code === 'reactor_busy' && busy.status === 503, 'reactor_busy');
  t.equal(calls.running, 1);
  g.open({ raw: null, tokens: null });
  await waitFor(() => calls.running === 0, { what: 'the run ended' });
  t.notOk(ran, 'the refused run never ran');
  const id = await calls.start(principal('app-1'), REACTOR, DAY, async () => ({ raw: 1, tokens: null }));
  await waitFor(() => calls.running === 0, { what: 'the second run ended' });
  t.match(await calls.read(principal('app-1'), 'r1', id), { state: 'done', body: { raw: 1 } });
});

t.test('a failing run is stored as its problem', async (t) => {
  const { calls } = await setup(t);
  const id = await calls.start(principal('app-1'), REACTOR, DAY, async () => {
    throw new ServiceError('reactor_timeout', { detail: 'The reactor did not finish within 1000 ms' });
  });
  await waitFor(() => calls.running === 0, { what: 'the run ended' });
  t.match(await calls.read(principal('app-1'), 'r1', id), { state: 'failed', problem: { code: 'reactor_timeout', status: 504 } });
});

t.test('shutdown: runs still going after the grace are stored as failed; new calls are refused', async (t) => {
  const { calls } = await setup(t);
  const never = gate<{ raw: unknown; tokens: unknown }>();
  const id = await calls.start(principal('app-1'), REACTOR, DAY, () => never.p);
  await calls.close(0);
  t.match(await calls.read(principal('app-1'), 'r1', id), { state: 'failed', problem: { code: 'reactor_unavailable', detail: /service stopped/ } });
  never.open({ raw: 'late', tokens: null });
  await waitFor(() => calls.running === 0, { what: 'the abandoned run ended' });
  t.match(await calls.read(principal('app-1'), 'r1', id), { state: 'failed' }, 'its late end does not overwrite the record');
  t.match(await caught(calls.start(principal('app-1'), REACTOR, DAY, () => never.p)), { code: 'shutting_down' });
});

t.test('a pending entry past its deadline that no run here holds reads as lost', async (t) => {
  const { store, ring, calls } = await setup(t);
  const id = '4f0b7b4e-0000-4000-8000-000000000001';
  // What an instance killed mid-run leaves: its pending entry (the sealed format of reactor-results.ts).
  const entry = { v: 1, app: 'app-1', reactor: 'r1', state: 'pending', deadline: Date.now() - 1 };
  await store.reactorResults.putReactorResult({ tenant_id: TENANT, id, sealed: ring.seal(JSON.stringify(entry), `reactor-result:${TENANT}:${id}`), expires_ms: Date.now() + DAY });
  t.match(await calls.read(principal('app-1'), 'r1', id), { state: 'failed', problem: { code: 'reactor_unavailable', status: 503, detail: /lost/ } });
  // Sealed for another id (an entry copied under another key): not opened, as unknown.
  await store.reactorResults.putReactorResult({ tenant_id: TENANT, id: `${id}x`, sealed: ring.seal(JSON.stringify(entry), `reactor-result:${TENANT}:${id}`), expires_ms: Date.now() + DAY });
  t.match(await caught(calls.read(principal('app-1'), 'r1', `${id}x`)), { code: 'reactor_result_not_found' });
});
