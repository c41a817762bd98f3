/**
 * `tokenproxy store copy` embedded → PostgreSQL of tokens whose metadata, search_indexes,
 * fingerprint_expression or mask hold text PostgreSQL's jsonb and text cannot (U+0000, a lone
 * UTF-16 surrogate): what an embedded store written before the vault refused such text may hold.
 * The copy finishes (exit 0, its own byte-for-byte sample check passing), the PostgreSQL store's
 * port reads every record back as the source holds it, and a service on the copy answers the
 * tokens with the same fields and data.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { baseConfig, startTestService } from '../helpers/service.js';
import { runCli, writeConfig } from '../helpers/process.js';
import { postgresForFile } from '../helpers/postgres.js';
import { EmbeddedStore } from '../../src/store/embedded/index.js';
import { PostgresStore } from '../../src/store/postgres/index.js';
import { canonicalToken } from '../../src/store/copy.js';
import type { StoredToken } from '../../src/store/types.js';
import { TENANT_A } from '../helpers/service.js';

t.setTimeout(300_000);

const pgServer = await postgresForFile(t);

if (pgServer) {
  const root = mkdtempSync(join(tmpdir(), 'tp-copy-unstorable-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const masterKey = randomBytes(32).toString('base64');
  const srcDir = join(root, 'src');
  mkdirSync(srcDir);
  const db = await pgServer.database(t);
  const config = (name: string, store: Record<string, unknown>) => writeConfig(root, { ...baseConfig(), store }, `${name}.json`);
  const src = config('embedded', { kind: 'embedded', path: join(srcDir, 'tokens.db') });
  const dst = config('postgres', { kind: 'postgres', url: db.url });
  const exprDir = join(root, 'expr');
  mkdirSync(exprDir);
  const exprDb = await pgServer.database(t);
  const exprSrc = config('expr-embedded', { kind: 'embedded', path: join(exprDir, 'tokens.db') });
  const exprDst = config('expr-postgres', { kind: 'postgres', url: exprDb.url });

  const ODD = { note: 'a\u0000b', 'k\u0000': 'v', lone: 'x\ud800', back: 'a\\u0000b' };

  t.test('tokens with U+0000 and lone surrogates in their metadata copy to PostgreSQL and read back the same', async (t) => {
    const s = await startTestService(t, { dataDir: srcDir, masterKey });
    const odd = await s.call('POST', '/tokens', { body: { type: 'token', data: 'copy-secret-1', metadata: { note: 'before' } } });
    t.equal(odd.status, 201, odd.text);
    const plain = await s.call('POST', '/tokens', { body: { type: 'token', data: 'copy-secret-2', metadata: { note: 'plain' } } });
    t.equal(plain.status, 201, plain.text);
    await s.svc.close();

    // What the vault accepted before it refused such text: written here through the store's port.
    const store = new EmbeddedStore(join(srcDir, 'tokens.db'));
    const record = await store.tokens.get(TENANT_A, odd.body.id as string);
    t.ok(record, 'the token is in the embedded store');
    t.ok(await store.tokens.update({ ...record!, metadata: ODD }), 'its metadata replaced');
    await store.close();

    const r = await runCli(['store', 'copy', '--from', src, '--to', dst], { TOKENPROXY_MASTER_KEY: masterKey });
    t.equal(r.code, 0, r.output);
    t.match(r.output, `tenant ${TENANT_A}: 2 token(s) (2 written now)`);
    t.match(r.output, /counts match, 2 sampled token\(s\) identical/);

    const p = await startTestService(t, { postgres: db, masterKey });
    const got = await p.call('GET', `/tokens/${odd.body.id as string}`);
    t.equal(got.status, 200, got.text);
    t.same(got.body.metadata, ODD, 'the same metadata');
    t.equal(got.body.data, 'copy-secret-1', 'the same data');
    const found = await p.call('GET', `/tokens?metadata.note=${encodeURIComponent('a\u0000b')}`);
    t.equal(found.status, 200, found.text);
    t.same((found.body.data as Array<{ id: string }>).map((x) => x.id), [odd.body.id], 'found by its metadata, as on the source');
    const other = await p.call('GET', `/tokens?metadata.note=plain`);
    t.same((other.body.data as Array<{ id: string }>).map((x) => x.id), [plain.body.id]);
    await p.svc.close();
  });

  /**
   * Expressions as the vault accepted them before it refused such text. Beside them: text that
   * reads like an escaped form (the JSON text of another case's expression, the marker a text
   * encoding would use, a JSON string), the same text on two tokens, and ordinary expressions.
   */
  const NUL_EXPR = '{{ data }}\u0000';
  const EXPRESSIONS: Array<Pick<StoredToken, 'search_indexes' | 'fingerprint_expression' | 'mask'>> = [
    { search_indexes: ['{{ data | slice: 0, 2 }}\u0000', '{{ data }}'], fingerprint_expression: NUL_EXPR, mask: 'x\ud800{{ data | slice: -2 }}' },
    { search_indexes: ['\udc00{{ data }}', 'a\u0000\ud800b{{ data }}\udfff'], fingerprint_expression: '\u0001~"{{ data }}"', mask: '{{ data }}\udbff' },
    // The JSON text of NUL_EXPR as an expression of its own, and NUL_EXPR again.
    { search_indexes: [JSON.stringify(NUL_EXPR), '\u0001~{{ data }}'], fingerprint_expression: JSON.stringify(NUL_EXPR), mask: NUL_EXPR },
    { search_indexes: ['\u0001~"{{ data }}"', '"a\\u0000b{{ data }}"'], fingerprint_expression: '{{ data | digits }}', mask: '\u0001~{{ data }}' },
    { search_indexes: ['{{ data | last4 }}'], fingerprint_expression: null, mask: null },
    { search_indexes: [], fingerprint_expression: '{{ data }}\ud83d\ude00', mask: 'é✓{{ data }}' },
  ];

  t.test('tokens with U+0000 and lone surrogates in search_indexes, fingerprint_expression and mask copy to PostgreSQL and read back the same', async (t) => {
    const s = await startTestService(t, { dataDir: exprDir, masterKey });
    const ids: string[] = [];
    for (const [i] of EXPRESSIONS.entries()) {
      const made = await s.call('POST', '/tokens', { body: { type: 'token', data: `expr-secret-${i}`, search_indexes: ['{{ data }}'] } });
      t.equal(made.status, 201, made.text);
      ids.push(made.body.id as string);
    }
    await s.svc.close();

    // Written through the store's port, as the vault accepted them before it refused such text.
    const store = new EmbeddedStore(join(exprDir, 'tokens.db'));
    const written: StoredToken[] = [];
    for (const [i, id] of ids.entries()) {
      const record = await store.tokens.get(TENANT_A, id);
      t.ok(record, 'the token is in the embedded store');
      const changed = { ...record!, ...EXPRESSIONS[i]! };
      t.ok(await store.tokens.update(changed), `its expressions replaced (${i})`);
      t.same(await store.tokens.get(TENANT_A, id), changed, `the embedded store holds them (${i})`);
      written.push(changed);
    }
    await store.close();

    const r = await runCli(['store', 'copy', '--from', exprSrc, '--to', exprDst], { TOKENPROXY_MASTER_KEY: masterKey });
    t.equal(r.code, 0, r.output);
    t.match(r.output, `tenant ${TENANT_A}: ${ids.length} token(s) (${ids.length} written now)`);
    t.match(r.output, new RegExp(`counts match, ${ids.length} sampled token\\(s\\) identical`));

    const pg = await PostgresStore.connect({ url: exprDb.url });
    try {
      for (const [i, w] of written.entries()) {
        const got = await pg.tokens.get(TENANT_A, w.id);
        t.ok(got, `read from PostgreSQL (${i})`);
        t.same([got?.search_indexes, got?.fingerprint_expression, got?.mask], [w.search_indexes, w.fingerprint_expression, w.mask], `the same expressions (${i})`);
        t.equal(got && canonicalToken(got), canonicalToken(w), `the same record (${i})`);
      }
      const many = await pg.tokens.getMany(TENANT_A, ids);
      t.same(many.map(canonicalToken).sort(), written.map(canonicalToken).sort(), 'getMany: the same records');
      const listed = (await pg.tokens.list(TENANT_A, {}, { size: 100, after: null })).items;
      t.same(listed.map(canonicalToken), written.map(canonicalToken).reverse(), 'list: the same records, newest first');

      // Written on PostgreSQL again, with the expressions of another case, and read back.
      const moved = { ...written[4]!, ...EXPRESSIONS[1]!, modified_by: 'app-1', modified_at: new Date().toISOString() };
      t.ok(await pg.tokens.update(moved), 'update on PostgreSQL');
      const back = await pg.tokens.get(TENANT_A, moved.id);
      t.equal(back && canonicalToken(back), canonicalToken(moved), 'read back after update');
      t.ok(await pg.tokens.update(written[4]!), 'and back');
    } finally {
      await pg.close();
    }

    const p = await startTestService(t, { postgres: exprDb, masterKey });
    for (const [i, w] of written.entries()) {
      const got = await p.call('GET', `/tokens/${w.id}`);
      t.equal(got.status, 200, got.text);
      t.same(got.body.search_indexes, w.search_indexes.length > 0 ? w.search_indexes : undefined, `search_indexes over HTTP (${i})`);
      t.equal(got.body.fingerprint_expression, w.fingerprint_expression ?? undefined, `fingerprint_expression over HTTP (${i})`);
      t.equal(got.body.mask, w.mask ?? undefined, `mask over HTTP (${i})`);
      t.equal(got.body.data, `expr-secret-${i}`, `the same data (${i})`);
    }
    await p.svc.close();
  });
}
