/**
 * Sentinel failover under write load (real primary, replica and 3 sentinels; the primary gets
 * SIGKILL while three writers run):
 *   - a RedisStore with waitReplicas 1: every insert it acknowledged, before or after the kill, is
 *     readable after the promotion; it cannot write while the new primary has no replica (503), and
 *     writes again once the old primary is back as a replica;
 *   - a RedisStore without WAIT: acknowledged inserts the replica had not received when the
 *     primary died can be lost (asynchronous replication), and only those: the test asserts that the
 *     lost writes (on one machine usually 0-2) are the old primary's last acknowledged ones and
 *     prints how many;
 *   - the real service over HTTP (POST /tokenize, no WAIT): every answer is 200 or
 *     503 store_unavailable, the gap gives 503s, and it serves again after the promotion without
 *     a restart.
 * Nothing else is acceptable from either store: an error other than StoreUnavailableError (such as
 * a re-sent insert reporting its own id as a duplicate) fails the test.
 */
import t from 'tap';
import { sentinelForFile } from '../helpers/redis-topology.js';
import { baseConfig, startTestService } from '../helpers/service.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { makeRecord, TENANT_A } from './contract.js';
import { RedisStore } from '../../src/store/redis/index.js';
import { StoreUnavailableError } from '../../src/store/types.js';

interface Writer {
  acked: string[];
  /** Acknowledged writes counted at the kill, at the promotion. */
  atKill: number;
  atPromotion: number;
  unavailable: number;
  wrong: string[];
  done: Promise<void>;
}

const sentinel = await sentinelForFile(t);
if (sentinel) {
  t.test('SIGKILL of the primary under write load', async (t) => {
    const topo = { sentinels: sentinel.sentinels, name: sentinel.name };
    const waiting = await RedisStore.connect({ sentinel: topo, keyPrefix: `${sentinel.prefix}wait:`, waitReplicas: 1 });
    t.teardown(() => waiting.close());
    const plain = await RedisStore.connect({ sentinel: topo, keyPrefix: `${sentinel.prefix}plain:` });
    t.teardown(() => plain.close());
    const s = await startTestService(t, { config: { ...baseConfig(), store: { kind: 'redis', sentinel: topo, key_prefix: `${sentinel.prefix}http:` } } });

    let stop = false;
    const writer = (write: () => Promise<string>, classify: (err: unknown) => boolean): Writer => {
      const w: Writer = { acked: [], atKill: 0, atPromotion: 0, unavailable: 0, wrong: [], done: Promise.resolve() };
      w.done = (async () => {
        while (!stop) {
          try {
            w.acked.push(await write());
          } catch (err) {
            if (classify(err)) w.unavailable++;
            else w.wrong.push(err instanceof Error ? `${err.name}: ${err.message}` : String(err));
            await sleep(20);
          }
          await sleep(5); // a steady load, not a busy loop on a shared machine
        }
      })();
      return w;
    };
    const storeWriter = (store: RedisStore) => writer(async () => {
      const r = makeRecord();
      await store.tokens.insertMany([r]);
      return r.id;
    }, (err) => err instanceof StoreUnavailableError);
    class HttpAnswer extends Error {}
    let n = 0;
    const http = writer(async () => {
      const res = await s.call('POST', '/tokenize', { body: { v: { type: 'token', data: `value-${++n}` } } });
      if (res.status === 200) return res.body.v.id as string;
      throw new HttpAnswer(`${res.status} ${res.body?.code}`);
    }, (err) => err instanceof HttpAnswer && err.message === '503 store_unavailable');
    const writers = { waiting: storeWriter(waiting), plain: storeWriter(plain), http };
    const all = Object.values(writers);
    t.teardown(async () => {
      stop = true;
      await Promise.all(all.map((w) => w.done));
    });

    await waitFor(() => all.every((w) => w.acked.length >= 20), { timeoutMs: 30_000, what: 'every writer has 20 acknowledged writes' });
    const oldPort = await sentinel.killPrimary();
    for (const w of all) w.atKill = w.acked.length;
    await sentinel.waitForPromotion(oldPort);
    for (const w of all) w.atPromotion = w.acked.length;
    // Without WAIT, both the store and the service write again on the new primary: no restart.
    await waitFor(() => writers.plain.acked.length >= writers.plain.atPromotion + 10 && http.acked.length >= http.atPromotion + 10,
      { timeoutMs: 30_000, what: 'writes resume on the promoted primary' });
    // With WAIT 1 the new primary needs a replica: the old primary comes back as one.
    const beforeReturn = writers.waiting.acked.length;
    await sentinel.restartNode(oldPort);
    await waitFor(() => writers.waiting.acked.length >= beforeReturn + 10, { timeoutMs: 30_000, what: 'WAIT writes resume once a replica is back' });
    stop = true;
    await Promise.all(all.map((w) => w.done));

    for (const [name, w] of Object.entries(writers)) t.same(w.wrong, [], `${name}: every failure is store_unavailable`);
    t.ok(writers.plain.unavailable > 0 && http.unavailable > 0, `the gap answered store_unavailable (store ${writers.plain.unavailable}, HTTP ${http.unavailable} times)`);

    const missing = async (store: RedisStore, ids: string[]): Promise<string[]> => {
      const found = new Set<string>();
      for (let i = 0; i < ids.length; i += 200) (await store.tokens.getMany(TENANT_A, ids.slice(i, i + 200))).forEach((r) => found.add(r.id));
      return ids.filter((id) => !found.has(id));
    };
    const w = writers.waiting;
    t.same(await missing(waiting, w.acked), [], `WAIT 1: all ${w.acked.length} acknowledged inserts readable (${w.atKill} before the kill)`);
    // issue 30: README "Storage and durability": without WAIT a failover "can lose the last writes
    // the old primary acknowledged but had not yet sent to the replica", and nothing else. Each
    // writer is sequential and the replica holds a prefix of the primary's stream, so the lost
    // writes must be a run at the end of what the old primary acknowledged: acknowledged before the
    // kill (or the one write in flight at it, answered as the signal landed), with no surviving
    // write after them, and every write acknowledged later (by the new primary) readable.
    const onlyTheLast = (name: string, w: Writer, lost: string[]) => {
      const at = lost.map((id) => w.acked.indexOf(id)).sort((a, b) => a - b);
      t.comment(`${name}, no WAIT: ${lost.length} of ${w.atKill} writes acknowledged before the kill lost in the failover (asynchronous replication) at ${JSON.stringify(at)}; ${w.unavailable} answers store_unavailable`);
      t.ok(at.every((i) => i >= 0 && i <= w.atKill), `${name}: every lost write was acknowledged by the old primary (before the kill, or the one in flight at it)`);
      const run = at.length === 0 || (at.every((i, k) => k === 0 || i === at[k - 1]! + 1) && at.at(-1)! >= w.atKill - 1);
      t.ok(run, `${name}: the lost writes are the old primary's last ones, with no surviving write after them`);
    };
    onlyTheLast('store', writers.plain, await missing(plain, writers.plain.acked));
    const httpLost: string[] = [];
    const odd: string[] = [];
    for (const id of http.acked) {
      const read = await s.call('GET', `/tokens/${id}`);
      if (read.status === 404) httpLost.push(id);
      else if (read.status !== 200) odd.push(`${read.status} ${read.body?.code}`);
    }
    t.same(odd, [], 'each acknowledged token reads 200, or 404 when lost');
    onlyTheLast('HTTP', http, httpLost);
  });
}
