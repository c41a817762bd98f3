/**
 * The reactor host's IPC protocol: the only messages that cross between the main process and the
 * host process (src/reactors/host.ts). Small on purpose. Payloads travel as JSON *strings*
 * (serialized once by the main process, parsed once inside the isolate) so the host never
 * deserializes user data and the sandbox only ever receives copies.
 *
 * This module is imported by both sides, so it must stay free of isolated-vm.
 */

/** Spec: maximum payload size to invoke a Reactor (the serialized args), 5 MB. */
export const MAX_PAYLOAD_BYTES = 5 * 1024 * 1024;
/** Ours: the serialized return value of a reactor is held to the same 5 MB. */
export const MAX_OUTPUT_BYTES = 5 * 1024 * 1024;
/** The host's exit code when no isolated-vm build loads (EX_CONFIG of sysexits.h; see ivm.ts). */
export const EXIT_NO_ISOLATED_VM = 78;
/** Captured console output per call: at most this many lines, each cut to MAX_LOG_LINE_CHARS. */
export const MAX_LOG_LINES = 100;
export const MAX_LOG_LINE_CHARS = 2048;
/** An error message from user code is cut to this length before it reaches a client. */
export const MAX_ERROR_MESSAGE_CHARS = 1024;

/** What the host needs to build isolates for one reactor. */
export interface HostReactorDef {
  key: string;
  name: string;
  code: string;
  configuration: Record<string, string>;
  timeout_ms: number;
  warm_concurrency: number;
  max_concurrency: number;
  queue_limit: number;
  memory_limit_mb: number;
}

export interface HostOptions {
  /** Extra (cold-started) isolates idle for this long are disposed. */
  idleMs: number;
}

export type ConsoleLevel = 'log' | 'info' | 'warn' | 'error' | 'debug';
export interface ConsoleLine {
  level: ConsoleLevel;
  msg: string;
}

/** Why a call failed, as the host saw it. The main process maps each kind to a ServiceError. */
export type CallFailure =
  | { kind: 'user_error'; message: string; status?: number }
  | { kind: 'timeout' }
  | { kind: 'out_of_memory' }
  | { kind: 'invalid_output'; message: string }
  | { kind: 'output_too_large' }
  | { kind: 'busy' }
  | { kind: 'unknown_reactor' }
  | { kind: 'internal'; message: string };

/**
 * Which isolate served a call (host diagnostics, never user data): a serial number per isolate
 * in this host, and the call's number on that isolate. Tests and benchmarks use it to tell warm,
 * cold-started and replaced isolates apart, since reactor code can no longer keep a counter of
 * its own across calls.
 */
export interface ServedBy {
  isolate: number;
  call: number;
}

export type CallResult =
  | { ok: true; output: string; logs: ConsoleLine[] }
  | { ok: false; failure: CallFailure; logs: ConsoleLine[] };

// main process → host
export type ToHost =
  | { t: 'init'; options: HostOptions }
  /** Compile a reactor into a staged pool (warm isolates included); answered by `ack`. */
  | { t: 'register'; id: number; def: HostReactorDef }
  /** Make staged pools live (replacing pools with the same key), or drop them. */
  | { t: 'commit'; id: number; keys: string[] }
  | { t: 'discard'; id: number; keys: string[] }
  /** Close live pools (reactors no longer in the config after a reload). */
  | { t: 'remove'; id: number; keys: string[] }
  /** `args` is the JSON text of the args, or '' for undefined. */
  | { t: 'invoke'; id: number; key: string; args: string }
  | { t: 'ping'; id: number };

// host → main process
export type FromHost =
  | { t: 'ready' }
  | { t: 'ack'; id: number; error?: string }
  | { t: 'done'; id: number; result: CallResult; served?: ServedBy }
  /** Host diagnostics (never user data). */
  | { t: 'log'; level: 'info' | 'warn' | 'error'; msg: string; reactor?: string }
  /** A reactor hit isolated-vm's catastrophic path; the host kills itself right after sending this. */
  | { t: 'fatal'; reactor: string; message: string };

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const CONSOLE_LEVELS: ReadonlySet<string> = new Set(['log', 'info', 'warn', 'error', 'debug']);

