/**
 * `server.workers: n` (n > 1 or 'auto'): n worker processes serve the one port (node:cluster); the
 * primary process does no request work. It:
 *
 * - forks the workers (each runs the whole service: its own store connections and writer thread,
 *   its own reactor host) and announces `tokenproxy listening` once all of them listen;
 * - keeps the memory rate-limit counters (rate-limiter-flexible's RateLimiterClusterMaster: every
 *   worker's RateLimiterCluster asks it, see src/rate-limit/limiter.ts), so a limit is exact
 *   across workers;
 * - is the only writer of standard output: each worker's stdout is a pipe to the primary, which
 *   writes only whole lines. Workers writing to a shared stdout themselves could interleave: an
 *   asynchronous write of more than PIPE_BUF bytes (4096 on Linux) to a pipe is not atomic and can
 *   be split by another process's write, cutting a line in two;
 * - restarts a worker that dies (after a back-off that grows while it keeps dying young), logged;
 * - on SIGTERM/SIGINT asks every worker to stop (each drains as a single process does: see
 *   src/server.ts close) and exits 0 once all have exited (1 if one failed); a second signal kills
 *   the workers and exits 1 at once;
 * - re-sends SIGHUP to every worker.
 */
import cluster, { type Worker } from 'node:cluster';
import { availableParallelism } from 'node:os';
import type { Readable } from 'node:stream';
import { RateLimiterClusterMaster } from 'rate-limiter-flexible';
import type { LoadedConfig } from './config/load.js';
import type { DestinationStream } from 'pino';
import { exitProcess, SHUTDOWN_MARGIN_MS, tryLog } from './exit.js';
import { createLogger, stdoutDestination, type Logger } from './log.js';

/** The message the primary sends a worker to make it drain and exit. */
interface StopMessage {
  tokenproxy: 'stop';
  signal: string;
}

function isStopMessage(m: unknown): m is StopMessage {
  return typeof m === 'object' && m !== null && (m as StopMessage).tokenproxy === 'stop' && typeof (m as StopMessage).signal === 'string';
}

/** Back-off before restarting a worker: doubles from RESTART_MIN_MS for each death in a row of a young worker. */
const RESTART_MIN_MS = 100;
const RESTART_MAX_MS = 10_000;
/** A worker that lived this long resets the back-off. */
const YOUNG_MS = 30_000;
/**
 * The primary's hard deadline comes this long after a worker's own (grace + SHUTDOWN_MARGIN_MS):
 * a worker that could not end itself is killed, and the primary exits.
 */
const PRIMARY_EXTRA_MS = 1_000;

/** The number of worker processes `server.workers` asks for (1: no cluster). */
export function workerCount(config: LoadedConfig): number {
  const w = config.server.workers;
  return w === 'auto' ? availableParallelism() : w;
}

/** Whether this process is the primary of a cluster to start (as opposed to a worker or a single process). */
export function isClusterPrimary(config: LoadedConfig): boolean {
  return cluster.isPrimary && workerCount(config) > 1;
}

/** A worker's log lines say which process wrote them (an access line's `pid` names the worker that served it). */
export function workerLogger(log: Logger): Logger {
  return cluster.isWorker ? log.child({ pid: process.pid, worker: cluster.worker!.id }) : log;
}

/** Whether this process is a worker of a `server.workers` cluster. */
export function isWorkerProcess(): boolean {
  return cluster.isWorker;
}

/** The message a started service logs: the primary announces the cluster, so a worker says it is one. */
export function listeningMessage(): string {
  return cluster.isWorker ? 'worker listening' : 'tokenproxy listening';
}

/**
 * Calls `stop` when the process is asked to stop: SIGTERM/SIGINT in a single process (a second
 * signal calls it again, `stop` decides what that means). In a worker, the primary's stop message
 * counts too: a terminal's Ctrl-C or a service manager signals the whole process group, so a
 * worker may get the signal and the primary's message for the same stop, which is one stop; a
 * second signal to the worker itself (or a second message) calls `stop` again.
 */
