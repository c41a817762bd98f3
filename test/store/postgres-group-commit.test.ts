/**
 * The PostgreSQL store's group commit of plain inserts (issue 24, src/store/postgres/insert-batcher.ts)
 * on a real PostgreSQL: concurrent batches share statements (fewer transactions than batches, seen
 * in the rows' xmin), and each batch stays all or nothing: a batch with a taken id fails alone,
 * with DuplicateTokenError, while the batches that shared its statement are written.
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
}
