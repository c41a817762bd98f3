/**
 * Two service instances counting on one real 3-master Redis Cluster (`rate_limits.cluster`):
 * exactly N admitted between them, a Block holds across them (its MULTI stays on one slot), and
 * the counters of many tenants spread over the shards, each tenant's on one shard (the tenant is
 * the keys' hash tag).
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { clusterForFile, cli } from '../helpers/redis-topology.js';
import { startTestService } from '../helpers/service.js';
import { client, limitedConfig, tenant } from './http-helpers.js';
import { blockAcross, blockTenant, exactness, exactnessTenants } from './shared-suite.js';

const cluster = await clusterForFile(t);
if (cluster) {
  const keyPrefix = `${cluster.prefix}rl:`;
  const exact = exactnessTenants();
  const blk = blockTenant();
  const many = Array.from({ length: 30 }, () => tenant({ apps: [{ kind: 'private' }] }));
  const config = limitedConfig([exact.seq, exact.conc, blk, ...many], {
    rate_limits: { store: 'redis', cluster: { nodes: cluster.nodes }, key_prefix: keyPrefix, timeout_ms: 1000 },
  });
  const a = await startTestService(t, { config });
  const b = await startTestService(t, { config });
  t.jobs = 3;

  exactness(t, a, b, exact);
  blockAcross(t, a, b, blk);

  t.test('counters of 30 tenants land on all three shards, each tenant on one', async (t) => {
    const c = client(t, a.url);
    for (const tn of many) {
      const r = await c.send('GET', `/tokens/${randomUUID()}`, { key: tn.keys[0][0] });
      t.equal(r.status, 404, `tenant ${tn.id.slice(0, 8)}: counted and served`);
      t.match(r.headers['ratelimit-remaining'], /^\d+$/);
    }
    // KEYS on each master lists only the keys of its own slots.
    const perNode = await Promise.all(cluster.ports.map(async (p) => (await cli(p, '--raw', 'keys', `${keyPrefix}*`)).split('\n').filter(Boolean)));
    const shardsOf = (id: string) => perNode.map((keys, i) => (keys.some((k) => k.includes(`:{${id}}:`)) ? i : -1)).filter((i) => i >= 0);
    for (const tn of many) t.equal(shardsOf(tn.id).length, 1, `tenant ${tn.id.slice(0, 8)}: its counters on one shard`);
    const used = new Set(many.flatMap((tn) => shardsOf(tn.id)));
    t.equal(used.size, 3, `tenants on every shard (keys per shard: ${perNode.map((k) => k.length).join(', ')})`);
    t.ok(perNode.flat().every((k) => /^[^{}]+:\{[0-9a-f-]{36}\}:/.test(k)), 'every counter key carries the tenant as its hash tag');
  });
}
