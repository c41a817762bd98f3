/**
 * A throwaway redis-server for a benchmark: a free loopback port, a temporary directory, and the
 * durable setting the README requires for the token store (AOF, appendfsync always), so Redis
 * figures are comparable with the embedded store's fsync-per-commit. Returns null when
 * redis-server is not installed (the caller prints that the Redis rows were skipped).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface BenchRedis {
  url: string;
  port: number;
  /** The server's settings, for the printout. */
  settings: string;
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
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

export async function startBenchRedis(): Promise<BenchRedis | null> {
  if (spawnSync('redis-server', ['--version']).status !== 0) return null;
  const dir = mkdtempSync(join(tmpdir(), 'tp-bench-redis-'));
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--protected-mode', 'no'];
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
  return { url: `redis://127.0.0.1:${port}`, port, settings: 'appendonly yes, appendfsync always', stop };
}