export function onStopRequest(stop: (signal: string) => void): void {
  if (!cluster.isWorker) {
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
    return;
  }
  // Signals and the primary's messages are counted apart: one of each is the same stop, a second
  // of the same kind (a second signal to this worker, issue 23) is a second stop.
  let requested = false;
  let signals = 0;
  let messages = 0;
  const request = (signal: string, second: boolean): void => {
    if (requested && !second) return;
    requested = true;
    stop(signal);
  };
  process.on('SIGTERM', () => request('SIGTERM', ++signals > 1));
  process.on('SIGINT', () => request('SIGINT', ++signals > 1));
  process.on('message', (m: unknown) => {
    if (isStopMessage(m)) request(m.signal, ++messages > 1);
  });
}

/**
 * Copies a worker's stdout to `out` in whole lines: what follows the last newline of a chunk waits
 * for the next chunk (or the end of the stream, when it gets a newline of its own).
 */
function relayLines(from: Readable, out: DestinationStream, paused: Set<Readable>): Promise<void> {
  let pending: Buffer[] = [];
  const write = (text: string): void => {
    // sonic-boom's write returns false above its high-water mark (pino's type says void).
    if ((out.write(text) as unknown) === false && !paused.has(from)) {
      // Back-pressure: the worker's own buffer grows instead of ours (as with a slow stdout).
      paused.add(from);
      from.pause();
    }
  };
  from.on('data', (chunk: Buffer) => {
    const nl = chunk.lastIndexOf(10);
    if (nl === -1) {
      pending.push(chunk);
      return;
    }
    const head = chunk.subarray(0, nl + 1);
    write((pending.length === 0 ? head : Buffer.concat([...pending, head])).toString('utf8'));
    pending = nl + 1 < chunk.length ? [Buffer.from(chunk.subarray(nl + 1))] : [];
  });
  return new Promise((resolve) => {
    from.once('close', () => {
      if (pending.length > 0) write(`${Buffer.concat(pending).toString('utf8')}\n`);
      pending = [];
      resolve();
    });
  });
}

