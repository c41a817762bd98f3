/**
 * README promises about purging (issue 30, items 2 and 4), through the running service rather
 * than by calling the store's purge with hand-made dates:
 *
 * - "The cvc is stored sealed apart from the rest and purged after `store.cvc_retention_seconds`":
 *   a card's cvc reaches a destination through `token:use` while it is retained, and once the
 *   retention has passed the service's own purge removes it from the store file and no use
 *   carries it; the rest of the card stays.
 * - "Stored answers live in the token store (SQLite table `idempotency_keys`, purged every 10
 *   minutes …)": an expired entry is deleted by the service's purge timer, a live one is kept.
 *
 * The purges run on timers (60 s and 10 minutes). The service takes their periods from
 * `StartOptions.purgeEveryMs`, a programmatic option for tests that no config file or command
 * line can set, so this file watches the real timers fire in a fraction of a second.
 */
import t, { type Test } from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { buildConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/log.js';
import { startService } from '../../src/server.js';
import { Sqlite as Database } from '../../src/store/embedded/sqlite.js';
import { packId } from '../../src/store/embedded/format.js';
import { slotOf } from '../../src/http/idempotency.js';
import { APP_PRIVATE, TENANT_A, baseConfig, call } from '../helpers/service.js';
import { cvcPattern, randomCard, randomCvc } from '../helpers/secrets.js';
import { startUpstream } from '../helpers/upstream.js';
import { waitFor } from '../helpers/wait.js';

const USER = 'promises_purge_user_key_aaaaaaaaaaa';
const RETENTION_S = 2;

async function start(t: Test, raw: Record<string, unknown>) {
  const dataDir = mkdtempSync(join(tmpdir(), 'tp-promises-purge-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const file = join(dataDir, 'tokens.db');
  const config = buildConfig({ ...raw, store: { kind: 'embedded', path: file, cvc_retention_seconds: RETENTION_S } },
    { env: { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') } });
  const lines: string[] = [];
  const log = createLogger('info', { write: (s: string) => void lines.push(s) } as never);
  const svc = await startService(config, { log, purgeEveryMs: { cvc: 100, idempotency: 100 } });
  t.teardown(() => svc.close());
  const query = <T>(sql: string, ...params: unknown[]): T[] => {
    const db = new Database(file, { fileMustExist: true, readonly: true });
    try {
      return db.prepare(sql).all(...params) as T[];
    } finally {
      db.close();
    }
  };
  return { svc, file, query, logs: () => lines.join('') };
}

t.test('the cvc: used while retained, purged from the store by the service after cvc_retention_seconds', async (t) => {
  const up = await startUpstream(t);
  const raw = baseConfig() as { tenants: Array<Record<string, unknown> & { applications: unknown[] }> };
  raw.tenants[0]!.applications.push({ id: 'aaaaaaaa-0000-4000-8000-0000000000b1', name: 'user', type: 'private', keys: [USER], permissions: ['proxy:invoke'],
    rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: ['token:use'] }] });
  raw.tenants[0]!.outbound = { allowed_destinations: [up.url] };
  const s = await start(t, raw);

  const number = randomCard();
  const cvc = randomCvc();
  const before = Date.now();
  const created = await call(s.svc.url, 'POST', '/tokens', { body: { type: 'card', data: { number, expiration_month: 3, expiration_year: 2032, cvc } } });
  const after = Date.now();
  t.equal(created.status, 201, created.text);
  const id = created.body.id as string;
  // Format 6 (issue 24): ids and ciphertext are BLOBs in vault_tokens.
  const row = () => s.query<{ cvc_sealed: Buffer | null; cvc_expires_ms: number | null }>('SELECT cvc_sealed, cvc_expires_ms FROM vault_tokens WHERE id = ?', packId(id))[0]!;
  const stored = row();
  t.ok(Buffer.isBuffer(stored.cvc_sealed), 'the cvc is stored (sealed)');
  t.ok(stored.cvc_expires_ms! >= before + RETENTION_S * 1000 && stored.cvc_expires_ms! <= after + RETENTION_S * 1000,
    `it is due cvc_retention_seconds after the create (${stored.cvc_expires_ms! - before} ms)`);

  const use = async () => {
    const r = await call(s.svc.url, 'POST', '/proxy/pay', {
      key: USER,
      headers: { 'svc-proxy-url': up.url, 'content-type': 'application/json' },
      raw: JSON.stringify({ pan: `{{ ${id} | json: '$.number' }}`, cvc: `{{ ${id} | json: '$.cvc' }}` }),
    });
    t.equal(r.status, 200, r.text);
    return up.received.at(-1)!.body.toString();
  };
  const early = await use();
  // Only when the use came within the retention (a loaded machine may take longer).
  if (Date.now() < stored.cvc_expires_ms!) t.match(early, cvcPattern(cvc), 'while retained, a use carries the cvc');
  else t.comment('the first use came after the retention: its cvc is not checked');
  t.match(early, number);

  // The service's purge (every 100 ms here) removes it once it is due, not before.
  await waitFor(() => row().cvc_sealed === null, { timeoutMs: 30_000, what: 'the cvc purged' });
  t.ok(Date.now() >= stored.cvc_expires_ms!, 'not purged before its retention ended');
  t.notOk(readFileSync(s.file).includes(Buffer.from(stored.cvc_sealed!)), 'the sealed cvc is gone from the store file');
  const late = await use();
  t.notMatch(late, cvcPattern(cvc), 'after the retention no use carries the cvc');
  t.same(JSON.parse(late), { pan: number, cvc: null }, 'the rest of the card is kept (a missing path is null as a whole string)');
  const read = await call(s.svc.url, 'GET', `/tokens/${id}`);
  t.equal(read.body.data.number, number);
  t.notOk(s.logs().includes(number), 'no card number in the log');
});

t.test('idempotency entries: an expired one is purged by the service, a live one is kept', async (t) => {
  const s = await start(t, baseConfig());
  const send = (key: string) => call(s.svc.url, 'POST', '/tokenize', { body: { e: 'x@example.com' }, headers: { 'svc-idempotency-key': key } });
  t.equal((await send('keep-me')).status, 200);
  t.equal((await send('expire-me')).status, 200);
  t.equal(s.query('SELECT 1 FROM idempotency_keys').length, 2);
  // One entry's 24 h pass (written through a second connection, as another process could).
  const db = new Database(s.file, { fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    const changed = db.prepare('UPDATE idempotency_keys SET expires_ms = ? WHERE tenant_id = ? AND key = ?')
      .run(Date.now() - 1, TENANT_A, slotOf(TENANT_A, APP_PRIVATE, 'expire-me').key).changes;
    t.equal(changed, 1);
  } finally {
    db.close();
  }
  await waitFor(() => s.query('SELECT 1 FROM idempotency_keys').length === 1, { timeoutMs: 30_000, what: 'the expired entry purged' });
  const left = await send('keep-me');
  t.equal(left.headers.get('svc-idempotent-replayed'), 'true', 'the live entry is kept and still replayed');
});
