/**
 * Expressions (compat.md): Liquid-style `{{ data.number | reveal_last: 4 }}` over a token's data,
 * for fingerprints, search indexes and masks. Only output blocks are allowed (no `{% %}` tags),
 * templates are compiled once and cached, and liquidjs' parse/render/memory limits bound the work
 * a hostile expression can ask for. Custom filters are registered here and nowhere else.
 */
import { Liquid, type Template } from 'liquidjs';

export const MAX_EXPRESSION_LENGTH = 1000;
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

/** Renders an expression over `{ data }`. Errors never carry the data. */
export function renderExpression(expr: string, data: unknown): string {
  return renderInScope(expr, { data });
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
