/**
 * A real redis-server for a test file: started on a free port in a temporary directory
 * (AOF with appendfsync always, as docs/storage.md requires for durability), stopped on teardown.
 *
 * REDIS_URL set: that server is used instead (each test still gets its own key prefix).
 * TOKENPROXY_REQUIRE_REDIS=1 (set by .ci/run): a missing redis-server fails instead of skipping.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';

export interface RedisHandle {
  url: string;
  port: number;
  /** A key prefix unique to this call, so parallel test files never share keys. */
  prefix: string;
  /** kill -9 the server (only for servers this helper started). */
  kill(): Promise<void>;
  /** Start it again on the same port and directory (after kill). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export function redisAvailable(): boolean {
  if (process.env.REDIS_URL) return true;
  return redisServerInstalled();
}

/** A redis-server this helper can start (REDIS_URL aside). */
function redisServerInstalled(): boolean {
  return spawnSync('redis-server', ['--version']).status === 0;
}

/** The reason to skip Redis tests, or false to run them. Throws when Redis is required but missing. */
export function redisSkip(): string | false {
  if (redisAvailable()) return false;
  if (process.env.TOKENPROXY_REQUIRE_REDIS === '1') {
    throw new Error('redis-server is required (TOKENPROXY_REQUIRE_REDIS=1) but not installed');
  }
  return 'redis-server not installed';
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

async function waitForPing(port: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const r = spawnSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8' });
    if (r.stdout?.trim() === 'PONG') return;
    await new Promise((res) => setTimeout(res, 50));
  }
  throw new Error(`redis-server on port ${port} did not answer within ${timeoutMs} ms`);
}

/**
 * `own`: start a server even when REDIS_URL is set (one this helper can kill and restart).
 * `durable: false`: no AOF (for tests about anything but durability that write a lot, such as
 * the fuzz suite: appendfsync always costs an fsync per write). `args`: the server's persistence
 * (and any other) arguments instead of those `durable` picks, such as `['--appendonly', 'no']` or
 * `['--rename-command', 'CONFIG', '']` (the tests of the store's durability check).
 */
export async function startRedis(opts: { own?: boolean; durable?: boolean; args?: string[] } = {}): Promise<RedisHandle> {
  const prefix = `t${randomBytes(6).toString('hex')}:`;
  if (process.env.REDIS_URL && !opts.own) {
    const url = process.env.REDIS_URL;
    const port = Number(new URL(url).port || 6379);
    const unsupported = async () => {
      throw new Error('kill/restart need a redis-server started by the helper (unset REDIS_URL)');
    };
    return { url, port, prefix, kill: unsupported, restart: unsupported, stop: async () => {} };
  }
  const dir = mkdtempSync(join(tmpdir(), 'tp-redis-'));
  const port = await freePort();
  let child: ChildProcess | null = null;
  const launch = async () => {
    child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--protected-mode', 'no',
        ...(opts.args ?? (opts.durable === false ? ['--appendonly', 'no'] : ['--appendonly', 'yes', '--appendfsync', 'always']))],
      { stdio: 'ignore' },
    );
    await waitForPing(port);
  };
  const kill = async () => {
    const c = child;
    child = null;
    if (!c || c.exitCode !== null) return;
    await new Promise<void>((res) => {
      c.once('exit', () => res());
      c.kill('SIGKILL');
    });
  };
  await launch();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    prefix,
    kill,
    restart: launch,
    stop: async () => {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** What redisForFile needs of a tap test. */
interface PlannableTest {
  plan(n: number, comment?: string): void;
  teardown(fn: () => unknown): void;
}

/**
 * The redis-server of one test file: started here and stopped on the file's teardown, or null
 * when the file must skip (its plan is set to 0 with the reason; with TOKENPROXY_REQUIRE_REDIS=1 a
 * missing redis-server throws instead). `killable`: the file kills and restarts the server, which
 * needs one this helper started: with REDIS_URL set it starts its own all the same, and when it
 * cannot (no redis-server installed) it skips, or fails under TOKENPROXY_REQUIRE_REDIS=1 (a CI run
 * with REDIS_URL used to pass those files by running none of their tests).
 */
export async function redisForFile(t: PlannableTest, opts: { killable?: boolean; durable?: boolean } = {}): Promise<RedisHandle | null> {
  const skip = redisSkip();
  if (skip) {
    t.plan(0, skip);
    return null;
  }
  const own = opts.killable === true && Boolean(process.env.REDIS_URL);
  if (own && !redisServerInstalled()) {
    const reason = 'kill/restart need a redis-server started by the helper; REDIS_URL is set but redis-server is not installed';
    if (process.env.TOKENPROXY_REQUIRE_REDIS === '1') throw new Error(`${reason} (TOKENPROXY_REQUIRE_REDIS=1)`);
    t.plan(0, reason);
    return null;
  }
  const redis = await startRedis({ own, durable: opts.durable });
  t.teardown(() => redis.stop());
  return redis;
}

/** The same server under a fresh key prefix (each service of a suite gets its own keys). */
export function withFreshPrefix(redis: RedisHandle): RedisHandle {
  return { ...redis, prefix: `${redis.prefix}${randomBytes(3).toString('hex')}:` };
}
