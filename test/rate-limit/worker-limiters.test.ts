/**
 * Memory limits in a worker of `server.workers > 1` (RateLimiterCluster, counters in the primary):
 * every reload that changes a tenant's limits builds new limiters, each adding a process 'message'
 * listener; the service disposes of those no tenant uses any more, so the listeners stay bounded,
 * counters of unchanged limits survive a reload, and a check in flight is still answered.
 * This process is the primary (RateLimiterClusterMaster); worker-limiters-fixture.ts is the worker.
 */
import t from 'tap';
import cluster from 'node:cluster';
import { join } from 'node:path';
import { ROOT } from '../helpers/cli-entry.js';
import { RateLimiterClusterMaster } from 'rate-limiter-flexible';

interface Report {
  fixture: 'worker-limiters';
  perReload: Array<{ listeners: number; limiters: number; check: string }>;
  steadyChecks: string[];
  inFlightResult: string;
  afterRemoval: { listeners: number; limiters: number };
}

new RateLimiterClusterMaster();
cluster.setupPrimary({ exec: join(ROOT, 'test/rate-limit/worker-limiters-fixture.ts') });
const worker = cluster.fork();
t.teardown(() => {
  if (!worker.isDead()) worker.kill('SIGKILL');
});
const report = await new Promise<Report>((resolve, reject) => {
  worker.on('message', (m: Report) => {
    if (m?.fixture === 'worker-limiters') resolve(m);
  });
  worker.once('exit', (code) => reject(new Error(`the worker exited (${code}) before reporting`)));
});

const first = report.perReload[0];
const last = report.perReload.at(-1)!;
t.ok(report.perReload.every((r) => r.check === 'ok'), 'every check after a reload was counted and admitted');
t.ok(first.listeners > 0 && first.listeners === first.limiters, `one listener per built limiter (${first.listeners})`);
t.equal(last.listeners, first.listeners, `after 20 reloads changing the limits: still ${first.listeners} listeners`);
t.equal(last.limiters, first.limiters, 'and as many limiters');
t.same(report.steadyChecks, ['ok', 'ok', 'ok', 'rate_limited'], 'unchanged limits keep counting across the reloads (3 admitted, then 429)');
t.equal(report.inFlightResult, 'ok', 'a check in flight while its tenant was removed is answered');
t.same(report.afterRemoval, { listeners: 0, limiters: 0 }, 'no tenant left: no limiter and no listener left');
