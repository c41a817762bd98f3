/**
 * Live reload (issue 13), continued from reload.test.ts, on the real CLI run as a child process:
 * reactors appear, change and go without a restart (the reactor host starts with the first one);
 * no request is dropped while the model is swapped under keep-alive load; a request in flight
 * during a swap finishes on the model (and proxy) it started with.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { call, hup, newKey, opsApp, opsChild as child, opsFiles } from '../helpers/ops.js';
import { startUpstream } from '../helpers/upstream.js';
import { waitFor } from '../helpers/wait.js';

const root = mkdtempSync(join(tmpdir(), 'tp-reload-live-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const mk = (prefix: string) => mkdtempSync(join(root, prefix));

t.test('reactors: the host starts with the first one; changed code is recompiled; bad code is refused', async (t) => {
  const files = opsFiles(mk('reactors-'));
  const a = newKey();
  files.write([opsApp(1, [a])]);
  const svc = await child(t, files);
  t.equal((await call(svc.url, 'POST', '/reactors/r1/react', a, { args: {} })).status, 404, 'no reactor yet');
  const reactor = (n: number) => ({ id: 'r1', name: 'r1', code: `module.exports = async function () { return { raw: { version: ${n} } }; };` });
  files.write([opsApp(1, [a])], { tenant: { reactors: [reactor(1)] } });
  t.match(await hup(svc), 'configuration reloaded');
  let r = await call(svc.url, 'POST', '/reactors/r1/react', a, { args: {} });
  t.same([r.status, r.body.raw], [200, { version: 1 }], 'the new reactor runs');
  files.write([opsApp(1, [a])], { tenant: { reactors: [reactor(2)] } });
  t.match(await hup(svc), 'configuration reloaded');
  r = await call(svc.url, 'POST', '/reactors/r1/react', a, { args: {} });
  t.same([r.status, r.body.raw], [200, { version: 2 }], 'the changed code runs');
  files.write([opsApp(1, [a])], { tenant: { reactors: [{ id: 'r1', name: 'r1', code: 'module.exports = async function ( {' }] } });
  const out = await hup(svc);
  t.match(out, 'reload refused');
  t.match(out, /reactor \\"ops\/r1\\" [^\n]*does not compile/);
  r = await call(svc.url, 'POST', '/reactors/r1/react', a, { args: {} });
  t.same([r.status, r.body.raw], [200, { version: 2 }], 'the running code is kept');
  // Removed: refused at once, and its isolates disposed once no older request runs.
  files.write([opsApp(1, [a])]);
  t.match(await hup(svc), 'configuration reloaded');
  t.equal((await call(svc.url, 'POST', '/reactors/r1/react', a, { args: {} })).status, 404, 'a removed reactor is gone');
  await waitFor(() => svc.output().includes('reactors removed from the configuration were disposed'), { what: 'the removed reactor disposed' });
  t.match(svc.output(), /"reactors":\["33333333-3333-4333-8333-333333333333\/reactor\/r1"\][^\n]*were disposed/);
});

t.test('no request is dropped while the model is swapped under load', async (t) => {
  const files = opsFiles(mk('load-'));
  const [a, b] = [newKey(), newKey()];
  files.write([opsApp(1, [a]), opsApp(2, [b])]);
  const svc = await child(t, files);
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 8 });
  t.teardown(() => agent.close());
  let stop = false;
  const seen = { a200: 0, b200: 0, b401: 0, other: [] as string[] };
  const loop = async (key: string, isA: boolean) => {
    while (!stop) {
      try {
        const res = await fetch(`${svc.url}/tokens`, { headers: { 'svc-api-key': key }, dispatcher: agent } as RequestInit);
        await res.arrayBuffer();
        if (isA && res.status === 200) seen.a200++;
        else if (!isA && res.status === 200) seen.b200++;
        else if (!isA && res.status === 401) seen.b401++;
        else seen.other.push(`${isA ? 'a' : 'b'}: ${res.status}`);
      } catch (err) {
        seen.other.push(`socket error: ${(err as Error).message} ${String((err as { cause?: unknown }).cause)}`);
      }
    }
  };
  const loops = [0, 1, 2, 3].map((i) => loop(i % 2 === 0 ? a : b, i % 2 === 0));
  for (let i = 0; i < 6; i++) {
    // b leaves and comes back, a stays: every a answer must be 200, every b answer 200 or 401.
    files.write(i % 2 === 0 ? [opsApp(1, [a])] : [opsApp(1, [a]), opsApp(2, [b])]);
    const before = seen.a200;
    t.match(await hup(svc), 'configuration reloaded');
      await waitFor(() => seen.a200 > before + 5, { what: 'requests served after the reload' });
  }
  stop = true;
  await Promise.all(loops);
  t.same(seen.other, [], 'no socket error and no unexpected status');
  t.ok(seen.a200 > 30, `a served throughout (${seen.a200})`);
  t.ok(seen.b401 > 0 && seen.b200 > 0, `b was refused while removed and served while present (${seen.b200} × 200, ${seen.b401} × 401)`);
});

t.test('a request in flight during a swap finishes on the model it started with', async (t) => {
  const upstream = await startUpstream(t);
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let arrived!: () => void;
  const atUpstream = new Promise<void>((r) => (arrived = r));
  upstream.respond(async (_req, res) => {
    arrived();
    await held;
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('held answer');
  });
  const files = opsFiles(mk('inflight-'));
  const a = newKey();
  const proxyKey = newKey();
  const proxy = { id: 'slow', name: 'slow', key: proxyKey, destination_url: upstream.url, require_auth: false };
  files.write([opsApp(1, [a])], { tenant: { proxies: [proxy] } });
  const svc = await child(t, files);
  const inFlight = fetch(`${svc.url}/proxy/x`, { headers: { 'svc-proxy-key': proxyKey } });
  await atUpstream;
  // The proxy leaves the file while its request waits at the destination.
  files.write([opsApp(1, [a])]);
  t.match(await hup(svc), 'configuration reloaded');
  const after = await fetch(`${svc.url}/proxy/x`, { headers: { 'svc-proxy-key': proxyKey } });
  t.equal(after.status, 401, 'a new request with the removed proxy key is refused');
  t.equal(((await after.json()) as { proxy_error: { code: string } }).proxy_error.code, 'invalid_proxy_key');
  release();
  const res = await inFlight;
  t.equal(res.status, 200, 'the request that started before the swap is answered');
  t.equal(await res.text(), 'held answer');
  t.equal(upstream.received.length, 1, 'only the old request reached the destination');
});
