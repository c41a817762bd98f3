/**
 * The PostgreSQL store under failure and at rest (issue 24), on a cluster of this file's own:
 * - PostgreSQL killed (`pg_ctl stop -m immediate`, no shutdown checkpoint) under write load:
 *   while it is down requests answer 503 store_unavailable and /readyz 503; started again, the
 *   service recovers by itself; every write answered 2xx is read back with its value;
 * - nothing in plaintext in the cluster's files (every file of the data directory, after a
 *   CHECKPOINT wrote the tables out).
 */
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { postgresForFile } from '../helpers/postgres.js';
import { KEYS, startTestService } from '../helpers/service.js';
import { cvcPattern, randomCard, randomCvc, randomMarker } from '../helpers/secrets.js';
import { waitFor } from '../helpers/wait.js';

const server = await postgresForFile(t, { killable: true });
if (server) {
  t.test('nothing in plaintext in the data directory: card number, cvc, token value, API key', async (t) => {
    const db = await server.database(t);
    const s = await startTestService(t, { postgres: db });
    const number = randomCard();
    const cvc = randomCvc();
    const value = randomMarker('ssn');
    const r = await s.call('POST', '/tokenize', {
      body: { card: { type: 'card', data: { number, expiration_month: 3, expiration_year: 2031, cvc }, search_indexes: ['{{ data.number | last4 }}'] }, ssn: value },
    });
    t.equal(r.status, 200);
    t.equal((await s.call('GET', `/tokens/${r.body.ssn}`)).body.data, value, 'stored and readable');
    const client = new pg.Client(db.url);
    await client.connect();
    await client.query('CHECKPOINT');
    await client.end();
    const files: string[] = [];
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const p = join(dir, name);
        if (statSync(p).isDirectory()) walk(p);
        else files.push(p);
      }
    };
    walk(server.dataDir!);
    let bytes = 0;
    let sawId = false;
    const leaks: string[] = [];
    for (const f of files) {
      const raw = readFileSync(f);
      bytes += raw.length;
      if (raw.indexOf(r.body.ssn) !== -1) sawId = true;
      for (const secret of [number, value, KEYS.private]) if (raw.indexOf(secret) !== -1) leaks.push(f);
      if (cvcPattern(cvc).test(raw.toString('latin1'))) leaks.push(`${f} (cvc)`);
    }
    t.ok(sawId, `the scan reads the stored rows (the token id is in the files; ${files.length} files, ${bytes} bytes)`);
    t.same(leaks, [], 'no file holds the card number, the value, the API key or the cvc');
  });

  t.test('killed under write load: 503 store_unavailable while down, recovery by itself, every 2xx write readable', async (t) => {
    const s = await startTestService(t, { postgres: await server.database(t) });
    const written = new Map<string, string>();
    const statuses = new Map<string, number>();
    let stop = false;
    let n = 0;
    let slowest503 = 0;
    const writer = async (): Promise<void> => {
      while (!stop) {
        const value = `v-${++n}-${randomMarker('kill')}`;
        const started = Date.now();
        const r = await s.call('POST', '/tokenize', { body: { v: value } }).catch(() => null);
        if (r?.status === 503) slowest503 = Math.max(slowest503, Date.now() - started);
        const label = r === null ? 'network' : r.status >= 500 ? `${r.status} ${r.body?.code}` : String(r.status);
        statuses.set(label, (statuses.get(label) ?? 0) + 1);
        if (r !== null && r.status === 200) written.set(r.body.v, value);
        // Failing fast while PostgreSQL is down: do not spin.
        else await new Promise((res) => setTimeout(res, 5));
      }
    };
    const writers = Array.from({ length: 8 }, () => writer());
    t.teardown(() => {
      stop = true;
    });
    await waitFor(() => written.size >= 100, { what: '100 writes before the kill', timeoutMs: 30_000 });
    await server.kill();
    const before = written.size;
    await waitFor(() => (statuses.get('503 store_unavailable') ?? 0) >= 20, { what: '503 store_unavailable while PostgreSQL is down', timeoutMs: 30_000 });
    const ready = await s.call('GET', '/readyz', { key: null });
    t.equal(ready.status, 503, '/readyz: 503 while PostgreSQL is down');
    t.equal(ready.body?.code, 'store_unavailable');
    const down = await s.call('POST', '/tokenize', { body: { v: 'while-down' } });
    t.equal(down.status, 503);
    t.equal(down.body.code, 'store_unavailable');
    t.equal(down.headers.get('content-type'), 'application/problem+json');
    await server.restart();
    await waitFor(() => written.size >= before + 100, { what: '100 more writes after the restart, with no help', timeoutMs: 60_000 });
    stop = true;
    await Promise.all(writers);
    t.equal((await s.call('GET', '/readyz', { key: null })).status, 200, '/readyz: 200 again');
    // A figure for the log, not an assertion (no wall-clock assertions): how long a 503 took at most.
    t.comment(`answers: ${JSON.stringify(Object.fromEntries(statuses))}; ${before} written before the kill, ${written.size} in all; slowest 503: ${slowest503} ms`);
    t.notOk([...statuses.keys()].some((k) => k.startsWith('5') && k !== '503 store_unavailable'), 'every failure was 503 store_unavailable');
    let lost = 0;
    for (const [id, value] of written) {
      const r = await s.call('GET', `/tokens/${id}`);
      if (r.status !== 200 || r.body.data !== value) lost++;
    }
    t.equal(lost, 0, `every one of the ${written.size} writes answered 200 is read back with its value`);
  });
}
