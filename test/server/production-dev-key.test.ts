/**
 * Production mode refuses the development master key, wherever it is given from. A development
 * start writes a master key file into the store's data directory (src/crypto/master-key.ts); an
 * operator who then starts in production mode with that same key (TOKENPROXY_MASTER_KEY=$(cat
 * data/master.key), or a copy of the file as secrets.master_key_file) would run production on a
 * key kept beside the store. The real CLI (helpers/first-hour.ts runs it as its own process):
 * refused with exit 1 and one line naming the file, never the key; the key file moved out of the
 * data directory, the same key starts.
 */
import t from 'tap';
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '../helpers/wait.js';
import { lines, OWN_KEY, ownConfig, run as runIn, scratch, sha, type Proc } from '../helpers/first-hour.js';

const base = scratch(t);
const run = (cwd: string, args: string[], extra: Record<string, string> = {}) => runIn(t, cwd, args, extra);

/** Its exit code, or 'served' as soon as it says it listens (then it is stopped): a refusal must not wait for a service that started. */
async function outcome(p: Proc): Promise<number | null | 'served'> {
  let timer: NodeJS.Timeout | undefined;
  const listening = new Promise<'served'>((resolve) => {
    timer = setInterval(() => {
      if (lines(p.stdout()).some((l) => l.msg === 'tokenproxy listening')) resolve('served');
    }, 50);
  });
  try {
    const first = await Promise.race([p.exited, listening]);
    if (first === 'served') process.kill(-p.child.pid!, 'SIGTERM');
    return first;
  } finally {
    clearInterval(timer);
  }
}

t.test('production mode refuses the master key of the development key file beside the store', async (t) => {
  const dir = join(base, 'dev-then-production');
  const config = ownConfig(dir, [{ sha256: sha(OWN_KEY) }]);

  // A development start writes data/master.key.
  const dev = run(dir, ['--config', config]);
  await waitFor(() => lines(dev.stdout()).find((l) => l.msg === 'tokenproxy listening'), { timeoutMs: 60_000, what: `listening:\n${dev.stdout()}${dev.stderr()}` });
  process.kill(-dev.child.pid!, 'SIGTERM');
  t.equal(await dev.exited, 0, 'the development service stopped cleanly');
  const devKeyFile = join(dir, 'data/master.key');
  t.ok(existsSync(devKeyFile), 'the development start wrote its key file');
  const devKey = readFileSync(devKeyFile, 'utf8').trim();

  const fromEnv = run(dir, ['--config', config], { NODE_ENV: 'production', TOKENPROXY_MASTER_KEY: devKey });
  t.equal(await outcome(fromEnv), 1, 'TOKENPROXY_MASTER_KEY=$(cat data/master.key): exit 1');
  t.same(fromEnv.stderr().split('\n'), [
    `tokenproxy: production mode refuses to start: TOKENPROXY_MASTER_KEY is the development master key of ${devKeyFile} (the same key id): ` +
      'a key written beside the store is not a production secret; move that file out of the data directory (keep the key only where your secrets are kept), or start a new store with a new key (tokenproxy gen-master-key)',
    '',
  ], 'exactly its line, naming the file');
  t.equal(fromEnv.stdout(), '', 'nothing on standard output: the service did not start');
  t.notOk(fromEnv.stderr().includes(devKey), 'the key is not in the message');

  // The same key copied to a file outside the data directory is still the development key.
  mkdirSync(join(dir, 'secrets'));
  copyFileSync(devKeyFile, join(dir, 'secrets/master.key'));
  const fileConfig = ownConfig(dir, [{ sha256: sha(OWN_KEY) }], { secrets: { master_key_file: './secrets/master.key' } });
  const fromFile = run(dir, ['--config', fileConfig], { NODE_ENV: 'production' });
  t.equal(await outcome(fromFile), 1, 'a copy as secrets.master_key_file: exit 1');
  t.match(fromFile.stderr(), /^tokenproxy: production mode refuses to start: secrets\.master_key_file \.\/secrets\/master\.key is the development master key of \S+data\/master\.key \(the same key id\)/);
  t.notOk(fromFile.stderr().includes(devKey), 'the key is not in the message');

  // The key moved out of the data directory: the same key is the operator's own now, and starts.
  renameSync(devKeyFile, join(dir, 'secrets/dev-master.key'));
  const moved = run(dir, ['--config', config], { NODE_ENV: 'production', TOKENPROXY_MASTER_KEY: devKey });
  await waitFor(() => lines(moved.stdout()).find((l) => l.msg === 'tokenproxy listening'), { timeoutMs: 60_000, what: `listening:\n${moved.stdout()}${moved.stderr()}` });
  t.notOk(moved.stdout().includes(devKey) || moved.stderr().includes(devKey), 'the key is not in the output');
  process.kill(-moved.child.pid!, 'SIGTERM');
  t.equal(await moved.exited, 0);
});
