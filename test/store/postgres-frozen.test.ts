/**
 * A frozen PostgreSQL (the postmaster and every process it started stopped with SIGSTOP: the
 * kernel still accepts TCP connections into the listen queue, nothing answers): every request
 * answers 503 store_unavailable within the documented bound (docs/storage.md, Failures: one
 * deadline a store call, the query timeout, 5 s by default), whatever it waited on: a pooled
 * connection whose statement hangs, a connection being opened, a free client of a full pool, its
 * turn in the insert batcher behind statements that hang. Resumed (SIGCONT), the service serves
 * again by itself. Each failure's log line names its code and class, and no value; so does the
 * line of a PostgreSQL that refuses connections (killed).
 *
 * On a cluster of this file's own (postgresForFile killable): freezing a shared one would stop the
 * other test files' databases.
 */
import t from 'tap';
import type { Test } from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { createPool, query, transaction } from '../../src/store/postgres/pool.js';
import { StoreUnavailableError } from '../../src/store/unavailable.js';
import { postgresForFile, type PostgresServer } from '../helpers/postgres.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { randomMarker } from '../helpers/secrets.js';
import { sleep, waitFor } from '../helpers/wait.js';

/** The documented bound (the default query timeout: one deadline a store call) and a margin for a loaded machine: a bound on a hang, not a speed test. */
const BOUND_MS = 5_000;
const MARGIN_MS = 1_500;

/**
 * Stops the postmaster, then every process it started (backends, checkpointer, walwriter, …):
 * stopped first, it forks nothing more. Returns the pids, to resume them.
 */
function freeze(server: PostgresServer): number[] {
  const postmaster = Number(readFileSync(join(server.dataDir!, 'postmaster.pid'), 'utf8').split('\n')[0]);
  process.kill(postmaster, 'SIGSTOP');
  const pids = [postmaster];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the last ')'.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === postmaster) pids.push(Number(entry));
  }
  signal(pids.slice(1), 'SIGSTOP');
  return pids;
}

function signal(pids: number[], sig: 'SIGSTOP' | 'SIGCONT'): void {
  for (const pid of pids) {
    try {
      process.kill(pid, sig);
    } catch {
      // a backend that ended meanwhile
    }
  }
}

interface Timed {
  what: string;
  status: number;
  code: unknown;
  ms: number;
}

/** Sends every request `after` ms from now; resolves with each answer and how long it took from its own send. */
function send(requests: Array<{ what: string; after: number; call: () => ReturnType<TestService['call']> }>): Promise<Timed[]> {
  return Promise.all(requests.map(async (r) => {
    await sleep(r.after);
    const t0 = performance.now();
    const a = await r.call();
    return { what: r.what, status: a.status, code: a.body?.code as unknown, ms: Math.round(performance.now() - t0) };
  }));
}

function expectBounded(t: Test, answers: Timed[], label: string): void {
  t.comment(`${label}: ${answers.map((a) => `${a.what} ${a.ms} ms`).join(', ')}`);
  for (const a of answers) {
    t.equal(a.status, 503, `${label}, ${a.what}: 503`);
    t.equal(a.code, 'store_unavailable', `${label}, ${a.what}: store_unavailable`);
    t.ok(a.ms <= BOUND_MS + MARGIN_MS, `${label}, ${a.what}: answered within the bound (${a.ms} ms <= ${BOUND_MS} + ${MARGIN_MS} ms)`);
  }
}

/** The `request failed` lines logged after `from` characters of the log. */
function failedLines(s: TestService, from: number): Array<{ code?: unknown; cause?: Record<string, unknown> }> {
  return s.logs().slice(from).split('\n').filter((l) => l.includes('"msg":"request failed"')).map((l) => JSON.parse(l));
}

/** Resumes the cluster and waits until the service reads and writes again. */
async function resumeAndRecover(t: Test, s: TestService, pids: number[], id: string): Promise<void> {
  signal(pids, 'SIGCONT');
  const back = await waitFor(async () => {
    const r = await s.call('GET', `/tokens/${id}`);
    return r.status === 200 ? r : undefined;
  }, { timeoutMs: 30_000, intervalMs: 100, what: 'the service serving again after SIGCONT' });
  t.equal(back.status, 200, 'resumed: reads serve again');
  t.equal((await s.call('POST', '/tokenize', { body: { v: randomMarker('after') } })).status, 200, 'resumed: writes serve again');
}

