/**
 * A small closed-loop HTTP load generator for the benchmarks: keep-alive undici connections, a fixed
 * number of requests in flight (one per connection, no pipelining), a warm-up whose results are
 * discarded, then a fixed measuring window. Bounded and self-stopping: no new request starts after
 * the window, every request has a timeout, and the pool is destroyed after a grace period.
 *
 * `runLoad` drives the load from the calling thread. `startLoadRunner` runs the same loop in a
 * child process (or a worker thread), so the load generator and the server under test do not
 * share one event loop (they still share the machine's cores: say so when printing results).
 * Benchmarks should use a runner unless they measure something in-process on purpose.
 *
 * Loopback only: a URL whose host is not a loopback address is refused.
 */
import { fork } from 'node:child_process';
import { createHistogram } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { Pool } from 'undici';

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'HEAD';

/** One request shape; `LoadOptions.variants` cycles through several (e.g. many API keys). */
export interface RequestVariant {
  /** Path and query, e.g. `/tokenize` (default: the URL's path). */
  path?: string;
  method?: HttpMethod;
  headers?: Record<string, string>;
  body?: string;
}

export interface LoadOptions {
  /** Origin and optional default path, e.g. `http://127.0.0.1:8080/tokenize`. */
  url: string;
  method?: HttpMethod;
  headers?: Record<string, string>;
  body?: string;
  /** When given, request i uses variants[i % length] merged over the defaults above. */
  variants?: RequestVariant[];
  /** Keep-alive connections, each with one request in flight (default 32). */
  connections?: number;
  /** Measuring window in ms (default 3000). */
  durationMs?: number;
  /** Load applied before measuring, results discarded (default 500). */
  warmupMs?: number;
  /** The status every response should have; any other counts as an error (default 200). */
  expectStatus?: number;
  /** Per-request headers/body timeout in ms (default 10000). */
  timeoutMs?: number;
}

export interface LoadResult {
  /** Responses completed in the measuring window (any status). */
  requests: number;
  /** requests / elapsed seconds. */
  rps: number;
  /** Latency percentiles in ms. */
  p50: number;
  p99: number;
  max: number;
  /** Transport failures plus responses whose status was not `expectStatus`. */
  errors: number;
  /** Status code → count (transport failures under "error"). */
  statuses: Record<string, number>;
  /** Up to three distinct error descriptions, for diagnosis. */
  errorSamples: string[];
  /** Measured window in ms (from the first request to the last response). */
  elapsedMs: number;
  /** Response bytes received in the measuring window. */
  bytes: number;
  connections: number;
  /** Responses completed during the warm-up (not in the figures above). */
  warmupRequests: number;
  /** Where the load loop ran. */
  mode: 'in-thread' | RunnerKind | 'wrk';
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);

interface Phase {
  requests: number;
  errors: number;
  bytes: number;
  statuses: Record<string, number>;
  errorSamples: string[];
}

function newPhase(): Phase {
  return { requests: 0, errors: 0, bytes: 0, statuses: {}, errorSamples: [] };
}

function sample(phase: Phase, text: string): void {
  if (phase.errorSamples.length < 3 && !phase.errorSamples.includes(text)) phase.errorSamples.push(text);
}

/** Drives the load from the calling thread (shares its event loop with anything else running here). */
export async function runLoad(opts: LoadOptions): Promise<LoadResult> {
  const url = new URL(opts.url);
  if (!LOOPBACK.has(url.hostname)) throw new Error(`runLoad only targets loopback addresses, not ${url.hostname}`);
  const connections = opts.connections ?? 32;
  const durationMs = opts.durationMs ?? 3000;
  const warmupMs = opts.warmupMs ?? 500;
  const expect = opts.expectStatus ?? 200;
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const base = {
    path: url.pathname + url.search,
    method: opts.method ?? 'GET',
    headers: opts.headers ?? {},
    body: opts.body,
  };
  const variants = (opts.variants?.length ? opts.variants : [{}]).map((v) => ({
    path: v.path ?? base.path,
    method: v.method ?? base.method,
    headers: { ...base.headers, ...(v.headers ?? {}) },
    body: v.body ?? base.body,
  }));

  const pool = new Pool(url.origin, {
    connections,
    pipelining: 1,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    connectTimeout: timeoutMs,
    keepAliveTimeout: 60_000,
  });
  const hist = createHistogram();
  let phase = newPhase();
  let measuring = false;
  let stopAt = Infinity;
  let next = 0;
  let lastResponse = 0;

  const worker = async () => {
    while (performance.now() < stopAt) {
      const v = variants[next++ % variants.length];
      const t0 = performance.now();
      const p = phase;
      try {
        const res = await pool.request({ path: v.path, method: v.method, headers: v.headers, body: v.body });
        const buf = await res.body.arrayBuffer();
        const t1 = performance.now();
        if (p !== phase) continue; // started in the warm-up
        p.requests++;
        p.bytes += buf.byteLength;
        p.statuses[res.statusCode] = (p.statuses[res.statusCode] ?? 0) + 1;
        if (res.statusCode !== expect) {
          p.errors++;
          sample(p, `status ${res.statusCode}: ${Buffer.from(buf).subarray(0, 200).toString('utf8')}`);
        }
        if (measuring) {
          hist.record(Math.max(1, Math.round((t1 - t0) * 1e6)));
          lastResponse = t1;
        }
      } catch (err) {
        if (p === phase) {
          p.requests++;
          p.errors++;
          p.statuses.error = (p.statuses.error ?? 0) + 1;
          sample(p, err instanceof Error ? `${err.name}: ${(err as NodeJS.ErrnoException).code ?? err.message}` : String(err));
        }
        // A refused connection fails at once: back off so a dead server does not spin the loop.
        await sleep(10);
      }
    }
  };

  const started = performance.now();
  stopAt = started + warmupMs + durationMs;
  const loops = Array.from({ length: connections }, worker);
  // Hard bound: whatever is still in flight a few timeouts after the window is cut off.
  const hardStop = setTimeout(() => void pool.destroy(), warmupMs + durationMs + 2 * timeoutMs + 1000);
  hardStop.unref();

  await sleep(warmupMs);
  const warmupRequests = phase.requests;
  phase = newPhase();
  hist.reset();
  measuring = true;
  const measureStart = performance.now();
  lastResponse = measureStart;

  await Promise.all(loops);
  clearTimeout(hardStop);
  await pool.close().catch(() => pool.destroy());

  const elapsedMs = Math.max(1, lastResponse - measureStart);
  const ms = (ns: number) => Math.round(ns / 1e4) / 100;
  return {
    requests: phase.requests,
    rps: (phase.requests / elapsedMs) * 1000,
    p50: hist.count ? ms(hist.percentile(50)) : NaN,
    p99: hist.count ? ms(hist.percentile(99)) : NaN,
    max: hist.count ? ms(hist.max) : NaN,
    errors: phase.errors,
    statuses: phase.statuses,
    errorSamples: phase.errorSamples,
    elapsedMs: Math.round(elapsedMs),
    bytes: phase.bytes,
    warmupRequests,
    connections,
    mode: 'in-thread',
  };
}

