/**
 * The worker thread behind large-json.ts: parses and walks large JSON bodies, and serializes
 * their answers, off the event loop. Stateless: every task brings its bytes (the body is parsed
 * again to render the answer rather than kept here between the two tasks).
 */
import { parentPort } from 'node:worker_threads';
import { ServiceError } from '../errors.js';
import { rebuild, summarizeTokenize } from '../vault/walk.js';
import type { WorkerAnswer, WorkerTask } from './json-worker-messages.js';
import { jsonDepthExceeds, parseJsonBytes } from './body.js';

/** max_tokens_per_request is at most 100 (config schema): a walk that counts 101 leaves has seen enough. */
const LEAF_CAP = 100;

function parse(bytes: Uint8Array, maxDepth: number | null): unknown {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (maxDepth !== null && jsonDepthExceeds(buf, maxDepth)) {
    throw new ServiceError('nesting_too_deep', { detail: `The body may be nested at most ${maxDepth} levels deep` });
  }
  // UTF-8 is checked here, off the event loop, with the parse (a render task's bytes passed it already).
  return parseJsonBytes(buf, 'The request body');
}

/** Whether the parsed value holds more than `max` JSON values (objects, arrays and scalars). */
function moreValuesThan(root: unknown, max: number): boolean {
  let count = 0;
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const v = stack.pop();
    if (++count > max) return true;
    if (typeof v === 'object' && v !== null) {
      const children = Array.isArray(v) ? v : Object.values(v);
      if (count + stack.length + children.length > max) return true;
      for (const c of children) stack.push(c);
    }
  }
  return false;
}

function run(task: WorkerTask): WorkerAnswer {
  if (task.op === 'args') {
    // POST /reactors/{id}/react: the same check as src/api/reactors.ts, then only `args` as text.
    const body = parse(task.bytes, task.maxDepth);
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw new ServiceError('validation_failed', { detail: 'The body must be an object: {"args": …}' });
    }
    return { id: task.id, ok: true, argsJson: JSON.stringify((body as { args?: unknown }).args) ?? '' };
  }
  if (task.op === 'value') {
    const value = parse(task.bytes, task.maxDepth);
    if (moreValuesThan(value, task.maxValues)) {
      throw new ServiceError('validation_failed', { detail: `This route takes bodies of at most ${task.maxValues} JSON values` });
    }
    return { id: task.id, ok: true, value };
  }
  if (task.op === 'plan') {
    const body = parse(task.bytes, task.maxDepth);
    const object = typeof body === 'object' && body !== null && !Array.isArray(body);
    const members = (['type', 'data'] as const).filter((k) => object && k in body);
    return { id: task.id, ok: true, summary: summarizeTokenize(body, { maxDepth: task.maxDepth, cap: LEAF_CAP, now: task.now }), members };
  }
  const answer = rebuild(parse(task.bytes, null), task.results);
  return { id: task.id, ok: true, json: new TextEncoder().encode(JSON.stringify(answer)) };
}

parentPort?.on('message', (task: WorkerTask) => {
  let answer: WorkerAnswer;
  try {
    answer = run(task);
  } catch (err) {
    // Only a ServiceError's code, detail and field errors cross: never a parser message.
    answer = { id: task.id, ok: false, error: err instanceof ServiceError ? { code: err.code, detail: err.detail, errors: err.errors } : null };
  }
  parentPort!.postMessage(answer, 'json' in answer ? [answer.json.buffer as ArrayBuffer] : []);
});
