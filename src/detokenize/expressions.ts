/**
 * Detokenization expressions (docs/detokenization.md "Detokenization"): the one parser every caller uses
 * (POST /detokenize, the outbound proxy, the proxies' `detokenize` transform, reactor args).
 * Pure: no I/O, no store, no permissions; the caller resolves the ids (detokenize/service.ts).
 *
 * Syntax, inside any string:
 * - `{{ token: <id> }}`: the whole token (`{ id, type, data, containers, metadata, … }`), e.g.
 *   `{{ token: <id> | json: '$.data.number' }}`;
 * - `{{ <id> }}`: the token's data, e.g. `{{ <id> | json: '$.number' }}`.
 * Filters chain with `|`: `json: '<path>'` (a JSONPath subset: `$`, `.field`, `[n]`) and the
 * Liquid filters token masks may use (`last4`, `reveal_last`, `slice`, `upcase`, …), evaluated by
 * the same Liquid engine as masks (vault/expressions.ts).
 *
 * Rules:
 * - `{{` only starts an expression when `token: <id>` or `<id>` follows and then `|` or `}}`;
 *   other text in braces (`{{ }}`, `{{ a b }}`, `{{ "x" }}`) is left as it is. Once an id is
 *   followed by `|` or `}}` it is an expression: a malformed filter is `invalid_expression`, an
 *   unknown one `unknown_filter` (400), never silently left in place.
 * - `\{{` is a literal `{{` (the backslash is dropped, nothing is parsed). In a JSON body the
 *   backslash itself is escaped: `"\\{{ not an expression }}"`.
 * - Expressions are found in JSON string values only, never in object keys.
 * - In a JSON string, an expression that is the whole string and yields a non-string (an object,
 *   a number, …) replaces the string with that JSON value; anywhere else a value is inserted as
 *   text (strings as they are, other values as JSON, null and a missing path as nothing).
 * - One request may hold at most MAX_EXPRESSIONS expressions (too_many_expressions, 400) and one
 *   expression at most MAX_EXPRESSION_CHARS characters. Scanning is linear in the input: no
 *   character is examined by more than two parse attempts.
 * - Bounded work per request: one ExpressionScan collects every carrier of a request
 *   (JSON, form and text bodies, header values, query, reactor args) against ONE budget, and
 *   rendering stops as soon as the values put in exceed MAX_OUTPUT_BYTES (5 MB, the default
 *   payload limit): each distinct expression is evaluated once, its size counted once per
 *   occurrence, and render() yields to the event loop every RENDER_SLICE_MS.
 * - A key without reveal on a token involved (Resolved.detailed false) gets every failure after
 *   values were put in as one problem, detokenized_value_refused, that names nothing (
 *   which header or which filter failed would tell it something about the value).
 *
 * Errors are ServiceErrors with stable codes; their details never quote a value.
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { performance } from 'node:perf_hooks';
import { ServiceError } from '../errors.js';
import { compileExpression, ExpressionError, isFilter, renderInScope } from '../vault/expressions.js';

/** The most expressions one request may hold, over all its carriers together. */
export const MAX_EXPRESSIONS = 1000;
/**
 * The most bytes (UTF-8) of values one request may have put in, over all its carriers: the
 * default payload limit (server.body_limit_bytes, 5 MB). Checked while rendering.
 */
export const MAX_OUTPUT_BYTES = 5 * 1024 * 1024;
/** render() gives the event loop a turn after this much evaluating: no long stalls. */
const RENDER_SLICE_MS = 10;
/** The most characters between `{{` and `}}` of one expression. */
export const MAX_EXPRESSION_CHARS = 1000;
/** Token ids are at most this long (as when a token is created with a custom id). */
const MAX_ID_LENGTH = 400;

/**
 * A token as an expression sees it: the record as a key could read it (plaintext `data` when the
 * key may use or reveal it, masked data after a `mask` rule). `{{ token: <id> }}` is this object,
 * `{{ <id> }}` its `data`.
 */
export interface DetokenizedToken {
  id: string;
  type: string;
  data: unknown;
  [field: string]: unknown;
}

type PathStep = string | number;

interface Filter {
  name: string;
  args: Array<string | number>;
  /** The parsed path of a `json` filter. */
  path?: PathStep[];
  /** A Liquid filter as Liquid source (`name: 'a', 2`), rebuilt from the parsed parts. */
  source?: string;
}

interface Expression {
  whole: boolean;
  id: string;
  filters: Filter[];
  /** The same key for the same id, form and filters: equal expressions are evaluated once. */
  key: string;
}

type Segment = string | Expression;

