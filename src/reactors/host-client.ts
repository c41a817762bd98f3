/**
 * The main process's handle on one reactor host process: fork, request/answer by id, heartbeat.
 * It never imports the host module or isolated-vm (the host is started by path).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Logger } from '../log.js';
import { hostEnvironment } from './host-env.js';
import { EXIT_NO_ISOLATED_VM, parseFromHost, type CallResult, type FromHost, type ServedBy, type ToHost } from './protocol.js';

/** The host process went away (or was killed) while a request was open. */
export class HostGoneError extends Error {
  override name = 'HostGoneError';
}

type Distribute<T> = T extends { id: number } ? Omit<T, 'id'> : never;
export type HostRequest = Distribute<Extract<ToHost, { id: number }>>;

interface Pending {
  resolve(msg: FromHost): void;
  reject(err: Error): void;
}

export interface SpawnOptions {
  hostPath: string;
  execArgv: string[];
  /** The program that runs the host: this node (process.execPath) unless given. */
  execPath?: string;
  serialization: 'json' | 'advanced';
  log: Logger;
  idleMs: number;
  /** A host that answers no ping for this long is killed (its event loop is stuck). */
  hangMs: number;
  heartbeatMs: number;
  /** How long the host may take to say it is ready. */
  startTimeoutMs: number;
}

export class HostProcess {
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private lastAnswer = Date.now();
  private heartbeat: NodeJS.Timeout | undefined;
  private exitListeners: Array<(code: number | null, signal: NodeJS.Signals | null) => void> = [];
  private fatalListeners: Array<(reactor: string) => void> = [];
  exited = false;

