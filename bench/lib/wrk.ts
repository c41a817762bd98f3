/**
 * wrk as the benchmarks' load generator, behind the same LoadRunner interface as lib/load.ts.
 *
 * Why: on this 2-core machine a load generator written in Node saturates before the servers it
 * measures do, so every row was capped by the generator and the ratios looked better than they
 * are (measured: 19.4k req/s for the bare forwarder under wrk). wrk is C, one thread here, and
 * costs a fraction of the CPU per request. The Node runner stays for what wrk cannot do (a
 * scenario that must react to answers, e.g. reading a created token back).
 *
 * Each run writes a small Lua script: the request (or the cycle of variants) pre-formatted once,
 * and a `done` callback that prints the summary as one JSON line. The warm-up is a separate wrk
 * run whose figures are discarded. wrk's windows are whole seconds (its -d takes s/m/h), so a
 * window is rounded up to at least 1 s. Loopback targets only; every run is bounded by -d and by
 * a kill a little after it.
 *
 * What wrk counts as an error: connect/read/write failures, timeouts, and responses with a status
 * above 399 ("non-2xx" here; our benchmarks expect 200/201, never 3xx).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startLoadRunner, type LoadOptions, type LoadResult, type LoadRunner } from './load.js';

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);

export type WrkLookup = { bin: string; version: string; installed: boolean } | { bin: null; reason: string };

function which(): string | null {
  const r = spawnSync('sh', ['-c', 'command -v wrk'], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() ? r.stdout.trim() : null;
}

function versionOf(bin: string): string {
  // `wrk -v` prints its version (and usage) and exits 1.
  const r = spawnSync(bin, ['-v'], { encoding: 'utf8' });
  return /wrk\s+\S+/.exec(`${r.stdout}${r.stderr}`)?.[0] ?? 'wrk';
}

/** Finds wrk; installs Debian's package with apt-get when missing, allowed and possible (root). */
export function findWrk(opts: { install: boolean; log: (line: string) => void }): WrkLookup {
  const found = which();
  if (found) return { bin: found, version: versionOf(found), installed: false };
  if (!opts.install) return { bin: null, reason: 'wrk is not on PATH (install disabled by --no-install)' };
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return { bin: null, reason: 'wrk is not on PATH and this process is not root, so it cannot apt-get install it' };
  opts.log('wrk not found: installing it with apt-get (Debian package wrk)');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  let r = spawnSync('apt-get', ['install', '-y', '-qq', 'wrk'], { encoding: 'utf8', env });
  if (r.status !== 0) {
    spawnSync('apt-get', ['update', '-qq'], { encoding: 'utf8', env });
    r = spawnSync('apt-get', ['install', '-y', '-qq', 'wrk'], { encoding: 'utf8', env });
  }
  const bin = which();
  if (!bin) return { bin: null, reason: `apt-get install wrk failed: ${(r.stderr || r.stdout || '').trim().split('\n').slice(-3).join(' | ')}` };
  return { bin, version: versionOf(bin), installed: true };
}

/** A Lua string literal: every byte outside printable ASCII, and `"` and `\\`, as a 3-digit decimal escape (`\034`, so a digit after it is not taken into the escape). */
function luaString(s: string): string {
  let out = '"';
  for (const byte of Buffer.from(s, 'utf8')) out += byte >= 0x20 && byte < 0x7f && byte !== 0x22 && byte !== 0x5c ? String.fromCharCode(byte) : `\\${String(byte).padStart(3, '0')}`;
  return `${out}"`;
}

function luaTable(h: Record<string, string>): string {
  return `{ ${Object.entries(h).map(([k, v]) => `[${luaString(k)}] = ${luaString(v)}`).join(', ')} }`;
}

/** The Lua script for one run: the requests formatted once, the summary printed as JSON. */
export function wrkScript(opts: LoadOptions): string {
  const url = new URL(opts.url);
  const base = { path: url.pathname + url.search, method: opts.method ?? 'GET', headers: opts.headers ?? {}, body: opts.body };
  const variants = (opts.variants?.length ? opts.variants : [{}]).map((v) => ({
    path: v.path ?? base.path,
    method: v.method ?? base.method,
    headers: { ...base.headers, ...(v.headers ?? {}) },
    body: v.body ?? base.body,
  }));
  const formatted = variants.map(
    (v) => `wrk.format(${luaString(v.method)}, ${luaString(v.path)}, ${luaTable(v.headers)}, ${v.body === undefined ? 'nil' : luaString(v.body)})`,
  );
  return `
local reqs = {}
init = function(args)
  ${formatted.map((f, i) => `reqs[${i + 1}] = ${f}`).join('\n  ')}
end
local n = 0
request = function()
  n = n + 1
  return reqs[(n - 1) % #reqs + 1]
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p99":%d,"max":%d}\\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
`;
}

