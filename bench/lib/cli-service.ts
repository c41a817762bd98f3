/**
 * tokenproxy as its own process (the CLI, src/main.ts, under this process's loader), for rows that
 * compare `server.workers` settings: a cluster cannot run inside the benchmark's process. The bench
 * tenant and key of lib/service.ts, rate limits off, a fresh embedded store, a free port picked
 * here (the service is ready when /healthz answers: at log level warn it prints no line for it).
 * No CPU figure: the service's CPU is spread over several processes. Its stdout is read here: the
 * access lines (log level info) are part of what is measured; warn and error lines are kept.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { childCount, exited } from './procs.js';
import { freePort } from '../../test/helpers/redis.js';
import { benchConfig } from './service.js';

export interface CliService {
  url: string;
  /** The first few warn/error log lines of the service (to explain a non-200 row). */
  problems(): string[];
  stop(): Promise<void>;
}

const PROBLEM = /"level":(?:40|50|60)[,}]/;

export async function startCliService(opts: { workers: number; logLevel: string }): Promise<CliService> {
  const dir = mkdtempSync(join(tmpdir(), 'tp-bench-cli-'));
  const port = await freePort();
  const config = {
    ...benchConfig(),
    server: { host: '127.0.0.1', port, workers: opts.workers },
    log: { level: opts.logLevel },
    store: { kind: 'embedded', path: join(dir, 'tokens.db') },
  };
  const path = join(dir, 'config.json');
  writeFileSync(path, JSON.stringify(config));
  const child = spawn(process.execPath, [...process.execArgv, 'src/main.ts', '--config', path], {
    env: { ...process.env, TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64'), PORT: String(port) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const problems: string[] = [];
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    if (problems.length >= 5 || !PROBLEM.test(chunk)) return;
    for (const line of chunk.split('\n')) if (PROBLEM.test(line) && problems.length < 5) problems.push(line.slice(0, 400));
  });
  const url = `http://127.0.0.1:${port}`;
  const stop = async (): Promise<void> => {
    child.kill('SIGTERM');
    await exited(child);
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`tokenproxy (workers ${opts.workers}) exited with ${child.exitCode} at start`);
    const ok = await request(`${url}/healthz`, { reset: true }).then((r) => r.body.dump().then(() => r.statusCode === 200), () => false);
    // A cluster answers once one worker listens: wait for every worker process, and a moment for
    // the last one to listen (nothing at log level warn says when it does).
    if (ok && (opts.workers === 1 || childCount(child.pid!) >= opts.workers)) {
      if (opts.workers > 1) await new Promise((r) => setTimeout(r, 3_000));
      return { url, problems: () => problems, stop };
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`tokenproxy (workers ${opts.workers}) did not answer /healthz within 120 s`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}
