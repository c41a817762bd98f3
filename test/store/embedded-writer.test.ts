/**
 * The embedded store's writer thread (src/store/embedded/writer.ts): group commit across turns,
 * a duplicate failing only its own batch, the writer dying mid-write, close() with writes in
 * flight, failures mapped without values, and a process that uses the store exiting on its own.
 * Real SQLite files in a temp dir per test; the writer is killed through EmbeddedStore.writerThread().
 */
import t, { type Test } from 'tap';
import { Sqlite as Database } from '../../src/store/embedded/sqlite.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from '../helpers/cli-entry.js';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import { makeRecord, TENANT_A } from './contract.js';
import { EmbeddedStore } from '../../src/store/embedded/index.js';
import { waitFor } from '../helpers/wait.js';
import { DuplicateTokenError, StoreUnavailableError, type StoredToken } from '../../src/store/types.js';

function dbPath(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'tp-writer-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'tokens.db');
}

function open(t: Test, path = dbPath(t)): EmbeddedStore {
  const store = new EmbeddedStore(path);
  t.teardown(() => store.close());
  return store;
}

async function caught(p: Promise<unknown>): Promise<unknown> {
  return p.then(() => null, (err: unknown) => err);
}

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

t.test('concurrent insertMany calls from many turns: all committed, each readable as soon as it resolves', async (t) => {
  const store = open(t);
  const calls: Promise<string>[] = [];
  for (let turn = 0; turn < 25; turn++) {
    for (let i = 0; i < 8; i++) {
      const records = [makeRecord({ metadata: { turn: String(turn) }, index_hashes: [`h${turn}`] }), makeRecord()];
      // Read on the main thread's connection in the same callback that sees the resolution.
      calls.push(store.tokens.insertMany(records).then(async () => {
        const got = await store.tokens.getMany(TENANT_A, records.map((r) => r.id));
        return got.length === 2 && JSON.stringify(got) === JSON.stringify(records) ? 'read back' : `missing ${2 - got.length}`;
      }));
    }
    if (turn % 3 === 0) await nextTurn();
    else if (turn % 3 === 1) await delay(1);
  }
  const outcomes = await Promise.all(calls);
  t.same(new Set(outcomes), new Set(['read back']), `${calls.length} inserts, every one readable right after it resolved`);
  const page = await store.tokens.list(TENANT_A, { metadata: { turn: '7' }, index_hashes: ['h7'] }, { size: 100, after: null });
  t.equal(page.items.length, 8, 'side tables written too');
  const reader = open(t, store.path);
  t.equal((await reader.tokens.list(TENANT_A, {}, { size: 100, after: null })).items.length, 100, 'another connection sees the commits');
});

t.test('a duplicate fails only its own batch while concurrent batches from several turns commit', async (t) => {
  const store = open(t);
  const existing = makeRecord();
  await store.tokens.insertMany([existing]);
  const good: StoredToken[][] = [];
  const calls: Promise<unknown>[] = [];
  const inBatch = [makeRecord(), makeRecord()];
  const vsStored = [makeRecord(), { ...makeRecord(), id: existing.id }];
  for (let turn = 0; turn < 4; turn++) {
    for (let i = 0; i < 5; i++) {
      const batch = [makeRecord(), makeRecord(), makeRecord()];
      good.push(batch);
      calls.push(caught(store.tokens.insertMany(batch)));
      if (turn === 1 && i === 2) calls.push(caught(store.tokens.insertMany([...inBatch, { ...makeRecord(), id: inBatch[1]!.id }])));
      if (turn === 2 && i === 0) calls.push(caught(store.tokens.insertMany(vsStored)));
    }
    await nextTurn();
  }
  const results = await Promise.all(calls);
  const failures = results.filter((r) => r !== null);
  t.equal(failures.length, 2, 'exactly the two bad batches failed');
  t.ok(failures.every((e) => e instanceof DuplicateTokenError), 'with DuplicateTokenError');
  t.same(failures.map((e) => (e instanceof DuplicateTokenError ? e.id : null)).sort(), [inBatch[1]!.id, existing.id].sort(), 'naming the duplicate id');
  t.same(await store.tokens.getMany(TENANT_A, [...inBatch, vsStored[0]!].map((r) => r.id)), [], "the bad batches' other records were not written");
  const ids = good.flat().map((r) => r.id);
  t.equal((await store.tokens.getMany(TENANT_A, ids)).length, ids.length, 'every good batch was written');
  t.same(await store.tokens.get(TENANT_A, existing.id), existing, 'the stored record was not overwritten');
});