export type RunnerKind = 'process' | 'worker';

/** A load generator outside the calling thread: one child process or worker thread that runs
 * load jobs one after another (start it once, reuse it for every row of a benchmark). */
export interface LoadRunner {
  /** 'wrk' for the wrk runner of lib/wrk.ts, which has the same interface. */
  readonly kind: RunnerKind | 'wrk';
  run(opts: LoadOptions): Promise<LoadResult>;
  close(): Promise<void>;
}

interface RunnerReply {
  id?: number;
  ready?: boolean;
  ok?: boolean;
  result?: LoadResult;
  error?: string;
}

/**
 * Starts a load runner. 'process' (a child process) keeps the load generator's CPU out of this
 * process's `process.cpuUsage()`, so a benchmark can report the server's CPU per request;
 * 'worker' (a worker thread) starts faster but shares the process's CPU accounting. Either way the
 * load has its own event loop. The runner takes no Node flags: its entry registers tsx itself.
 */
export async function startLoadRunner(kind: RunnerKind = 'process'): Promise<LoadRunner> {
  const entry = new URL('./load-runner.mjs', import.meta.url);
  const pending = new Map<number, { resolve: (r: LoadResult) => void; reject: (e: Error) => void }>();
  let nextId = 1;
  let dead: Error | null = null;
  const onReply = (msg: RunnerReply) => {
    if (msg.id === undefined) return;
    const p = pending.get(msg.id);
    if (!p) return;
    pending.delete(msg.id);
    if (msg.ok && msg.result) p.resolve({ ...msg.result, mode: kind });
    else p.reject(new Error(`load runner failed: ${msg.error ?? 'no result'}`));
  };
  const onGone = (why: string) => {
    dead = new Error(`load runner ${why}`);
    for (const p of pending.values()) p.reject(dead);
    pending.clear();
  };
  let send: (msg: { id: number; opts: LoadOptions }) => void;
  let close: () => Promise<void>;
  let ready: Promise<void>;
  if (kind === 'worker') {
    const worker = new Worker(entry, { execArgv: [] });
    ready = new Promise((res, rej) => {
      worker.once('message', () => res());
      worker.once('error', rej);
    });
    worker.on('message', onReply);
    worker.on('error', (err) => onGone(`failed: ${err.message}`));
    worker.on('exit', (code) => onGone(`exited (${code})`));
    send = (msg) => worker.postMessage(msg);
    close = async () => {
      await worker.terminate();
    };
  } else {
    const child = fork(fileURLToPath(entry), [], { execArgv: [], serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    ready = new Promise((res, rej) => {
      child.once('message', () => res());
      child.once('error', rej);
      child.once('exit', (code) => rej(new Error(`load runner exited (${code}) before it was ready`)));
    });
    child.on('message', (m) => onReply(m as RunnerReply));
    child.on('exit', (code, signal) => onGone(`exited (${code ?? signal})`));
    send = (msg) => child.send(msg);
    close = () =>
      new Promise<void>((res) => {
        if (child.exitCode !== null || child.signalCode !== null) return res();
        child.once('exit', () => res());
        child.disconnect();
        setTimeout(() => child.kill('SIGKILL'), 3000).unref();
      });
  }
  await ready;
  return {
    kind,
    run: (opts) => {
      if (dead) return Promise.reject(dead);
      const id = nextId++;
      return new Promise<LoadResult>((resolve, reject) => {
        pending.set(id, { resolve, reject });
        send({ id, opts });
      });
    },
    close,
  };
}

/** One load in a fresh worker thread (for a one-off; start a runner to reuse it). */
export async function runLoadInWorker(opts: LoadOptions): Promise<LoadResult> {
  const runner = await startLoadRunner('worker');
  try {
    return await runner.run(opts);
  } finally {
    await runner.close();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
