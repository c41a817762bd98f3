/**
 * One isolate running one reactor: created and compiled once, then called many times, one call
 * at a time, each call in a new context (no data outlives a call). Host process only (imports
 * isolated-vm).
 *
 * An isolate that timed out, ran out of memory or failed in any way outside the user's own
 * try/catch is marked broken; the pool disposes it and never reuses it (sandbox hygiene: a suspect isolate is never called again).
 */
import { loadIsolatedVm, type CachedDataResult, type Context, type ExternalCopy, type IsolatedVm, type Isolate, type Reference, type Script } from './ivm.js';
import {
  MAX_LOG_LINE_CHARS,
  MAX_LOG_LINES,
  MAX_OUTPUT_BYTES,
  type CallFailure,
  type CallResult,
  type ConsoleLine,
  type ConsoleLevel,
  type HostReactorDef,
  type ServedBy,
} from './protocol.js';
import { harnessScript, wrapModule } from './sandbox.js';

/**
 * isolated-vm's own `timeout` covers the call and the microtasks it leaves behind (measured: an
 * endless `await` loop or a self-rescheduling `.then` chain is stopped at the limit). It cannot
 * end a promise that simply never settles (there are no timers to settle it), so a host-side
 * backstop disposes the isolate a little later.
 */
const BACKSTOP_GRACE_MS = 100;
const BACKSTOP: unique symbol = Symbol('backstop');
/**
 * After the backstop disposed the isolate, how long its call may take to end. An idle isolate's
 * call ends at once ("Promise was abandoned", about 100 ms); one whose thread is stuck in code that
 * ignores termination never does. Measured on isolated-vm 6.2 (Node 24): `new Array(1e8).fill(0)`
 * at a 16 MB limit is disposed by isolated-vm at its memory limit while its thread runs on, and
 * isolated-vm ends the whole process with "Script failed to terminate" about 7 s later, failing
 * whatever other calls run then. Such a host is ended at once instead (run()).
 */
const STUCK_GRACE_MS = 2000;

let loaded: IsolatedVm | undefined;
/** isolated-vm, loaded on first use (the host checks at start-up that it loads: host.ts). */
function isolatedVm(): IsolatedVm {
  return (loaded ??= loadIsolatedVm().ivm);
}

/** A problem with the reactor's code, found while building an isolate (reported at registration). */
export class ReactorCodeError extends Error {
  override name = 'ReactorCodeError';
}

export interface CompiledCode {
  /** V8 code cache from the first compile: later (cold) isolates skip parsing. */
  cachedData?: ExternalCopy;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

const CONSOLE_LEVELS: ReadonlySet<string> = new Set<ConsoleLevel>(['log', 'info', 'warn', 'error', 'debug']);

/** Validates the console lines copied out of the isolate (user code may have tampered with them). */
function cleanLines(v: unknown): ConsoleLine[] {
  if (!Array.isArray(v)) return [];
  const out: ConsoleLine[] = [];
  for (const l of v.slice(0, MAX_LOG_LINES + 1)) {
    if (typeof l !== 'object' || l === null) continue;
    const { level, msg } = l as { level?: unknown; msg?: unknown };
    if (typeof level !== 'string' || !CONSOLE_LEVELS.has(level) || typeof msg !== 'string') continue;
    out.push({ level: level as ConsoleLevel, msg: msg.length > MAX_LOG_LINE_CHARS + 1 ? msg.slice(0, MAX_LOG_LINE_CHARS) + '…' : msg });
  }
  return out;
}

function parseUserError(payload: string): CallFailure {
  try {
    const v: unknown = JSON.parse(payload);
    if (typeof v === 'object' && v !== null) {
      const { message, status } = v as { message?: unknown; status?: unknown };
      if (typeof message === 'string') {
        return typeof status === 'number' ? { kind: 'user_error', message, status } : { kind: 'user_error', message };
      }
    }
  } catch {
    // fall through: the harness always sends JSON, so this is tampering
  }
  return { kind: 'invalid_output', message: 'the reactor produced an unreadable error' };
}

/** Turns what `run` answered into a CallResult, trusting nothing about its shape. */
function toResult(raw: unknown): CallResult {
  if (!Array.isArray(raw) || raw.length !== 3 || typeof raw[1] !== 'string') {
    return { ok: false, failure: { kind: 'invalid_output', message: 'the reactor sandbox returned an unexpected value' }, logs: [] };
  }
  const [status, payload, rawLines] = raw as [unknown, string, unknown];
  const logs = cleanLines(rawLines);
  switch (status) {
    case 'ok':
      if (Buffer.byteLength(payload, 'utf8') > MAX_OUTPUT_BYTES) return { ok: false, failure: { kind: 'output_too_large' }, logs };
      return { ok: true, output: payload, logs };
    case 'error':
      return { ok: false, failure: parseUserError(payload), logs };
    case 'invalid':
      return { ok: false, failure: { kind: 'invalid_output', message: payload.slice(0, 1100) }, logs };
    case 'too_large':
      return { ok: false, failure: { kind: 'output_too_large' }, logs };
    default:
      return { ok: false, failure: { kind: 'invalid_output', message: 'the reactor sandbox returned an unexpected value' }, logs };
  }
}

/** One context, ready for one call: the harness and the user's module, run in it and nowhere else. */
interface Fresh {
  context: Context;
  runRef: Reference;
}

const HARNESS_FILENAME = 'file:///reactors/(harness).js';

/** What an isolate compiled once and runs in every call's context. */
interface Compiled {
  /** The harness, whose completion value is `{ run, exportType }` (registration: the export is checked). */
  harnessChecked: Script;
  /** The harness, whose completion value is `run` (every later call: one step fewer). */
  harness: Script;
  /** The user's module. */
  module: Script;
}

/** Serial numbers of the isolates of this process (ServedBy). */
let serials = 0;

/**
 * An isolate keeps compiled code, never data: every call runs in a context of its own,
 * built from the compiled harness and module, so globals, module-level variables, closures and
 * changes to built-ins (`Object.prototype`) made by one call are gone before the next. The next
 * call's context is built as soon as a call ends, while the isolate waits, so a warm call finds it
 * ready when the isolate had the time (building one costs about 1 ms: docs/benchmarks.md); the
 * module's top-level code therefore runs once per call, not once per isolate.
 */
export class Sandbox {
  /** This isolate's serial number and the calls it served so far (host diagnostics, ServedBy). */
  readonly serial = ++serials;
  private calls = 0;
  /** Set once the isolate must not serve another call. */
  broken = false;
  /** Warm isolates are kept; extra (cold-started) ones are disposed when idle. */
  warm = false;
  idleTimer: NodeJS.Timeout | undefined;
  /** The context the next call runs in (being built while the isolate is idle). */
  private next: Promise<Fresh> | undefined;
  /** The context a call is running in (released when the call ends, or with the isolate). */
  private current: Fresh | undefined;

