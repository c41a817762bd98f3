/**
 * The master key in an HSM (SoftHSM2 through PKCS#11), with the real CLI and service as child
 * processes: each test has its own token directory, store and ports.
 *
 * - `tokenproxy hsm init` makes the key; the service wraps its data keys and root secret with it,
 *   tokenizes, restarts and reads back, for every mechanism SoftHSM2 offers;
 * - an HSM it cannot use (module path, token, PIN, key label, PIN variable) fails the start with
 *   exit 1 and a message naming what failed, never the PIN;
 * - a store made with TOKENPROXY_MASTER_KEY moved to the HSM by `tokenproxy rotate-master-key`
 *   keeps its tokens, fingerprints, page cursors and audit anchors, and a second run is a no-op.
 */
import t from 'tap';
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { opsApp, OPS_TENANT, call, newKey } from '../helpers/ops.js';
import { runCli, startChild, writeConfig } from '../helpers/process.js';
import { randomCard } from '../helpers/secrets.js';
import { softHsm, softhsmSkip } from '../helpers/softhsm.js';

const skip = softhsmSkip();
const root = mkdtempSync(join(tmpdir(), 'tp-hsm-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));

function config(dir: string, key: string, secrets: Record<string, unknown>): string {
  return writeConfig(dir, {
    server: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    rate_limits: { enabled: false },
    store: { kind: 'embedded', path: join(dir, 'data', 'tokens.db') },
    secrets,
    tenants: [{ id: OPS_TENANT, name: 'ops', applications: [opsApp(1, [key])] }],
  }, `config-${randomBytes(3).toString('hex')}.json`);
}

/** The message of the service's `start-up failed` log line ('' when there is none). */
function startupFailure(output: string): string {
  for (const line of output.split('\n')) {
    try {
      const o = JSON.parse(line) as { msg?: string; error?: { message?: string } };
      if (o.msg === 'start-up failed') return o.error?.message ?? '';
    } catch {
      // not a log line
    }
  }
  return '';
}

const card = (number: string) => ({ type: 'card', data: { number, expiration_month: 12, expiration_year: 2031 } });

/** The data key ring as the store file holds it. */
function ring(dir: string): Array<{ kid: string; wrapped: string }> {
  const db = new Database(join(dir, 'data', 'tokens.db'), { readonly: true });
  try {
    return db.prepare('SELECT kid, wrapped FROM data_keys ORDER BY ord').all() as Array<{ kid: string; wrapped: string }>;
  } finally {
    db.close();
  }
}

t.test('SoftHSM2', { skip }, async (t) => {
  for (const mechanism of ['auto', 'aes_key_wrap', 'aes_gcm']) {
    t.test(`mechanism ${mechanism}: hsm init, tokenize, restart, read back`, async (t) => {
      const dir = mkdtempSync(join(root, 'svc-'));
      const hsm = softHsm(dir);
      const made = await hsm.initKey('tp-master', mechanism === 'auto' ? undefined : mechanism);
      t.equal(made.code, 0, made.output);
      const id = /id ([0-9a-f]{16})/.exec(made.output)?.[1];
      t.ok(id, 'hsm init prints the key id');
      const again = await hsm.initKey('tp-master');
      t.equal(again.code, 1, 'a label the token holds is refused');
      t.match(again.output, /already holds a secret key labelled "tp-master": nothing was created/);

      const key = newKey();
      const path = config(dir, key, { master_key: hsm.masterKey('tp-master', { mechanism }) });
      const number = randomCard();
      let svc = await startChild(path, hsm.env);
      const made1 = await call(svc.url, 'POST', '/tokens', key, card(number));
      t.equal(made1.status, 201, JSON.stringify(made1.body));
      await svc.stop();
      let out = svc.output();

      const entries = ring(dir);
      t.same(entries.map((e) => e.kid), ['root', 'k1'], 'the ring holds the wrapped root secret and the first data key');
      const tag = mechanism === 'aes_gcm' ? 'gcm' : mechanism === 'aes_key_wrap' ? 'kw' : 'kwpad';
      for (const e of entries) t.match(e.wrapped, new RegExp(`^h1\\.${id}\\.${tag}\\.[A-Za-z0-9_-]+$`), `${e.kid} is wrapped by the HSM key (${tag})`);

      svc = await startChild(path, hsm.env);
      const read = await call(svc.url, 'GET', `/tokens/${made1.body.id}`, key);
      t.equal(read.status, 200);
      t.equal(read.body.data.number, number, 'read back after a restart');
      const again1 = await call(svc.url, 'POST', '/tokens', key, card(number));
      t.equal(again1.body.fingerprint, made1.body.fingerprint, 'the same fingerprint after a restart');
      // A new data key, wrapped by the HSM, with the service running; read after its refresh.
      const rotated = await runCli(['rotate-data-key', '--config', path], hsm.env);
      t.equal(rotated.code, 0, rotated.output);
      t.match(ring(dir).at(-1)!, { kid: 'k2', wrapped: new RegExp(`^h1\\.${id}\\.`) });
      await svc.stop();
      out += svc.output() + rotated.output + made.output;
      const verified = await runCli(['verify-audit', '--config', path, '--tenant', OPS_TENANT], hsm.env);
      t.equal(verified.code, 0, verified.output);
      t.notOk(out.includes(hsm.pin), 'no PIN in any output');
      t.notOk(out.includes(number), 'no card number in any output');
    });
  }

  t.test('an HSM the service cannot use: exit 1, the reason named, never the PIN', async (t) => {
    const dir = mkdtempSync(join(root, 'down-'));
    const hsm = softHsm(dir);
    t.equal((await hsm.initKey('tp-master')).code, 0);
    const key = newKey();
    const wrongPin = `wrong${randomBytes(4).toString('hex')}`;
    const cases: Array<{ name: string; secrets: Record<string, unknown>; env?: Record<string, string>; message: RegExp }> = [
      { name: 'a module path that does not exist', secrets: { master_key: hsm.masterKey('tp-master', { module: join(dir, 'no-such-pkcs11.so') }) }, message: /cannot load the PKCS#11 module .*no-such-pkcs11\.so/ },
      { name: 'a wrong PIN', secrets: { master_key: hsm.masterKey('tp-master', { pin_file: undefined, pin_env: 'TP_TEST_HSM_PIN' }) }, env: { TP_TEST_HSM_PIN: wrongPin }, message: /cannot log in to the token "tokenproxy-test" .*CKR_PIN_INCORRECT/ },
      { name: 'an unset PIN variable', secrets: { master_key: hsm.masterKey('tp-master', { pin_file: undefined, pin_env: 'TP_TEST_HSM_PIN_UNSET' }) }, message: /the environment variable TP_TEST_HSM_PIN_UNSET \(secrets\.master_key\.pin_env\) is not set/ },
      { name: 'a token label the module does not have', secrets: { master_key: hsm.masterKey('tp-master', { token_label: 'elsewhere' }) }, message: /has no token labelled "elsewhere"/ },
      { name: 'a key label the token does not hold', secrets: { master_key: hsm.masterKey('no-such-key') }, message: /holds no secret key labelled "no-such-key" .*tokenproxy hsm init/ },
    ];
    for (const c of cases) {
      const path = config(dir, key, c.secrets);
      const r = await runCli(['--config', path], { ...hsm.env, ...c.env });
      t.equal(r.code, 1, `${c.name}: exit 1`);
      t.match(startupFailure(r.output), c.message, c.name);
      t.notOk(r.output.includes(hsm.pin) || r.output.includes(wrongPin), `${c.name}: no PIN in the output`);
      t.notOk(/listening/.test(r.output), `${c.name}: never listened`);
    }
    const conflict = config(dir, key, { master_key: hsm.masterKey('tp-master') });
    const r = await runCli(['--config', conflict], { ...hsm.env, TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') });
    t.equal(r.code, 1, 'an HSM key and TOKENPROXY_MASTER_KEY together are refused');
    t.match(r.output, /TOKENPROXY_MASTER_KEY: set while secrets\.master_key names an HSM key/);
  });

  t.test('a store made with TOKENPROXY_MASTER_KEY moves to the HSM and keeps fingerprints, cursors and anchors', async (t) => {
    const dir = mkdtempSync(join(root, 'move-'));
    const hsm = softHsm(dir);
    t.equal((await hsm.initKey('tp-master')).code, 0);
    const key = newKey();
    const envKey = randomBytes(32).toString('base64');
    const before = config(dir, key, {});
    const after = config(dir, key, { master_key: hsm.masterKey('tp-master') });

    const numbers = [randomCard(), randomCard(), randomCard()];
    let svc = await startChild(before, { ...hsm.env, TOKENPROXY_MASTER_KEY: envKey });
    const made = [];
    for (const n of numbers) made.push((await call(svc.url, 'POST', '/tokens', key, card(n))).body);
    const page = await call(svc.url, 'GET', '/tokens?size=1', key);
    const cursor = page.body.pagination.next as string;
    t.ok(cursor, 'a page cursor sealed under the env key');
    const rest = await call(svc.url, 'GET', `/tokens?size=10&start=${encodeURIComponent(cursor)}`, key);

    // The HSM key alone cannot open it yet: the start says what to run.
    const early = await runCli(['--config', after], hsm.env);
    t.equal(early.code, 1);
    t.match(startupFailure(early.output), /its data keys were wrapped by master key [0-9a-f]{16} \(a raw key: .*tokenproxy rotate-master-key moves a store to the HSM/);

    // Moved with the service running on the env key.
    const moved = await runCli(['rotate-master-key', '--config', before, '--to', after], { ...hsm.env, TOKENPROXY_MASTER_KEY: envKey });
    t.equal(moved.code, 0, moved.output);
    t.match(moved.output, /root: wrapped\n {2}k1: wrapped\n/);
    t.match(moved.output, /done: 1 data key\(s\) and the root secret are wrapped by master key [0-9a-f]{16} \(1 written now\); 3 token\(s\)/);
    const still = await call(svc.url, 'GET', `/tokens/${made[0].id}`, key);
    t.equal(still.body.data.number, numbers[0], 'the service on the env key is not disturbed');
    await svc.stop();
    const again = await runCli(['rotate-master-key', '--config', before, '--to', after], { ...hsm.env, TOKENPROXY_MASTER_KEY: envKey });
    t.equal(again.code, 0, again.output);
    t.match(again.output, /root: already wrapped \(an earlier run\)\n {2}k1: already wrapped/, 'a second run writes nothing');
    t.match(again.output, /\(0 written now\)/);

    svc = await startChild(after, hsm.env);
    for (const [i, n] of numbers.entries()) {
      const r = await call(svc.url, 'GET', `/tokens/${made[i].id}`, key);
      t.equal(r.body.data.number, n, `token ${i + 1} read under the HSM key`);
      const fp = await call(svc.url, 'GET', `/tokens?fingerprint=${encodeURIComponent(made[i].fingerprint)}`, key);
      t.same(fp.body.data.map((d: { id: string }) => d.id), [made[i].id], `token ${i + 1} found by its old fingerprint`);
    }
    const resumed = await call(svc.url, 'GET', `/tokens?size=10&start=${encodeURIComponent(cursor)}`, key);
    t.equal(resumed.status, 200, 'a cursor sealed under the env key opens under the HSM key');
    t.same(resumed.body.data.map((d: { id: string }) => d.id), rest.body.data.map((d: { id: string }) => d.id), 'and pages on as before');
    const same = await call(svc.url, 'POST', '/tokens', key, card(numbers[0]));
    t.equal(same.body.fingerprint, made[0].fingerprint, 'a value tokenized again has the fingerprint it had under the env key');
    await svc.stop();
    const verified = await runCli(['verify-audit', '--config', after, '--tenant', OPS_TENANT], hsm.env);
    t.equal(verified.code, 0, `the audit anchors written under the env key check under the HSM key: ${verified.output}`);
    t.notOk((moved.output + again.output + svc.output() + verified.output).includes(hsm.pin), 'no PIN in any output');
  });
});
