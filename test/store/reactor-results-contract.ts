/**
 * The reactor result port's contract (store/reactor-results.ts, issue 28), run by contract.ts
 * against every backend: an entry is replaced by a later put, scoped by tenant and id, missing
 * once expired, and purged (embedded, PostgreSQL) or expired by Redis itself.
 */
import type { Test } from 'tap';
import { randomUUID } from 'node:crypto';
import type { Store } from '../../src/store/types.js';
import { waitFor } from '../helpers/wait.js';

const DAY = 86_400_000;

export function runReactorResultsContract(t: Test, makeStore: (t: Test) => Promise<Store>, tenants: [string, string]): void {
  const [A, B] = tenants;

  t.test('reactor results: put, get, replace; other tenants and ids see nothing', async (t) => {
    const s = await makeStore(t);
    const id = randomUUID();
    const expires = Date.now() + DAY;
    t.equal(await s.reactorResults.getReactorResult(A, id), null, 'nothing before the put');
    await s.reactorResults.putReactorResult({ tenant_id: A, id, sealed: 'sealed-pending', expires_ms: expires });
    const got = await s.reactorResults.getReactorResult(A, id);
    t.match(got, { tenant_id: A, id, sealed: 'sealed-pending' });
    t.ok(got && Math.abs(got.expires_ms - expires) < 5000, 'its expiry');
    await s.reactorResults.putReactorResult({ tenant_id: A, id, sealed: 'sealed-done', expires_ms: expires });
    t.equal((await s.reactorResults.getReactorResult(A, id))?.sealed, 'sealed-done', 'the later put replaced it');
    t.equal(await s.reactorResults.getReactorResult(B, id), null, 'same id, other tenant');
    t.equal(await s.reactorResults.getReactorResult(A, randomUUID()), null, 'other id');
  });

  t.test('reactor results: an entry is missing once expired; purge deletes expired entries (embedded, PostgreSQL) or Redis does', async (t) => {
    const s = await makeStore(t);
    const short = randomUUID();
    await s.reactorResults.putReactorResult({ tenant_id: A, id: short, sealed: 'x', expires_ms: Date.now() + 50 });
    await waitFor(async () => (await s.reactorResults.getReactorResult(A, short)) === null, { what: 'the entry expired' });
    const kept = randomUUID();
    await s.reactorResults.putReactorResult({ tenant_id: A, id: kept, sealed: 'y', expires_ms: Date.now() + DAY });
    const purgedNow = await s.reactorResults.purgeReactorResults(new Date());
    t.equal((await s.reactorResults.getReactorResult(A, kept))?.sealed, 'y', 'a live entry survives a purge');
    const later = await s.reactorResults.purgeReactorResults(new Date(Date.now() + 2 * DAY));
    if (s.kind !== 'redis') {
      t.equal(purgedNow, 1, 'the expired entry was purged');
      t.equal(later, 1, 'the live one too, as of two days from now');
    } else {
      t.equal(purgedNow + later, 0, 'Redis expires keys itself');
    }
  });
}
