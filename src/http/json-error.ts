/**
 * What a `400 invalid_json` says: where the body stops being JSON, as a line and a
 * column, and that an empty body is empty. Never any text of the body: V8's parser messages quote
 * it ("Unexpected token '}', "{"card":"4242…"}" is not valid JSON"), so only the offset is taken
 * from them and the text is built here.
 *
 * The offset: V8 reports "at position N" for most errors (Node 20; Node 22 and 24 add "(line L
 * column C)", which is not used: one way to count for every version) and "Unexpected end of JSON
 * input" for a text that ends early. For an unexpected token it reports no position; then the
 * scanner below finds it: the first character at which the text stops being a JSON text (RFC
 * 8259), which is where V8's positions point too (test/http/json-error.test.ts checks the two
 * agree). When neither gives one, the detail has no position rather than a wrong one.
 */
import { positionOf } from '../config/text-position.js';

const isWs = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isHex = (c: number) => isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);

/**
 * The offset of the first character at which `text` stops being a JSON text; text.length when it
 * ends before the text is complete; null when it is valid. Iterative: a body nested a million
 * levels deep must not overflow the stack on the error path.
 */
export function firstJsonError(text: string): number | null {
  const n = text.length;
  let i = 0;
  const stack: Array<'a' | 'o'> = [];
  const ws = () => {
    while (i < n && isWs(text.charCodeAt(i))) i++;
  };
  /** Scans a string from its opening quote; returns the error offset, or -1 when it closed. */
  const string = (): number => {
    i++;
    for (;;) {
      if (i >= n) return n;
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        i++;
        return -1;
      }
      if (c < 0x20) return i;
      if (c !== 0x5c) {
        i++;
        continue;
      }
      i++;
      if (i >= n) return n;
      const e = text[i]!;
      if ('"\\/bfnrt'.includes(e)) i++;
      else if (e === 'u') {
        i++;
        for (let k = 0; k < 4; k++, i++) {
          if (i >= n) return n;
          if (!isHex(text.charCodeAt(i))) return i;
        }
      } else return i;
    }
  };
  const digits = () => {
    while (i < n && isDigit(text.charCodeAt(i))) i++;
  };
  /** Scans a number; returns the error offset, or -1. */
  const number = (): number => {
    if (text[i] === '-') i++;
    if (i >= n) return n;
    if (text[i] === '0') {
      i++;
      if (i < n && isDigit(text.charCodeAt(i))) return i;
    } else if (isDigit(text.charCodeAt(i))) digits();
    else return i;
    if (text[i] === '.') {
      i++;
      if (i >= n) return n;
      if (!isDigit(text.charCodeAt(i))) return i;
      digits();
    }
    if (text[i] === 'e' || text[i] === 'E') {
      i++;
      if (text[i] === '+' || text[i] === '-') i++;
      if (i >= n) return n;
      if (!isDigit(text.charCodeAt(i))) return i;
      digits();
    }
    return -1;
  };
  /** A value at i (after whitespace): 'done', 'open' (a container opened, its first value is next), or the error offset. */
  const value = (): number | 'done' | 'open' => {
    if (i >= n) return n;
    const c = text[i]!;
    if (c === '{' || c === '[') {
      const close = c === '{' ? '}' : ']';
      i++;
      ws();
      if (text[i] === close) {
        i++;
        return 'done';
      }
      if (c === '{') {
        const k = key();
        if (k !== -1) return k;
      }
      stack.push(c === '{' ? 'o' : 'a');
      return 'open';
    }
    const end = c === '"' ? string() : c === '-' || isDigit(c.charCodeAt(0)) ? number() : literal(c);
    return end === -1 ? 'done' : end;
  };
  /** true, false or null at i; returns the error offset, or -1. */
  const literal = (c: string): number => {
    const word = ['true', 'false', 'null'].find((w) => w[0] === c);
    if (!word) return i;
    for (let k = 0; k < word.length; k++, i++) {
      if (i >= n) return n;
      if (text[i] !== word[k]) return i;
    }
    return -1;
  };
  /** A member's name and its colon, at i; -1 when done (i at the value, after whitespace). */
  const key = (): number => {
    if (i >= n) return n;
    if (text[i] !== '"') return i;
    const s = string();
    if (s !== -1) return s;
    ws();
    if (i >= n) return n;
    if (text[i] !== ':') return i;
    i++;
    ws();
    return -1;
  };
  ws();
  for (;;) {
    const v = value();
    if (typeof v === 'number') return v;
    if (v === 'open') {
      ws();
      continue;
    }
    // A value is complete: close containers until one expects another member.
    for (;;) {
      ws();
      const top = stack[stack.length - 1];
      if (top === undefined) return i < n ? i : null;
      if (i >= n) return n;
      const c = text[i];
      if (c === (top === 'a' ? ']' : '}')) {
        i++;
        stack.pop();
        continue;
      }
      if (c !== ',') return i;
      i++;
      ws();
      if (top === 'o') {
        const k = key();
        if (k !== -1) return k;
      }
      break;
    }
  }
}

/** The offset V8's message names: "at position N", or the end for "Unexpected end of JSON input". */
function offsetFromMessage(message: string, text: string): number | null {
  const m = / at position (\d+)/.exec(message);
  if (m) {
    const at = Number(m[1]);
    return at <= text.length ? at : null;
  }
  return message.startsWith('Unexpected end of JSON input') ? text.length : null;
}

/** JSON's whitespace only (or nothing): the body is empty, whatever its Content-Length. */
export function isEmptyJsonText(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (!isWs(text.charCodeAt(i))) return false;
  return true;
}

/**
 * The detail of an invalid_json answer for `text`, which JSON.parse refused with `parserMessage`;
 * `subject` names what was read ("The request body"). Holds no character of the text.
 */
export function invalidJsonDetail(text: string, parserMessage: string, subject: string): string {
  if (isEmptyJsonText(text)) return `${subject} is empty: it must be a JSON document`;
  const offset = offsetFromMessage(parserMessage, text) ?? firstJsonError(text);
  if (offset === null) return `${subject} is not valid JSON`;
  const { line, column } = positionOf(text, offset);
  return offset >= text.length
    ? `${subject} is not valid JSON: it ends at line ${line}, column ${column}, before the JSON document is complete`
    : `${subject} is not valid JSON: unexpected character at line ${line}, column ${column}`;
}
