/**
 * The upstream of the proxy benchmark: a bare node:http server on 127.0.0.1 port 0, in a child
 * process of its own (so it shares no event loop with the proxies under test in the benchmark's
 * process, as nginx shares none either). It reads each request body, answers 200 with one small
 * constant JSON body, and keeps counts the benchmark reads over IPC: requests, body bytes, how
 * many bodies contained a watched string (plaintext that must never arrive), and the first
 * request after each reset (method, URL, headers, body) as a sample.
 *
 * This same file is the child's entry: started with TP_BENCH_UPSTREAM_CHILD=1 it serves.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';

export interface UpstreamSample {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

export interface UpstreamStats {
  /** Requests answered since the last reset. */
  requests: number;
  /** Request body bytes received since the last reset. */
  bodyBytes: number;
  /** Requests whose body contained the watched string since the last reset. */
  watchHits: number;
  /** The first request since the last reset. */
  sample: UpstreamSample | null;
  /** The first request since the last reset whose body contained the watched string. */
  watchSample: UpstreamSample | null;
}

export interface Upstream {
  /** http://127.0.0.1:port */
  url: string;
  pid: number;
  /** Its answer to every request. */
  responseBody: string;
  /** Counts since the last reset; `reset` starts new counts after reading these. */
  stats(reset?: boolean): Promise<UpstreamStats>;
  close(): Promise<void>;
}

interface StartMsg {
  op: 'start';
  responseBody: string;
  watch: string;
}
interface StatsMsg {
  op: 'stats';
  id: number;
  reset: boolean;
}

/** Starts the upstream child; `watch` is the string whose arrival in a body is counted. */
export async function startUpstream(opts: { responseBody: string; watch: string }): Promise<Upstream> {
  const entry = fileURLToPath(import.meta.url);
  // The child needs the tsx loader for this .ts file, and none of the parent's other flags
  // (e.g. --cpu-prof): start it with exactly that.
  const child: ChildProcess = fork(entry, [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, TP_BENCH_UPSTREAM_CHILD: '1' },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    serialization: 'advanced',
  });
  const pending = new Map<number, (s: UpstreamStats) => void>();
  let nextId = 1;
  let gone: Error | null = null;
  const exited = new Promise<void>((res) => child.once('exit', () => res()));
  child.on('exit', (code, signal) => {
    gone = new Error(`upstream process exited (${code ?? signal})`);
    pending.clear();
  });
  const port = await new Promise<number>((resolve, reject) => {
    const onMsg = (m: { ready?: number; error?: string }) => {
      if (m.ready) {
        child.off('message', onMsg);
        resolve(m.ready);
      } else if (m.error) reject(new Error(`upstream failed to start: ${m.error}`));
    };
    child.on('message', onMsg);
    child.once('exit', (code) => reject(new Error(`upstream exited (${code}) before it listened`)));
    child.send({ op: 'start', responseBody: opts.responseBody, watch: opts.watch } satisfies StartMsg);
  });
  child.on('message', (m: { id?: number; stats?: UpstreamStats }) => {
    if (m.id === undefined || !m.stats) return;
    pending.get(m.id)?.(m.stats);
    pending.delete(m.id);
  });
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid ?? -1,
    responseBody: opts.responseBody,
    stats: (reset = false) => {
      if (gone) return Promise.reject(gone);
      const id = nextId++;
      return new Promise<UpstreamStats>((resolve) => {
        pending.set(id, resolve);
        child.send({ op: 'stats', id, reset } satisfies StatsMsg);
      });
    },
    close: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(timer);
    },
  };
}

function serveInChild(): void {
  let stats: UpstreamStats = fresh();
  function fresh(): UpstreamStats {
    return { requests: 0, bodyBytes: 0, watchHits: 0, sample: null, watchSample: null };
  }
  process.on('message', (msg: StartMsg | StatsMsg) => {
    if (msg.op === 'stats') {
      const s = stats;
      if (msg.reset) stats = fresh();
      process.send!({ id: msg.id, stats: s });
      return;
    }
    const body = Buffer.from(msg.responseBody);
    const watch = Buffer.from(msg.watch);
    const headers = { 'content-type': 'application/json', 'content-length': String(body.length) };
    const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const buf = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
        const s = stats;
        s.requests++;
        s.bodyBytes += buf.length;
        const hit = watch.length > 0 && buf.includes(watch);
        if (hit) s.watchHits++;
        if (!s.sample || (hit && !s.watchSample)) {
          const sample = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: buf.subarray(0, 4096).toString('utf8') };
          if (!s.sample) s.sample = sample;
          if (hit && !s.watchSample) s.watchSample = sample;
        }
        res.writeHead(200, headers);
        res.end(body);
      });
    });
    server.once('error', (err) => process.send!({ error: err.message }));
    server.listen(0, '127.0.0.1', () => process.send!({ ready: (server.address() as AddressInfo).port }));
    process.once('SIGTERM', () => {
      server.closeAllConnections();
      server.close(() => process.exit(0));
    });
  });
  // The benchmark went away: do not outlive it.
  process.on('disconnect', () => process.exit(0));
}

if (process.env.TP_BENCH_UPSTREAM_CHILD === '1' && process.send) serveInChild();
