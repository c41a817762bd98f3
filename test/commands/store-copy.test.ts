/**
 * `tokenproxy store copy` (issue 24 item 4), through the real CLI (child processes) and real
 * services over HTTP: a vault written by a service on the embedded store goes embedded →
 * PostgreSQL → Redis → embedded, and a service started on each target answers every token as the
 * first one did (reads, lists in the same order, search, detokenize); verify-audit passes on each
 * target with the source's head. A copy killed with -9 and run again ends with the same counts and
 * no duplicate. Targets that are another vault's are refused before anything is written.
 */
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { isDeepStrictEqual } from 'node:util';
import pg from 'pg';
import { baseConfig, KEYS, startTestService, TENANT_A, TENANT_B, type StartTestOptions, type TestService } from '../helpers/service.js';
import { runCli, writeConfig } from '../helpers/process.js';
import { postgresForFile, type PostgresDatabase } from '../helpers/postgres.js';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';
import { randomCard } from '../helpers/secrets.js';
import { createStore } from '../../src/store/factory.js';
import { createLogger } from '../../src/log.js';

t.setTimeout(600_000);

const pgServer = await postgresForFile(t);
const redis = pgServer ? await redisForFile(t) : null;

if (pgServer && redis) {
  const root = mkdtempSync(join(tmpdir(), 'tp-store-copy-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const masterKey = randomBytes(32).toString('base64');
  const env = { TOKENPROXY_MASTER_KEY: masterKey };
  const srcDir = join(root, 'src');
  mkdirSync(srcDir);
  const config = (name: string, store: Record<string, unknown>) => writeConfig(root, { ...baseConfig(), store }, `${name}.json`);
  const cli = (...args: string[]) => runCli(args, env);

  // Every database before the first subtest: tap's root test must not wait on anything between subtests.
  const pgA = await pgServer.database(t);
  const pgKill = await pgServer.database(t);
  const pgOwnRing = await pgServer.database(t);

  /** What the seed service answered: per tenant, the ids newest first and each token's GET body. */
  const expected = new Map<string, { key: string; ids: string[]; bodies: Map<string, unknown>; secrets: Map<string, string>; search: unknown; detokenized: unknown }>();
  let total = 0;

  const listAll = async (s: TestService, key: string): Promise<string[]> => {
    const ids: string[] = [];
    let path: string | null = '/tokens?size=100';
    while (path) {
      const r = await s.call('GET', path, { key });
      if (r.status !== 200) throw new Error(`list answered ${r.status}: ${r.text}`);
      for (const item of r.body.data as Array<{ id: string }>) ids.push(item.id);
      const next = r.body.pagination?.next as string | undefined;
      path = next ? `/tokens?size=100&start=${encodeURIComponent(next)}` : null;
    }
    return ids;
  };

  await t.test('seed: a service on the embedded store writes tokens, updates, reveals and detokenizes', async (t) => {
    const s = await startTestService(t, { dataDir: srcDir, masterKey });
    for (const [tenant, key, cards, strings] of [[TENANT_A, KEYS.private, 240, 40], [TENANT_B, KEYS.tenantB, 20, 10]] as const) {
      const secrets = new Map<string, string>();
      for (let done = 0; done < cards; done += 80) {
        const body = Array.from({ length: Math.min(80, cards - done) }, (_, i) => ({
          type: 'card', data: { number: randomCard(), expiration_month: 1 + (i % 12), expiration_year: 2031 }, metadata: { batch: String(done), n: String(i) },
        }));
        const r = await s.call('POST', '/tokenize', { key, body });
        t.equal(r.status, 200, r.text.slice(0, 200));
      }
      for (let i = 0; i < strings; i++) {
        const value = `copysecret${tenant.slice(0, 4)}${i}`;
        const r = await s.call('POST', '/tokens', {
          key, body: { type: 'token', data: value, metadata: { zeta: 'z', alpha: String(i) }, search_indexes: ['{{ data }}'], fingerprint_expression: '{{ data }}' },
        });
        t.equal(r.status, 201, r.text);
        secrets.set(r.body.id as string, value);
      }
      const some = [...secrets.keys()];
      const patched = await s.call('PATCH', `/tokens/${some[0]!}`, { key, body: { metadata: { patched: 'yes' } }, headers: { 'content-type': 'application/merge-patch+json' } });
      t.equal(patched.status, 200, patched.text);
      // Audit events: reveals and a detokenize.
      for (const id of some.slice(0, 3)) t.equal((await s.call('GET', `/tokens/${id}`, { key })).status, 200);
      const d = await s.call('POST', '/detokenize', { key, body: { a: `{{ ${some[1]!} }}` } });
      t.equal(d.status, 200, d.text);
      const ids = await listAll(s, key);
      t.equal(ids.length, cards + strings, 'every token listed');
      const bodies = new Map<string, unknown>();
      for (const id of ids) bodies.set(id, (await s.call('GET', `/tokens/${id}`, { key })).body);
      // What search and detokenize answer for one token (tenant B's application has no access rule: nothing revealed).
      const [id5, value5] = [...secrets][5]!;
      const search = (await s.call('POST', '/tokens/search', { key, body: { query: `data:${value5}` } })).body.data;
      const detokenized = (await s.call('POST', '/detokenize', { key, body: { a: `{{ ${id5} }}` } })).body;
      if (tenant === TENANT_A) {
        t.same((search as Array<{ id: string }>).map((x) => x.id), [id5], 'search finds the token by its index');
        t.same(detokenized, { a: value5 }, 'detokenize gives the value');
      }
      expected.set(tenant, { key, ids, bodies, secrets, search, detokenized });
      total += ids.length;
    }
    await s.svc.close();
  });

  const src = config('embedded', { kind: 'embedded', path: join(srcDir, 'tokens.db') });
  const headOf = async (cfg: string, tenant: string): Promise<string> => {
    const r = await cli('verify-audit', '--tenant', tenant, '--config', cfg);
    if (r.code !== 0) throw new Error(`verify-audit exited ${r.code}: ${r.output}`);
    return /chain intact, head (\S+)/.exec(r.output)![1]!;
  };
  const sourceHeads = new Map<string, string>();

  /** A service on the target answers every token as the seed service did. */
  const answersEveryToken = async (t: Test, opts: StartTestOptions) => {
    const s = await startTestService(t, { ...opts, masterKey, dataDir: opts.dataDir ?? mkdtempSync(join(root, 'svc-')) });
    for (const [tenant, e] of expected) {
      t.same(await listAll(s, e.key), e.ids, `tenant ${tenant}: the same tokens, listed in the same order`);
      let same = 0;
      for (const id of e.ids) {
        const r = await s.call('GET', `/tokens/${id}`, { key: e.key });
        // Key order aside (PostgreSQL's jsonb orders metadata keys its own way): the same record.
        if (isDeepStrictEqual(r.body, e.bodies.get(id))) same++;
        else t.same(r.body, e.bodies.get(id), `token ${id}`);
      }
      t.equal(same, e.ids.length, `tenant ${tenant}: every token reads back as it did on the source`);
      const [id, value] = [...e.secrets][5]!;
      const found = await s.call('POST', '/tokens/search', { key: e.key, body: { query: `data:${value}` } });
      t.equal(found.status, 200, found.text);
      t.same(found.body.data, e.search, `tenant ${tenant}: search answers as on the source`);
      const d = await s.call('POST', '/detokenize', { key: e.key, body: { a: `{{ ${id} }}` } });
      t.same(d.body, e.detokenized, `tenant ${tenant}: detokenize answers as on the source`);
      if (tenant === TENANT_A) {
        const dup = await s.call('POST', '/tokens', { key: e.key, body: { type: 'token', data: value, fingerprint_expression: '{{ data }}', deduplicate_token: true } });
        t.equal(dup.body?.id, id, `a deduplicating create finds the copied token ${dup.text.slice(0, 200)}`);
      }
    }
    await s.svc.close();
  };

  const pgCfg = config('postgres', { kind: 'postgres', url: pgA.url });
  const redisHandle = withFreshPrefix(redis);
  const redisCfg = config('redis', { kind: 'redis', url: redisHandle.url, key_prefix: redisHandle.prefix });
  const dstDir = join(root, 'dst');
  const dstCfg = config('embedded2', { kind: 'embedded', path: join(dstDir, 'tokens.db') });

  await t.test('embedded → PostgreSQL: copied, verified, resumable as a no-op; a service answers every token', async (t) => {
    for (const tenant of expected.keys()) sourceHeads.set(tenant, await headOf(src, tenant));
    const r = await cli('store', 'copy', '--from', src, '--to', pgCfg, '--batch', '50');
    t.equal(r.code, 0, r.output);
    t.match(r.output, `tenant ${TENANT_A}: 280 token(s) (280 written now)`);
    t.match(r.output, /counts match, 200 sampled token\(s\) identical/);
    const again = await cli('store', 'copy', '--from', src, '--to', pgCfg);
    t.equal(again.code, 0, again.output);
    t.match(again.output, `tenant ${TENANT_A}: 280 token(s) (0 written now)`, 'a second run writes nothing');
    t.match(again.output, /audit event\(s\) \(0 written now\)/);
    for (const [tenant, head] of sourceHeads) t.equal(await headOf(pgCfg, tenant), head, `tenant ${tenant}: verify-audit passes with the source's head`);
    await answersEveryToken(t, { postgres: pgA });
  });

  await t.test('PostgreSQL → Redis → embedded: each target answers every token', async (t) => {
    const r = await cli('store', 'copy', '--from', pgCfg, '--to', redisCfg);
    t.equal(r.code, 0, r.output);
    for (const tenant of expected.keys()) t.equal(await headOf(redisCfg, tenant), await headOf(pgCfg, tenant), `tenant ${tenant}: the same audit head on Redis`);
    await answersEveryToken(t, { redis: redisHandle });
    const back = await cli('store', 'copy', '--from', redisCfg, '--to', dstCfg);
    t.equal(back.code, 0, back.output);
    for (const tenant of expected.keys()) t.equal(await headOf(dstCfg, tenant), await headOf(redisCfg, tenant), `tenant ${tenant}: the same audit head on the embedded store`);
    await answersEveryToken(t, { dataDir: dstDir });
  });

  const count = async (db: PostgresDatabase, sql: string): Promise<number> => {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      return Number((await c.query<{ n: string }>(sql)).rows[0]!.n);
    } finally {
      await c.end();
    }
  };

  await t.test('kill -9 mid-copy, then again: the same counts, no duplicate, the audit trail intact', async (t) => {
    const db = pgKill;
    const cfg = config('postgres-kill', { kind: 'postgres', url: db.url });
    const child = spawn(process.execPath, [...process.execArgv.filter((a) => !a.startsWith('--inspect')), 'src/main.ts', 'store', 'copy', '--from', src, '--to', cfg, '--batch', '2'], {
      env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    let atKill = 0;
    // Waits for the copy to have written tokens (the schema exists once the CLI connected).
    for (;;) {
      if (child.exitCode !== null) break;
      atKill = await count(db, 'SELECT count(*) AS n FROM tokenproxy.tokens').catch(() => 0);
      if (atKill >= 10) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    child.kill('SIGKILL');
    await exited;
    t.equal(child.signalCode, 'SIGKILL', `killed while copying (${output})`);
    const written = await count(db, 'SELECT count(*) AS n FROM tokenproxy.tokens');
    t.ok(written > 0 && written < total, `the kill left a partial copy (${written} of ${total} tokens)`);
    const r = await cli('store', 'copy', '--from', src, '--to', cfg, '--batch', '7');
    t.equal(r.code, 0, r.output);
    t.match(r.output, `tenant ${TENANT_A}: 280 token(s)`);
    t.equal(await count(db, 'SELECT count(*) AS n FROM tokenproxy.tokens'), total, 'every token, once');
    t.equal(await count(db, 'SELECT count(DISTINCT (tenant, id, custom_id)) AS n FROM tokenproxy.tokens'), total, 'no duplicate');
    for (const [tenant, head] of sourceHeads) t.equal(await headOf(cfg, tenant), head, `tenant ${tenant}: verify-audit passes with the source's head`);
  });

  await t.test('refused: a target with its own data key ring, a token with other contents, another master key', async (t) => {
    // A service started on the target made a data key ring of its own.
    const db = pgOwnRing;
    const svc = await startTestService(t, { postgres: db, masterKey });
    await svc.svc.close();
    const cfg = config('postgres-own-ring', { kind: 'postgres', url: db.url });
    const r = await cli('store', 'copy', '--from', src, '--to', cfg);
    t.equal(r.code, 1, r.output);
    t.match(r.output, /holds a data key ring of its own/);
    t.equal(await count(db, 'SELECT count(*) AS n FROM tokenproxy.tokens'), 0, 'nothing was written');

    // A token of the finished copy changed on the target: a re-run refuses before writing.
    const store = await createStore({ kind: 'postgres', url: pgA.url, path: '', key_prefix: '' }, { log: createLogger('silent') });
    try {
      const id = expected.get(TENANT_A)!.ids[0]!;
      const rec = (await store.tokens.get(TENANT_A, id))!;
      t.ok(await store.tokens.update({ ...rec, metadata: { ...rec.metadata, changed: 'on the target' } }));
    } finally {
      await store.close();
    }
    const changed = await cli('store', 'copy', '--from', src, '--to', pgCfg);
    t.equal(changed.code, 1, changed.output);
    t.match(changed.output, /with other contents than the source's/);

    const otherKey = await runCli(['store', 'copy', '--from', src, '--to', pgCfg], { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') });
    t.equal(otherKey.code, 1, otherKey.output);
    t.match(otherKey.output, /master key/);
  });

  await t.test('usage: help, missing options, a bad batch, the same store twice', async (t) => {
    const help = await cli('store', 'copy', '--help');
    t.equal(help.code, 0);
    t.match(help.output, /tokenproxy store copy --from CONFIG --to CONFIG/);
    t.match(help.output, /Exit 0: copied and verified/);
    t.match((await cli('--help')).output, /\n {2}store +copy a vault to another store/);
    for (const args of [['store'], ['store', 'move'], ['store', 'copy', '--from', src], ['store', 'copy', '--from', src, '--to', pgCfg, '--batch', '0'], ['store', 'copy', '--from', src, '--to', src]]) {
      const r = await cli(...args);
      t.equal(r.code, 2, `${args.join(' ')}: ${r.output}`);
      t.notMatch(r.output, /\n\s+at /, 'no stack trace');
    }
  });
}
