/**
 * The two-instance exactness checks of a shared counter store (not a test file: tap runs only
 * *.test.ts), run by redis-shared.test.ts (one node), redis-cluster.test.ts and
 * redis-sentinel.test.ts on two started services that count on the same Redis.
 */
import type { Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { client, driveRow, expectAllowed, oneToken, tenant, type BuiltTenant } from './http-helpers.js';

/** Tenants for `exactness`: put them in both services' config. */
export function exactnessTenants(): { seq: BuiltTenant; conc: BuiltTenant } {
  return {
    seq: tenant({ custom: { private_key: { points: 5, duration_seconds: 30 } }, apps: [{ kind: 'private' }] }),
    conc: tenant({ custom: { private_key: { points: 7, duration_seconds: 30 } }, apps: [{ kind: 'private' }] }),
  };
}

/** Sequential (alternating) and concurrent requests to both instances: exactly N admitted, not 2N. */
export function exactness(t: Test, a: { url: string }, b: { url: string }, { seq, conc }: ReturnType<typeof exactnessTenants>): void {
  t.test('sequential, alternating instances: exactly N admitted, one countdown', async (t) => {
    const ca = client(t, a.url);
    const cb = client(t, b.url);
    const key = seq.keys[0][0];
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await (i % 2 ? cb : ca).send('GET', `/tokens/${randomUUID()}`, { key });
      if (i < 5) expectAllowed(t, r, 404, 5, 4 - i, `request ${i + 1} (instance ${i % 2 ? 'b' : 'a'}):`);
      statuses.push(r.status);
    }
    t.same(statuses, [404, 404, 404, 404, 404, 429, 429, 429, 429, 429, 429, 429], '5 admitted by the two together');
  });

  t.test('concurrent, both instances: exactly N admitted, not 2N', async (t) => {
    const clients = [client(t, a.url), client(t, b.url), client(t, a.url, '127.0.0.2'), client(t, b.url, '127.0.0.2')];
    const key = conc.keys[0][0];
    const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => clients[i % 4].send('GET', `/tokens/${randomUUID()}`, { key })));
    t.equal(replies.filter((r) => r.status === 404).length, 7, '7 admitted');
    t.equal(replies.filter((r) => r.status === 429).length, 33, 'the rest 429');
  });
}

/** A tenant for `blockAcross`. */
export function blockTenant(): BuiltTenant {
  return tenant({ custom: { public_key: { points: 2, duration_seconds: 1, block_seconds: 3 } }, apps: [{ kind: 'public' }] });
}

/** A Block set through one instance holds on the other, past the window (on Redis: a MULTI on the counter's key). */
export function blockAcross(t: Test, a: { url: string }, b: { url: string }, blk: BuiltTenant): void {
  t.test('Block set through one instance holds on the other, past the window', async (t) => {
    const ca = client(t, a.url);
    const cb = client(t, b.url);
    let i = 0;
    await driveRow(t, {
      send: () => (i++ % 2 ? cb : ca).send('POST', '/tokenize', { key: blk.keys[0][0], body: oneToken() }),
      okStatus: 200, points: 2, durationSeconds: 1, mitigation: { kind: 'block', blockSeconds: 3 },
    });
  });
}
