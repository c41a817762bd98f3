/**
 * Issue 31 finding 7, from the service's working directory: the service and the commands resolve
 * a relative `store.path` alike, so `verify-audit` and `rotate-data-key` find the store the
 * service wrote; an unknown tenant or one without a chain head exits 2 naming it. The service and
 * the commands run as child processes (store-commands-fixture.ts).
 */
import t from 'tap';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { call, KEYS, TENANT_A, TENANT_B } from '../helpers/service.js';
import { cli, dirs, service } from './store-commands-fixture.js';

t.setTimeout(300_000);

const { serviceDir, otherDir, config, masterKey } = dirs(t);

t.test('from the service\'s working directory: the store the service wrote; unknown tenants and tenants without a head exit 2', async (t) => {
  const svc = await service(serviceDir, config, { TOKENPROXY_MASTER_KEY: masterKey });
  try {
    const created = await call(svc.url, 'POST', '/tokens', { key: KEYS.private, body: { type: 'token', data: 'store-commands', containers: ['/general/'] } });
    t.equal(created.status, 201, created.text);
    t.equal((await call(svc.url, 'GET', `/tokens/${created.body.id as string}`, { key: KEYS.private })).status, 200);
  } finally {
    await svc.stop();
  }
  t.ok(existsSync(join(serviceDir, 'data', 'tokens.db')), 'the service put the relative path under its working directory');
  const env = { TOKENPROXY_MASTER_KEY: masterKey };

  const ok = await cli(serviceDir, ['verify-audit', '--tenant', TENANT_A, '--config', config], env);
  t.equal(ok.code, 0, ok.out);
  t.match(ok.out, /1 audit event\(s\), chain intact/, 'the command found the same store');

  const unknown = '99999999-aaaa-4bbb-8ccc-dddddddddddd';
  const u = await cli(serviceDir, ['verify-audit', '--tenant', unknown, '--config', config], env);
  t.equal(u.code, 2, u.out);
  t.match(u.out, unknown, 'names the unknown tenant');
  t.notMatch(u.out, /intact/);

  const b = await cli(serviceDir, ['verify-audit', '--tenant', TENANT_B, '--config', config], env);
  t.equal(b.code, 2, b.out);
  t.match(b.out, new RegExp(`${TENANT_B} has no audit chain head`), 'names the tenant without a head');

  const rotated = await cli(serviceDir, ['rotate-data-key', '--config', config], env);
  t.equal(rotated.code, 0, rotated.out);
  t.match(rotated.out, /data key rotated: k1 -> k2/, 'rotated the service\'s store');
  t.same(readdirSync(otherDir), [], 'still nothing elsewhere');
});