export interface WrkSummary {
  requests: number;
  duration_us: number;
  bytes: number;
  connect: number;
  read: number;
  write: number;
  status: number;
  timeout: number;
  p50: number;
  p99: number;
  max: number;
}

export function runWrk(bin: string, scriptPath: string, url: string, connections: number, seconds: number, timeoutMs: number): Promise<WrkSummary> {
  return new Promise((resolve, reject) => {
    const args = ['-t1', `-c${connections}`, `-d${seconds}s`, `--timeout`, `${Math.max(1, Math.ceil(timeoutMs / 1000))}s`, '-s', scriptPath, url];
    const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const kill = setTimeout(() => child.kill('SIGKILL'), (seconds + Math.ceil(timeoutMs / 1000) + 5) * 1000);
    child.on('error', (err) => {
      clearTimeout(kill);
      reject(err);
    });
    child.on('exit', (code) => {
      clearTimeout(kill);
      const line = /WRK_JSON (\{.*\})/.exec(out)?.[1];
      if (!line) return reject(new Error(`wrk exited ${code} without a summary: ${out.trim().split('\n').slice(-3).join(' | ')}`));
      resolve(JSON.parse(line) as WrkSummary);
    });
  });
}

export interface WrkRunner {
  readonly kind: 'wrk';
  readonly version: string;
  run(opts: LoadOptions): Promise<LoadResult>;
  close(): Promise<void>;
}

/** A LoadRunner driving wrk (one thread, `connections` keep-alive connections). */
export function startWrkRunner(bin: string, version: string): WrkRunner {
  const dir = mkdtempSync(join(tmpdir(), 'tp-wrk-'));
  let seq = 0;
  return {
    kind: 'wrk',
    version,
    async run(opts) {
      const url = new URL(opts.url);
      if (!LOOPBACK.has(url.hostname)) throw new Error(`wrk runs only against loopback addresses, not ${url.hostname}`);
      const connections = opts.connections ?? 32;
      const timeoutMs = opts.timeoutMs ?? 10_000;
      const path = join(dir, `run-${++seq}.lua`);
      writeFileSync(path, wrkScript(opts));
      const origin = url.origin;
      let warmupRequests = 0;
      if ((opts.warmupMs ?? 500) > 0) {
        warmupRequests = (await runWrk(bin, path, origin, connections, Math.max(1, Math.ceil((opts.warmupMs ?? 500) / 1000)), timeoutMs)).requests;
      }
      const s = await runWrk(bin, path, origin, connections, Math.max(1, Math.ceil((opts.durationMs ?? 3000) / 1000)), timeoutMs);
      const transport = s.connect + s.read + s.write + s.timeout;
      const ms = (us: number) => Math.round(us / 10) / 100;
      const elapsedMs = Math.max(1, s.duration_us / 1000);
      return {
        requests: s.requests,
        rps: (s.requests / elapsedMs) * 1000,
        p50: ms(s.p50),
        p99: ms(s.p99),
        max: ms(s.max),
        errors: transport + s.status,
        statuses: { '2xx': Math.max(0, s.requests - s.status), 'non-2xx': s.status, ...(transport ? { error: transport } : {}) },
        errorSamples: [
          ...(s.status ? [`${s.status} responses with a status above 399`] : []),
          ...(transport ? [`transport errors: connect ${s.connect}, read ${s.read}, write ${s.write}, timeout ${s.timeout}`] : []),
        ],
        elapsedMs: Math.round(elapsedMs),
        bytes: s.bytes,
        warmupRequests,
        connections,
        mode: 'wrk',
      };
    },
    async close() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * The benchmarks' load generator: wrk when it is there (installed with apt-get when missing and
 * allowed), else the Node runner, with a line saying so (its figures are capped by the generator).
 */
export async function startBenchRunner(opts: { install: boolean; log: (line: string) => void }): Promise<LoadRunner & { describe: string }> {
  const wrk = findWrk(opts);
  if (wrk.bin !== null) return Object.assign(startWrkRunner(wrk.bin, wrk.version), { describe: `${wrk.version}, 1 thread` });
  opts.log(`WARNING: ${wrk.reason}; falling back to the Node load generator, which saturates first on 2 cores: ratios are capped by it`);
  return Object.assign(await startLoadRunner('process'), { describe: 'the Node load generator (lib/load.ts) in a child process' });
}
