/**
 * Expressions (docs/api.md "Token definitions"): Liquid-style `{{ data.number | reveal_last: 4 }}` over a token's data,
 * for fingerprints, search indexes and masks. Only output blocks are allowed (no `{% %}` tags),
 * templates are compiled once and cached, and liquidjs' parse/render/memory limits bound the work
 * a hostile expression can ask for. Custom filters are registered here and nowhere else.
 *
 * A token's expressions must depend on `data` (checkDataExpression: a constant such as
 * `{{ "4242…" }}` would turn a fingerprint into an oracle), and a render over data yields at most
 * MAX_EXPRESSION_OUTPUT_BYTES (4 KB) of UTF-8: more is an ExpressionError like any failure.
 */
import { Liquid, type Template } from 'liquidjs';

export const MAX_EXPRESSION_LENGTH = 1000;
/** The most a token expression may yield, in UTF-8 bytes (docs/api.md "Token definitions": 4 KB). */
export const MAX_EXPRESSION_OUTPUT_BYTES = 4096;
const CACHE_LIMIT = 1000;

const engine = new Liquid({
  cache: false,
  strictFilters: true,
  parseLimit: 10_000,
  renderLimit: 50,
  memoryLimit: 1e6,
  outputEscape: undefined,
});

function str(v: unknown): string {
  return v === undefined || v === null ? '' : String(v);
}

/** All characters but the last `n` replaced by `char` (default X); length unchanged. */
engine.registerFilter('reveal_last', (v: unknown, n: unknown = 4, char: unknown = 'X') => {
  const s = str(v);
  const keep = Math.max(0, Math.min(s.length, Number(n) || 0));
  return str(char).charAt(0).repeat(s.length - keep) + s.slice(s.length - keep);
});
/** The first `n` characters kept, the rest replaced by `char`. */
engine.registerFilter('reveal_first', (v: unknown, n: unknown = 6, char: unknown = 'X') => {
  const s = str(v);
  const keep = Math.max(0, Math.min(s.length, Number(n) || 0));
  return s.slice(0, keep) + str(char).charAt(0).repeat(s.length - keep);
});
engine.registerFilter('last4', (v: unknown) => str(v).slice(-4));
engine.registerFilter('digits', (v: unknown) => str(v).replace(/[^0-9]/g, ''));

/** Whether `name` is a filter expressions may use (liquidjs' own and the ones registered above). */
export function isFilter(name: string): boolean {
  return Object.hasOwn(engine.filters, name);
}

const cache = new Map<string, Template[]>();

export class ExpressionError extends Error {}

/** Parses (or takes from the cache) an expression; throws ExpressionError with a safe message. */
export function compileExpression(expr: string): Template[] {
  const hit = cache.get(expr);
  if (hit) return hit;
  if (expr.length > MAX_EXPRESSION_LENGTH) throw new ExpressionError(`expression is longer than ${MAX_EXPRESSION_LENGTH} characters`);
  if (expr.includes('{%')) throw new ExpressionError('only {{ }} output expressions are allowed');
  let tpl: Template[];
  try {
    tpl = engine.parse(expr);
  } catch (err) {
    throw new ExpressionError(`invalid expression: ${(err as Error).message.split(',')[0]}`);
  }
  if (cache.size >= CACHE_LIMIT) cache.delete(cache.keys().next().value!);
  cache.set(expr, tpl);
  return tpl;
}

const dataChecked = new Map<string, string | null>();

/**
 * Compiles a token expression and checks that it reads `data` and no other name: an expression
 * that does not depend on the token's data (a constant) is refused. Throws ExpressionError.
 */
export function checkDataExpression(expr: string): Template[] {
  const tpl = compileExpression(expr);
  let problem = dataChecked.get(expr);
  if (problem === undefined) {
    let names: string[];
    try {
      names = engine.globalVariablesSync(tpl);
    } catch {
      names = [];
    }
    if (names.some((n) => n !== 'data')) problem = 'an expression may refer to data only';
    else if (names.length === 0) problem = 'the expression must depend on data (a constant is not allowed)';
    else problem = null;
    if (dataChecked.size >= CACHE_LIMIT) dataChecked.delete(dataChecked.keys().next().value!);
    dataChecked.set(expr, problem);
  }
  if (problem !== null) throw new ExpressionError(problem);
  return tpl;
}

/**
 * Renders a token expression over `{ data }`; more than MAX_EXPRESSION_OUTPUT_BYTES of output is
 * an ExpressionError like a failed render. Errors never carry the data.
 */
export function renderExpression(expr: string, data: unknown): string {
  const out = readDirect(directPath(expr), data) ?? digitsOf(expr, data) ?? renderInScope(expr, { data });
  // UTF-8 is at most 3 bytes per UTF-16 unit: count only when it could be over.
  if (out.length * 3 > MAX_EXPRESSION_OUTPUT_BYTES && Buffer.byteLength(out, 'utf8') > MAX_EXPRESSION_OUTPUT_BYTES) {
    throw new ExpressionError(`the expression yields more than ${MAX_EXPRESSION_OUTPUT_BYTES} bytes`);
  }
  return out;
}

/**
 * `{{ data.a.b }}` without filters (the default card fingerprint `{{ data.number }}` is one) is
 * read directly: liquidjs' render of it cost almost as much as the token's HMAC in a CPU profile of
 * /tokenize (3.6% of the main thread vs 4.6%). Only a string found through own members of plain objects is taken; anything else
 * (an array, a number, a missing member) is rendered by liquidjs as before, so the answer is
 * always liquidjs' (test/vault/expressions-direct.test.ts compares the two).
 */
const DIRECT = /^\{\{\s*data((?:\.[A-Za-z_][A-Za-z0-9_]*)+)\s*\}\}$/;
const directPaths = new Map<string, string[] | null>();

function directPath(expr: string): string[] | null {
  let path = directPaths.get(expr);
  if (path === undefined) {
    const m = DIRECT.exec(expr);
    path = m ? m[1]!.slice(1).split('.') : null;
    if (directPaths.size >= CACHE_LIMIT) directPaths.delete(directPaths.keys().next().value!);
    directPaths.set(expr, path);
  }
  return path;
}

/** The string at `path` in `data`, or undefined when liquidjs must render the expression. */
export function readDirect(path: readonly string[] | null, data: unknown): string | undefined {
  if (path === null) return undefined;
  let v = data;
  for (const key of path) {
    if (typeof v !== 'object' || v === null || Array.isArray(v) || !Object.hasOwn(v, key)) return undefined;
    v = (v as Record<string, unknown>)[key];
  }
  return typeof v === 'string' ? v : undefined;
}

/**
 * `{{ data | digits }}`, the default fingerprint of five token types, over a string: its digits,
 * as the filter registered above gives them, without liquidjs. Its render counts against
 * liquidjs' renderLimit (50 ms of wall time), which a loaded machine's pauses could reach: a valid
 * definition refused at random. Anything else is left to liquidjs (test/vault/expressions-direct.test.ts).
 */
const DIGITS_EXPR = /^\{\{\s*data\s*\|\s*digits\s*\}\}$/;
function digitsOf(expr: string, data: unknown): string | undefined {
  return typeof data === 'string' && DIGITS_EXPR.test(expr) ? data.replace(/[^0-9]/g, '') : undefined;
}

/** Renders an expression over the given top-level names (e.g. the proxy's `{ tokens }`). */
export function renderInScope(expr: string, scope: Record<string, unknown>): string {
  const tpl = compileExpression(expr);
  try {
    return str(engine.renderSync(tpl, scope));
  } catch {
    throw new ExpressionError('the expression could not be evaluated');
  }
}