const server = await postgresForFile(t, { killable: true });
if (server) {
  const s = await startTestService(t, { postgres: await server.database(t) });
  const made = await s.call('POST', '/tokenize', { body: { v: randomMarker('before') } });
  const id = made.body?.v as string;
  const secret = randomMarker('frozen');
  /** Ten concurrent reads: the pool (10 connections) holds ten open, idle connections afterwards. */
  const warm = () => Promise.all(Array.from({ length: 10 }, () => s.call('GET', `/tokens/${id}`)));

  t.test('frozen: inserts queued in the batcher behind hung statements fail by their own deadline', async (t) => {
    t.equal(made.status, 200, 'serving before the freeze');
    await warm();
    const pids = freeze(server);
    t.teardown(() => signal(pids, 'SIGCONT')); // should a request throw: the service's own teardown needs the cluster
    const from = s.logs().length;
    // Five inserts take the batcher's five statement slots (half the pool), each hung on an idle
    // connection; three more queue behind them; two reads hang on two more idle connections.
    // Three connections stay idle: a queued insert that waited out the hung statements and then
    // got one of them waited a whole query timeout more before.
    const answers = await send([
      ...Array.from({ length: 5 }, (_, i) => ({ what: `tokenize ${i}`, after: 0, call: () => s.call('POST', '/tokenize', { body: { v: `${secret}-a${i}` } }) })),
      ...Array.from({ length: 3 }, (_, i) => ({ what: `queued tokenize ${i}`, after: 300, call: () => s.call('POST', '/tokenize', { body: { v: `${secret}-b${i}` } }) })),
      { what: 'read', after: 300, call: () => s.call('GET', `/tokens/${id}`) },
      { what: 'read of an unknown id', after: 300, call: () => s.call('GET', `/tokens/${randomUUID()}`) },
    ]);
    expectBounded(t, answers, 'batcher');
    const lines = failedLines(s, from);
    t.equal(lines.length, answers.length, 'one request failed line a 503');
    for (const line of lines) {
      t.match(line, { code: 'store_unavailable', cause: { type: 'StoreUnavailableError', code: 'timeout', class: 'timeout', message: 'the PostgreSQL store failed (timeout)' } }, 'the line names the code and the class');
    }
    t.notOk(s.logs().includes(secret), 'no value in the log');
    await resumeAndRecover(t, s, pids, id);
  });

  t.test('frozen: more requests than the pool has connections, all answered within the bound', async (t) => {
    await warm();
    const pids = freeze(server);
    t.teardown(() => signal(pids, 'SIGCONT'));
    const from = s.logs().length;
    // Staggered, so later ones arrive while earlier ones hold the pool and the batcher: some hang on
    // an idle connection, some wait for a free client of the full pool, some open a new connection
    // (the kernel accepts it; the startup gets no answer), some queue in the batcher.
    const answers = await send(Array.from({ length: 16 }, (_, i) => i % 2 === 0
      ? { what: `tokenize ${i}`, after: (i % 4) * 250, call: () => s.call('POST', '/tokenize', { body: { v: `${secret}-c${i}` } }) }
      : { what: `read ${i}`, after: (i % 4) * 250, call: () => s.call('GET', `/tokens/${i % 3 === 0 ? id : randomUUID()}`) }));
    expectBounded(t, answers, 'full pool');
    const lines = failedLines(s, from);
    t.equal(lines.length, answers.length, 'one request failed line a 503');
    for (const line of lines) t.match(line, { cause: { code: 'timeout', class: 'timeout' } }, 'the line names the code and the class');
    t.notOk(s.logs().includes(secret), 'no value in the log');
    await resumeAndRecover(t, s, pids, id);
  });

  t.test('a transaction has one deadline, not one a statement; so has a statement, with the wait for a connection', async (t) => {
    const pool = createPool({ url: (await server.database(t)).url, poolSize: 1, queryTimeoutMs: 1_500 });
    t.teardown(() => pool.end());
    // Each statement well within the timeout, the two together past it.
    const started = performance.now();
    const err = await transaction(pool, async (c) => {
      await c.query('SELECT pg_sleep(1)');
      await c.query('SELECT pg_sleep(1)');
    }).then(() => null, (e: unknown) => e);
    const ms = Math.round(performance.now() - started);
    t.ok(err instanceof StoreUnavailableError, `the transaction fails (${ms} ms)`);
    t.match(err, { code: 'timeout', class: 'timeout' });
    t.ok(ms < 1_500 + MARGIN_MS, `at its deadline, not after both statements (${ms} ms)`);
    t.same((await query(pool, 'SELECT 1 AS one')).rows, [{ one: 1 }], 'the pool serves again (the closed connection replaced)');
    // The pool's one connection busy for 1 s: a statement that waits for it has the rest of its deadline.
    const busy = query(pool, 'SELECT pg_sleep(1)');
    const waited = performance.now();
    const late = await query(pool, 'SELECT pg_sleep(1)').then(() => null, (e: unknown) => e);
    const waitedMs = Math.round(performance.now() - waited);
    await busy;
    t.match(late, { code: 'timeout', class: 'timeout' }, `a statement that waited 1 s for a connection has 0.5 s left (${waitedMs} ms)`);
    t.ok(waitedMs < 1_500 + MARGIN_MS, `failed at its deadline (${waitedMs} ms)`);
  });

  t.test('killed: the log line names ECONNREFUSED, an outage', async (t) => {
    await server.kill();
    let restarted = false;
    t.teardown(() => (restarted ? undefined : server.restart().catch(() => {})));
    const from = s.logs().length;
    // The first may meet a pooled connection the shutdown closed (connection_closed, 57P01); the
    // pool drops those, so the second opens a new one, refused.
    for (let i = 0; i < 2; i++) {
      const r = await s.call('POST', '/tokenize', { body: { v: `${secret}-killed-${i}` } });
      t.equal(r.status, 503, r.text);
      t.equal(r.body?.code, 'store_unavailable');
    }
    const lines = failedLines(s, from);
    t.equal(lines.length, 2, 'a request failed line a request');
    for (const line of lines) t.match(line, { code: 'store_unavailable', cause: { type: 'StoreUnavailableError', code: /^(ECONNREFUSED|connection_closed|57P0[12])$/, class: 'outage' } });
    t.match(lines[1], { cause: { code: 'ECONNREFUSED', message: 'the PostgreSQL store failed (ECONNREFUSED)' } }, 'a refused connection: ECONNREFUSED');
    t.notOk(s.logs().includes(secret), 'no value in the log');
    await server.restart();
    restarted = true;
    await waitFor(async () => (await s.call('GET', `/tokens/${id}`)).status === 200, { timeoutMs: 30_000, intervalMs: 100, what: 'the service serving again after the restart' });
  });
}
