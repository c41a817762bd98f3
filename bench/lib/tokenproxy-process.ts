/**
 * tokenproxy under benchmark: the built service (`node --no-node-snapshot dist/main.js`, as
 * `npm start` runs it) in a process of its own, so its CPU and memory are read from /proc and
 * nothing of the benchmark (tsx's loader, its `__name` wrapper around every function, the
 * benchmark's own event loop) is measured with it. dist/ is rebuilt first when a file under src/
 * is newer than it.
 *
 * The config is written to a JSON file in a fresh data directory (the embedded store lives there
 * too, unless `store` names a Redis or PostgreSQL store); the log goes to a file there (standard output redirected: at `info` that is the access
 * line of every request, written as in production). Ready when /healthz answers 200 and, for
 * `server.workers` > 1, every worker process exists.
 *
 * TOKENPROXY_BENCH_CPU_PROF=DIR: the service runs with --cpu-prof into DIR (one profile per
 * process and thread, written when it stops). TOKENPROXY_BENCH_DIST=DIR runs another build (e.g.
 * an older commit's dist/, for a before/after on the same machine), never rebuilt.
 * TOKENPROXY_BENCH_NODE_FLAGS="--flag …" adds Node flags to the service's command line (e.g. a
 * V8 heap setting, for a comparison).
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { freePort } from '../../test/helpers/redis.js';
import { childCount, exited } from './procs.js';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const OTHER_DIST = process.env.TOKENPROXY_BENCH_DIST;
const MAIN = OTHER_DIST ? join(resolve(OTHER_DIST), 'main.js') : join(ROOT, 'dist', 'main.js');

function newestMtime(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestMtime(path));
    else if (entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/** Builds dist/ (tsc -p tsconfig.build.json) when it is missing or older than a file under src/. */
export function ensureBuilt(log: (line: string) => void): void {
  if (OTHER_DIST) {
    if (!existsSync(MAIN)) throw new Error(`TOKENPROXY_BENCH_DIST: no main.js in ${OTHER_DIST}`);
    log(`tokenproxy: the build in ${OTHER_DIST} (TOKENPROXY_BENCH_DIST)`);
    return;
  }
  if (existsSync(MAIN) && statSync(MAIN).mtimeMs >= newestMtime(join(ROOT, 'src'))) return;
  log('dist/ is missing or older than src/: building it (tsc -p tsconfig.build.json)');
  const r = spawnSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'], { cwd: ROOT, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`the build failed: ${(r.stdout + r.stderr).trim().split('\n').slice(0, 5).join(' | ')}`);
}

export interface TokenproxyProcess {
  url: string;
  /** The service's process (the cluster's primary with workers). */
  pid: number;
  dataDir: string;
  /** Where its standard output (the log) goes. */
  logFile: string;
  /** The first few warn/error lines of its log (to explain a failed row). */
  problems(): string[];
  /** Stops the service (SIGTERM: a clean stop) and keeps its data directory, e.g. to measure the store files. */
  stop(): Promise<void>;
  /** Stops it and removes its data directory. */
  close(): Promise<void>;
}

/** A Redis token store for the service (give each run its own `key_prefix`). */
export interface RedisStoreChoice {
  kind: 'redis';
  url: string;
  key_prefix: string;
}

/** A PostgreSQL token store (issue 24: give each run its own database); `pool_size` as the config's. */
export interface PostgresStoreChoice {
  kind: 'postgres';
  url: string;
  pool_size?: number;
}

export type StoreChoice = RedisStoreChoice | PostgresStoreChoice;

/**
 * Starts the built service with `raw` (a config object: server.port, store and log are set here)
 * in `dataRoot`/tp-bench-*: the store is a fresh embedded one in that directory, or `opts.store`.
 * Throws when it does not come up within 120 s.
 */
export async function startTokenproxyProcess(
  raw: Record<string, unknown>,
  opts: { dataRoot: string; logLevel: string; workers?: number; name: string; store?: StoreChoice },
): Promise<TokenproxyProcess> {
  const dataDir = mkdtempSync(join(opts.dataRoot, `tp-bench-${opts.name}-`));
  const port = await freePort();
  const workers = opts.workers ?? 1;
  const config = {
    ...raw,
    server: { ...(raw.server as object), host: '127.0.0.1', port, workers },
    log: { level: opts.logLevel },
    store: opts.store ?? { kind: 'embedded', path: join(dataDir, 'tokens.db') },
  };
  const configPath = join(dataDir, 'config.json');
  writeFileSync(configPath, JSON.stringify(config));
  const logFile = join(dataDir, 'service.log');
  const out = openSync(logFile, 'w');
  const prof = process.env.TOKENPROXY_BENCH_CPU_PROF;
  const extra = (process.env.TOKENPROXY_BENCH_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean);
  const flags = ['--no-node-snapshot', ...extra, ...(prof ? ['--cpu-prof', `--cpu-prof-dir=${join(resolve(prof), opts.name)}`] : [])];
  const child = spawn(process.execPath, [...flags, MAIN, '--config', configPath], {
    cwd: ROOT,
    env: { ...process.env, TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64'), NODE_OPTIONS: '' },
    stdio: ['ignore', out, 'inherit'],
  });
  closeSync(out);
  const problems = (): string[] => {
    try {
      return readFileSync(logFile, 'utf8').split('\n').filter((l) => /"level":(?:40|50|60)[,}]/.test(l)).slice(0, 5).map((l) => l.slice(0, 400));
    } catch {
      return [];
    }
  };
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      await exited(child);
      clearTimeout(timer);
    }
  };
  const close = async (): Promise<void> => {
    await stop();
    rmSync(dataDir, { recursive: true, force: true });
  };
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) {
      const why = problems().join(' / ');
      await close();
      throw new Error(`tokenproxy (${opts.name}) exited with ${child.exitCode} at start${why ? `: ${why}` : ''}`);
    }
    const ok = await request(`${url}/healthz`, { reset: true }).then((r) => r.body.dump().then(() => r.statusCode === 200), () => false);
    if (ok && (workers === 1 || childCount(child.pid!) >= workers)) {
      // A cluster answers once one worker listens: give the others a moment to listen too.
      if (workers > 1) await new Promise((r) => setTimeout(r, 3_000));
      return { url, pid: child.pid!, dataDir, logFile, problems, stop, close };
    }
    if (Date.now() > deadline) {
      await close();
      throw new Error(`tokenproxy (${opts.name}) did not answer /healthz within 120 s`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

export interface ChildServer {
  url: string;
  pid: number;
  close(): Promise<void>;
}

/** Starts bench/lib/reference-server.mjs (plain Node, no loader) and waits for its port. */
export async function startReferenceServer(args: string[]): Promise<ChildServer> {
  const entry = fileURLToPath(new URL('./reference-server.mjs', import.meta.url));
  const child = spawn(process.execPath, [entry, ...args], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, NODE_OPTIONS: '' } });
  const port = await new Promise<number>((res, rej) => {
    let buf = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      buf += d;
      const m = /\{"port":(\d+)\}/.exec(buf);
      if (m) res(Number(m[1]));
    });
    child.once('exit', (code) => rej(new Error(`reference server ${args[0]} exited (${code}) before it listened`)));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    close: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited(child);
      clearTimeout(timer);
    },
  };
}
