/**
 * Issue 28: a SIGTERM while an asynchronous reactor run is going and a request holds the drain for
 * the whole grace: the process still exits 0 within its hard deadline (grace + 5 s), and the run is
 * recorded as failed, readable after a restart. The runs' wait shares the requests' grace (a second
 * grace after the drain, 2 x 6 s, overran the 11 s deadline: exit 1, nothing recorded).
 */
import t from 'tap';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startChild, writeConfig } from '../helpers/process.js';
import { baseConfig, KEYS, startTestService } from '../helpers/service.js';
import { startUpstream } from '../helpers/upstream.js';

t.setTimeout(240_000);

const GRACE_MS = 6_000;
const MASTER = Buffer.alloc(32, 28).toString('base64');

function exitOf(child: ChildProcess): Promise<{ code: number | null; signal: string | null }> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
}

t.test('SIGTERM with a run going and the drain held for the whole grace: exit 0, the run recorded as failed', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tp-async-stop-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const up = await startUpstream(t);
  let arrived!: () => void;
  const arrival = new Promise<void>((r) => (arrived = r));
  up.respond(() => arrived()); // never answers: the request holds the drain until the grace ends
  const cfg = baseConfig() as Record<string, any>;
  cfg.server = { ...cfg.server, shutdown_grace_ms: GRACE_MS };
  cfg.store = { kind: 'embedded', path: join(dir, 'tokens.db') };
  cfg.tenants[0].outbound = { allowed_destinations: [up.url] };
  cfg.tenants[0].reactors = [{ id: 'never', name: 'never', timeout_ms: 30_000, code: 'module.exports = async function () { return new Promise(() => {}); };' }];
  const svc = await startChild(writeConfig(dir, cfg), { TOKENPROXY_MASTER_KEY: MASTER }, 120_000);
  t.teardown(() => (svc.child.exitCode === null && svc.child.signalCode === null ? svc.kill9() : undefined));

  const started = await fetch(`${svc.url}/reactors/never/react-async`, {
    method: 'POST', headers: { 'svc-api-key': KEYS.private, 'content-type': 'application/json' }, body: '{"args":{}}',
  });
  t.equal(started.status, 202);
  const { asyncReactorRequestId: id } = (await started.json()) as { asyncReactorRequestId: string };
  const held = fetch(`${svc.url}/proxy/x`, { headers: { 'svc-api-key': KEYS.private, 'svc-proxy-url': up.url } }).catch(() => 'cut');
  await arrival;
  svc.child.kill('SIGTERM');
  const e = await exitOf(svc.child);
  t.same(e, { code: 0, signal: null }, 'exited 0 on its own (not past the hard deadline)');
  t.equal(await held, 'cut');
  t.notMatch(svc.output(), /shutdown deadline passed/);

  const again = await startTestService(t, { config: cfg, dataDir: dir, masterKey: MASTER });
  const got = await again.call('GET', `/reactors/never/results/${id}`, { key: KEYS.private });
  t.equal(got.status, 503, got.text);
  t.equal(got.body.code, 'reactor_unavailable');
  t.match(got.body.detail, /service stopped before the reactor finished/);
});