/** Runs the primary; returns null (the process keeps running until it exits on its own). */
export function runPrimary(config: LoadedConfig): null {
  const n = workerCount(config);
  const out = stdoutDestination();
  const log = createLogger(config.log.level, out).child({ pid: process.pid, role: 'primary' });
  if (config.store.kind === 'embedded' && config.store.path === ':memory:') {
    log.fatal({ workers: n }, 'start-up failed: server.workers > 1 needs a store the workers share (an embedded store file or Redis), not :memory:');
    exitProcess(log, 1);
    return null;
  }
  // Before the first fork: a worker's limiters register with it as they are built.
  new RateLimiterClusterMaster();
  cluster.setupPrimary({ stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });

  const paused = new Set<Readable>();
  (out as unknown as NodeJS.EventEmitter).on('drain', () => {
    for (const s of paused) s.resume();
    paused.clear();
  });

  const slots = new Map<number, Worker>();
  /** Workers that listen, so have their stop handler (cli.ts start registers it right after). */
  const ready = new WeakSet<Worker>();
  const outputs = new Set<Promise<void>>();
  const restarts = new Map<number, NodeJS.Timeout>();
  const youngDeaths = new Map<number, number>();
  let listening = 0;
  let started = false;
  let stopping = false;
  let failed = false;
  /** The longest grace a worker serves with (a reload may change it: workers say so, see below). */
  const shutdownGraceMs = (): number => config.server.shutdown_grace_ms;

  const exitWhenDone = (): void => {
    if (!stopping || slots.size > 0) return;
    // The workers' last lines are in their pipes: relay them before exiting.
    void Promise.all(outputs).then(() => {
      tryLog(() => log.info({ failed }, 'all workers exited'));
      exitProcess(log, failed ? 1 : 0);
    });
  };

  const fork = (slot: number): void => {
    const worker = cluster.fork();
    const bornAt = Date.now();
    slots.set(slot, worker);
    const relayed = relayLines(worker.process.stdout!, out, paused);
    outputs.add(relayed);
    void relayed.then(() => outputs.delete(relayed));
    // An IPC send to a worker that just died: its exit is handled below.
    worker.on('error', (err: Error) => log.warn({ worker: worker.id, error: { type: err.name, message: err.message } }, 'worker channel error'));
    worker.once('listening', (address: { address: string | null; port: number }) => {
      ready.add(worker);
      if (started) {
        log.info({ worker: worker.id, worker_pid: worker.process.pid }, 'worker restarted');
        return;
      }
      if (++listening < n) return;
      started = true;
      const host = (address.address ?? config.server.host).includes(':') ? `[${address.address}]` : address.address ?? config.server.host;
      log.info({ url: `http://${host}:${address.port}`, workers: n, store: config.store.kind, config: config.source }, 'tokenproxy listening');
    });
    worker.once('exit', (code: number | null, signal: string | null) => {
      slots.delete(slot);
      if (stopping) {
        if (code !== 0) failed = true;
        exitWhenDone();
        return;
      }
      if (!started) {
        log.fatal({ worker: worker.id, code, signal }, 'start-up failed: a worker exited before all were listening');
        for (const w of slots.values()) w.process.kill('SIGKILL');
        void Promise.all(outputs).then(() => exitProcess(log, 1));
        return;
      }
      const deaths = Date.now() - bornAt < YOUNG_MS ? (youngDeaths.get(slot) ?? 0) + 1 : 1;
      youngDeaths.set(slot, deaths);
      const delay = Math.min(RESTART_MIN_MS * 2 ** (deaths - 1), RESTART_MAX_MS);
      log.error({ worker: worker.id, worker_pid: worker.process.pid, code, signal, restart_in_ms: delay }, 'worker exited; restarting it');
      restarts.set(slot, setTimeout(() => {
        restarts.delete(slot);
        fork(slot);
      }, delay));
    });
  };

  const stop = (signal: string): void => {
    if (stopping) {
      tryLog(() => log.warn({ signal }, 'second signal while draining: killing the workers, exiting at once'));
      for (const w of slots.values()) w.process.kill('SIGKILL');
      exitProcess(log, 1);
      return;
    }
    stopping = true;
    for (const t of restarts.values()) clearTimeout(t);
    restarts.clear();
    const graceMs = shutdownGraceMs();
    tryLog(() => log.info({ signal, workers: slots.size, grace_ms: graceMs }, 'stopping: every worker drains its requests in flight'));
    for (const w of slots.values()) {
      // A worker still starting has no stop handler yet: the signal ends it, as it would a single process.
      if (!ready.has(w)) {
        w.process.kill('SIGTERM');
        continue;
      }
      const message: StopMessage = { tokenproxy: 'stop', signal };
      w.send(message, (err: Error | null) => {
        if (err) w.process.kill('SIGTERM');
      });
    }
    // The hard deadline (issue 23): not unref'd, and it ends the primary too, even if a killed
    // worker's output pipe is still held open (by a process the worker started).
    setTimeout(() => {
      tryLog(() => log.error({ workers: slots.size }, 'shutdown deadline passed: the workers still running are killed'));
      for (const w of slots.values()) w.process.kill('SIGKILL');
      exitProcess(log, 1);
    }, graceMs + SHUTDOWN_MARGIN_MS + PRIMARY_EXTRA_MS);
    exitWhenDone();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  // A reload (SIGHUP) is each worker's: the primary passes it on.
  process.on('SIGHUP', () => {
    for (const w of slots.values()) w.process.kill('SIGHUP');
  });

  for (let slot = 1; slot <= n; slot++) fork(slot);
  return null;
}
