/**
 * Issue 31 finding 7, from another working directory: `verify-audit`, `rotate-data-key` and
 * `migrate` (issue 24) on a config whose `store.path` is relative exit 1 naming the path they
 * looked at, and create neither the file, its directory nor a development master key. The
 * commands run as child processes (store-commands-fixture.ts).
 */
import t from 'tap';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { TENANT_A } from '../helpers/service.js';
import { cli, dirs } from './store-commands-fixture.js';

t.setTimeout(300_000);

const { otherDir, config, masterKey } = dirs(t);

t.test('from another working directory: exit 1 naming the path, nothing created', async (t) => {
  for (const args of [['verify-audit', '--tenant', TENANT_A], ['rotate-data-key'], ['migrate']]) {
    for (const env of [{}, { TOKENPROXY_MASTER_KEY: masterKey }] as Array<Record<string, string>>) {
      const what = `${args[0]} (${'TOKENPROXY_MASTER_KEY' in env ? 'master key set' : 'no master key: a development key would be looked for'})`;
      const r = await cli(otherDir, [...args, '--config', config], env);
      t.equal(r.code, 1, `${what}: ${r.out}`);
      t.match(r.out, join(otherDir, 'data', 'tokens.db'), `${what}: names the path it looked at`);
      t.match(r.out, /relative to the working directory/, `${what}: says how a relative path resolves`);
      t.notMatch(r.out, /chain intact|data key rotated/, what);
      t.same(readdirSync(otherDir), [], `${what}: no file, no directory, no development key created`);
    }
  }
});
