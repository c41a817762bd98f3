/**
 * `server.workers: 2` on the real CLI process (node:cluster), one cluster for the whole file (each
 * start loads the sources three times): memory rate limits stay exact across the workers (the
 * counters live in the primary), a token written through one worker is read through the other at
 * once, the log lines of both workers reach stdout whole, a worker killed with SIGKILL loses no
 * acknowledged token and is restarted, and SIGTERM drains every worker before the primary exits 0;
 * ':memory:' (which workers cannot share) is refused.
 * Redis limits across workers: workers-redis.test.ts.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { alive, logLines, onNewConnection, servedBy, startCluster, workerPids } from '../helpers/cluster.js';
import { runCli, writeConfig } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';
import { limitedConfig, tenant } from '../rate-limit/http-helpers.js';
import { exactlyN } from './workers-suite.js';

t.setTimeout(900_000);

const N = 7;
const limited = tenant({ custom: { private_key: { points: N, duration_seconds: 300 } }, apps: [{ kind: 'private' }] });
const HIGH = { points: 1_000_000, duration_seconds: 1 };
const open = tenant({ custom: { private_key: HIGH, creating_tokens: HIGH }, apps: [{ kind: 'private' }] });
const KEY = open.keys[0][0];

const svc = await startCluster(t, limitedConfig([limited, open], { rate_limits: { store: 'memory' } }));
const [first, second] = workerPids(svc.output());

t.test('memory limits: two workers admit exactly N', async (t) => {
  await exactlyN(t, svc, limited.keys[0][0], N);
});

t.test('a token written through one worker is read through the other at once; log lines stay whole', async (t) => {
  for (let i = 0; i < 6; i++) {
    const w = await onNewConnection(svc.url, 'POST', '/tokenize', { key: KEY, body: { v: `value-${i}` } });
    t.equal(w.status, 200, `token ${i} written`);
    const writer = await servedBy(svc.output, w.reqId);
    // New connections go to the workers in turn: read until a read lands on the other worker.
    await waitFor(async () => {
      const r = await onNewConnection(svc.url, 'GET', `/tokens/${w.body.v}`, { key: KEY });
      t.equal(r.status, 200, `token ${i} read`);
      t.equal(r.body.data, `value-${i}`);
      return (await servedBy(svc.output, r.reqId)) !== writer;
    }, { what: `a read of token ${i} through the worker that did not write it` });
  }

  // Both workers log at once (many requests on many connections): every line reaches stdout whole.
  const before = logLines(svc.output()).length;
  await Promise.all(Array.from({ length: 20 }, async () => {
    for (let i = 0; i < 10; i++) await onNewConnection(svc.url, 'GET', `/tokens/${randomUUID()}`, { key: KEY });
  }));
  const lines = await waitFor(() => {
    const l = logLines(svc.output());
    return l.length >= before + 200 && l;
  }, { what: '200 more access lines' });
  t.ok(lines.length >= before + 200, 'every line parses as one JSON object');
  t.same(new Set(lines.slice(before).map((l) => l.pid)), new Set([first, second]), 'from both workers');
});

t.test('a worker killed with SIGKILL loses no acknowledged token and is restarted', async (t) => {
  const acknowledged: Array<{ id: string; value: string }> = [];
  let failed = 0;
  // Writers keep tokenizing on fresh connections while one worker is killed under them.
  await Promise.all(Array.from({ length: 4 }, async (_, c) => {
    for (let i = 0; i < 15; i++) {
      if (c === 0 && i === 5) process.kill(first, 'SIGKILL');
      const value = `c${c}-${i}`;
      const r = await onNewConnection(svc.url, 'POST', '/tokenize', { key: KEY, body: { v: value } }).catch(() => null);
      if (r?.status === 200) acknowledged.push({ id: r.body.v, value });
      else failed++;
    }
  }));
  t.ok(acknowledged.length >= 30, `${acknowledged.length} tokens acknowledged, ${failed} cut by the kill`);
  const restarted = await waitFor(() => {
    const l = logLines(svc.output());
    const pids = workerPids(svc.output());
    return l.some((x) => x.msg === 'worker exited; restarting it' && x.worker_pid === first && x.signal === 'SIGKILL') && pids.length === 3 && pids[2];
  }, { what: 'the killed worker restarted', timeoutMs: 120_000 });
  t.not(restarted, first, 'a new process');
  t.notOk(alive(first), 'the killed worker is gone');
  t.ok(alive(second), 'the other worker kept running');
  for (const { id, value } of acknowledged) {
    const r = await onNewConnection(svc.url, 'GET', `/tokens/${id}`, { key: KEY });
    t.equal(r.status, 200, 'an acknowledged token is there');
    t.equal(r.body.data, value);
  }
  // The replacement serves requests: new connections reach it.
  await waitFor(async () => {
    const r = await onNewConnection(svc.url, 'GET', `/tokens/${randomUUID()}`, { key: KEY });
    return (await servedBy(svc.output, r.reqId)) === restarted;
  }, { what: 'a request served by the restarted worker' });
});

t.test('SIGTERM drains every worker; the primary exits 0 after them', async (t) => {
  const pids = workerPids(svc.output()).slice(1);
  await svc.stop();
  t.equal(svc.child.exitCode, 0, 'the primary exits 0');
  t.same(pids.filter(alive), [], 'no worker left running');
  const lines = logLines(svc.output());
  for (const pid of pids) t.ok(lines.some((l) => l.pid === pid && l.msg === 'stopping: draining requests in flight'), `worker ${pid} drained`);
  t.ok(lines.some((l) => l.msg === 'all workers exited' && l.failed === false), 'the primary saw them all exit cleanly');
});

t.test('an in-memory store cannot be shared by workers: refused at start', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tp-workers-mem-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = writeConfig(dir, { ...limitedConfig([open]), server: { host: '127.0.0.1', port: 0, workers: 2 }, store: { kind: 'embedded', path: ':memory:' } });
  const r = await runCli(['--config', path], { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64'), PORT: '0' });
  t.equal(r.code, 1, 'exit 1');
  t.match(r.output, /server\.workers > 1 needs a store the workers share/);
  t.notMatch(r.output, /worker listening/, 'no worker was started');
});
