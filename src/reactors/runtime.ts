/**
 * ReactorRuntime: the main process's side of the reactors. It starts and supervises the reactor
 * host process, registers reactors in it, and turns calls into results or ServiceErrors.
 *
 * Main process rule: never import isolated-vm here, not even transitively (the host is forked by
 * path). A host that dies costs only the calls in flight (503 reactor_unavailable); the runtime
 * starts a new one, compiles the registered reactors again, and calls that arrive meanwhile wait
 * for it (up to `restartWaitMs`) or get the same 503.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MAX_CODE_LENGTH, REACTOR_LIMITS, type ReactorLimitField } from '../config/limits.js';
import { ServiceError } from '../errors.js';
import type { Logger } from '../log.js';
import { validateTransformResult, type ReactorInput, type TransformArgs, type TransformResult } from './contract.js';
import { failureToError } from './failures.js';
import { HostGoneError, HostProcess } from './host-client.js';
import { MAX_PAYLOAD_BYTES, type ConsoleLine, type HostReactorDef, type ServedBy } from './protocol.js';
import type { ReactorMetrics } from './metrics.js';

export type { ReactorInput, TransformArgs, TransformResult } from './contract.js';

/** One reactor (or proxy code transform) to run; `key` is unique per runtime (e.g. tenant/id). */
export type ReactorDefinition = HostReactorDef;

export interface ReactorRuntimeOptions {
  log: Logger;
  /** The host entry; defaults to host.ts next to this file under a TS loader, host.js when compiled. */
  hostPath?: string;
  /**
   * Node flags for the host. Default: this process's own (so a TS loader applies to host.ts too),
   * minus debugger flags; --no-node-snapshot is always added (isolated-vm needs it).
   */
  execArgv?: string[];
  /**
   * The program the host is started with (node's fork `execPath`): this node unless given. The
   * tests start it through /usr/bin/env to set the host's NODE_OPTIONS (test/helpers/cli-entry.ts).
   */
  execPath?: string;
  /**
   * Largest serialized args (UTF-8 bytes) a call may carry; larger is 413 body_too_large, refused
   * before the host sees it. Default: the spec's 5 MB ("larger needs arrangement with the
   * operator": e.g. pass `server.body_limit_bytes`).
   */
  payloadLimitBytes?: number;
  /** Extra (cold-started) isolates idle this long are disposed. Default 10 s. */
  idleMs?: number;
  /** How long a call waits for a restarting host before it gets 503. Default 5 s. */
  restartWaitMs?: number;
  /**
   * IPC encoding. Default 'advanced' (V8 structured clone): bench/reactors-runtime.ts measured it
   * level with 'json' for 1 KB calls and about 30% faster for 1 MB payloads.
   */
  serialization?: 'json' | 'advanced';
  /** Heartbeat period and the silence after which a stuck host is killed. Defaults 1 s and 5 s. */
  heartbeatMs?: number;
  hangMs?: number;
  /**
   * A reactor that takes the host down `strikes` times within `windowMs` is suspended for
   * `suspendMs`: its calls get 503 without reaching the host, so one tenant's memory bomb cannot
   * keep failing everyone's calls in flight. Defaults: 3 strikes in 10 minutes → 5 minutes.
   */
  suspension?: { strikes: number; windowMs: number; suspendMs: number };
  /** Counts calls by outcome and host restarts (docs/operations.md "Metrics"). */
  metrics?: ReactorMetrics;
}

interface Settings {
  metrics?: ReactorMetrics | undefined;
  restartWaitMs: number;
  payloadLimit: number;
  suspension: { strikes: number; windowMs: number; suspendMs: number };
}

export interface InvokeOptions {
  /** Logger for the reactor's console lines (e.g. the request's child logger). */
  log?: Logger;
  /** Told which isolate served the call, when one did (tests and benchmarks; ServedBy). */
  served?: (served: ServedBy) => void;
}

/** Grace on top of the host's own bounds (queue wait + run) before the main process gives up. */
const CALL_GRACE_MS = 2000;
const MAX_RESTART_DELAY_MS = 5000;
/** A host that lived this long resets the crash-loop backoff. */
const STABLE_AFTER_MS = 30_000;

/** host.ts next to this file when running from source under a TS loader, host.js from dist/. */
function defaultHostPath(): string {
  const here = fileURLToPath(import.meta.url);
  return join(dirname(here), here.endsWith('.ts') ? 'host.ts' : 'host.js');
}

