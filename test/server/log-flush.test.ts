/**
 * The service logs to standard output asynchronously (src/log.ts stdoutDestination: the access
 * line costs no write on the request's path), and loses nothing for it: every line buffered when
 * the process stops on SIGTERM, calls process.exit, or dies of an uncaught exception is written.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { startChild, writeConfig } from '../helpers/process.js';
import { baseConfig, KEYS } from '../helpers/service.js';

const dir = mkdtempSync(join(tmpdir(), 'tp-log-flush-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

function exited(child: import('node:child_process').ChildProcess): Promise<number | null> {
  return child.exitCode !== null ? Promise.resolve(child.exitCode) : new Promise((r) => child.once('exit', (code) => r(code)));
}

t.test('SIGTERM right after a burst: every request has its access line', async (t) => {
  const cfg = baseConfig();
  cfg.store = { kind: 'embedded', path: join(dir, 'burst.db') };
  const svc = await startChild(writeConfig(dir, cfg, 'burst.json'), { TOKENPROXY_MASTER_KEY: Buffer.alloc(32, 3).toString('base64') });
  t.teardown(() => svc.kill9());
  const N = 400;
  const agent = new Agent({ connections: 8, pipelining: 1 });
  t.teardown(() => agent.close());
  // 404s on a route pattern no other request uses, so their access lines can be counted exactly.
  const statuses = await Promise.all(Array.from({ length: N }, async (_, i) => {
    const res = await request(`${svc.url}/tokens/00000000-0000-4000-8000-${String(i).padStart(12, '0')}`, {
      dispatcher: agent, headers: { 'svc-api-key': KEYS.private },
    });
    await res.body.dump();
    return res.statusCode;
  }));
  t.same(new Set(statuses), new Set([404]), 'every request answered 404 token_not_found');
  svc.child.kill('SIGTERM');
  t.equal(await exited(svc.child), 0, 'exit 0 after the drain');
  const lines = svc.output().split('\n').filter((l) => l.includes('"route":"/tokens/:id"') && l.includes('"msg":"request"'));
  t.equal(lines.length, N, `${N} access lines written`);
  t.ok(svc.output().includes('stopping: draining requests in flight'), 'the stop line too');
});

/** A child that logs `count` lines through createLogger's default destination, then ends as `how` says. */
function logAndEnd(how: 'exit' | 'throw' | 'return', count: number): Promise<{ code: number | null; stdout: string }> {
  const script = `
    import { createLogger } from './src/log.ts';
    const log = createLogger('info');
    for (let i = 0; i < ${count}; i++) log.info({ n: i }, 'line');
    ${how === 'exit' ? 'process.exit(3);' : how === 'throw' ? "throw new Error('fatal on purpose');" : ''}
  `;
  const child = spawn(process.execPath, [...process.execArgv.filter((a) => !a.startsWith('--inspect')), '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr!.resume();
  return exited(child).then((code) => ({ code, stdout }));
}

for (const how of ['exit', 'throw', 'return'] as const) {
  t.test(`buffered lines are flushed when the process ends by ${how}`, async (t) => {
    const count = 20_000;
    const { code, stdout } = await logAndEnd(how, count);
    t.equal(code, how === 'exit' ? 3 : how === 'throw' ? 1 : 0, 'the exit code of that ending');
    const lines = stdout.split('\n').filter((l) => l.includes('"msg":"line"'));
    t.equal(lines.length, count, `all ${count} lines written`);
    t.match(lines[count - 1], `"n":${count - 1}`, 'the last one last');
  });
}

// A quiet process's last line is written while the process runs, not only when it ends. The case
// that held one: sonic-boom's flush does nothing while a write is in flight, and when that write
// ends it writes on only if 8 KB wait; so a line logged during a slow write (stdout a pipe its
// reader is behind on) stayed buffered until the next log call. In a cluster the primary relays
// each worker's 'worker listening' just after its own line, and a test waited over a minute for one.
t.test('a line logged while a slow write is in flight goes out without another log call', async (t) => {
  // The child fills the pipe (its reader, this test, is paused) with one 1 MB line, so that write
  // stays in flight; logs the short line; and says 'ready' on stderr from a timer that fires after
  // the logger's 50 ms flush timer (Node runs timers in the order they expire). Then it idles,
  // logging nothing more, until its stdin closes.
  const script = `
    import { createLogger } from './src/log.ts';
    const log = createLogger('info');
    log.info({ pad: 'x'.repeat(1_000_000) }, 'big');
    setTimeout(() => {
      log.info('the short line');
      setTimeout(() => process.stderr.write('ready\\n'), 200);
    }, 10);
    process.stdin.resume();
    process.stdin.on('end', () => process.exit(0));
  `;
  const child = spawn(process.execPath, [...process.execArgv.filter((a) => !a.startsWith('--inspect')), '--input-type=module', '-e', script], { stdio: ['pipe', 'pipe', 'pipe'] });
  t.teardown(() => child.kill('SIGKILL'));
  child.stdout!.pause();
  let stderr = '';
  await new Promise<void>((resolve, reject) => {
    child.stderr!.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
      if (stderr.includes('ready\n')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`child exited with ${code}: ${stderr}`)));
  });
  let stdout = '';
  const sawShortLine = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 10_000);
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
      if (stdout.includes('"msg":"the short line"')) {
        clearTimeout(timer);
        resolve(true);
      }
    });
    child.stdout!.resume();
  });
  t.ok(stdout.includes('"msg":"big"'), 'the big line came first');
  t.ok(sawShortLine, 'the short line came while the process was still running (not held for its exit)');
  child.stdin!.end();
  t.equal(await exited(child), 0);
});
