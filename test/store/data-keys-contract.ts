/**
 * The data key port's contract (store/types.ts DataKeyPort), run by contract.ts against every
 * backend: the key ring's wrapped keys, oldest first, the first write of a kid kept.
 */
import type { Test } from 'tap';
import type { Store } from '../../src/store/types.js';

const iso = (offsetMs: number): string => new Date(Date.now() + offsetMs).toISOString();

export function runDataKeysContract(t: Test, makeStore: (t: Test) => Promise<Store>): void {
  t.test('data keys: first write of a kid wins, concurrent adds converge', async (t) => {
    const s = await makeStore(t);
    t.same(await s.dataKeys.listDataKeys(), []);
    const k1 = { kid: 'k1', wrapped: 'w1.a', created_at: iso(0) };
    t.same(await s.dataKeys.addDataKey(k1), [k1]);
    t.same(await s.dataKeys.addDataKey({ ...k1, wrapped: 'w1.b' }), [k1], 'same kid: ignored');
    const k2 = { kid: 'k2', wrapped: 'w1.c', created_at: iso(0) };
    const k3 = { kid: 'k3', wrapped: 'w1.d', created_at: iso(0) };
    const [ra, rb] = await Promise.all([s.dataKeys.addDataKey(k2), s.dataKeys.addDataKey(k3)]);
    const ring = await s.dataKeys.listDataKeys();
    t.same(ring.map((k) => k.kid).sort(), ['k1', 'k2', 'k3']);
    t.same(ring[0], k1, 'oldest first');
    t.ok(ra.some((k) => k.kid === 'k2') && rb.some((k) => k.kid === 'k3'), 'each add returns a ring holding its key');
    t.same(await s.dataKeys.listDataKeys(), ring, 'stable order');
  });
}