  private constructor(
    private readonly child: ChildProcess,
    private readonly log: Logger,
  ) {}

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Forks a host and resolves once it reports ready. */
  static spawn(opts: SpawnOptions): Promise<HostProcess> {
    const child = fork(opts.hostPath, [], {
      execArgv: opts.execArgv,
      ...(opts.execPath !== undefined ? { execPath: opts.execPath } : {}),
      // An allow-list: no master key, store password or other secret reaches tenant code's process.
      env: hostEnvironment(process.env),
      serialization: opts.serialization,
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    const host = new HostProcess(child, opts.log);
    host.wire();
    return new Promise<HostProcess>((resolve, reject) => {
      const timer = setTimeout(() => {
        host.kill();
        reject(new HostGoneError('the reactor host did not start in time'));
      }, opts.startTimeoutMs);
      host.onReady = () => {
        clearTimeout(timer);
        host.startHeartbeat(opts);
        host.post({ t: 'init', options: { idleMs: opts.idleMs } });
        resolve(host);
      };
      host.onExit((code, signal) => {
        clearTimeout(timer);
        reject(new HostGoneError(
          code === EXIT_NO_ISOLATED_VM
            ? `the reactor host cannot load isolated-vm on Node ${process.version} (the reason is in the log line before this one)`
            : `the reactor host exited while starting (code ${code}, signal ${signal})`,
        ));
      });
    });
  }

  private onReady: () => void = () => undefined;

  private wire(): void {
    const { child } = this;
    child.on('message', (raw: unknown) => this.onMessage(raw));
    child.on('error', (err) => this.log.error({ err: err.message }, 'reactor host process error'));
    child.on('exit', (code, signal) => {
      this.exited = true;
      clearInterval(this.heartbeat);
      const err = new HostGoneError('the reactor host exited');
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
      for (const l of this.exitListeners) l(code, signal);
    });
    // V8 and isolated-vm write fatal diagnostics to stderr; they carry no user data.
    if (child.stderr) {
      createInterface({ input: child.stderr }).on('line', (line) => {
        if (line.trim()) this.log.warn({ reactorHost: child.pid }, line.slice(0, 500));
      });
    }
  }

  /** Pings the host from the moment it is ready; a silent host is killed (its loop is stuck). */
  private startHeartbeat(opts: SpawnOptions): void {
    this.lastAnswer = Date.now();
    this.heartbeat = setInterval(() => {
      if (Date.now() - this.lastAnswer > opts.hangMs) {
        this.log.error({ reactorHost: this.child.pid }, 'reactor host stopped answering; killing it');
        this.kill();
        return;
      }
      this.request({ t: 'ping' }).catch(() => undefined);
    }, opts.heartbeatMs);
    this.heartbeat.unref();
  }

  private onMessage(raw: unknown): void {
    this.lastAnswer = Date.now();
    const msg = parseFromHost(raw);
    if (!msg) {
      this.log.error({ reactorHost: this.child.pid }, 'malformed message from the reactor host');
      // An answer we cannot read still ends its call (as a sandbox failure) instead of leaving it
      // to the deadline.
      const id = typeof raw === 'object' && raw !== null ? (raw as { id?: unknown }).id : undefined;
      const p = typeof id === 'number' ? this.pending.get(id) : undefined;
      if (p && typeof id === 'number') {
        this.pending.delete(id);
        p.resolve({ t: 'done', id, result: { ok: false, failure: { kind: 'internal', message: 'malformed answer' }, logs: [] } });
      }
      return;
    }
    switch (msg.t) {
      case 'ready':
        this.onReady();
        return;
      case 'log': {
        const fields = msg.reactor === undefined ? { reactorHost: this.child.pid } : { reactorHost: this.child.pid, reactor: msg.reactor };
        this.log[msg.level](fields, msg.msg);
        return;
      }
      case 'fatal':
        this.log.error({ reactorHost: this.child.pid, reactor: msg.reactor }, `catastrophic isolate error (${msg.message}); the reactor host exits`);
        for (const l of this.fatalListeners) l(msg.reactor);
        return;
      case 'ack':
      case 'done': {
        const p = this.pending.get(msg.id);
        if (!p) return;
        this.pending.delete(msg.id);
        p.resolve(msg);
        return;
      }
    }
  }

  /** A reactor took the host down through isolated-vm's catastrophic path. */
  onFatal(listener: (reactor: string) => void): void {
    this.fatalListeners.push(listener);
  }

  onExit(listener: (code: number | null, signal: NodeJS.Signals | null) => void): void {
    this.exitListeners.push(listener);
  }

  private post(msg: ToHost): boolean {
    if (this.exited || !this.child.connected) return false;
    try {
      this.child.send(msg, (err) => {
        if (err && 'id' in msg) this.fail(msg.id, new HostGoneError('could not reach the reactor host'));
      });
      return true;
    } catch {
      return false;
    }
  }

  private fail(id: number, err: Error): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    p.reject(err);
  }

  /** Sends a request and resolves with its answer; rejects with HostGoneError if the host goes. */
  request(req: HostRequest): Promise<FromHost> {
    const id = this.nextId++;
    const msg = { ...req, id } as ToHost;
    return new Promise<FromHost>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (!this.post(msg)) this.fail(id, new HostGoneError('the reactor host is not running'));
    });
  }

  async ack(req: HostRequest): Promise<string | undefined> {
    const answer = await this.request(req);
    if (answer.t !== 'ack') throw new HostGoneError('unexpected answer from the reactor host');
    return answer.error;
  }

  async invoke(key: string, args: string): Promise<CallResult & { served?: ServedBy }> {
    const answer = await this.request({ t: 'invoke', key, args });
    if (answer.t !== 'done') throw new HostGoneError('unexpected answer from the reactor host');
    return answer.served ? { ...answer.result, served: answer.served } : answer.result;
  }

  kill(): void {
    if (!this.exited) this.child.kill('SIGKILL');
  }

  /** Asks the host to exit (it does on disconnect); kills it if it lingers. */
  async stop(graceMs = 2000): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<void>((resolve) => this.onExit(() => resolve()));
    // disconnect() on a channel already closed (the host is exiting) emits an 'error'
    // ("IPC channel is already disconnected") rather than throwing: only disconnect a live one.
    if (this.child.connected) this.child.disconnect();
    const timer = setTimeout(() => this.kill(), graceMs);
    await gone;
    clearTimeout(timer);
  }
}