function isConsoleLines(v: unknown): v is ConsoleLine[] {
  return (
    Array.isArray(v) &&
    v.length <= MAX_LOG_LINES + 1 &&
    v.every((l) => isRecord(l) && typeof l.level === 'string' && CONSOLE_LEVELS.has(l.level) && typeof l.msg === 'string')
  );
}

const FAILURE_KINDS: ReadonlySet<string> = new Set([
  'user_error',
  'timeout',
  'out_of_memory',
  'invalid_output',
  'output_too_large',
  'busy',
  'unknown_reactor',
  'internal',
]);

function isFailure(v: unknown): v is CallFailure {
  if (!isRecord(v) || typeof v.kind !== 'string' || !FAILURE_KINDS.has(v.kind)) return false;
  if (v.kind === 'user_error') return typeof v.message === 'string' && (v.status === undefined || typeof v.status === 'number');
  if (v.kind === 'invalid_output' || v.kind === 'internal') return typeof v.message === 'string';
  return true;
}

function isCallResult(v: unknown): v is CallResult {
  if (!isRecord(v) || !isConsoleLines(v.logs)) return false;
  if (v.ok === true) return typeof v.output === 'string';
  return v.ok === false && isFailure(v.failure);
}

/** Narrows a message from the host; anything else is dropped (and logged) by the receiver. */
export function parseFromHost(v: unknown): FromHost | null {
  if (!isRecord(v)) return null;
  switch (v.t) {
    case 'ready':
      return { t: 'ready' };
    case 'ack':
      if (typeof v.id !== 'number' || (v.error !== undefined && typeof v.error !== 'string')) return null;
      return v.error === undefined ? { t: 'ack', id: v.id } : { t: 'ack', id: v.id, error: v.error };
    case 'done':
      if (typeof v.id !== 'number' || !isCallResult(v.result)) return null;
      if (isServedBy(v.served)) return { t: 'done', id: v.id, result: v.result, served: v.served };
      return { t: 'done', id: v.id, result: v.result };
    case 'fatal':
      return typeof v.reactor === 'string' && typeof v.message === 'string' ? { t: 'fatal', reactor: v.reactor, message: v.message } : null;
    case 'log':
      if ((v.level !== 'info' && v.level !== 'warn' && v.level !== 'error') || typeof v.msg !== 'string') return null;
      if (v.reactor !== undefined && typeof v.reactor !== 'string') return null;
      return v.reactor === undefined ? { t: 'log', level: v.level, msg: v.msg } : { t: 'log', level: v.level, msg: v.msg, reactor: v.reactor };
    default:
      return null;
  }
}

function isServedBy(v: unknown): v is ServedBy {
  return isRecord(v) && Number.isSafeInteger(v.isolate) && Number.isSafeInteger(v.call);
}

function isDef(v: unknown): v is HostReactorDef {
  if (!isRecord(v)) return false;
  const nums = ['timeout_ms', 'warm_concurrency', 'max_concurrency', 'queue_limit', 'memory_limit_mb'] as const;
  return (
    typeof v.key === 'string' &&
    typeof v.name === 'string' &&
    typeof v.code === 'string' &&
    isRecord(v.configuration) &&
    Object.values(v.configuration).every((c) => typeof c === 'string') &&
    nums.every((n) => typeof v[n] === 'number' && Number.isFinite(v[n]))
  );
}

function isStrings(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((s) => typeof s === 'string');
}

/** Narrows a message from the main process. */
export function parseToHost(v: unknown): ToHost | null {
  if (!isRecord(v)) return null;
  switch (v.t) {
    case 'init':
      return isRecord(v.options) && typeof v.options.idleMs === 'number' ? { t: 'init', options: { idleMs: v.options.idleMs } } : null;
    case 'register':
      return typeof v.id === 'number' && isDef(v.def) ? { t: 'register', id: v.id, def: v.def } : null;
    case 'commit':
    case 'discard':
    case 'remove':
      return typeof v.id === 'number' && isStrings(v.keys) ? { t: v.t, id: v.id, keys: v.keys } : null;
    case 'invoke':
      return typeof v.id === 'number' && typeof v.key === 'string' && typeof v.args === 'string'
        ? { t: 'invoke', id: v.id, key: v.key, args: v.args }
        : null;
    case 'ping':
      return typeof v.id === 'number' ? { t: 'ping', id: v.id } : null;
    default:
      return null;
  }
}
