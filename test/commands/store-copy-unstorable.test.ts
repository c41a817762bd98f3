/**
 * `tokenproxy store copy` embedded → PostgreSQL of tokens whose metadata holds text PostgreSQL's
 * jsonb cannot (U+0000, a lone UTF-16 surrogate): what an embedded store written before the vault
 * refused such text may hold. The copy finishes (exit 0, its own byte-for-byte sample check
 * passing) and a service on the copy answers the token with the same metadata and data.
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
}