t.test('another failure in a group fails every write of the group, as StoreUnavailableError without values', async (t) => {
  const path = dbPath(t);
  const store = open(t, path);
  const side = new Database(path);
  t.teardown(() => side.close());
  // Format 6 (issue 24): the type is a number into dict, added in the same transaction as the row.
  side.exec("CREATE TRIGGER refuse BEFORE INSERT ON vault_tokens WHEN NEW.type = (SELECT n FROM dict WHERE s = 'refused') BEGIN SELECT RAISE(ABORT, 'refused'); END");
  const bad = makeRecord({ type: 'refused' });
  const other = makeRecord();
  const [eBad, eOther] = await Promise.all([caught(store.tokens.insertMany([bad])), caught(store.tokens.insertMany([other]))]);
  for (const e of [eBad, eOther]) {
    t.ok(e instanceof StoreUnavailableError, 'StoreUnavailableError');
    t.equal(e instanceof Error && e.message, 'the embedded store failed (SQLITE_CONSTRAINT_TRIGGER)');
    t.notOk(e instanceof Error && (e.message.includes(bad.id) || e.message.includes(bad.sealed)), 'no values in the message');
  }
  t.equal(await store.tokens.get(TENANT_A, other.id), null, 'rolled back with the group');
  side.exec('DROP TRIGGER refuse');
  await store.tokens.insertMany([other]);
  t.same(await store.tokens.get(TENANT_A, other.id), other, 'the writer carries on');
});

t.test('the writer dies mid-write: writes in flight reject, the next write starts a new writer', async (t) => {
  const path = dbPath(t);
  const store = open(t, path);
  await store.tokens.insertMany([makeRecord()]);
  const first = store.writerThread();
  if (!first) throw new Error('no writer thread');
  // Another connection holds the write lock, so the writer is stuck inside its transaction
  // (busy_timeout) when it is terminated: those writes are in flight and never commit.
  const lock = new Database(path);
  t.teardown(() => lock.close());
  lock.exec('BEGIN IMMEDIATE');
  const a = makeRecord();
  const b = makeRecord();
  const idleBefore = first.performance.eventLoopUtilization();
  const inFlight = [caught(store.tokens.insertMany([a])), caught(store.tokens.insertMany([b])), caught(store.tokens.delete(TENANT_A, 'x'))];
  // Waits until the writer is stuck in its transaction: its event loop has been busy (inside the
  // synchronous wait for the lock) for 200 ms since the writes were sent, where a write takes a
  // few ms (issue 30: a fixed 100 ms sleep assumed the writes had reached it).
  await waitFor(() => first.performance.eventLoopUtilization(idleBefore).active >= 200, { timeoutMs: 4000, intervalMs: 10, what: 'the writer blocked on the lock inside its transaction' });
  const terminated = first.terminate();
  lock.exec('ROLLBACK');
  await terminated;
  const errors = await Promise.all(inFlight);
  for (const e of errors) {
    t.ok(e instanceof StoreUnavailableError, 'rejected with StoreUnavailableError');
    t.notOk(e instanceof Error && (e.message.includes(a.id) || e.message.includes(a.sealed)), 'no values in the message');
  }
  t.same(await store.tokens.getMany(TENANT_A, [a.id, b.id]), [], 'nothing of the killed transaction was committed');
  t.equal(store.writerThread(), null, 'no live writer until the next write');

  const c = makeRecord();
  await store.tokens.insertMany([c]);
  t.same(await store.tokens.get(TENANT_A, c.id), c, 'the next insert succeeds');
  const second = store.writerThread();
  t.ok(second && second !== first && second.threadId !== first.threadId, 'on a new writer thread');
  await store.tokens.insertMany([a, b]);
  t.equal((await store.tokens.getMany(TENANT_A, [a.id, b.id])).length, 2, 'the lost writes can be retried');
});

