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
 * - on SIGTERM/SIGINT asks every worker to stop and exits 0 once all have exited (1 if one
 *   failed); a second signal kills the workers and exits 1 at once. Each worker first closes its
 *   listeners and says so; once every worker has, the port is closed and the primary tells them to
 *   drain (each as a single process does: see src/server.ts close and stoppedAccepting below);
 * - on SIGHUP asks every worker to reload (an IPC message, never a signal to a worker that may be
 *   starting), reloads a worker that became ready after a SIGHUP it may have missed, and keeps the
 *   reload status file that `tokenproxy reload` reads (src/pid-file.ts);
 * - writes the pid file once every worker listens (it owns the listener).
 */
import cluster, { type Worker } from 'node:cluster';
import { availableParallelism } from 'node:os';
import type { Readable } from 'node:stream';
import { RateLimiterClusterMaster } from 'rate-limiter-flexible';
import type { LoadedConfig } from './config/load.js';
import type { DestinationStream } from 'pino';
import { exitProcess, SHUTDOWN_MARGIN_MS, tryLog } from './exit.js';
import { createLogger, stdoutDestination, type Logger } from './log.js';
import { writePidFile, writeReloadStatus, type ProcessOutcome, type ProcessStatus } from './pid-file.js';
import type { StartupNotice } from './production.js';
import { onSighup } from './reload-signal.js';

/** The message the primary sends a worker to make it drain and exit. */
interface StopMessage {
  tokenproxy: 'stop';
  signal: string;
}

function isStopMessage(m: unknown): m is StopMessage {
  return typeof m === 'object' && m !== null && (m as StopMessage).tokenproxy === 'stop' && typeof (m as StopMessage).signal === 'string';
}

/** Primary to worker: reload, for the primary's reload generation `generation`. */
interface ReloadMessage {
  tokenproxy: 'reload';
  generation: number;
}

/** Primary to a stopping worker: every worker has stopped accepting, drain now. */
interface DrainMessage {
  tokenproxy: 'drain';
}

/**
 * Worker to primary: started (its handlers are in place), a reload's outcome, or (stopping) its
 * listeners are closed.
 */
type WorkerMessage =
  | { tokenproxy: 'ready'; grace_ms: number }
  | { tokenproxy: 'reloaded'; generation: number; outcome: ProcessOutcome; grace_ms: number }
  | { tokenproxy: 'accepting-stopped'; grace_ms: number };

function isReloadMessage(m: unknown): m is ReloadMessage {
  return typeof m === 'object' && m !== null && (m as ReloadMessage).tokenproxy === 'reload' && Number.isSafeInteger((m as ReloadMessage).generation);
}

function isWorkerMessage(m: unknown): m is WorkerMessage {
  if (typeof m !== 'object' || m === null) return false;
  const w = m as WorkerMessage;
  return (w.tokenproxy === 'ready' || w.tokenproxy === 'reloaded' || w.tokenproxy === 'accepting-stopped') && typeof w.grace_ms === 'number';
}

function isDrainMessage(m: unknown): m is DrainMessage {
  return typeof m === 'object' && m !== null && (m as DrainMessage).tokenproxy === 'drain';
}

/** In a worker: calls `fn` with the generation of each reload the primary asks for. */
export function onReloadMessage(fn: (generation: number) => void): void {
  if (!cluster.isWorker) return;
  process.on('message', (m: unknown) => {
    if (isReloadMessage(m)) fn(m.generation);
  });
}

function toPrimary(m: WorkerMessage): void {
  // The primary gone (it exits after its workers): nothing to tell.
  if (cluster.isWorker && process.connected) process.send!(m, undefined, {}, () => undefined);
}

/** In a worker: it serves, its stop and reload handlers are in place. */
export function reportReady(graceMs: number): void {
  toPrimary({ tokenproxy: 'ready', grace_ms: graceMs });
}

/** In a worker: the outcome of the reload for `generation`. */
export function reportReloaded(generation: number, outcome: ProcessOutcome, graceMs: number): void {
  toPrimary({ tokenproxy: 'reloaded', generation, outcome, grace_ms: graceMs });
}

