/**
 * What the `tokenproxy store copy` tests share (not a test file: tap runs only *.test.ts). The
 * store copy tests were one file (issue 30: 165 s of the whole run, one after the other); each
 * part is now a file of its own that tap runs in parallel, and each seeds its own source vault
 * here: a service on the embedded store writes tokens for two tenants (cards and strings with
 * search indexes and fingerprints), patches one, reveals and detokenizes (audit events), and what
 * it answered is kept so a service on a copy can be held to the same answers.
 *   - store-copy-postgres.test.ts: embedded → PostgreSQL, verified, resumable as a no-op;
 *   - store-copy-round-trip.test.ts: PostgreSQL → Redis → embedded;
 *   - store-copy-kill.test.ts: kill -9 mid-copy, then again;
 *   - store-copy-refused.test.ts: targets that are another vault's, and usage errors.
 */
import type { Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import pg from 'pg';
import { baseConfig, KEYS, startTestService, TENANT_A, TENANT_B, type StartTestOptions, type TestService } from '../helpers/service.js';
import { runCli, writeConfig } from '../helpers/process.js';
import type { PostgresDatabase } from '../helpers/postgres.js';
import { randomCard } from '../helpers/secrets.js';

/** What the seed service answered for one tenant. */
export interface Expected {
  key: string;
  /** The ids, newest first, as the listing gave them. */
  ids: string[];
  /** Each token's GET body. */
  bodies: Map<string, unknown>;
  secrets: Map<string, string>;
  search: unknown;
  detokenized: unknown;
}

export interface CopyVault {
  root: string;
  masterKey: string;
  /** The source's config file (the seed service's embedded store). */
  src: string;
  expected: Map<string, Expected>;
  /** Tokens of every tenant. */
  total: () => number;
  /** A config file `<name>.json` in the file's directory for this store. */
  config: (name: string, store: Record<string, unknown>) => string;
  /** The real CLI as a child process, with the master key of the vault. */
  cli: (...args: string[]) => Promise<{ code: number | null; output: string }>;
  /** `verify-audit` passes on a config, and the head it reports. */
  headOf: (cfg: string, tenant: string) => Promise<string>;
  /** A service on the target answers every token as the seed service did. */
  answersEveryToken: (t: Test, opts: StartTestOptions) => Promise<void>;
  /** The seed subtest: run it after every database the file needs is made. */
  seed: (t: Test) => Promise<unknown>;
}

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

/** One count(*) on a PostgreSQL database. */
export const count = async (db: PostgresDatabase, sql: string): Promise<number> => {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  try {
    return Number((await c.query<{ n: string }>(sql)).rows[0]!.n);
  } finally {
    await c.end();
  }
};

export function copyVault(t: Test): CopyVault {
  const root = mkdtempSync(join(tmpdir(), 'tp-store-copy-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const masterKey = randomBytes(32).toString('base64');
  const env = { TOKENPROXY_MASTER_KEY: masterKey };
  const srcDir = join(root, 'src');
  mkdirSync(srcDir);
  const config = (name: string, store: Record<string, unknown>) => writeConfig(root, { ...baseConfig(), store }, `${name}.json`);
  const cli = (...args: string[]) => runCli(args, env);
  const expected = new Map<string, Expected>();
  let total = 0;

  const seed = (t: Test) => t.test('seed: a service on the embedded store writes tokens, updates, reveals and detokenizes', async (t) => {
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

  return { root, masterKey, src, expected, total: () => total, config, cli, headOf, answersEveryToken, seed };
}

/** The source's audit heads, per tenant (verify-audit on the source passes). */
export async function sourceHeads(v: CopyVault): Promise<Map<string, string>> {
  const heads = new Map<string, string>();
  for (const tenant of v.expected.keys()) heads.set(tenant, await v.headOf(v.src, tenant));
  return heads;
}

/** `store copy` from the source to a target, for a file whose part starts from a finished copy. */
export async function copyTo(t: Test, v: CopyVault, cfg: string): Promise<void> {
  const r = await v.cli('store', 'copy', '--from', v.src, '--to', cfg);
  t.equal(r.code, 0, r.output);
}
