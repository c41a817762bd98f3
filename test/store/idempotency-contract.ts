/**
 * The idempotency port's contract (store/idempotency.ts IdempotencyPort), run by contract.ts
 * against every backend: claims are atomic, only the owner completes or releases its
 * claim, entries expire (a crashed claim, an old answer), and slots are scoped by tenant and key.
 */
import type { Test } from 'tap';
import { randomUUID } from 'node:crypto';
import type { Store } from '../../src/store/types.js';
import type { IdempotencySlot } from '../../src/store/idempotency.js';
import { waitFor } from '../helpers/wait.js';

const DAY = 86_400_000;
const MINUTE = 60_000;
const slot = (tenant_id: string): IdempotencySlot => ({ tenant_id, key: randomUUID() });

export function runIdempotencyContract(t: Test, makeStore: (t: Test) => Promise<Store>, tenants: [string, string]): void {
  const [A, B] = tenants;

  t.test('idempotency: claim, a second claim sees it in flight, complete, then every claim sees it done', async (t) => {
    const s = await makeStore(t);
    const k = slot(A);
    t.same(await s.idempotency.claimIdempotencyKey(k, 'o1', 'sealed-pending', MINUTE), { state: 'claimed' });
    t.same(await s.idempotency.claimIdempotencyKey(k, 'o2', 'sealed-other', MINUTE), { state: 'in_flight', sealed: 'sealed-pending' }, 'the first claim is kept');
    t.equal(await s.idempotency.completeIdempotencyKey(k, 'o2', 'sealed-wrong', DAY), false, 'only the owner completes');
    t.equal(await s.idempotency.completeIdempotencyKey(k, 'o1', 'sealed-answer', DAY), true);
    t.equal(await s.idempotency.completeIdempotencyKey(k, 'o1', 'sealed-again', DAY), false, 'a done entry is not completed twice');
    t.same(await s.idempotency.claimIdempotencyKey(k, 'o3', 'x', MINUTE), { state: 'done', sealed: 'sealed-answer' });
    t.equal(await s.idempotency.releaseIdempotencyKey(k, 'o1'), false, 'a done entry is not released');
    t.same(await s.idempotency.claimIdempotencyKey(k, 'o4', 'x', MINUTE), { state: 'done', sealed: 'sealed-answer' });
  });

  t.test('idempotency: only the owner releases its claim; a released slot can be claimed again', async (t) => {
    const s = await makeStore(t);
    const k = slot(A);
    t.same(await s.idempotency.claimIdempotencyKey(k, 'o1', 'p1', MINUTE), { state: 'claimed' });
    t.equal(await s.idempotency.releaseIdempotencyKey(k, 'o2'), false);
    t.same(await s.idempotency.claimIdempotencyKey(k, 'o2', 'p2', MINUTE), { state: 'in_flight', sealed: 'p1' });
    t.equal(await s.idempotency.releaseIdempotencyKey(k, 'o1'), true);
    t.equal(await s.idempotency.releaseIdempotencyKey(k, 'o1'), false, 'released once');
    t.same(await s.idempotency.claimIdempotencyKey(k, 'o2', 'p2', MINUTE), { state: 'claimed' });
    t.equal(await s.idempotency.completeIdempotencyKey(k, 'o1', 'late', DAY), false, 'the old owner cannot complete the new claim');
  });

  t.test('idempotency: slots of other tenants and other keys are independent', async (t) => {
    const s = await makeStore(t);
    const k = slot(A);
    t.same(await s.idempotency.claimIdempotencyKey(k, 'o1', 'p', MINUTE), { state: 'claimed' });
    t.same(await s.idempotency.claimIdempotencyKey({ tenant_id: B, key: k.key }, 'o2', 'p', MINUTE), { state: 'claimed' }, 'same key, other tenant');
    t.same(await s.idempotency.claimIdempotencyKey({ tenant_id: A, key: `${k.key}x` }, 'o3', 'p', MINUTE), { state: 'claimed' }, 'other key');
  });

  t.test('idempotency: concurrent claims of one slot: exactly one wins', async (t) => {
    const s = await makeStore(t);
    const k = slot(A);
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => s.idempotency.claimIdempotencyKey(k, `o${i}`, `p${i}`, MINUTE)));
    const won = results.filter((r) => r.state === 'claimed');
    t.equal(won.length, 1);
    const winner = results.indexOf(won[0]!);
    t.ok(results.every((r, i) => i === winner || (r.state === 'in_flight' && r.sealed === `p${winner}`)), 'the others see the winner');
  });

  t.test('idempotency: a claim left behind expires (a crashed request); its owner can no longer complete it', async (t) => {
    const s = await makeStore(t);
    const k = slot(A);
    t.same(await s.idempotency.claimIdempotencyKey(k, 'crashed', 'p', 1), { state: 'claimed' });
    await waitFor(async () => (await s.idempotency.claimIdempotencyKey(k, 'next', 'p2', MINUTE)).state === 'claimed', { what: 'the expired claim is taken over' });
    t.equal(await s.idempotency.completeIdempotencyKey(k, 'crashed', 'late', DAY), false);
    t.equal(await s.idempotency.completeIdempotencyKey(k, 'next', 'answer', DAY), true);
    t.same(await s.idempotency.claimIdempotencyKey(k, 'third', 'p3', MINUTE), { state: 'done', sealed: 'answer' });
  });

  t.test('idempotency: an answer expires after its TTL; purge deletes expired entries (embedded, PostgreSQL) or Redis does', async (t) => {
    const s = await makeStore(t);
    const short = slot(A);
    t.same(await s.idempotency.claimIdempotencyKey(short, 'o1', 'p', MINUTE), { state: 'claimed' });
    t.equal(await s.idempotency.completeIdempotencyKey(short, 'o1', 'answer', 1), true);
    await waitFor(async () => (await s.idempotency.claimIdempotencyKey(short, 'o2', 'p', MINUTE)).state === 'claimed', { what: 'the answer expired' });
    const kept = slot(A);
    t.same(await s.idempotency.claimIdempotencyKey(kept, 'o1', 'p', MINUTE), { state: 'claimed' });
    t.equal(await s.idempotency.completeIdempotencyKey(kept, 'o1', 'answer', DAY), true);
    t.equal(await s.idempotency.purgeIdempotencyKeys(new Date()), 0, 'nothing has expired');
    const purged = await s.idempotency.purgeIdempotencyKeys(new Date(Date.now() + 2 * DAY));
    if (s.kind !== 'redis') {
      t.equal(purged, 2, 'both entries, as of two days from now');
      t.same(await s.idempotency.claimIdempotencyKey(kept, 'o3', 'p', MINUTE), { state: 'claimed' }, 'the purged slot is free');
    } else {
      t.equal(purged, 0, 'Redis expires keys itself');
    }
  });
}
