/**
 * README "Idempotent retries" (issue 30, item 4): "The first successful (2xx) answer … is stored
 * for 24 hours"; "A claim left by a process that crashed expires after 60 seconds".
 *
 * Waiting a day is not a test, and the service has no clock to turn, so each promise is checked in
 * two halves against the real store the service runs on:
 *   - the lifetime the service gives an entry, read where the store keeps it (the SQLite row's
 *     `expires_ms`; on Redis the TTL argument of every script call, seen with MONITOR, and PTTL);
 *   - that the service honours it: the entry's expiry is moved to the past in the store (the time
 *     has passed) and the retry runs again instead of being replayed or refused.
 * A crashed claim is what a process leaves when it dies between its claim and its answer: an
 * in-flight entry. It is made by turning a stored entry back to `in_flight` (a kill -9 cannot be
 * timed between the two writes of a request that takes a millisecond).
 */
import t from 'tap';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Sqlite as Database } from '../../src/store/embedded/sqlite.js';
import { withStoreDb } from '../helpers/store-file.js';
import { redisSkip, startRedis } from '../helpers/redis.js';
import { startTestService, type TestService } from '../helpers/service.js';

const DAY_MS = 24 * 3_600_000;
const CLAIM_MS = 60_000;

const send = (s: TestService, key: string) =>
  s.call('POST', '/tokenize', { body: { email: 'someone@example.com' }, headers: { 'svc-idempotency-key': key } });

t.test('embedded store: an answer kept 24 h, a crashed claim blocking its key for 60 s, then the request runs again', async (t) => {
  const s = await startTestService(t);
  const row = () => withStoreDb(s, (db) => db.prepare('SELECT state, expires_ms FROM idempotency_keys').all() as Array<{ state: string; expires_ms: number }>);
  const setRow = (state: string, expires: number) => withStoreDb(s, (db) => db.prepare('UPDATE idempotency_keys SET state = ?, expires_ms = ?').run(state, expires));

  const before = Date.now();
  const first = await send(s, 'order-ttl-1');
  const after = Date.now();
  t.equal(first.status, 200, first.text);
  const stored = row();
  t.equal(stored.length, 1);
  t.equal(stored[0]!.state, 'done');
  t.ok(stored[0]!.expires_ms >= before + DAY_MS && stored[0]!.expires_ms <= after + DAY_MS,
    `the answer lives 24 h from the request (${stored[0]!.expires_ms - before} ms after it started)`);

  const replay = await send(s, 'order-ttl-1');
  t.equal(replay.status, 200);
  t.equal(replay.headers.get('svc-idempotent-replayed'), 'true', 'within 24 h: replayed');
  t.same(replay.body, first.body);

  // 24 hours later.
  setRow('done', Date.now() - 1);
  const later = await send(s, 'order-ttl-1');
  t.equal(later.status, 200, later.text);
  t.equal(later.headers.get('svc-idempotent-replayed'), null, 'after 24 h: not replayed');
  t.not(later.body.email, first.body.email, 'the route ran again: a new token');
  t.equal(row()[0]!.state, 'done');

  // A process crashed between its claim and its answer: the key is in flight, for 60 s.
  setRow('in_flight', Date.now() + CLAIM_MS);
  const blocked = await send(s, 'order-ttl-1');
  t.equal(blocked.status, 409);
  t.equal(blocked.body.code, 'idempotency_key_in_flight');
  t.equal(blocked.headers.get('retry-after'), '1');
  // 60 seconds later.
  setRow('in_flight', Date.now() - 1);
  const freed = await send(s, 'order-ttl-1');
  t.equal(freed.status, 200, `an expired claim frees its key: ${freed.text}`);
  t.equal(freed.headers.get('svc-idempotent-replayed'), null);
  t.not(freed.body.email, later.body.email, 'the route ran');
  const tokens = await s.call('GET', '/tokens?size=100');
  t.equal(tokens.body.data.length, 3, 'one token per run, none for the replay or the refusal');
});

