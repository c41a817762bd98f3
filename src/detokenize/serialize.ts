/**
 * JSON.stringify in turns.
 * A POST /detokenize answer may carry up to 5 MB of values (expressions.ts MAX_OUTPUT_BYTES);
 * one JSON.stringify of that took 115-250 ms on a busy 2-core machine, and one Buffer.from of the
 * result another 75-130 ms. This walks the value, hands the text out in pieces of about CHUNK
 * characters and gives the event loop a turn every SLICE_MS; each string value is still
 * stringified at once (one value is at most what one token holds).
 * The output is what JSON.stringify gives for parsed JSON and token records (no toJSON, no
 * functions): undefined members are left out, undefined array items are null.
 */
import { performance } from 'node:perf_hooks';
import { setImmediate as yieldToLoop } from 'node:timers/promises';

const SLICE_MS = 10;
const CHUNK = 64 * 1024;

/** Writes the JSON text of `value` to `sink` in pieces, in turns; a sink's promise is awaited (back-pressure). */
export async function stringifyInTurns(value: unknown, sink: (piece: string) => void | Promise<void>): Promise<void> {
  let parts: string[] = [];
  let size = 0;
  let slice = performance.now();
  const flush = async () => {
    const piece = parts.join('');
    parts = [];
    size = 0;
    if (piece !== '') await sink(piece);
  };
  const turn = async () => {
    if (size >= CHUNK) await flush();
    if (performance.now() - slice >= SLICE_MS) {
      await yieldToLoop();
      slice = performance.now();
    }
  };
  const walk = async (v: unknown): Promise<void> => {
    if (Array.isArray(v)) {
      parts.push('[');
      for (let i = 0; i < v.length; i++) {
        if (i > 0) parts.push(',');
        const x: unknown = v[i];
        if (x === undefined || typeof x === 'function' || typeof x === 'symbol') parts.push('null');
        else await walk(x);
      }
      parts.push(']');
    } else if (typeof v === 'object' && v !== null) {
      parts.push('{');
      let first = true;
      for (const k of Object.keys(v)) {
        const x = (v as Record<string, unknown>)[k];
        if (x === undefined || typeof x === 'function' || typeof x === 'symbol') continue;
        parts.push(first ? `${JSON.stringify(k)}:` : `,${JSON.stringify(k)}:`);
        first = false;
        await walk(x);
      }
      parts.push('}');
    } else {
      const text = JSON.stringify(v) ?? 'null';
      parts.push(text);
      size += text.length;
    }
    await turn();
  };
  await walk(value);
  await flush();
}
