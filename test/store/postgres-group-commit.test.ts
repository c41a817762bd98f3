/**
 * The PostgreSQL store's group commit of plain inserts (issue 24, src/store/postgres/insert-batcher.ts)
 * on a real PostgreSQL: concurrent batches share statements (fewer transactions than batches, seen
 * in the rows' xmin), and each batch stays all or nothing: a batch with a taken id fails alone,
 * with DuplicateTokenError, while the batches that shared its statement are written. And the
 * one-record deduplicating insert, which runs without BEGIN/COMMIT: a taken id is still
 * DuplicateTokenError with nothing written, and an expired slot holder gives its slot up.
 */
import t from 'tap';
import type { Test } from 'tap';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { postgresForFile } from '../helpers/postgres.js';
import { makeRecord, TENANT_A } from './contract.js';
import { PostgresStore } from '../../src/store/postgres/index.js';
import { DuplicateTokenError } from '../../src/store/types.js';

const server = await postgresForFile(t);
if (server) {
  const BATCHES = 40;

  const setup = async (t: Test) => {
    const db = await server.database(t);
    // A pool of 2: one insert statement at a time, so concurrent batches queue and share the next.
    const store = await PostgresStore.connect({ url: db.url, poolSize: 2 });
    t.teardown(() => store.close());
    const client = new pg.Client(db.url);
    await client.connect();
    t.teardown(() => client.end());
    return { store, client };
  };

  /** Per stored id (uuid or custom), the transaction that wrote its row. */
  const writers = async (client: pg.Client): Promise<Map<string, string>> => {
    const r = await client.query<{ id: string; xmin: string }>('SELECT coalesce(id::text, custom_id) AS id, xmin::text AS xmin FROM tokenproxy.tokens');
    return new Map(r.rows.map((row) => [row.id, row.xmin]));
  };

  t.test('concurrent plain batches share statements; each is written whole', async (t) => {
    const { store, client } = await setup(t);
    const batches = Array.from({ length: BATCHES }, (_, i) => [makeRecord({ id: randomUUID() }), makeRecord({ id: `custom-${i}-${randomUUID()}` })]);
    const results = await Promise.all(batches.map((b) => store.tokens.insertMany(b)));
    t.same(results, batches.map(() => [null, null]), 'every record written (null each)');
    const stored = await writers(client);
    t.equal(stored.size, BATCHES * 2, 'every row stored');
    for (const [i, b] of batches.entries()) {
      t.equal(stored.get(b[0]!.id), stored.get(b[1]!.id), `batch ${i}: both rows in one transaction`);
    }
    const transactions = new Set(stored.values()).size;
    t.ok(transactions < BATCHES, `fewer transactions (${transactions}) than batches (${BATCHES}): statements were shared`);
    const back = await store.tokens.getMany(TENANT_A, batches.flat().map((r) => r.id));
    t.equal(back.length, BATCHES * 2, 'every record reads back');
  });

  t.test('a batch with a taken id fails alone; the batches sharing its statement are written', async (t) => {
    const { store, client } = await setup(t);
    const taken = makeRecord({ id: `taken-${randomUUID()}` });
    await store.tokens.insertMany([taken]);
    const bad = BATCHES / 2;
    const batches = Array.from({ length: BATCHES }, (_, i) => [
      makeRecord({ id: randomUUID() }),
      i === bad ? makeRecord({ id: taken.id }) : makeRecord({ id: `custom-${i}-${randomUUID()}` }),
    ]);
    const results = await Promise.all(batches.map((b) => store.tokens.insertMany(b).then(() => null, (err: unknown) => err)));
    const failed = results.flatMap((r, i) => (r === null ? [] : [i]));
    t.same(failed, [bad], 'only the batch with the taken id failed');
    const err = results[bad];
    t.ok(err instanceof DuplicateTokenError, 'DuplicateTokenError');
    t.equal(err instanceof DuplicateTokenError && err.id, taken.id, 'naming the taken id');
    const stored = await writers(client);
    t.notOk(stored.has(batches[bad]![0]!.id), 'nothing of the failed batch was written (its other record neither)');
    t.equal(stored.size, 1 + (BATCHES - 1) * 2, 'every row of every other batch, and the taken one');
    for (const [i, b] of batches.entries()) if (i !== bad) t.ok(stored.has(b[0]!.id) && stored.has(b[1]!.id), `batch ${i} written whole`);
    t.equal((await store.tokens.get(TENANT_A, taken.id))?.sealed, taken.sealed, 'the taken id still holds its own token');
  });

  t.test('one deduplicating record (no transaction): a taken id fails with nothing written; an expired holder gives up its slot', async (t) => {
    const { store, client } = await setup(t);
    const taken = makeRecord({ id: `taken-${randomUUID()}` });
    await store.tokens.insertMany([taken]);
    const fingerprint = `fp-${randomUUID()}`;
    const err = await store.tokens.insertMany([makeRecord({ id: taken.id, fingerprint })], { dedupe: [true] }).then(() => null, (e: unknown) => e);
    t.ok(err instanceof DuplicateTokenError, 'DuplicateTokenError');
    t.equal(err instanceof DuplicateTokenError && err.id, taken.id, 'naming the taken id');
    t.equal((await writers(client)).size, 1, 'nothing written');
    const holder = makeRecord({ fingerprint, expires_at: new Date(Date.now() + 3_600_000).toISOString() });
    t.same(await store.tokens.insertMany([holder], { dedupe: [true] }), [null], 'the first holds the slot');
    // makeRecord's ids are not UUIDs: stored in custom_id. Expired in the database, not through update
    // (which gives the slot up itself).
    await client.query('UPDATE tokenproxy.tokens SET expires_ms = 1 WHERE custom_id = $1', [holder.id]);
    const next = makeRecord({ fingerprint });
    t.same(await store.tokens.insertMany([next], { dedupe: [true] }), [null], 'the holder expired: written');
    const slots = await client.query<{ id: string }>('SELECT coalesce(id::text, custom_id) AS id FROM tokenproxy.tokens WHERE dedupe_slot');
    t.same(slots.rows.map((r) => r.id), [next.id], 'the slot moved to the new token');
    t.equal((await store.tokens.insertMany([makeRecord({ fingerprint })], { dedupe: [true] }))[0]?.id, next.id, 'and it is matched');
  });
}