t.test('embedded store: a claim in flight is due 60 s after it was made', async (t) => {
  const s = await startTestService(t);
  // A body that keeps its request in flight a while after the claim (which is made once the body
  // is read): 1.5 million empty arrays, walked and answered off the main thread. The test reads
  // the claim from the file meanwhile (WAL readers never wait); a run that answers before one
  // read sees it is tried again with another key.
  const body = `[${'[],'.repeat(1_500_000)}[]]`;
  const db = new Database(join(s.dataDir, 'tokens.db'), { fileMustExist: true, readonly: true });
  t.teardown(() => db.close());
  const inFlight = db.prepare("SELECT expires_ms FROM idempotency_keys WHERE state = 'in_flight'");
  let seen: { sentAt: number; seenAt: number; expires: number } | null = null;
  for (let attempt = 0; attempt < 5 && !seen; attempt++) {
    const sentAt = Date.now();
    let done = false;
    const req = s.call('POST', '/tokenize', { raw: body, headers: { 'content-type': 'application/json', 'svc-idempotency-key': `claim-${attempt}` } })
      .finally(() => (done = true));
    while (!done && !seen) {
      const row = inFlight.get() as { expires_ms: number } | undefined;
      if (row) seen = { sentAt, seenAt: Date.now(), expires: row.expires_ms };
      else await new Promise((r) => setTimeout(r, 1));
    }
    const res = await req;
    t.equal(res.status, 200, `attempt ${attempt + 1}: answered`);
  }
  if (!seen) {
    t.fail('no claim was seen in flight in 5 requests');
    return;
  }
  t.ok(seen.expires >= seen.sentAt + CLAIM_MS && seen.expires <= seen.seenAt + CLAIM_MS,
    `the claim expires 60 s after it was made (${seen.expires - seen.sentAt} ms after the request was sent)`);
  t.equal(inFlight.all().length, 0, 'answered: no claim is left in flight');
});

t.test('redis store: claims live 60 s and answers 24 h (the TTLs the service sends), and both are honoured', { skip: redisSkip() }, async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const s = await startTestService(t, { redis });
  const client = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await client.connect();
  t.teardown(() => client.disconnect());
  const monitor = await client.monitor();
  t.teardown(() => monitor.disconnect());
  const calls: string[][] = [];
  monitor.on('monitor', (_time: string, args: string[]) => {
    // The service's script calls on the entry (not the commands the scripts run, nor this test's).
    const script = /^eval(sha)?$/i.test(args[0] ?? '');
    if (script && args.some((a) => a.startsWith(redis.prefix) && a.includes(':idem:'))) calls.push(args);
  });

  const first = await send(s, 'order-ttl-2');
  t.equal(first.status, 200, first.text);
  const keys = await client.keys(`${redis.prefix}*:idem:*`);
  t.equal(keys.length, 1);
  const key = keys[0]!;
  // MONITOR may deliver after the answer: wait for the completing call. A script the server does
  // not hold yet is sent twice (EVALSHA, NOSCRIPT, then EVAL): the TTLs in order, repeats merged.
  for (let i = 0; i < 2000 && !calls.some((c) => c.at(-1) === String(DAY_MS)); i++) await new Promise((r) => setTimeout(r, 5));
  // Numbers only: a slot's first write also sets its copy of the store marker (the id, then the
  // write again), which is not an idempotency TTL.
  const ttls = calls.map((c) => c.at(-1)!).filter((v) => /^\d+$/.test(v)).filter((v, i, all) => i === 0 || all[i - 1] !== v);
  t.same(ttls, [String(CLAIM_MS), String(DAY_MS)], 'the claim is sent with a 60 s TTL, the answer with 24 h');
  const pttl = await client.pttl(key);
  t.ok(pttl > DAY_MS - CLAIM_MS && pttl <= DAY_MS, `the stored answer expires in 24 h (PTTL ${pttl})`);
  t.equal((await send(s, 'order-ttl-2')).headers.get('svc-idempotent-replayed'), 'true');

  // A crashed claim: in flight, 60 s.
  await client.hset(key, 's', 'in_flight');
  await client.pexpire(key, CLAIM_MS);
  const blocked = await send(s, 'order-ttl-2');
  t.equal(blocked.status, 409);
  t.equal(blocked.body.code, 'idempotency_key_in_flight');
  // 60 seconds later Redis has expired it.
  await client.pexpire(key, 1);
  for (let i = 0; i < 1000 && (await client.exists(key)) === 1; i++) await new Promise((r) => setTimeout(r, 5));
  const freed = await send(s, 'order-ttl-2');
  t.equal(freed.status, 200, freed.text);
  t.equal(freed.headers.get('svc-idempotent-replayed'), null, 'the key is free: the route ran');
  t.not(freed.body.email, first.body.email);
});
