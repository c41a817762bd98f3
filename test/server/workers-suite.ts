/** The exactness check shared by workers.test.ts (memory limits) and workers-redis.test.ts. */
import type { Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { onNewConnection, servedBy, workerPids } from '../helpers/cluster.js';
import type { ChildService } from '../helpers/process.js';

/** N+20 requests for a key limited to N, all at once, each on a connection of its own. */
export async function exactlyN(t: Test, svc: ChildService, key: string, n: number): Promise<void> {
  const answers = await Promise.all(Array.from({ length: n + 20 }, () => onNewConnection(svc.url, 'GET', `/tokens/${randomUUID()}`, { key })));
  t.equal(answers.filter((a) => a.status === 404).length, n, `exactly ${n} admitted by the two workers together`);
  t.equal(answers.filter((a) => a.status === 429).length, 20, 'the other 20 rejected');
  const pids = new Set(await Promise.all(answers.map((a) => servedBy(svc.output, a.reqId))));
  t.same([...pids].sort(), workerPids(svc.output()).slice(0, 2).sort(), 'both workers served some of them (the access lines\' pid)');
}
