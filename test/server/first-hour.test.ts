/**
 * Issue 29, "the first hour and the first deployment": the shipped config/tokenproxy.yaml run as a
 * fresh clone runs it (in a directory of its own, as the working directory):
 *
 * - with NODE_ENV=production it refuses to start, says why in three lines or fewer, exits 1 and
 *   creates nothing (no development master key);
 * - in development mode it starts, says once what production mode would refuse, writes the pid
 *   file `tokenproxy reload` finds without flags, and on SIGINT or SIGTERM to the whole process
 *   group (a terminal's Ctrl-C, `timeout`, a service manager) it stops without an error line: the
 *   reactor host (the default config has a reactor) stops, it is not "restarted", and the pid file
 *   is removed.
 */
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '../helpers/wait.js';
import { clone as cloneIn, lines, run as runIn, scratch } from '../helpers/first-hour.js';

const base = scratch(t);
const clone = (name: string, edit?: (yaml: string) => string) => cloneIn(base, name, edit);
const run = (cwd: string, args: string[], extra: Record<string, string> = {}) => runIn(t, cwd, args, extra);

t.test('the default config under NODE_ENV=production refuses to start, in three lines or fewer, and creates nothing', async (t) => {
  const dir = clone('production');
  const p = run(dir, [], { NODE_ENV: 'production' });
  t.equal(await p.exited, 1, 'exit code 1');
  const said = p.stderr().trimEnd().split('\n');
  t.ok(said.length <= 3, `at most three lines (${said.length})`);
  t.same(said, [
    `tokenproxy: production mode refuses to start: no master key: set TOKENPROXY_MASTER_KEY or secrets.master_key_file (tokenproxy gen-master-key makes one); the development key ${join(dir, 'data/master.key')} is for development only`,
    'tokenproxy: production mode refuses to start: tenants[0].applications[0].keys[0], tenants[0].applications[1].keys[0] and tenants[0].proxies[0].key are development keys published in the README and the default config: make your own (tokenproxy gen-key --type private|public|proxy) and list their digests',
  ]);
  t.equal(p.stdout(), '', 'nothing on standard output');
  t.notOk(existsSync(join(dir, 'data')), 'no data directory, no development master key was created');
});

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  t.test(`development mode: one notice, a pid file reload finds, and ${signal} to the process group stops it without an error line`, async (t) => {
    const dir = clone(`dev-${signal}`);
    const p = run(dir, []);
    const listening = await waitFor(() => lines(p.stdout()).find((l) => l.msg === 'tokenproxy listening'), { timeoutMs: 60_000, what: `listening:\n${p.stdout()}${p.stderr()}` });
    const url = listening.url as string;

    const notices = lines(p.stdout()).filter((l) => typeof l.msg === 'string' && l.msg.startsWith('development mode:'));
    t.equal(notices.length, 1, 'development mode says it once');
    t.same(notices[0]?.would_refuse, [
      `no master key: set TOKENPROXY_MASTER_KEY or secrets.master_key_file (tokenproxy gen-master-key makes one); the development key ${join(dir, 'data/master.key')} is for development only`,
      'tenants[0].applications[0].keys[0], tenants[0].applications[1].keys[0] and tenants[0].proxies[0].key are development keys published in the README and the default config: make your own (tokenproxy gen-key --type private|public|proxy) and list their digests',
    ], 'and names what production mode would refuse');

    // The reactor host is up: the default config's reactor answers.
    const react = await fetch(`${url}/reactors/card-brand/react`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'svc-api-key': 'key_dev_private_change_me_0000000000' },
      body: JSON.stringify({ args: { card: { number: '4242424242424242', expiration_month: 12, expiration_year: 2030 } } }),
    });
    t.equal(react.status, 200, `the reactor answers (${react.status})`);
    await react.text();

    const pidFile = join(dir, 'data/tokenproxy.pid');
    t.equal(readFileSync(pidFile, 'utf8').trim(), String(p.child.pid), 'the default config writes the pid file');
    const reload = run(dir, ['reload']);
    t.equal(await reload.exited, 0, `tokenproxy reload finds it without flags: ${reload.stdout()}${reload.stderr()}`);
    t.match(reload.stdout(), new RegExp(`process ${p.child.pid}: serves the new file`));

    process.kill(-p.child.pid!, signal);
    t.equal(await p.exited, 0, 'exit 0');
    const all = lines(p.stdout());
    t.ok(all.some((l) => l.msg === 'stopping: draining requests in flight'), 'it drained');
    t.same(all.filter((l) => (l.level ?? 0) >= 50).map((l) => l.msg), [], 'no error or fatal line');
    t.notMatch(p.stdout() + p.stderr(), /reactor host died|restarting|IPC channel|ERR_IPC/i, 'the reactor host is stopped, not restarted');
    t.equal(p.stderr(), '', 'nothing on standard error');
    t.notOk(existsSync(pidFile), 'the pid file is removed');
  });
}

t.test('workers: SIGTERM to the process group stops the primary, every worker and their reactor hosts without an error line', async (t) => {
  const dir = clone('workers', (y) => y.replace(/^  workers: 1 /m, '  workers: 2 '));
  const p = run(dir, []);
  await waitFor(() => lines(p.stdout()).find((l) => l.msg === 'tokenproxy listening'), { timeoutMs: 90_000, what: `listening:\n${p.stdout()}${p.stderr()}` });
  t.equal(lines(p.stdout()).filter((l) => typeof l.msg === 'string' && l.msg.startsWith('development mode:')).length, 1, 'the notice once, not once per worker');
  process.kill(-p.child.pid!, 'SIGTERM');
  t.equal(await p.exited, 0, 'exit 0');
  t.same(lines(p.stdout()).filter((l) => (l.level ?? 0) >= 50).map((l) => l.msg), [], 'no error or fatal line');
  t.notMatch(p.stdout() + p.stderr(), /reactor host died|restarting|IPC channel|ERR_IPC/i, 'nothing is restarted');
  t.notOk(existsSync(join(dir, 'data/tokenproxy.pid')), 'the pid file is removed');
});
