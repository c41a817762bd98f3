/**
 * Issue 23 finding 8: after a reload, the old model's connection pools close once its last request
 * has ended. The outbound proxy's pool (one per destination address) never closed: a local
 * `retire` in src/server.ts shadowed the one that also closes it. A real upstream that keeps idle
 * connections for two minutes (and says so in Keep-Alive, which undici follows) sees the
 * service's connection closed soon after the reload, not at the keep-alive timeout.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { createLogger } from '../../src/log.js';
import { loadModel } from '../../src/model/compile.js';
import { startService } from '../../src/server.js';
import { baseConfig, call, KEYS } from '../helpers/service.js';
import { PROXY_KEY } from '../helpers/proxy.js';
import { writeConfig } from '../helpers/process.js';

t.setTimeout(60_000);
const dir = mkdtempSync(join(tmpdir(), 'tp-reload-pools-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/** An upstream keeping idle keep-alive connections for 120 s; `closed` resolves when the client closes one. */
async function longKeepAliveUpstream(): Promise<{ url: string; server: Server; sockets: Set<Socket>; closed: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  let onClose: (() => void) | undefined;
  const server = createServer({ keepAliveTimeout: 120_000 }, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"ok":true}');
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => {
      sockets.delete(s);
      onClose?.();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => new Promise<void>((r) => {
    server.close(() => r());
    server.closeAllConnections();
  }));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, server, sockets, closed: () => new Promise<void>((r) => (onClose = r)) };
}

t.test('a reload closes the old model\'s outbound and proxy pools', async (t) => {
  const out = await longKeepAliveUpstream();
  const inb = await longKeepAliveUpstream();
  const cfg = baseConfig() as Record<string, any>;
  const user = cfg.tenants[0].applications[0];
  user.permissions = [...user.permissions, 'token:use'];
  cfg.tenants[0].outbound = { allowed_destinations: [out.url] };
  cfg.tenants[0].proxies = [{ id: 'p', name: 'p', key: PROXY_KEY, destination_url: inb.url, require_auth: false }];
  cfg.store = { kind: 'embedded', path: join(dir, 'tokens.db') };
  const path = writeConfig(dir, cfg);
  const { config } = loadModel({ path, env: { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') } });
  const svc = await startService(config, { log: createLogger('error') });
  t.teardown(() => svc.close());

  const viaOutbound = await call(svc.url, 'GET', '/proxy/x', { headers: { 'svc-proxy-url': out.url } });
  t.equal(viaOutbound.status, 200, viaOutbound.text);
  const viaProxy = await call(svc.url, 'GET', '/proxy/x', { key: null, headers: { 'svc-proxy-key': PROXY_KEY } });
  t.equal(viaProxy.status, 200, viaProxy.text);
  t.equal(out.sockets.size, 1, 'the outbound pool keeps its connection open');
  t.equal(inb.sockets.size, 1, 'the proxy pool keeps its connection open');

  const outClosed = out.closed();
  const inbClosed = inb.closed();
  const outcome = await svc.reload();
  t.equal(outcome.applied, true);
  // Bounded by the file's 60 s timeout, well below the 120 s the connections may idle.
  await Promise.all([outClosed, inbClosed]);
  t.equal(out.sockets.size, 0, 'the outbound pool closed its connection');
  t.equal(inb.sockets.size, 0, 'the proxy pool closed its connection');
  // The new model opens its own.
  t.equal((await call(svc.url, 'GET', '/proxy/x', { headers: { 'svc-proxy-url': out.url }, key: KEYS.private })).status, 200);
});