/** Counts expressions across one request. */
interface Budget {
  count: number;
}

function invalid(detail: string): ServiceError {
  return new ServiceError('invalid_expression', { detail });
}

const isWs = (c: number) => c === 32 || c === 9 || c === 10 || c === 13;
/** The characters of a token id: A-Z a-z 0-9 . _ ~ : @ + = - */
function isIdChar(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122)
    || c === 46 || c === 95 || c === 126 || c === 58 || c === 64 || c === 43 || c === 61 || c === 45;
}
const isNameStart = (c: number) => (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95;
const isNameChar = (c: number) => isNameStart(c) || (c >= 48 && c <= 57);

function skipWs(s: string, i: number): number {
  while (i < s.length && isWs(s.charCodeAt(i))) i++;
  return i;
}

/** `$`, `.field`, `[n]` (and `["field"]`): the JSONPath subset of the `json` filter. */
function parsePath(raw: string): PathStep[] {
  if (!raw.startsWith('$')) throw invalid('A json path starts with $ (e.g. $.data.number)');
  const steps: PathStep[] = [];
  let i = 1;
  while (i < raw.length) {
    const c = raw[i];
    if (c === '.') {
      let j = i + 1;
      while (j < raw.length && raw[j] !== '.' && raw[j] !== '[') j++;
      if (j === i + 1) throw invalid('A json path has an empty field name');
      steps.push(raw.slice(i + 1, j));
      i = j;
    } else if (c === '[') {
      const close = raw.indexOf(']', i);
      if (close === -1) throw invalid('A json path has an unclosed [');
      const inner = raw.slice(i + 1, close);
      if (/^[0-9]{1,9}$/.test(inner)) steps.push(Number(inner));
      else if (/^(['"]).*\1$/.test(inner) && inner.length >= 2) steps.push(inner.slice(1, -1));
      else throw invalid('A json path index must be a number ([0]) or a quoted name');
      i = close + 1;
    } else {
      throw invalid('A json path is $ followed by .field and [n] steps');
    }
  }
  return steps;
}

/**
 * Parses the expression whose `{{` ends at `start`. Returns null when the text there is not an
 * expression (left as it is), else the expression and the index after its `}}`.
 */
function parseAt(s: string, start: number): { expr: Expression; end: number } | null {
  const limit = Math.min(s.length, start + MAX_EXPRESSION_CHARS);
  let j = skipWs(s, start);
  let whole = false;
  if (s.startsWith('token', j)) {
    const k = skipWs(s, j + 5);
    if (s.charCodeAt(k) === 58 /* : */) {
      whole = true;
      j = skipWs(s, k + 1);
    }
  }
  const idStart = j;
  while (j < s.length && isIdChar(s.charCodeAt(j))) j++;
  if (j === idStart) return null;
  const id = s.slice(idStart, j);
  j = skipWs(s, j);
  const next = s.charCodeAt(j);
  const closes = next === 125 && s.charCodeAt(j + 1) === 125; // }}
  if (!closes && next !== 124 /* | */) return null;
  // From here on it is an expression: every problem is an error.
  if (id.length > MAX_ID_LENGTH) throw invalid(`A token id in an expression is longer than ${MAX_ID_LENGTH} characters`);
  const filters: Filter[] = [];
  while (s.charCodeAt(j) === 124) {
    j = skipWs(s, j + 1);
    const nameStart = j;
    if (!isNameStart(s.charCodeAt(j))) throw invalid('A filter name is expected after |');
    while (j < limit && isNameChar(s.charCodeAt(j))) j++;
    const name = s.slice(nameStart, j);
    if (name !== 'json' && !isFilter(name)) {
      throw new ServiceError('unknown_filter', { detail: 'An expression uses an unknown filter; use json or a filter token masks allow (docs/detokenization.md#detokenization)' });
    }
    j = skipWs(s, j);
    const args: Array<string | number> = [];
    const sources: string[] = [];
    if (s.charCodeAt(j) === 58 /* : */) {
      do {
        j = skipWs(s, j + 1);
        const q = s[j];
        if (q === "'" || q === '"') {
          const close = s.indexOf(q, j + 1);
          if (close === -1 || close >= limit) throw invalid('A filter argument has no closing quote');
          args.push(s.slice(j + 1, close));
          sources.push(s.slice(j, close + 1));
          j = close + 1;
        } else {
          const m = /^-?[0-9]{1,15}(?:\.[0-9]{1,15})?/.exec(s.slice(j, Math.min(limit, j + 40)));
          if (!m) throw invalid('A filter argument is a quoted string or a number');
          args.push(Number(m[0]));
          sources.push(m[0]);
          j += m[0].length;
        }
        j = skipWs(s, j);
      } while (s.charCodeAt(j) === 44 /* , */ && j < limit);
    }
    const filter: Filter = { name, args };
    if (name === 'json') {
      if (args.length !== 1 || typeof args[0] !== 'string') throw invalid("The json filter takes one quoted path: json: '$.data.number'");
      filter.path = parsePath(args[0]);
    } else {
      filter.source = sources.length > 0 ? `${name}: ${sources.join(', ')}` : name;
      // Compiled now (and cached), so a filter Liquid refuses fails before any token is resolved.
      try {
        compileExpression(`{{ v | ${filter.source} }}`);
      } catch (err) {
        if (err instanceof ExpressionError) throw invalid('A filter of an expression is not valid');
        throw err;
      }
    }
    filters.push(filter);
    if (j >= limit) break;
  }
  if (j >= limit) throw invalid(`An expression is longer than ${MAX_EXPRESSION_CHARS} characters`);
  if (s.charCodeAt(j) !== 125 || s.charCodeAt(j + 1) !== 125) throw invalid('An expression must end with }} after its filters');
  const key = `${whole ? 'T' : 'D'} ${id}${filters.map((f) => ` | ${f.path ? `json: ${JSON.stringify(f.args[0])}` : f.source!}`).join('')}`;
  return { expr: { whole, id, filters, key }, end: j + 2 };
}

/**
 * The segments of `s`, or null when `s` holds neither an expression nor an escaped `{{` (the
 * string stays as it is). Counts expressions against the budget.
 */
function parseText(s: string, budget: Budget): Segment[] | null {
  let at = s.indexOf('{{');
  if (at === -1) return null;
  const out: Segment[] = [];
  let literal = '';
  let pos = 0;
  let changed = false;
  while (at !== -1) {
    if (at > 0 && s.charCodeAt(at - 1) === 92 /* \ */) {
      literal += s.slice(pos, at - 1) + '{{';
      pos = at + 2;
      changed = true;
    } else {
      const hit = parseAt(s, at + 2);
      if (hit) {
        if (++budget.count > MAX_EXPRESSIONS) throw tooMany();
        literal += s.slice(pos, at);
        if (literal) out.push(literal);
        literal = '';
        out.push(hit.expr);
        pos = hit.end;
        changed = true;
      } else {
        // Not an expression: keep the first brace and look again from the second (`{{{ id }}`).
        literal += s.slice(pos, at + 1);
        pos = at + 1;
      }
    }
    at = s.indexOf('{{', pos);
  }
  if (!changed) return null;
  literal += s.slice(pos);
  if (literal) out.push(literal);
  return out;
}

/** Every string value of a JSON value (not the keys), depth first, without recursion. */
function* strings(value: unknown): Generator<string> {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'string') yield v;
    else if (Array.isArray(v)) for (let i = v.length - 1; i >= 0; i--) stack.push(v[i]);
    else if (typeof v === 'object' && v !== null) {
      const keys = Object.keys(v);
      for (let i = keys.length - 1; i >= 0; i--) stack.push((v as Record<string, unknown>)[keys[i]!]);
    }
  }
}

/** What the detokenizer needs to know of a request's expressions before it decrypts anything. */
export interface ExpressionUses {
  /** The distinct token ids, in order of first appearance. */
  readonly ids: readonly string[];
  /** The names of the filters the expressions over `id` use (`json` included). */
  filtersOf(id: string): ReadonlySet<string>;
}

/** The tokens of a request, resolved for one key (detokenize/service.ts). */
export interface Resolved {
  tokens: ReadonlyMap<string, DetokenizedToken>;
  /**
   * The key holds reveal on every token involved: failures after values were put in may say
   * what failed. Otherwise they are one detokenized_value_refused that names nothing.
   */
  detailed: boolean;
}

interface Use {
  expr: Expression;
  times: number;
}

/**
 * The expressions of one request, over every carrier, against one budget (a new budget
 * per header or per form field let a request hold any number). Scan every carrier first, resolve
 * `ids` (with `filtersOf`), then render() and put the values in with the Rendering.
 */
export class ExpressionScan implements ExpressionUses {
  private readonly budget: Budget = { count: 0 };
  /** Parsed strings that hold expressions: a repeated string is parsed once, counted each time. */
  private readonly parsed = new Map<string, Segment[]>();
  private readonly uses = new Map<string, Use>();
  private readonly filters = new Map<string, Set<string>>();
  private readonly order: string[] = [];

  get ids(): readonly string[] {
    return this.order;
  }

  filtersOf(id: string): ReadonlySet<string> {
    return this.filters.get(id) ?? new Set();
  }

  /** Scans the string values of a JSON value (object keys are not scanned). */
  json(value: unknown): this {
    for (const s of strings(value)) this.text(s);
    return this;
  }

  /** Scans one text (a header value, a form value, a text body). */
  text(s: string): this {
    this.segments(s);
    return this;
  }

  /** The segments of `s`, counted against the budget; null when nothing in it is replaced. */
  segments(s: string): Segment[] | null {
    const hit = this.parsed.get(s);
    let segs: Segment[] | null;
    if (hit === undefined) {
      segs = parseText(s, this.budget);
      // Kept for the Rendering; strings without an expression are not worth the memory.
      if (segs !== null) this.parsed.set(s, segs);
    } else {
      segs = hit;
      let n = 0;
      for (const seg of segs) if (typeof seg !== 'string') n++;
      this.budget.count += n;
      if (this.budget.count > MAX_EXPRESSIONS) throw tooMany();
    }
    if (segs) for (const seg of segs) if (typeof seg !== 'string') this.note(seg);
    return segs;
  }

  /** For the Rendering: a scanned string's segments, not counted again (one not scanned is scanned now). */
  parsedOf(s: string): Segment[] | null {
    return this.parsed.get(s) ?? this.segments(s);
  }

  private note(e: Expression): void {
    const use = this.uses.get(e.key);
    if (use) use.times++;
    else this.uses.set(e.key, { expr: e, times: 1 });
    let names = this.filters.get(e.id);
    if (!names) {
      names = new Set();
      this.filters.set(e.id, names);
      this.order.push(e.id);
    }
    for (const f of e.filters) names.add(f.name);
  }

  /**
   * Evaluates every expression scanned so far, within MAX_OUTPUT_BYTES, giving the event loop a
   * turn every RENDER_SLICE_MS; then the Rendering puts the values in (no evaluation left).
   */
  async render(resolved: Resolved): Promise<Rendering> {
    const r = new Rendering(this, resolved);
    let slice = performance.now();
    for (const use of this.uses.values()) {
      r.evaluate(use.expr, use.times);
      if (performance.now() - slice >= RENDER_SLICE_MS) {
        await yieldToLoop();
        slice = performance.now();
      }
    }
    return r;
  }

  /** render() without turns: for small inputs and tests (substituteJson, substituteText). */
  renderSync(resolved: Resolved): Rendering {
    const r = new Rendering(this, resolved);
    for (const use of this.uses.values()) r.evaluate(use.expr, use.times);
    return r;
  }
}

function tooMany(): ServiceError {
  return new ServiceError('too_many_expressions', { detail: `A request may hold at most ${MAX_EXPRESSIONS} expressions` });
}

/** The one answer for a key without reveal when anything fails after values were put in. */
export function valueRefused(): ServiceError {
  return new ServiceError('detokenized_value_refused', {
    detail: 'The values named in the request could not be put into it; nothing was sent',
  });
}

interface Value {
  value: unknown;
  /** The value as text (asText). */
  text: string;
  /** Its UTF-8 length. */
  bytes: number;
}

/** The values of a scan's expressions, and how they go into the request's parts. */
export class Rendering {
  private readonly values = new Map<string, Value>();
  private bytes = 0;

  /** How many bytes (UTF-8) of values were put in so far. */
  get renderedBytes(): number {
    return this.bytes;
  }

  constructor(private readonly scan: ExpressionScan, private readonly resolved: Resolved) {}

  /** `err` to a key with reveal on every token involved; else the one uniform problem. */
  refuse(err: ServiceError): ServiceError {
    return this.resolved.detailed ? err : valueRefused();
  }

  /** Evaluates `e` (once), counting its size `times` against MAX_OUTPUT_BYTES. */
  evaluate(e: Expression, times: number): Value {
    let v = this.values.get(e.key);
    if (v === undefined) {
      let value: unknown;
      try {
        value = evaluate(e, this.resolved.tokens);
      } catch (err) {
        if (err instanceof ServiceError && err.code === 'invalid_expression') throw this.refuse(err);
        throw err;
      }
      const text = asText(value);
      v = { value, text, bytes: Buffer.byteLength(text, 'utf8') };
      this.values.set(e.key, v);
    }
    this.bytes += v.bytes * times;
    if (this.bytes > MAX_OUTPUT_BYTES) {
      throw this.refuse(new ServiceError('detokenized_output_too_large', {
        detail: `The values put into one request may add up to at most ${MAX_OUTPUT_BYTES} bytes; nothing was sent`,
      }));
    }
    return v;
  }

  private valueOf(e: Expression): Value {
    // Every expression of a scanned string was evaluated by render(); counted there.
    return this.values.get(e.key) ?? this.evaluate(e, 1);
  }

  private string(s: string, inJson: boolean): unknown {
    const segs = this.scan.parsedOf(s);
    if (!segs) return s;
    if (inJson && segs.length === 1 && typeof segs[0] !== 'string') return this.valueOf(segs[0]!).value;
    let out = '';
    for (const seg of segs) out += typeof seg === 'string' ? seg : this.valueOf(seg).text;
    return out;
  }

  /**
   * The JSON value with every expression in its string values replaced (the input is not
   * changed; unchanged parts are shared).
   */
  json(v: unknown): unknown {
    if (typeof v === 'string') return this.string(v, true);
    if (Array.isArray(v)) {
      let copy: unknown[] | null = null;
      for (let i = 0; i < v.length; i++) {
        const x = this.json(v[i]);
        if (x !== v[i]) (copy ??= v.slice())[i] = x;
      }
      return copy ?? v;
    }
    if (typeof v === 'object' && v !== null) {
      const src = v as Record<string, unknown>;
      const keys = Object.keys(src);
      let values: unknown[] | null = null;
      for (let i = 0; i < keys.length; i++) {
        const before = src[keys[i]!];
        const x = this.json(before);
        if (x !== before) (values ??= keys.map((k) => src[k]))[i] = x;
      }
      if (values === null) return v;
      const copy: Record<string, unknown> = {};
      for (let i = 0; i < keys.length; i++) {
        // Own data properties only: a "__proto__" key of a parsed body is a key like any other.
        if (keys[i] === '__proto__') Object.defineProperty(copy, '__proto__', { value: values[i], enumerable: true, writable: true, configurable: true });
        else copy[keys[i]!] = values[i];
      }
      return copy;
    }
    return v;
  }

  /** The text with every expression replaced by its value as text. */
  text(s: string): string {
    return this.string(s, false) as string;
  }
}

function step(v: unknown, s: PathStep): unknown {
  if (typeof s === 'number') return Array.isArray(v) ? v[s] : undefined;
  if (typeof v !== 'object' || v === null || Array.isArray(v) || !Object.hasOwn(v, s)) return undefined;
  return (v as Record<string, unknown>)[s];
}

function asText(v: unknown): string {
  if (v === undefined || v === null) return '';
  if (typeof v === 'string') return v;
  return JSON.stringify(v);
}

function evaluate(e: Expression, tokens: ReadonlyMap<string, DetokenizedToken>): unknown {
  const token = tokens.get(e.id);
  if (!token) throw new ServiceError('unknown_token', { detail: 'An expression names a token that was not resolved' });
  let v: unknown = e.whole ? token : token.data;
  let liquid: string[] = [];
  const flush = () => {
    if (liquid.length === 0) return;
    try {
      v = renderInScope(`{{ v | ${liquid.join(' | ')} }}`, { v });
    } catch (err) {
      if (err instanceof ExpressionError) throw invalid('A filter of an expression could not be evaluated');
      throw err;
    }
    liquid = [];
  };
  for (const f of e.filters) {
    if (f.path) {
      flush();
      for (const s of f.path) v = step(v, s);
      if (v === undefined) v = null;
    } else liquid.push(f.source!);
  }
  flush();
  return v;
}

/**
 * The distinct token ids referenced by expressions in the string values of a JSON value (object
 * keys are not scanned), in order of first appearance. Throws invalid_expression, unknown_filter
 * or too_many_expressions: call it before resolving anything.
 */
export function findTokenIds(value: unknown): string[] {
  return [...new ExpressionScan().json(value).ids];
}

/** The distinct token ids referenced in a text (a header value, a form or text body). */
export function findTokenIdsInText(text: string): string[] {
  return [...new ExpressionScan().text(text).ids];
}

/**
 * The JSON value with every expression in its string values replaced, all at once (no turns to
 * the event loop; the routes use ExpressionScan.render). Every id must be in `tokens`, else
 * unknown_token.
 */
export function substituteJson(value: unknown, tokens: ReadonlyMap<string, DetokenizedToken>): unknown {
  const scan = new ExpressionScan().json(value);
  return scan.renderSync({ tokens, detailed: true }).json(value);
}

/** The text with every expression replaced by its value as text. */
export function substituteText(text: string, tokens: ReadonlyMap<string, DetokenizedToken>): string {
  const scan = new ExpressionScan().text(text);
  return scan.renderSync({ tokens, detailed: true }).text(text);
}