  private constructor(
    private readonly isolate: Isolate,
    private readonly scripts: Compiled,
    readonly def: HostReactorDef,
    first: Fresh,
    private readonly onCatastrophicError: (message: string) => void,
  ) {
    this.next = Promise.resolve(first);
  }

  /**
   * Builds an isolate for `def` and the first call's context: harness, then the user's module (its
   * top-level code runs here, under the reactor's timeout). Throws ReactorCodeError for problems
   * with the code; `compiled` receives the code cache after the first successful compile.
   */
  static async create(def: HostReactorDef, compiled: CompiledCode, onCatastrophicError: (message: string) => void): Promise<Sandbox> {
    const isolate = new (isolatedVm().Isolate)({ memoryLimit: def.memory_limit_mb, onCatastrophicError });
    try {
      let script: Script;
      const filename = `file:///reactors/${encodeURIComponent(def.name)}.js`;
      try {
        if (compiled.cachedData) {
          script = await isolate.compileScript(wrapModule(def.code), { filename, cachedData: compiled.cachedData });
        } else {
          script = await isolate.compileScript(wrapModule(def.code), { filename, produceCachedData: true });
          const produced = (script as Script & CachedDataResult).cachedData;
          if (produced) compiled.cachedData = produced;
        }
      } catch (err) {
        throw new ReactorCodeError(`does not compile: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
      }
      // The configuration is part of the harness's text: compiled once, like the module.
      const scripts: Compiled = {
        harnessChecked: await isolate.compileScript(harnessScript(def.configuration, false), { filename: HARNESS_FILENAME }),
        harness: await isolate.compileScript(harnessScript(def.configuration, true), { filename: HARNESS_FILENAME }),
        module: script,
      };
      let first: Fresh;
      try {
        first = await prepare(isolate, scripts, def, true);
      } catch (err) {
        throw err instanceof ReactorCodeError ? err : new ReactorCodeError(classifyTopLevel(err, isolate, def));
      }
      return new Sandbox(isolate, scripts, def, first, onCatastrophicError);
    } catch (err) {
      if (!isolate.isDisposed) isolate.dispose();
      throw err;
    }
  }

  /** One call. Never throws: every outcome is a CallResult, and a failure may mark this broken. */
  async run(argsJson: string): Promise<CallResult> {
    if (this.broken) return { ok: false, failure: { kind: 'internal', message: 'isolate already recycled' }, logs: [] };
    let fresh: Fresh;
    try {
      fresh = await (this.next ?? this.prepareNext());
    } catch (err) {
      // The module's top-level code failed this time (it did at registration too, or it depends
      // on chance): the isolate is suspect.
      this.broken = true;
      return { ok: false, failure: classifyRunError(err, this.isolate), logs: [] };
    } finally {
      this.next = undefined;
    }
    if (this.broken) return { ok: false, failure: { kind: 'internal', message: 'isolate already recycled' }, logs: [] };
    this.calls++;
    this.current = fresh;
    const timeout = this.def.timeout_ms;
    let timer: NodeJS.Timeout | undefined;
    const backstop = new Promise<typeof BACKSTOP>((resolve) => {
      timer = setTimeout(() => resolve(BACKSTOP), timeout + BACKSTOP_GRACE_MS);
    });
    const call = fresh.runRef.apply(undefined, [argsJson], { timeout, result: { promise: true, copy: true } });
    try {
      const raw: unknown = await Promise.race([call, backstop]);
      if (raw === BACKSTOP) {
        // Disposed already, by isolated-vm: the isolate reached its memory limit.
        const atLimit = this.isolate.isDisposed;
        this.dispose();
        if (!(await settlesWithin(call, STUCK_GRACE_MS))) {
          // The isolate's thread cannot be stopped and will take the process down later, with
          // other reactors' calls in flight: end the host now, naming this reactor, while its own
          // call is the one in flight (the host sends no answer for it: the caller gets 503).
          this.onCatastrophicError('the isolate did not stop at its time or memory limit');
          return { ok: false, failure: { kind: 'internal', message: 'the isolate did not stop' }, logs: [] };
        }
        return { ok: false, failure: atLimit ? { kind: 'out_of_memory' } : { kind: 'timeout' }, logs: [] };
      }
      return toResult(raw);
    } catch (err) {
      // Anything thrown out of `run` escaped the harness's own try/catch: the isolate is suspect.
      this.broken = true;
      return { ok: false, failure: classifyRunError(err, this.isolate), logs: [] };
    } finally {
      clearTimeout(timer);
      this.current = undefined;
      release(fresh);
      // Nothing of this call survives it: the next call gets a context of its own, built now.
      if (!this.broken) this.prepareNext();
    }
  }

  /** Starts building the next call's context; a failure is kept for that call to report. */
  private prepareNext(): Promise<Fresh> {
    const next = prepare(this.isolate, this.scripts, this.def, false);
    // Handled by the call that takes it; until then it must not count as unhandled.
    next.catch(() => undefined);
    this.next = next;
    return next;
  }

  /** Which isolate served the last call, and its number on it. */
  get served(): ServedBy {
    return { isolate: this.serial, call: this.calls };
  }

  get disposed(): boolean {
    return this.isolate.isDisposed;
  }

  dispose(): void {
    this.broken = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    if (this.isolate.isDisposed) return;
    try {
      if (this.current) release(this.current);
      this.isolate.dispose();
    } catch {
      // already disposed by isolated-vm (memory limit): nothing left to free
    }
  }
}

/**
 * A new context with the harness and the user's module run in it. `checkExport` (at registration)
 * also checks that the module exports a function; later contexts run the same code, and a module
 * that exports something else only by chance fails its call inside the harness.
 */
async function prepare(isolate: Isolate, scripts: Compiled, def: HostReactorDef, checkExport: boolean): Promise<Fresh> {
  const context = await isolate.createContext();
  try {
    let runRef: Reference;
    let exportTypeRef: Reference | undefined;
    if (checkExport) {
      const harness = (await scripts.harnessChecked.run(context, { timeout: def.timeout_ms, reference: true })) as Reference;
      runRef = await harness.get('run', { reference: true });
      exportTypeRef = await harness.get('exportType', { reference: true });
      harness.release();
    } else {
      runRef = (await scripts.harness.run(context, { timeout: def.timeout_ms, reference: true })) as Reference;
    }
    await scripts.module.run(context, { timeout: def.timeout_ms });
    if (exportTypeRef) {
      const exportType: unknown = await exportTypeRef.apply(undefined, [], { timeout: def.timeout_ms, result: { copy: true } });
      exportTypeRef.release();
      if (exportType !== 'function') {
        throw new ReactorCodeError(`does not export a function (module.exports is ${exportType === 'missing' ? 'not set' : String(exportType)})`);
      }
    }
    return { context, runRef };
  } catch (err) {
    context.release();
    throw err;
  }
}

/** Whether `p` settles (either way) within `ms`. */
function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  return Promise.race([p.then(() => true, () => true), late]).finally(() => clearTimeout(timer));
}

function release(fresh: Fresh): void {
  try {
    fresh.runRef.release();
    fresh.context.release();
  } catch {
    // the isolate is already gone
  }
}

function isTimeout(err: unknown): boolean {
  return messageOf(err).includes('Script execution timed out');
}

function isOutOfMemory(err: unknown, isolate: Isolate): boolean {
  return isolate.isDisposed && /memory limit/i.test(messageOf(err));
}

function classifyRunError(err: unknown, isolate: Isolate): CallFailure {
  if (isTimeout(err)) return { kind: 'timeout' };
  if (isOutOfMemory(err, isolate)) return { kind: 'out_of_memory' };
  return { kind: 'internal', message: messageOf(err).slice(0, 300) };
}

function classifyTopLevel(err: unknown, isolate: Isolate, def: HostReactorDef): string {
  if (isTimeout(err)) return `top-level code did not finish within ${def.timeout_ms} ms`;
  if (isOutOfMemory(err, isolate)) return `top-level code exceeded the memory limit of ${def.memory_limit_mb} MB`;
  return `top-level code threw: ${messageOf(err)}`;
}
