/**
 * `tokenproxy rotate-master-key` from TOKENPROXY_MASTER_KEY to a SoftHSM2 key, killed with -9 in
 * the middle and run again, then from that HSM key to another: every token reads back under each
 * new key, with the fingerprints and audit anchors it had. The ring has a few hundred data keys so
 * that the kill lands while entries are being written.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KeyRing } from '../../src/crypto/keyring.js';
import { createStore } from '../../src/store/factory.js';
import { spawnCli } from '../helpers/cli-entry.js';
import { opsApp, OPS_TENANT, call, newKey } from '../helpers/ops.js';
import { runCli, startChild, writeConfig } from '../helpers/process.js';
import { randomCard } from '../helpers/secrets.js';
import { softHsm, softhsmSkip } from '../helpers/softhsm.js';
import { waitFor } from '../helpers/wait.js';

const skip = softhsmSkip();
const DATA_KEYS = 300;

t.test('env key -> HSM key (killed with -9, resumed) -> another HSM key', { skip }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tp-hsm-rotate-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const hsm = softHsm(dir);
  t.equal((await hsm.initKey('first')).code, 0);
  t.equal((await hsm.initKey('second')).code, 0);
  const key = newKey();
  const envKey = randomBytes(32).toString('base64');
  const storePath = join(dir, 'data', 'tokens.db');
  const cfg = (name: string, secrets: Record<string, unknown>) => writeConfig(dir, {
    server: { host: '127.0.0.1', port: 0 }, log: { level: 'info' }, rate_limits: { enabled: false },
    store: { kind: 'embedded', path: storePath }, secrets,
    tenants: [{ id: OPS_TENANT, name: 'ops', applications: [opsApp(1, [key])] }],
  }, name);
  const envCfg = cfg('env.json', {});
  const firstCfg = cfg('first.json', { master_key: hsm.masterKey('first') });
  const secondCfg = cfg('second.json', { master_key: hsm.masterKey('second') });

  const numbers = [randomCard(), randomCard()];
  const made: Array<{ id: string; fingerprint: string }> = [];
  const svc = await startChild(envCfg, { ...hsm.env, TOKENPROXY_MASTER_KEY: envKey });
  for (const number of numbers) made.push((await call(svc.url, 'POST', '/tokens', key, { type: 'card', data: { number, expiration_month: 1, expiration_year: 2032 } })).body);
  await svc.stop();
  // Many data keys, added through the key ring as rotate-data-key adds them (one process, not hundreds).
  const store = await createStore({ kind: 'embedded', path: storePath } as never, { mustExist: true });
  const ring = await KeyRing.open(Buffer.from(envKey, 'base64'), store.dataKeys);
  for (let i = 1; i < DATA_KEYS; i++) await ring.rotate();
  t.equal(ring.activeKid, `k${DATA_KEYS}`);
  ring.close();
  await store.close();

  // Killed once it has written some entries, before it is done.
  const child = spawnCli(['rotate-master-key', '--config', envCfg, '--to', firstCfg], { ...process.env, ...hsm.env, TOKENPROXY_MASTER_KEY: envKey }, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d));
  child.stderr.on('data', (d: Buffer) => (out += d));
  const exited = new Promise<void>((r) => child.on('exit', () => r()));
  await waitFor(() => (out.match(/: wrapped\n/g) ?? []).length >= 20 || /done:/.test(out), { what: 'twenty entries written', timeoutMs: 60_000 });
  child.kill('SIGKILL');
  await exited;
  const writtenFirst = (out.match(/: wrapped\n/g) ?? []).length;
  t.notMatch(out, /done:/, 'killed before it finished');
  t.ok(writtenFirst < DATA_KEYS + 1, `killed after ${writtenFirst} entries`);

  const resumed = await runCli(['rotate-master-key', '--config', envCfg, '--to', firstCfg], { ...hsm.env, TOKENPROXY_MASTER_KEY: envKey });
  t.equal(resumed.code, 0, resumed.output.slice(-500));
  const already = (resumed.output.match(/already wrapped \(an earlier run\)/g) ?? []).length;
  const now = Number(/\((\d+) written now\)/.exec(resumed.output)?.[1]);
  t.ok(already >= writtenFirst - 1, `the second run found the entries of the first (${already})`);
  t.equal(now + already, DATA_KEYS + 1, 'between them, every data key and the root secret');
  t.match(resumed.output, new RegExp(`done: ${DATA_KEYS} data key\\(s\\) and the root secret are wrapped by master key [0-9a-f]{16}`));

  const check = async (config: string, label: string) => {
    const s = await startChild(config, hsm.env);
    for (const [i, number] of numbers.entries()) {
      const r = await call(s.url, 'GET', `/tokens/${made[i]!.id}`, key);
      t.equal(r.body.data.number, number, `${label}: token ${i + 1} reads back`);
      const again = await call(s.url, 'POST', '/tokens', key, { type: 'card', data: { number, expiration_month: 1, expiration_year: 2032 } });
      t.equal(again.body.fingerprint, made[i]!.fingerprint, `${label}: token ${i + 1} keeps its fingerprint`);
    }
    await s.stop();
    const verified = await runCli(['verify-audit', '--config', config, '--tenant', OPS_TENANT], hsm.env);
    t.equal(verified.code, 0, `${label}: ${verified.output}`);
    return s.output();
  };
  const logs1 = await check(firstCfg, 'first HSM key');

  // HSM -> HSM: the current key is the first HSM key now.
  const moved = await runCli(['rotate-master-key', '--config', firstCfg, '--to', secondCfg], hsm.env);
  t.equal(moved.code, 0, moved.output.slice(-500));
  t.match(moved.output, new RegExp(`done: ${DATA_KEYS} data key\\(s\\) and the root secret are wrapped by master key [0-9a-f]{16} \\(${DATA_KEYS} written now\\)`));
  const logs2 = await check(secondCfg, 'second HSM key');
  t.notOk((out + resumed.output + moved.output + logs1 + logs2).includes(hsm.pin), 'no PIN in any output');
});
