/**
 * A throwaway redis-server for a benchmark: a free loopback port, a temporary directory, and by
 * default the durable setting the README requires for the token store (AOF, appendfsync always),
 * so Redis figures are comparable with the embedded store's fsync-per-commit; `durable: false`
 * for counters that need no persistence (rate limits). Returns null when redis-server is not
 * installed (the caller prints that the Redis rows were skipped).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../test/helpers/redis.js';

export interface BenchRedis {
  url: string;
  port: number;
  /** The server's settings, for the printout. */
  settings: string;
  stop(): Promise<void>;
}

export async function startBenchRedis(opts: { durable?: boolean } = {}): Promise<BenchRedis | null> {
  if (spawnSync('redis-server', ['--version']).status !== 0) return null;
  const durable = opts.durable ?? true;
  const dir = mkdtempSync(join(tmpdir(), 'tp-bench-redis-'));
  const port = await freePort();
  const persistence = durable ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no'];
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', ...persistence, '--protected-mode', 'no'];
  const child: ChildProcess = spawn('redis-server', args, { stdio: 'ignore' });
  const exited = new Promise<void>((res) => child.once('exit', () => res()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    const r = spawnSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8' });
    if (r.stdout?.trim() === 'PONG') break;
    if (Date.now() > deadline || child.exitCode !== null) {
      await stop();
      throw new Error(`redis-server on port ${port} did not start`);
    }
    await new Promise((res) => setTimeout(res, 50));
  }
  return { url: `redis://127.0.0.1:${port}`, port, settings: durable ? 'appendonly yes, appendfsync always' : 'no persistence', stop };
}
