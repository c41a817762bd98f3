/**
 * The marker port's contract (store/identity.ts), run by contract.ts against every backend: a new
 * store has no marker and holds no records; the first marker written wins; a tombstone keeps the
 * id; clearMarker removes it; a token or an audit event is a record.
 */
import type { Test } from 'tap';
import { randomUUID } from 'node:crypto';
import type { Store } from '../../src/store/types.js';
import { makeRecord } from './tokens-contract.js';

export function runMarkerContract(t: Test, makeStore: (t: Test) => Promise<Store>): void {
  t.test('marker: none on a new store; the first written wins; a tombstone keeps the id; cleared', async (t) => {
    const s = await makeStore(t);
    t.equal(await s.marker.readMarker(), null, 'a new store has no marker');
    t.equal(await s.marker.holdsRecords(), false, 'and holds no records');
    const first = { id: randomUUID(), created_at: '2026-01-02T03:04:05.000Z' };
    t.same(await s.marker.createMarker(first), first, 'the first marker is written');
    t.same(await s.marker.createMarker({ id: randomUUID(), created_at: new Date().toISOString() }), first, 'a second one is not: the store holds the first');
    t.same(await s.marker.readMarker(), first);
    await s.marker.markLost({ ...first, lost_at: '2026-02-03T04:05:06.000Z' });
    t.same(await s.marker.readMarker(), { ...first, lost_at: '2026-02-03T04:05:06.000Z' }, 'marked lost, its id kept');
    await s.marker.clearMarker();
    t.equal(await s.marker.readMarker(), null, 'cleared');
    await s.marker.markLost({ ...first, lost_at: '2026-02-03T04:05:06.000Z' });
    t.same(await s.marker.readMarker(), { ...first, lost_at: '2026-02-03T04:05:06.000Z' }, 'a tombstone is written where there was no marker');
  });

  t.test('marker: a token is a record', async (t) => {
    const s = await makeStore(t);
    await s.tokens.insertMany([makeRecord()]);
    t.equal(await s.marker.holdsRecords(), true);
  });
}
