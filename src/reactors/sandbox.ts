/**
 * The JavaScript that runs *inside* each isolate, next to the user's code: a CommonJS-style
 * `module`/`exports`, a buffering `console`, and the `run` function the host calls.
 *
 * Everything crosses the boundary as strings: `run` takes the args as JSON text and answers
 * `[status, payload, consoleLines]` (copied out by isolated-vm), so no host object, Reference or
 * function is ever reachable from user code (copies in and out only). The harness keeps its own copies of
 * the intrinsics it needs, so user code that patches `JSON` only breaks its own results, which the
 * host validates anyway.
 *
 * No isolated-vm import here: this module is source text only.
 */
import { MAX_ERROR_MESSAGE_CHARS, MAX_LOG_LINE_CHARS, MAX_LOG_LINES, MAX_OUTPUT_BYTES } from './protocol.js';

/** What `run` returns, as seen by the host before validation. */
export type RunStatus = 'ok' | 'error' | 'invalid' | 'too_large';

/**
 * Body of a function whose `$0` is the configuration as JSON text (harnessScript). Returns `{ run, exportType }`
 * (held by the host as References, never handed to user code) and installs the one-shot global
 * `__tp_define`, through which the wrapped user module hands over its export. `run(argsJson)`
 * answers `[status, payload, consoleLines]` with status `RunStatus`.
 */
export const HARNESS_SOURCE = `
'use strict';
const G = globalThis;
const stringify = JSON.stringify;
const parse = JSON.parse;
const StringCtor = String;
const ErrorCtor = Error;
const configJson = $0;
const MAX_LINES = ${MAX_LOG_LINES};
const MAX_CHARS = ${MAX_LOG_LINE_CHARS};
const MAX_ERR = ${MAX_ERROR_MESSAGE_CHARS};
const MAX_OUT = ${MAX_OUTPUT_BYTES};

// "Standard JavaScript and nothing else": WebAssembly memory is not ours to account for, and a
// bare isolate's V8 console would swallow output; both go.
delete G.WebAssembly;

let lines = [];
let dropped = 0;

function fmt(v) {
  if (typeof v === 'string') return v;
  try {
    if (v instanceof ErrorCtor) return StringCtor(v.stack || v.message);
    const s = stringify(v);
    if (typeof s === 'string') return s;
  } catch (e) {}
  try { return StringCtor(v); } catch (e) { return '[unprintable]'; }
}

function capture(level, args) {
  if (lines.length >= MAX_LINES) { dropped++; return; }
  let msg = '';
  for (let i = 0; i < args.length && msg.length <= MAX_CHARS; i++) msg += (i ? ' ' : '') + fmt(args[i]);
  if (msg.length > MAX_CHARS) msg = msg.substring(0, MAX_CHARS) + '…';
  lines[lines.length] = { level: level, msg: msg };
}

const consoleObject = {};
for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
  consoleObject[level] = function () { capture(level, arguments); };
}
Object.freeze(consoleObject);
Object.defineProperty(G, 'console', { value: consoleObject, writable: true, configurable: true, enumerable: false });

function takeLines() {
  const out = lines;
  if (dropped > 0) out[out.length] = { level: 'warn', msg: '[' + dropped + ' more console lines dropped]' };
  lines = [];
  dropped = 0;
  return out;
}

function describe(e) {
  let message = 'Error';
  let status;
  try {
    if (e !== null && (typeof e === 'object' || typeof e === 'function')) {
      const m = e.message;
      message = typeof m === 'string' ? m : StringCtor(e);
      const s = e.status;
      if (typeof s === 'number') status = s;
    } else {
      message = StringCtor(e);
    }
  } catch (err) {
    message = 'unprintable error';
  }
  if (message.length > MAX_ERR) message = message.substring(0, MAX_ERR) + '…';
  return stringify(status === undefined ? { message: message } : { message: message, status: status });
}

let fn = null;
let defined = false;
Object.defineProperty(G, '__tp_define', {
  configurable: true,
  value: function (factory) {
    if (defined) return;
    defined = true;
    delete G.__tp_define;
    const module = { exports: {} };
    factory.call(module.exports, module, module.exports);
    fn = module.exports;
  },
});

async function run(argsJson) {
  let value;
  try {
    const req = { args: argsJson === '' ? undefined : parse(argsJson), configuration: parse(configJson) };
    value = await fn(req);
  } catch (e) {
    return ['error', describe(e), takeLines()];
  }
  let json;
  try {
    json = value === undefined ? '' : stringify(value);
  } catch (e) {
    let m = 'unknown error';
    try { m = StringCtor(e && e.message); } catch (err) {}
    return ['invalid', 'the result is not JSON-serializable: ' + m.substring(0, MAX_ERR), takeLines()];
  }
  if (typeof json !== 'string') return ['invalid', 'the result is not JSON-serializable', takeLines()];
  if (json.length > MAX_OUT) return ['too_large', '', takeLines()];
  return ['ok', json, takeLines()];
}

return {
  run: run,
  exportType: function () { return fn === null ? 'missing' : typeof fn; },
};
`;

/**
 * The harness as a script of its own, with the reactor's configuration in its text (JSON, a valid
 * JavaScript literal): compiled once per isolate and run in every call's new context. Its
 * completion value is `run` alone when `runOnly`, else `{ run, exportType }`.
 */
export function harnessScript(configuration: Readonly<Record<string, string>>, runOnly: boolean): string {
  return `(function ($0) {${HARNESS_SOURCE}\n})(${JSON.stringify(JSON.stringify(configuration))})${runOnly ? '.run' : ''};`;
}

/**
 * The user's CommonJS module as a script. The prefix sits on the first line so error line numbers
 * match the user's file; the newline before the closer survives a trailing line comment.
 */
export function wrapModule(code: string): string {
  return `__tp_define(function (module, exports) {${code}\n});`;
}