t.test('close() commits the writes in flight, the writer exits, later calls reject', async (t) => {
  const path = dbPath(t);
  const store = new EmbeddedStore(path);
  t.teardown(() => store.close());
  await store.ping();
  const posted = Array.from({ length: 20 }, () => makeRecord());
  const results = posted.map((r) => store.tokens.insertMany([r]));
  await nextTurn(); // these are with the writer now
  const queued = Array.from({ length: 20 }, () => makeRecord());
  results.push(...queued.map((r) => store.tokens.insertMany([r]))); // these still wait for this turn to end
  const writer = store.writerThread();
  if (!writer) throw new Error('no writer thread');
  let exited = false;
  writer.once('exit', () => (exited = true));
  await store.close();
  t.ok(exited, 'the writer thread has exited when close() resolves');
  t.same(await Promise.allSettled(results).then((rs) => rs.map((r) => r.status)), results.map(() => 'fulfilled'), 'every write in flight resolved');
  const closed = { name: 'StoreUnavailableError', message: 'the embedded store is closed' };
  const r = makeRecord();
  await t.rejects(store.tokens.insertMany([r]), closed);
  await t.rejects(store.tokens.update(r), closed);
  await t.rejects(store.tokens.delete(TENANT_A, r.id), closed);
  await t.rejects(store.tokens.purgeCvc(new Date()), closed);
  await t.rejects(store.dataKeys.addDataKey({ kid: 'k', wrapped: 'w', created_at: new Date().toISOString() }), closed);
  await t.rejects(store.tokens.get(TENANT_A, r.id), closed);
  await t.rejects(store.dataKeys.listDataKeys(), closed);
  await t.rejects(store.ping(), closed);
  await store.close();
  t.pass('a second close() resolves');

  const reopened = open(t, path);
  const ids = [...posted, ...queued].map((x) => x.id);
  t.equal((await reopened.tokens.getMany(TENANT_A, ids)).length, ids.length, 'all of them are in the file');
});

t.test('encoding stays on the caller: a bad date is a TypeError for that call alone', async (t) => {
  const store = open(t);
  const good = makeRecord();
  const results = await Promise.allSettled([store.tokens.insertMany([makeRecord({ expires_at: 'not a date' })]), store.tokens.insertMany([good])]);
  t.equal(results[0]!.status === 'rejected' && results[0]!.reason instanceof TypeError, true, 'TypeError');
  t.equal(results[1]!.status, 'fulfilled');
  await t.rejects(store.tokens.update({ ...good, cvc_expires_at: 'nope' }), TypeError);
  await t.rejects(store.tokens.purgeCvc(new Date(NaN)), TypeError);
});

t.test('a process that uses the store exits on its own, closed or not (the idle writer holds nothing open)', async (t) => {
  const storeUrl = pathToFileURL(join(ROOT, 'src/store/embedded/index.ts')).href;
  for (const close of [true, false]) {
    const path = dbPath(t);
    // `--import tsx` on purpose: on Node 20 tsx does not load .ts files in worker threads on its own.
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', `
        import { EmbeddedStore } from ${JSON.stringify(storeUrl)};
        const store = new EmbeddedStore(process.argv[1]);
        await store.tokens.insertMany([JSON.parse(process.argv[2])]);
        await store.dataKeys.addDataKey({ kid: 'k1', wrapped: 'w', created_at: new Date().toISOString() });
        if (process.argv[3] === 'close') await store.close();
        process.stdout.write('done\\n');`, path, JSON.stringify(makeRecord()), close ? 'close' : 'open'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    t.teardown(() => child.kill('SIGKILL'));
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const started = Date.now();
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    const [code, signal] = await once(child, 'exit');
    clearTimeout(timer);
    t.same({ code, signal, out }, { code: 0, signal: null, out: 'done\n' }, `${close ? 'closed' : 'never closed'}: exited by itself in ${Date.now() - started} ms`);
    const reader = open(t, path);
    t.equal((await reader.dataKeys.listDataKeys()).length, 1, 'its writes are in the file');
  }
});
