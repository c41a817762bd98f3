/**
 * Issue 30, item 9: Redis over TLS. README "Storage and durability" (`tls: { ca_file }`, "or true
 * (system CAs); rediss:// URLs too") and "Stores: memory or Redis" (the rate limiter takes "the same
 * options as the token store (`username`, `password` …, `tls`)"). A redis-server with TLS only
 * (`--port 0`: no plaintext port at all) on a certificate of a private CA made at test time
 * (test/helpers/tls.ts); the token store and the rate limiter both reach it over `rediss://` with
 * the CA as `tls.ca_file`. Without the CA the certificate is not trusted: the store fails start-up
 * and the limiter's checks fail (503 rate_limit_unavailable), so TLS is verified, not only used.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { baseConfig, KEYS, startTestService } from '../helpers/service.js';
import { freePort, type RedisHandle } from '../helpers/redis.js';
import { randomCard } from '../helpers/secrets.js';
import { makeTestCa, opensslAvailable } from '../helpers/tls.js';
import { waitFor } from '../helpers/wait.js';

// Its own redis-server even with REDIS_URL set (that server has no TLS port): it must be installed.
const installed = spawnSync('redis-server', ['--version']).status === 0;
const skip = (installed ? false : 'redis-server not installed') || (opensslAvailable() ? false : 'openssl not installed');
if (skip && process.env.TOKENPROXY_REQUIRE_REDIS === '1') throw new Error(`${skip} (TOKENPROXY_REQUIRE_REDIS=1)`);
if (skip) t.plan(0, skip);
if (process.env.REDIS_URL) t.comment('REDIS_URL is ignored here: this file starts its own TLS redis-server');

t.setTimeout(300_000);

if (!skip) {
  const ca = makeTestCa(t);
  const dir = mkdtempSync(join(tmpdir(), 'tp-redis-tls-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const port = await freePort();
  const server: ChildProcess = spawn(
    'redis-server',
    [
      '--port', '0', '--tls-port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--protected-mode', 'no',
      '--tls-cert-file', join(ca.dir, 'server.pem'), '--tls-key-file', join(ca.dir, 'server.key'), '--tls-ca-cert-file', ca.caFile,
      // Clients are not asked for a certificate of their own: the README configures none.
      '--tls-auth-clients', 'no',
    ],
    { stdio: 'ignore' },
  );
  t.teardown(() => {
    if (server.exitCode === null) server.kill('SIGKILL');
  });
  const cli = (...args: string[]) =>
    spawnSync('redis-cli', ['--tls', '--cacert', ca.caFile, '-h', '127.0.0.1', '-p', String(port), ...args], { encoding: 'utf8' });
  await waitFor(() => cli('ping').stdout?.trim() === 'PONG', { what: 'the TLS redis-server', timeoutMs: 20_000, intervalMs: 50 });

  const prefix = `t${randomBytes(6).toString('hex')}:`;
  const url = `rediss://localhost:${port}`;
  const handle = (p: string): RedisHandle => {
    const none = async () => undefined;
    return { url, port, prefix: p, kill: none, restart: none, stop: none };
  };
  const config = (limiterTls: unknown, storeTls: unknown): Record<string, any> => {
    const cfg = baseConfig() as Record<string, any>;
    cfg.rate_limits = { enabled: true, store: 'redis', url, key_prefix: `${prefix}rl:`, tls: limiterTls };
    cfg.tenants[0].custom_rate_limits = { creating_tokens: { points: 3, duration_seconds: 600 } };
    cfg.store = { tls: storeTls };
    return cfg;
  };

  t.test('the token store and the rate limiter over rediss:// with tls.ca_file', async (t) => {
    const s = await startTestService(t, { config: config({ ca_file: ca.caFile }, { ca_file: ca.caFile }), redis: handle(`${prefix}a:`) });
    const card = randomCard();
    const created = await s.call('POST', '/tokens', { body: { type: 'card', data: { number: card, expiration_month: 4, expiration_year: 2032 } } });
    t.equal(created.status, 201, created.text.slice(0, 300));
    t.equal(created.headers.get('ratelimit-limit'), '3', 'counted by the Redis limiter');
    t.equal(created.headers.get('ratelimit-remaining'), '2');
    const read = await s.call('GET', `/tokens/${created.body.id}`);
    t.equal(read.status, 200, read.text.slice(0, 300));
    t.equal(read.body.data.number, card, 'read back from Redis');
    await s.call('POST', '/tokens', { body: { type: 'token', data: 'two' } });
    await s.call('POST', '/tokens', { body: { type: 'token', data: 'three' } });
    const over = await s.call('POST', '/tokens', { body: { type: 'token', data: 'four' } });
    t.equal(over.status, 429, 'the fourth creation is over the limit');
    t.equal(over.body?.code, 'rate_limited');
    const keys = cli('--scan', '--pattern', `${prefix}*`).stdout.split('\n').filter(Boolean);
    t.ok(keys.some((k) => k.startsWith(`${prefix}a:`)), `token store keys in the TLS server (${keys.length} keys)`);
    t.ok(keys.some((k) => k.startsWith(`${prefix}rl:`)), 'rate-limit counters in the TLS server');
    t.notOk(s.logs().includes(card), 'no card in the log');
  });

  t.test('without the CA the server certificate is refused', async (t) => {
    // The store: start-up fails (the connection is refused at the TLS handshake).
    await t.rejects(
      startTestService(t, { config: config({ ca_file: ca.caFile }, true), redis: handle(`${prefix}b:`) }),
      { name: 'StoreUnavailableError' },
      'a store trusting only the system CAs does not start',
    );
    // The limiter: every check fails, answered as README "Stores" says for a failing limiter store.
    const s = await startTestService(t, { config: config(true, { ca_file: ca.caFile }), redis: handle(`${prefix}c:`) });
    const r = await s.call('GET', '/tokens', { key: KEYS.private });
    t.equal(r.status, 503, r.text.slice(0, 300));
    t.equal(r.body?.code, 'rate_limit_unavailable');
  });
}
