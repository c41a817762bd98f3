/**
 * One isolate running one reactor: created, compiled and warmed once, then called many times,
 * one call at a time. Host process only (imports isolated-vm).
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
} from './protocol.js';
import { HARNESS_SOURCE, wrapModule } from './sandbox.js';

/**
 * isolated-vm's own `timeout` covers the call and the microtasks it leaves behind (measured: an
 * endless `await` loop or a self-rescheduling `.then` chain is stopped at the limit). It cannot
 * end a promise that simply never settles (there are no timers to settle it), so a host-side
 * backstop disposes the isolate a little later.
 */
const BACKSTOP_GRACE_MS = 100;
const BACKSTOP: unique symbol = Symbol('backstop');

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

export class Sandbox {
  /** Set once the isolate must not serve another call. */
  broken = false;
  /** Warm isolates are kept; extra (cold-started) ones are disposed when idle. */
  warm = false;
  idleTimer: NodeJS.Timeout | undefined;

  private constructor(
    private readonly isolate: Isolate,
    private readonly context: Context,
    private readonly runRef: Reference,
    readonly def: HostReactorDef,
  ) {}

  /**
   * Builds an isolate for `def`: harness, then the user's module (its top-level code runs here,
   * under the reactor's timeout). Throws ReactorCodeError for problems with the code; `compiled`
   * receives the code cache after the first successful compile.
   */
  static async create(def: HostReactorDef, compiled: CompiledCode, onCatastrophicError: (message: string) => void): Promise<Sandbox> {
    const isolate = new (isolatedVm().Isolate)({ memoryLimit: def.memory_limit_mb, onCatastrophicError });
    try {
      const context = await isolate.createContext();
      const harness = await context.evalClosure(HARNESS_SOURCE, [JSON.stringify(def.configuration)], {
        timeout: def.timeout_ms,
        result: { reference: true },
      });
      const runRef = (await harness.get('run', { reference: true })) as Reference;
      const exportTypeRef = await harness.get('exportType', { reference: true });
      harness.release();

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
      try {
        await script.run(context, { timeout: def.timeout_ms, release: true });
      } catch (err) {
        throw new ReactorCodeError(classifyTopLevel(err, isolate, def));
      }
      const exportType: unknown = await exportTypeRef.apply(undefined, [], { timeout: def.timeout_ms, result: { copy: true } });
      exportTypeRef.release();
      if (exportType !== 'function') {
        throw new ReactorCodeError(`does not export a function (module.exports is ${exportType === 'missing' ? 'not set' : String(exportType)})`);
      }
      return new Sandbox(isolate, context, runRef, def);
    } catch (err) {
      if (!isolate.isDisposed) isolate.dispose();
      throw err;
    }
  }

  /** One call. Never throws: every outcome is a CallResult, and a failure may mark this broken. */
  async run(argsJson: string): Promise<CallResult> {
    if (this.broken) return { ok: false, failure: { kind: 'internal', message: 'isolate already recycled' }, logs: [] };
    const timeout = this.def.timeout_ms;
    let timer: NodeJS.Timeout | undefined;
    const backstop = new Promise<typeof BACKSTOP>((resolve) => {
      timer = setTimeout(() => resolve(BACKSTOP), timeout + BACKSTOP_GRACE_MS);
    });
    const call = this.runRef.apply(undefined, [argsJson], { timeout, result: { promise: true, copy: true } });
    try {
      const raw: unknown = await Promise.race([call, backstop]);
      if (raw === BACKSTOP) {
        call.catch(() => undefined);
        this.dispose();
        return { ok: false, failure: { kind: 'timeout' }, logs: [] };
      }
      return toResult(raw);
    } catch (err) {
      // Anything thrown out of `run` escaped the harness's own try/catch: the isolate is suspect.
      this.broken = true;
      return { ok: false, failure: classifyRunError(err, this.isolate), logs: [] };
    } finally {
      clearTimeout(timer);
    }
  }

  get disposed(): boolean {
    return this.isolate.isDisposed;
  }

  dispose(): void {
    this.broken = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    if (this.isolate.isDisposed) return;
    try {
      this.runRef.release();
      this.context.release();
      this.isolate.dispose();
    } catch {
      // already disposed by isolated-vm (memory limit): nothing left to free
    }
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