/** Debugger flags are dropped (the port would clash); isolated-vm requires --no-node-snapshot. */
function hostExecArgv(base: readonly string[]): string[] {
  const argv = base.filter((a) => !/^--(inspect|debug)/.test(a));
  if (!argv.includes('--no-node-snapshot')) argv.push('--no-node-snapshot');
  return argv;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function unavailable(detail = 'The reactor host is unavailable', retryAfterSeconds = 1): ServiceError {
  return new ServiceError('reactor_unavailable', { detail, headers: { 'Retry-After': String(retryAfterSeconds) } });
}

export class ReactorRuntime {
  private host: HostProcess | null = null;
  /** Set while a (re)start is under way; resolves with the new host, fully registered. */
  private restarting: Promise<HostProcess> | null = null;
  private readonly defs = new Map<string, ReactorDefinition>();
  private closed = false;
  private crashes = 0;
  private registerChain: Promise<unknown> = Promise.resolve();
  /** Per reactor: when it took the host down (recent ones only), and until when it is suspended. */
  private readonly strikes = new Map<string, number[]>();
  private readonly suspended = new Map<string, number>();

  private constructor(
    private readonly log: Logger,
    private readonly spawnHost: () => Promise<HostProcess>,
    private readonly settings: Settings,
  ) {}

  static async start(opts: ReactorRuntimeOptions): Promise<ReactorRuntime> {
    const hostPath = opts.hostPath ?? defaultHostPath();
    const execArgv = hostExecArgv(opts.execArgv ?? process.execArgv);
    if (!existsSync(hostPath)) throw new Error(`reactor host entry not found: ${hostPath}`);
    const log = opts.log.child({ component: 'reactors' });
    const spawnHost = (): Promise<HostProcess> =>
      HostProcess.spawn({
        hostPath,
        execArgv,
        ...(opts.execPath !== undefined ? { execPath: opts.execPath } : {}),
        serialization: opts.serialization ?? 'advanced',
        log,
        idleMs: opts.idleMs ?? 10_000,
        heartbeatMs: opts.heartbeatMs ?? 1000,
        hangMs: opts.hangMs ?? 5000,
        startTimeoutMs: 15_000,
      });
    const runtime = new ReactorRuntime(log, spawnHost, {
      metrics: opts.metrics,
      restartWaitMs: opts.restartWaitMs ?? 5000,
      payloadLimit: opts.payloadLimitBytes ?? MAX_PAYLOAD_BYTES,
      suspension: { strikes: 3, windowMs: 10 * 60_000, suspendMs: 5 * 60_000, ...opts.suspension },
    });
    runtime.adopt(await spawnHost());
    return runtime;
  }

  /** The current host's pid (tests and diagnostics). */
  get hostPid(): number | undefined {
    return this.host?.pid;
  }

  /** Registered keys. */
  keys(): string[] {
    return [...this.defs.keys()];
  }

  /**
   * Compiles every definition in the host (warm isolates included) and makes them callable, all
   * or none: if any fails, rejects with one Error naming each bad reactor and registers nothing.
   * A key registered again is replaced once the new code compiled.
   */
  register(defs: ReactorDefinition[]): Promise<void> {
    const run = this.registerChain.then(() => this.registerNow(defs));
    this.registerChain = run.catch(() => undefined);
    return run;
  }

  private async registerNow(defs: ReactorDefinition[]): Promise<void> {
    const problems: string[] = [];
    const seen = new Set<string>();
    for (const d of defs) {
      if (seen.has(d.key)) problems.push(`reactor "${d.name}" (${d.key}): registered twice`);
      seen.add(d.key);
      if (d.code.length > MAX_CODE_LENGTH) {
        problems.push(`reactor "${d.name}" (${d.key}): code is ${d.code.length} characters; the limit is ${MAX_CODE_LENGTH}`);
      }
      for (const [field, { min, max }] of Object.entries(REACTOR_LIMITS) as Array<[ReactorLimitField, { min: number; max: number }]>) {
        const v = d[field];
        if (!Number.isInteger(v) || v < min || v > max) problems.push(`reactor "${d.name}" (${d.key}): ${field} must be an integer in ${min}..${max}`);
      }
    }
    if (problems.length) throw new Error(`reactors failed to register:\n  ${problems.join('\n  ')}`);

    const host = await this.ready(60_000);
    const staged: string[] = [];
    // One at a time: a reactor whose top-level code crashes the host is then known by name.
    for (const d of defs) {
      let error: string | undefined;
      try {
        error = await host.ack({ t: 'register', def: d });
      } catch (err) {
        if (!(err instanceof HostGoneError)) throw err;
        problems.push(`reactor "${d.name}" (${d.key}): crashed the reactor host while starting (${err.message})`);
        break;
      }
      if (error === undefined) staged.push(d.key);
      else problems.push(`reactor "${d.name}" (${d.key}): ${error}`);
    }
    if (problems.length) {
      if (!host.exited) await host.ack({ t: 'discard', keys: staged }).catch(() => undefined);
      throw new Error(`reactors failed to register:\n  ${problems.join('\n  ')}`);
    }
    await host.ack({ t: 'commit', keys: staged });
    for (const d of defs) this.defs.set(d.key, { ...d, configuration: { ...d.configuration } });
  }

  /**
   * Forgets reactors (after a reload removed them from the config): their isolates are disposed
   * and calls get 404. In the same order as `register` calls.
   */
  unregister(keys: string[]): Promise<void> {
    const run = this.registerChain.then(async () => {
      const known = keys.filter((k) => this.defs.delete(k));
      if (known.length === 0) return;
      const host = this.host;
      // A host being restarted re-registers only what is still in `defs`.
      if (host && !host.exited) await host.ack({ t: 'remove', keys: known }).catch(() => undefined);
    });
    this.registerChain = run.catch(() => undefined);
    return run;
  }

  /**
   * Runs a reactor. `{ args }` resolves with the user function's return value (a copy);
   * `{ transform }` passes `args: { body, headers, method, path, query }` and resolves with the
   * validated `{ body, headers? }`. Failures are ServiceErrors (reactor_*, body_too_large).
   */
  invoke(key: string, input: { transform: TransformArgs }, opts?: InvokeOptions): Promise<TransformResult>;
  invoke(key: string, input: { args: unknown }, opts?: InvokeOptions): Promise<unknown>;
  /** `argsJson`: the args already as compact JSON text (a large body serialized off the event loop). */
  invoke(key: string, input: { argsJson: string }, opts?: InvokeOptions): Promise<unknown>;
  async invoke(key: string, input: ReactorInput | { argsJson: string }, opts: InvokeOptions = {}): Promise<unknown> {
    const def = this.defs.get(key);
    if (!def) throw new ServiceError('not_found', { detail: 'No such reactor' });
    let argsJson: string | undefined;
    if ('argsJson' in input) argsJson = input.argsJson;
    else {
      try {
        argsJson = JSON.stringify('transform' in input ? input.transform : input.args);
      } catch {
        throw new ServiceError('validation_failed', { detail: 'The reactor args are not JSON-serializable' });
      }
    }
    argsJson ??= '';
    // Spec: 5 MB payload limit, refused before the host sees it.
    if (argsJson.length > this.settings.payloadLimit || Buffer.byteLength(argsJson, 'utf8') > this.settings.payloadLimit) {
      throw new ServiceError('body_too_large', { detail: `The reactor payload exceeds the limit of ${this.settings.payloadLimit} bytes` });
    }
    if (this.closed) throw unavailable();
    const until = this.suspended.get(key);
    if (until !== undefined) {
      const left = until - Date.now();
      // Retry-After is when the suspension ends, not "soon": retrying earlier only gets more 503s.
      if (left > 0) throw unavailable('The reactor is suspended: it crashed the reactor host repeatedly', Math.ceil(left / 1000));
      this.suspended.delete(key);
    }

    const host = await this.ready(this.settings.restartWaitMs);
    const result = await this.call(host, def, argsJson);
    if (result.served) opts.served?.(result.served);
    this.settings.metrics?.call(result.ok ? 'ok' : result.failure.kind);
    this.logConsole(result.logs, key, opts.log ?? this.log);
    if (!result.ok) throw failureToError(result.failure, def);
    let value: unknown;
    try {
      value = result.output === '' ? undefined : JSON.parse(result.output);
    } catch {
      throw new ServiceError('reactor_invalid_output', { detail: 'The reactor returned an invalid result: not JSON' });
    }
    return 'transform' in input ? validateTransformResult(value) : value;
  }

  private async call(host: HostProcess, def: ReactorDefinition, argsJson: string): Promise<Awaited<ReturnType<HostProcess['invoke']>>> {
    // The host answers within queue wait + run time; past that it is stuck and gets replaced.
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        this.log.error({ reactor: def.key, reactorHost: host.pid }, 'reactor host did not answer a call in time; killing it');
        host.kill();
        reject(unavailable());
      }, 2 * def.timeout_ms + CALL_GRACE_MS);
    });
    try {
      return await Promise.race([host.invoke(def.key, argsJson), deadline]);
    } catch (err) {
      this.settings.metrics?.call(err instanceof HostGoneError ? 'host_gone' : 'host_unresponsive');
      if (err instanceof HostGoneError) throw unavailable('The reactor host stopped while running the reactor');
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  private logConsole(lines: ConsoleLine[], key: string, log: Logger): void {
    for (const line of lines) {
      const fields = { reactor: key, console: line.level };
      if (line.level === 'error') log.error(fields, line.msg);
      else if (line.level === 'warn') log.warn(fields, line.msg);
      else if (line.level === 'debug') log.debug(fields, line.msg);
      else log.info(fields, line.msg);
    }
  }

  /** The live host, or the one being started (waiting at most `waitMs`), or 503. */
  private async ready(waitMs: number): Promise<HostProcess> {
    if (this.closed) throw unavailable();
    if (this.host && !this.host.exited) return this.host;
    const pending = this.restarting;
    if (!pending) throw unavailable();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(unavailable('The reactor host is restarting')), waitMs);
    });
    try {
      return await Promise.race([pending, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  private strike(key: string): void {
    const now = Date.now();
    const recent = (this.strikes.get(key) ?? []).filter((at) => now - at < this.settings.suspension.windowMs);
    recent.push(now);
    this.strikes.set(key, recent);
    if (recent.length >= this.settings.suspension.strikes) {
      this.strikes.delete(key);
      this.suspended.set(key, now + this.settings.suspension.suspendMs);
      this.log.error({ reactor: key, suspendMs: this.settings.suspension.suspendMs }, 'reactor suspended: it crashed the reactor host repeatedly');
    }
  }

  private adopt(host: HostProcess): void {
    this.host = host;
    host.onFatal((key) => this.strike(key));
    const startedAt = Date.now();
    host.onExit((code, signal) => {
      if (this.host === host) this.host = null;
      if (this.closed) return;
      if (Date.now() - startedAt > STABLE_AFTER_MS) this.crashes = 0;
      this.crashes++;
      this.log.error({ reactorHost: host.pid, code, signal, restarts: this.crashes }, 'reactor host died; restarting it');
      this.restarting ??= this.restart();
    });
  }

  /** Starts hosts until one is up with every registered reactor (crash-loop backoff in between). */
  private async restart(): Promise<HostProcess> {
    try {
      for (;;) {
        const wait = this.crashes <= 1 ? 0 : Math.min(100 * 2 ** (this.crashes - 2), MAX_RESTART_DELAY_MS);
        if (wait) await delay(wait);
        if (this.closed) throw unavailable();
        let host: HostProcess | undefined;
        try {
          host = await this.spawnHost();
          await this.reregister(host);
        } catch (err) {
          host?.kill();
          this.crashes++;
          this.log.error({ err: err instanceof Error ? err.message : String(err) }, 'reactor host restart failed');
          continue;
        }
        if (this.closed) {
          await host.stop();
          throw unavailable();
        }
        this.adopt(host);
        this.settings.metrics?.hostRestarted();
        this.log.info({ reactorHost: host.pid, reactors: this.defs.size }, 'reactor host restarted');
        return host;
      }
    } finally {
      this.restarting = null;
    }
  }

  private async reregister(host: HostProcess): Promise<void> {
    const keys: string[] = [];
    for (const d of this.defs.values()) {
      const error = await host.ack({ t: 'register', def: d });
      // Registered once already, so a failure now is environmental; the others still serve.
      if (error === undefined) keys.push(d.key);
      else this.log.error({ reactor: d.key }, `reactor failed to start after a host restart: ${error}`);
    }
    await host.ack({ t: 'commit', keys });
  }

  /** Stops the host; calls in flight get 503. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const host = this.host;
    this.host = null;
    await host?.stop();
    // A restart under way notices `closed` and stops its host itself.
    await this.restarting?.catch(() => undefined);
  }
}
