/**
 * Issue 23 finding 8, "Shutdown": the service ends within server.shutdown_grace_ms plus a small
 * margin whatever is in flight, and a second signal ends it at once. Each case holds something
 * that never finishes on its own (an outbound request to a destination that never answers, a
 * reactor call that never resolves, a standard output nobody reads any more), sends SIGTERM and
 * waits for the exit event, bounded generously (20 s against a 300 ms grace plus a margin of a
 * few seconds). With standard output broken, the old code's second signal never ended the process:
 * process.exit ran pino's synchronous flush, which retries a write that fails with EPIPE for ever.
 */
import t from 'tap';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startChild, writeConfig, type ChildService } from '../helpers/process.js';
import { baseConfig, KEYS } from '../helpers/service.js';
import { startUpstream } from '../helpers/upstream.js';
import { waitFor } from '../helpers/wait.js';

t.setTimeout(240_000);

const dir = mkdtempSync(join(tmpdir(), 'tp-shutdown-deadline-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const MASTER = Buffer.alloc(32, 9).toString('base64');
/** Far above grace (300 ms) plus the margin, far below what the old code waited. */
const EXIT_BOUND_MS = 20_000;

function exitOf(child: ChildProcess): Promise<{ code: number | null; signal: string | null }> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
}

/** Resolves with the exit, or rejects naming `what` if the process is still running after EXIT_BOUND_MS. */
function exitWithin(child: ChildProcess, what: string, ms = EXIT_BOUND_MS): Promise<{ code: number | null; signal: string | null }> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: still running ${ms} ms after SIGTERM`)), ms);
    void exitOf(child).then((e) => {
      clearTimeout(timer);
      resolve(e);
    });
  });
}

function config(name: string, extra: (cfg: Record<string, any>) => void, graceMs = 300): string {
  const cfg = baseConfig() as Record<string, any>;
  cfg.server = { ...cfg.server, shutdown_grace_ms: graceMs };
  cfg.store = { kind: 'embedded', path: join(dir, `${name}.db`) };
  extra(cfg);
  return writeConfig(dir, cfg, `${name}.json`);
}

async function child(t: { teardown(fn: () => unknown): void }, path: string): Promise<ChildService> {
  const svc = await startChild(path, { TOKENPROXY_MASTER_KEY: MASTER }, 120_000);
  t.teardown(() => (svc.child.exitCode === null && svc.child.signalCode === null ? svc.kill9() : undefined));
  return svc;
}

t.test('an outbound request whose destination never answers', async (t) => {
  const up = await startUpstream(t);
  let arrived!: () => void;
  const arrival = new Promise<void>((r) => (arrived = r));
  up.respond(() => arrived()); // never answers
  const svc = await child(t, config('outbound', (cfg) => (cfg.tenants[0].outbound = { allowed_destinations: [up.url] })));
  const pending = fetch(`${svc.url}/proxy/x`, { headers: { 'svc-api-key': KEYS.private, 'svc-proxy-url': up.url } }).catch(() => 'cut');
  await arrival;
  svc.child.kill('SIGTERM');
  const e = await exitWithin(svc.child, 'outbound request in flight');
  t.equal(e.signal, null, 'exited on its own, not killed');
  t.equal(await pending, 'cut', 'the request was cut');
});

t.test('a reactor call that never resolves', async (t) => {
  const svc = await child(t, config('reactor', (cfg) => {
    cfg.tenants[0].reactors = [{ id: 'r', name: 'r', timeout_ms: 30_000, code: 'module.exports = async function () { return new Promise(() => {}); };' }];
  }));
  const logged = svc.output().length;
  const pending = fetch(`${svc.url}/reactors/r/react`, {
    method: 'POST', headers: { 'svc-api-key': KEYS.private, 'content-type': 'application/json' }, body: '{"args":{}}',
  }).catch(() => 'cut');
  // The access line of a call comes when it ends: wait until the host has the call instead.
  await waitFor(() => svc.output().length > logged || undefined, { what: 'anything logged', timeoutMs: 2_000 }).catch(() => undefined);
  await new Promise((r) => setTimeout(r, 500));
  svc.child.kill('SIGTERM');
  const e = await exitWithin(svc.child, 'reactor call in flight');
  t.equal(e.signal, null, 'exited on its own, not killed');
  t.equal(await pending, 'cut', 'the call was cut');
});

t.test('standard output nobody reads any more', async (t) => {
  const svc = await child(t, config('stdout', () => undefined));
  // The reader goes away: every later log line hits a broken pipe.
  svc.child.stdout!.destroy();
  for (let i = 0; i < 5; i++) await fetch(`${svc.url}/healthz`).then((r) => r.text());
  svc.child.kill('SIGTERM');
  const e = await exitWithin(svc.child, 'broken stdout');
  t.equal(e.signal, null, 'exited on its own, not killed');
});

t.test('a second SIGTERM while draining exits at once, whatever the grace', async (t) => {
  const up = await startUpstream(t);
  let arrived!: () => void;
  const arrival = new Promise<void>((r) => (arrived = r));
  up.respond(() => arrived());
  const svc = await child(t, config('second', (cfg) => (cfg.tenants[0].outbound = { allowed_destinations: [up.url] }), 120_000));
  void fetch(`${svc.url}/proxy/x`, { headers: { 'svc-api-key': KEYS.private, 'svc-proxy-url': up.url } }).catch(() => 'cut');
  await arrival;
  svc.child.kill('SIGTERM');
  await waitFor(() => svc.output().includes('stopping: draining requests in flight'), { what: 'the stopping line' });
  svc.child.kill('SIGTERM');
  const e = await exitWithin(svc.child, 'second SIGTERM');
  t.not(e.code, 0, 'a non-zero exit');
  t.match(svc.output(), /second signal while draining: exiting at once/);
});

t.test('a second SIGTERM while draining exits at once with stdout broken too', async (t) => {
  const up = await startUpstream(t);
  let arrived!: () => void;
  const arrival = new Promise<void>((r) => (arrived = r));
  up.respond(() => arrived());
  const svc = await child(t, config('second-broken', (cfg) => (cfg.tenants[0].outbound = { allowed_destinations: [up.url] }), 120_000));
  void fetch(`${svc.url}/proxy/x`, { headers: { 'svc-api-key': KEYS.private, 'svc-proxy-url': up.url } }).catch(() => 'cut');
  await arrival;
  svc.child.stdout!.destroy();
  svc.child.kill('SIGTERM');
  // No log line to wait for any more: the process has handled the first signal once its
  // listener is closed.
  await waitFor(async () => (await fetch(`${svc.url}/healthz`).then(() => false, () => true)) || undefined, { what: 'the listener closed' });
  svc.child.kill('SIGTERM');
  const e = await exitWithin(svc.child, 'second SIGTERM, broken stdout');
  t.equal(e.signal, null, 'exited on its own, not killed');
  t.not(e.code, 0, 'a non-zero exit');
});
