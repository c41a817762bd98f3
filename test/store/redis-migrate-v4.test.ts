/**
 * Layout 3 → 4 (issue 24 items 2 and 3) on a real redis-server, from the committed fixture
 * (test/fixtures/redis-v3: a keyspace written by the layout 3 code through the HTTP API), each
 * test under its own prefix:
 * - a service start on the unmigrated keyspace fails, naming `tokenproxy migrate`, and changes nothing;
 * - `tokenproxy migrate` (the CLI, a child process) converts it; the service then reads every token
 *   back over HTTP as it read when the fixture was made; search, list, deduplication, the
 *   idempotent retry and the sealed cvcs still work;
 * - killed with -9 mid-way, the next run goes on and nothing is lost;
 * - a layout 4 record written under a pending id meanwhile is kept, not clobbered.
 */
import t from 'tap';
import type { Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { redisForFile, type RedisHandle } from '../helpers/redis.js';
import { loadRedisFixture, redisFixtureExpected, type ExpectedToken } from '../helpers/redis-fixture.js';
import { baseConfig, KEYS, startTestService, TENANT_A, TENANT_B, type TestService } from '../helpers/service.js';
import { writeConfig } from '../helpers/process.js';
import { spawnCli } from '../helpers/cli-entry.js';
import { KeyRing } from '../../src/crypto/keyring.js';
import { encodeRecord as encodeLayout3 } from '../../src/store/codec.js';
import { RedisStore } from '../../src/store/redis/index.js';
import { StoreFormatError, type StoredToken } from '../../src/store/types.js';

t.setTimeout(300_000);

const fixture = redisFixtureExpected();
const MASTER = fixture.master_key;
const TEN_YEARS = 10 * 365 * 24 * 3600;
const dir = mkdtempSync(join(tmpdir(), 'tp-redis-migrate-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const redis = await redisForFile(t);
if (redis) {
  let n = 0;
  /** The fixture loaded under a fresh prefix, and a config file for the CLI naming it. */
  const loaded = async (): Promise<{ handle: RedisHandle; config: string }> => {
    const handle = { ...redis, prefix: `${redis.prefix}fx${++n}:` };
    await loadRedisFixture(redis.url, handle.prefix);
    const config = writeConfig(dir, { ...baseConfig(), store: { kind: 'redis', url: redis.url, key_prefix: handle.prefix, cvc_retention_seconds: TEN_YEARS } }, `config-${n}.json`);
    return { handle, config };
  };
  const cli = (args: string[], onOut?: (out: string, kill: () => void) => void): Promise<{ code: number | null; signal: NodeJS.Signals | null; out: string }> =>
    new Promise((done) => {
      const child = spawnCli(args, { ...process.env, TOKENPROXY_MASTER_KEY: MASTER }, { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      const kill = () => void child.kill('SIGKILL');
      child.stdout.on('data', (d) => {
        out += d;
        onOut?.(out, kill);
      });
      child.stderr.on('data', (d) => (out += d));
      child.on('exit', (code, signal) => done({ code, signal, out }));
    });
  const start = (t: Test, handle: RedisHandle): Promise<TestService> =>
    startTestService(t, { redis: handle, masterKey: MASTER, config: { ...baseConfig(), store: { cvc_retention_seconds: TEN_YEARS } } });
  const keyOf = (e: ExpectedToken): string => (e.tenant === TENANT_B ? KEYS.tenantB : KEYS.private);
  const raw = (t: Test): Redis => {
    const c = new Redis(redis.url);
    t.teardown(() => c.disconnect());
    return c;
  };

  t.test('a service start on the layout 3 keyspace fails naming tokenproxy migrate, and changes nothing', async (t) => {
    const { handle, config } = await loaded();
    const client = raw(t);
    const before = (await client.keys(`${handle.prefix}*`)).sort();
    const err = await start(t, handle).then(() => null, (e: unknown) => e);
    t.ok(err instanceof StoreFormatError, 'StoreFormatError');
    t.match((err as Error).message, /holds format 3, this version reads format 4: run `tokenproxy migrate`/);
    // The service as an operator starts it: it exits, saying what to run.
    const started = await cli(['--config', config]);
    t.not(started.code, 0, `the service exits (${started.code})`);
    t.match(started.out, /holds format 3, this version reads format 4: run `tokenproxy migrate`/, 'its output names the command');
    t.same((await client.keys(`${handle.prefix}*`)).sort(), before, 'no key added or removed');
    t.equal(await client.hget(`${handle.prefix}meta`, 'version'), '3');
  });

  t.test('tokenproxy migrate converts the fixture; the service reads every token back as before', async (t) => {
    const { handle, config } = await loaded();
    const client = raw(t);
    const dry = await cli(['migrate', '--dry-run', '--config', config]);
    t.equal(dry.code, 0, dry.out);
    t.match(dry.out, /would convert 23 of 23 token\(s\) of the redis store from format 3 to format 4/);
    t.equal(await client.hget(`${handle.prefix}meta`, 'version'), '3', 'a dry run changes nothing');
    const run = await cli(['migrate', '--batch', '5', '--config', config]);
    t.equal(run.code, 0, run.out);
    t.match(run.out, /done: 23 token\(s\), as before; \d+ of them .* decrypt under the master key/);
    t.equal(await client.hget(`${handle.prefix}meta`, 'version'), '4');
    t.same(await client.keys(`${handle.prefix}t:{*}:rec:*`), [], 'no layout 3 record is left');
    t.same(await client.keys(`${handle.prefix}t:{*}:cvc:*`), [], 'nor a cvc key');

    const s = await start(t, handle);
    for (const e of fixture.tokens) {
      const r = await s.call('GET', `/tokens/${encodeURIComponent(e.id)}`, { key: keyOf(e) });
      if (e.expired) t.equal(r.status, 404, `${e.id}: expired, as it was`);
      else t.same({ status: r.status, body: r.body }, { status: 200, body: e.read }, `${e.id} reads back as before`);
    }
    for (const e of fixture.tokens.filter((x) => x.search)) {
      const r = await s.call('POST', '/tokens/search', { body: { query: e.search, size: 100 } });
      t.ok(r.status === 200 && (r.body.data as Array<{ id: string }>).some((x) => x.id === e.id), `search ${e.search} finds ${e.id}`);
    }
    const live = fixture.tokens.filter((e) => e.tenant === TENANT_A && !e.expired).map((e) => e.id);
    const listed: string[] = [];
    let next: string | null = null;
    do {
      const r = await s.call('GET', `/tokens?size=7${next ? `&start=${encodeURIComponent(next)}` : ''}`);
      t.equal(r.status, 200);
      listed.push(...(r.body.data as Array<{ id: string }>).map((x) => x.id));
      next = r.body.pagination.next as string | null;
    } while (next);
    t.same(listed, [...live].reverse(), 'the list: every live token of the tenant, newest first, in pages of 7');
    const dedupe = await s.call('POST', '/tokenize', { body: { type: 'card', data: { number: '4111111111111111', expiration_month: 12, expiration_year: 2033 }, deduplicate_token: true } });
    const first = fixture.tokens.find((e) => (e.data as { number?: string }).number === '4111111111111111')!;
    t.equal(dedupe.body?.id, first.id, 'deduplication finds the migrated token');
    const idem = fixture.tokens.find((e) => e.data === 'idempotent value')!;
    const retry = await s.call('POST', '/tokenize', { body: { type: 'token', data: 'idempotent value' }, headers: { 'svc-idempotency-key': fixture.idempotency_key } });
    t.equal(retry.body?.id, idem.id, 'the idempotent retry answers the stored answer');
    const fresh = await s.call('POST', '/tokenize', { body: 'after the migration' });
    t.equal(fresh.status, 200);
    const newest = await s.call('GET', '/tokens?size=1');
    t.same(newest.body.data.map((x: { id: string }) => x.id), [fresh.body], 'a new token is newest: the sequence goes on above the migrated ones');

    // The cvcs moved sealed as they were: they open under the fixture's master key.
    const store = await RedisStore.connect({ url: redis.url, keyPrefix: handle.prefix });
    t.teardown(() => store.close());
    const ring = await KeyRing.open(Buffer.from(MASTER, 'base64'), store.dataKeys);
    for (const e of fixture.tokens.filter((x) => x.cvc)) {
      const rec = await store.tokens.get(e.tenant, e.id);
      t.equal(rec && ring.unseal(rec.cvc_sealed!, `${e.tenant}:${e.id}:cvc`), e.cvc, `${e.id}: its cvc`);
    }
  });

  t.test('killed with -9 mid-way, the next run goes on: nothing is lost', async (t) => {
    const { handle, config } = await loaded();
    const client = raw(t);
    // 2,000 more layout 3 tokens of tenant B, sealed under the fixture's key (as layout 3 wrote them),
    // so the run lasts long enough to be killed in the middle.
    const extra: StoredToken[] = [];
    {
      const opened = await RedisStore.connect({ url: redis.url, keyPrefix: handle.prefix, forMigration: true });
      const ring = await KeyRing.open(Buffer.from(MASTER, 'base64'), opened.dataKeys);
      await opened.close();
      const seq0 = Number(await client.get(`${handle.prefix}t:{${TENANT_B}}:seq`));
      const v3 = (...parts: string[]) => `${handle.prefix}t:{${TENANT_B}}:${parts.map(encodeURIComponent).join(':')}`;
      const p = client.pipeline();
      for (let i = 0; i < 2000; i++) {
        const id = `extra-${i}`;
        const r: StoredToken = {
          tenant_id: TENANT_B, id, type: 'token', container: '/general/high/', sealed: ring.seal(JSON.stringify(`extra value ${i}`), `${TENANT_B}:${id}`),
          cvc_sealed: null, cvc_expires_at: null, metadata: { n: String(i % 7) }, search_indexes: [], index_hashes: [], fingerprint: null,
          fingerprint_expression: null, mask: null, created_by: 'app', created_at: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
          modified_by: null, modified_at: null, expires_at: null,
        };
        const zsets = [v3('all'), v3('type', 'token'), v3('ct', r.container), v3('md', 'n', r.metadata.n!)];
        const seq = seq0 + 1 + i;
        p.hset(v3('rec', id), 'r', encodeLayout3(r), 'k', JSON.stringify(zsets), 's', String(seq), 'e', '');
        for (const z of zsets) p.zadd(z, seq, id);
        extra.push(r);
      }
      p.set(v3('seq'), String(seq0 + 2000));
      await p.exec();
    }
    const total = fixture.tokens.length + extra.length;
    const killed = await cli(['migrate', '--batch', '20', '--config', config], (out, kill) => {
      // The first progress line past 0%: kill -9 there.
      if (/converted [1-9][\d,]* of [\d,]+ token\(s\) \((10|20|30|40|50|60|70|80|90)%\)/.test(out)) kill();
    });
    t.equal(killed.signal, 'SIGKILL', 'the first run was killed');
    const pending = (await client.keys(`${handle.prefix}t:{*}:rec:*`)).length;
    t.ok(pending > 0 && pending < total, `killed mid-way: ${pending} of ${total} left in layout 3`);
    const refused = await start(t, handle).then(() => null, (e: unknown) => e);
    t.ok(refused instanceof StoreFormatError, 'a half-converted keyspace is still refused by a service start');
    const resumed = await cli(['migrate', '--batch', '500', '--config', config]);
    t.equal(resumed.code, 0, resumed.out);
    t.match(resumed.out, new RegExp(`converting ${pending.toLocaleString('en-US')} of ${total.toLocaleString('en-US')} token\\(s\\)`), 'the second run converts what was left');
    t.match(resumed.out, new RegExp(`done: ${total.toLocaleString('en-US')} token\\(s\\), as before`));

    const store = await RedisStore.connect({ url: redis.url, keyPrefix: handle.prefix });
    t.teardown(() => store.close());
    const got = await store.tokens.getMany(TENANT_B, extra.map((r) => r.id));
    t.equal(got.length, extra.length, 'every extra token is there');
    t.same(got, extra, 'each as it was written');
    const byMeta = await store.tokens.list(TENANT_B, { metadata: { n: '3' } }, { size: 100, after: null });
    t.equal(byMeta.items.length + (byMeta.next ? 1 : 0) > 0, true);
    t.same(byMeta.items.slice(0, 3).map((r) => r.id), ['extra-1998', 'extra-1991', 'extra-1984'], 'metadata search, newest first');
    const s = await start(t, handle);
    for (const e of fixture.tokens) {
      const r = await s.call('GET', `/tokens/${encodeURIComponent(e.id)}`, { key: keyOf(e) });
      if (e.expired) t.equal(r.status, 404);
      else t.same(r.body, e.read, `${e.id} reads back as before`);
    }
  });

  t.test('a layout 4 record written under a pending id meanwhile is kept, not clobbered', async (t) => {
    const { handle } = await loaded();
    const client = raw(t);
    const store = await RedisStore.connect({ url: redis.url, keyPrefix: handle.prefix, forMigration: true });
    t.teardown(() => store.close());
    const target = fixture.tokens.find((e) => e.id === 'custom-id-1')!;
    const newer: StoredToken = {
      tenant_id: TENANT_A, id: target.id, type: 'token', container: '/general/low/', sealed: 'v1.k1.written-by-layout-4', cvc_sealed: null,
      cvc_expires_at: null, metadata: { by: 'layout 4' }, search_indexes: [], index_hashes: [], fingerprint: null, fingerprint_expression: null,
      mask: null, created_by: 'app', created_at: new Date().toISOString(), modified_by: null, modified_at: null, expires_at: null,
    };
    await store.tokens.insertMany([newer]);
    const m = store.migrator();
    t.equal((await m.status()).pending, 23);
    for (let i = 0; i < 100 && !(await m.step(3)).done; i++);
    t.same(await m.status(), { from: 4, to: 4, pending: 0, total: 23 }, 'converted; the id counted once');
    t.same(await store.tokens.get(TENANT_A, target.id), newer, 'the layout 4 record is kept');
    t.equal(await client.exists(`${handle.prefix}t:{${TENANT_A}}:rec:${target.id}`), 0, 'the layout 3 copy is gone');
    const byMeta = await store.tokens.list(TENANT_A, { metadata: { by: 'layout 4' } }, { size: 10, after: null });
    t.same(byMeta.items.map((r) => r.id), [target.id]);
  });
}