/** How long a stopping worker waits for the primary's go-ahead to drain at most (a primary that never sends it is broken). */
const DRAIN_WAIT_MS = 2_000;

/**
 * In a stopping worker whose listeners are closed (RunningService.stopAccepting): tells the
 * primary, and resolves once the primary says every worker has, so draining may start (or after
 * DRAIN_WAIT_MS, or at once without a primary). Why the wait: the primary accepts the
 * connections of the shared port and hands each to a worker that still listens; once the last
 * worker stops listening, the connections it accepted but had not handed over yet are reset. A
 * worker that answered `Connection: close` while another still listened would send its clients
 * to open new connections right into that window.
 */
export function stoppedAccepting(graceMs: number): Promise<void> {
  if (!cluster.isWorker || !process.connected) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      process.off('message', onMessage);
      process.off('disconnect', done);
      resolve();
    };
    const onMessage = (m: unknown): void => {
      if (isDrainMessage(m)) done();
    };
    const timer = setTimeout(done, Math.min(graceMs, DRAIN_WAIT_MS));
    process.on('message', onMessage);
    process.once('disconnect', done);
    // Sent after the listeners' own close messages on the same channel: when it arrives, the
    // primary has taken this worker off the port.
    toPrimary({ tokenproxy: 'accepting-stopped', grace_ms: graceMs });
  });
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
  // of the same kind (a second signal to this worker) is a second stop.
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
export function runPrimary(config: LoadedConfig, notices: readonly StartupNotice[] = []): null {
  const n = workerCount(config);
  const out = stdoutDestination();
  const log = createLogger(config.log.level, out).child({ pid: process.pid, role: 'primary' });
  // The start-up notices of production mode, once for the service, not per worker.
  for (const notice of notices) log.warn(notice.fields, notice.msg);
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
  /** Workers that said they are ready: their stop and reload handlers are in place. */
  const ready = new WeakSet<Worker>();
  const outputs = new Set<Promise<void>>();
  const restarts = new Map<number, NodeJS.Timeout>();
  const youngDeaths = new Map<number, number>();
  let listening = 0;
  let started = false;
  let stopping = false;
  let failed = false;
  /** A worker exited before every worker listened: the start failed (reported once). */
  let startFailed = false;
  /** The grace each worker serves with (a reload may change it: workers say so in their messages). */
  const graces = new Map<number, number>();
  const shutdownGraceMs = (): number => Math.max(config.server.shutdown_grace_ms, ...graces.values());

  // Reload: `generation` counts SIGHUPs (from main.ts's first instruction on). A worker
  // gets reload messages only once it said it is ready (its handlers are in place): one forked
  // before the last SIGHUP may have read the file before it changed, so it is reloaded as soon as
  // it is ready. Each worker's state goes to the status file beside the pid file.
  const states = new Map<number, ProcessStatus>();
  const forkedAt = new Map<Worker, number>();
  let generation = 0;
  const writeStatus = (): void => {
    if (!started || !config.server.pid_file) return;
    writeReloadStatus(config.server.pid_file, {
      pid: process.pid, generation, processes: [...states.entries()].sort(([a], [b]) => a - b).map(([, p]) => p),
    });
  };
  const sendReload = (w: Worker): void => {
    const message: ReloadMessage = { tokenproxy: 'reload', generation };
    w.send(message, (err: Error | null) => {
      if (err) tryLog(() => log.warn({ worker: w.id, error: { type: err.name } }, 'reload message not delivered'));
    });
  };
  const reloadAll = (): void => {
    generation++;
    if (stopping) return;
    tryLog(() => log.info({ signal: 'SIGHUP', generation }, 'reloading every worker'));
    for (const w of slots.values()) if (ready.has(w)) sendReload(w);
    writeStatus();
  };
  generation = onSighup(reloadAll);

  // Stopping: each worker closes its listeners first and says so; once all have, the primary no
  // longer accepts on the port, and they drain (stoppedAccepting).
  const acceptingStopped = new WeakSet<Worker>();
  const drainSent = new WeakSet<Worker>();
  const sendDrain = (w: Worker): void => {
    if (drainSent.has(w)) return;
    drainSent.add(w);
    const message: DrainMessage = { tokenproxy: 'drain' };
    // A worker gone meanwhile: its exit is handled on its own.
    w.send(message, () => undefined);
  };
  const drainWhenAllStopped = (): void => {
    const workers = [...slots.values()];
    if (!workers.every((w) => acceptingStopped.has(w))) return;
    for (const w of workers) sendDrain(w);
  };

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
    forkedAt.set(worker, generation);
    states.set(slot, { worker: slot, pid: worker.process.pid ?? null, generation, outcome: 'starting' });
    writeStatus();
    worker.on('message', (m: unknown) => {
      if (!isWorkerMessage(m) || slots.get(slot) !== worker) return;
      graces.set(slot, m.grace_ms);
      if (m.tokenproxy === 'accepting-stopped') {
        acceptingStopped.add(worker);
        // Not stopping (yet): a worker stopped alone, or one that got the process group's signal
        // before the primary handled its own. The primary's stop will send the go-ahead; a worker
        // stopped alone drains after its own wait (stoppedAccepting).
        if (stopping) drainWhenAllStopped();
        return;
      }
      if (m.tokenproxy === 'ready') {
        ready.add(worker);
        const at = forkedAt.get(worker) ?? 0;
        states.set(slot, { worker: slot, pid: worker.process.pid ?? null, generation: at, outcome: 'started' });
        if (generation > at) sendReload(worker);
      } else {
        const prev = states.get(slot);
        if (!prev || m.generation >= prev.generation) states.set(slot, { worker: slot, pid: worker.process.pid ?? null, generation: m.generation, outcome: m.outcome });
      }
      writeStatus();
    });
    const relayed = relayLines(worker.process.stdout!, out, paused);
    outputs.add(relayed);
    void relayed.then(() => outputs.delete(relayed));
    // An IPC send to a worker that just died: its exit is handled below.
    worker.on('error', (err: Error) => log.warn({ worker: worker.id, error: { type: err.name, message: err.message } }, 'worker channel error'));
    worker.once('listening', (address: { address: string | null; port: number }) => {
      if (started) {
        log.info({ worker: worker.id, worker_pid: worker.process.pid }, 'worker restarted');
        return;
      }
      if (++listening < n) return;
      started = true;
      // The primary owns the listener (node:cluster): its pid file is written now that every
      // worker listens, never by a start that fails.
      if (config.server.pid_file) writePidFile(config.server.pid_file);
      writeStatus();
      const host = (address.address ?? config.server.host).includes(':') ? `[${address.address}]` : address.address ?? config.server.host;
      log.info({ url: `http://${host}:${address.port}`, workers: n, store: config.store.kind, config: config.source }, 'tokenproxy listening');
    });
    worker.once('exit', (code: number | null, signal: string | null) => {
      slots.delete(slot);
      graces.delete(slot);
      if (stopping) {
        if (code !== 0) failed = true;
        drainWhenAllStopped();
        exitWhenDone();
        return;
      }
      if (!started) {
        // Once: the workers killed below exit too, and are not the cause to report.
        if (startFailed) return;
        startFailed = true;
        log.fatal({ worker: worker.id, code, signal }, 'start-up failed: a worker exited before all were listening');
        for (const w of slots.values()) w.process.kill('SIGKILL');
        void Promise.all(outputs).then(() => exitProcess(log, 1));
        return;
      }
      const deaths = Date.now() - bornAt < YOUNG_MS ? (youngDeaths.get(slot) ?? 0) + 1 : 1;
      youngDeaths.set(slot, deaths);
      const delay = Math.min(RESTART_MIN_MS * 2 ** (deaths - 1), RESTART_MAX_MS);
      log.error({ worker: worker.id, worker_pid: worker.process.pid, code, signal, restart_in_ms: delay }, 'worker exited; restarting it');
      states.set(slot, { worker: slot, pid: null, generation, outcome: 'starting' });
      writeStatus();
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
    // Workers that closed their listeners before this (they got the signal first) count.
    drainWhenAllStopped();
    // The hard deadline: not unref'd, and it ends the primary too, even if a killed
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

  for (let slot = 1; slot <= n; slot++) fork(slot);
  return null;
}
