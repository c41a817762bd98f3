/**
 * `tokenproxy rotate-data-key` with the service running (issue 13), for both stores
 * (rotate.test.ts, rotate-redis.test.ts): the CLI runs as a child process next to two
 * running instances (child processes too) and adds a data key; tokens created before stay
 * readable; an instance picks the new key up periodically (store.data_key_refresh_seconds), on
 * reading a value sealed with it (one refresh) and on reload; tokens sealed after carry the new
 * kid, checked in the store itself.
 */
import type { Test } from 'tap';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { KeyRing } from '../../src/crypto/keyring.js';
import { createStore } from '../../src/store/factory.js';
import { call, hup, newKey, OPS_TENANT, opsApp, opsChild, opsFiles } from '../helpers/ops.js';
import { runCli } from '../helpers/process.js';
import { randomMarker } from '../helpers/secrets.js';
import { waitFor } from '../helpers/wait.js';

export interface StoreCfg {
  kind: 'embedded' | 'redis';
  path: string;
  url: string;
  key_prefix: string;
}

/**
 * Two instances on one store: x refreshes its keys only on reload and on an unknown kid
 * (store.data_key_refresh_seconds: 0), y every second.
 */
export async function rotateSuite(t: Test, root: string, store: StoreCfg): Promise<void> {
  const xFiles = opsFiles(mkdtempSync(join(root, 'x-')), { ...store, data_key_refresh_seconds: 0 });
  const yFiles = opsFiles(mkdtempSync(join(root, 'y-')), { ...store, data_key_refresh_seconds: 1 }, xFiles.masterKey);
  const key = newKey();
  xFiles.write([opsApp(1, [key])]);
  yFiles.write([opsApp(1, [key])]);
  const env = { TOKENPROXY_MASTER_KEY: xFiles.masterKey };
  const x = await opsChild(t, xFiles);
  const y = await opsChild(t, yFiles);

  const direct = await createStore(store);
  t.teardown(() => direct.close());
  /** The kid a token's value is sealed with, read from the store itself. */
  const kidOf = async (id: string) => KeyRing.kidOf((await direct.tokens.get(OPS_TENANT, id))!.sealed);
  const secrets: string[] = [];
  const create = async (url: string) => {
    const data = randomMarker('rotate_data');
    secrets.push(data);
    const r = await call(url, 'POST', '/tokens', key, { type: 'token', data });
    t.equal(r.status, 201);
    return { id: r.body.id as string, data };
  };
  const read = async (url: string, token: { id: string; data: string }, what: string) => {
    const r = await call(url, 'GET', `/tokens/${token.id}`, key);
    t.same([r.status, r.body.data], [200, token.data], what);
  };

  const before = await create(x.url);
  t.equal(await kidOf(before.id), 'k1');

  const rotated = await runCli(['rotate-data-key', '--config', xFiles.path], env);
  t.equal(rotated.code, 0, rotated.output);
  t.match(rotated.output, /data key rotated: k1 -> k2/);

  // x has no periodic refresh and was not reloaded: it still seals with k1.
  const stale = await create(x.url);
  t.equal(await kidOf(stale.id), 'k1', 'an instance keeps its key until it refreshes');

  // y refreshes every second: its tokens carry k2 without a restart or a reload.
  const after = await waitFor(async () => {
    const tok = await create(y.url);
    return (await kidOf(tok.id)) === 'k2' ? tok : undefined;
  }, { what: 'a token sealed with k2 by the periodically refreshing instance', timeoutMs: 20_000, intervalMs: 200 });
  await read(y.url, before, 'a token sealed before the rotation is readable');
  await read(y.url, stale, 'and one sealed with the old key by the other instance');

  // x reads a value sealed with k2, which it does not hold: it refreshes once and reads it, and
  // from then on seals with k2 too.
  await read(x.url, after, 'an unknown kid makes the instance refresh its keys');
  t.equal(await kidOf((await create(x.url)).id), 'k2', 'and seal with the new key');

  // A reload refreshes the keys too.
  t.match((await runCli(['rotate-data-key', '--config', xFiles.path], env)).output, /data key rotated: k2 -> k3/);
  t.match(await hup(x), 'configuration reloaded');
  t.equal(await kidOf((await create(x.url)).id), 'k3', 'sealed with the new key after a reload');
  await read(x.url, before, 'the first token is still readable');

  for (const svc of [x, y]) {
    for (const s of [...secrets, key, xFiles.masterKey]) t.notOk(svc.output().includes(s), 'no value or key in the log');
  }
}
