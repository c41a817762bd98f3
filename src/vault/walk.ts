/**
 * The tokenize walk (spec "Endpoints"): a pure function from a request body to a plan — which
 * definitions, in which order, at which JSON paths — and back from results to a response of the
 * same shape. Objects with `type` and `data` are definitions; plain strings become `token`
 * tokens; other objects and arrays are walked; numbers, booleans and null stay as they are.
 * Nothing is written until the whole plan is valid.
 *
 * Both directions are linear and cheap per node: a path string is built only for a string or a
 * definition (at most max_tokens_per_request + 1 of them), never for the nodes in between, and
 * the answer shares every subtree that holds nothing to replace instead of copying it. A body too
 * large to walk on the event loop comes as a PreplannedBody (src/http/large-json.ts): walked in a
 * worker thread, it carries the walk's summary, and the answer is built there too.
 */
import type { TemplatePolicy } from '../auth/access.js';
import { ServiceError, type FieldErrors } from '../errors.js';
import { isDefinitionShape, parseDefinition, plainStringDefinition, type Definition } from './definition.js';
import { callerTemplates } from './templates.js';

export interface PlanOptions {
  maxDepth: number;
  maxTokens: number;
  now: number;
  /**
   * 'named' (or 'none', which the token service refuses before planning): the caller may not
   * compute on the values (auth/access.ts templatePolicy), so a definition that carries a template
   * of its own is refused (403 expression_not_allowed) before any value is validated. Default
   * 'caller'.
   */
  templates?: TemplatePolicy;
}

export interface Plan {
  definitions: Definition[];
  /** spec: a body that is a single definition answers with `mask`; anything else with `data`. */
  single: boolean;
}

/** An error body lists at most this many fields (a body of 500,000 unknown fields is one error, not 15 MB of them). */
export const MAX_ERROR_FIELDS = 100;

/**
 * What the walk found, before the request's own limits are applied: strings and definitions in
 * walk order (`leaves`, counted up to `cap` + 1), the valid definitions among them, the field
 * errors, and whether the walk stopped early.
 */
export interface WalkSummary {
  leaves: number;
  definitions: Definition[];
  errors: FieldErrors;
  /** The definitions' fields that are caller templates (vault/templates.ts), by path. */
  templates: FieldErrors;
  single: boolean;
  /** `too_many`: more than `cap` leaves; `too_deep`: a node deeper than maxDepth. */
  stop: 'too_many' | 'too_deep' | null;
}

/** A body whose walk was done elsewhere (a worker thread); it answers through `assembled`. */
export abstract class PreplannedBody {
  abstract readonly summary: WalkSummary;
  /** The answer: the body with the k-th string/definition replaced by `results[k]`. */
  abstract assembled(results: readonly unknown[]): unknown;
}

type Segment = string | number;

function pathOf(stack: readonly Segment[]): string {
  let path = '';
  for (const seg of stack) {
    if (typeof seg === 'number') path += `[${seg}]`;
    else path = path ? `${path}.${seg}` : seg;
  }
  return path;
}

/** Walks the body, stopping after `cap` + 1 leaves or at the first node deeper than maxDepth. */
export function summarizeTokenize(body: unknown, opts: { maxDepth: number; cap: number; now: number }): WalkSummary {
  const definitions: Definition[] = [];
  // No prototype: a field named "constructor" or "__proto__" is a key like any other here.
  const errors: FieldErrors = Object.create(null) as FieldErrors;
  const templates: FieldErrors = Object.create(null) as FieldErrors;
  const stack: Segment[] = [];
  let leaves = 0;
  let stop: WalkSummary['stop'] = null;
  const tooDeep = () => {
    stop = 'too_deep';
    return false;
  };
  const visit = (node: unknown, depth: number): boolean => {
    if (depth > opts.maxDepth) return tooDeep();
    if (typeof node === 'string') {
      if (++leaves > opts.cap) {
        stop = 'too_many';
        return false;
      }
      definitions.push(plainStringDefinition(pathOf(stack), node));
    } else if (typeof node !== 'object' || node === null) {
      // numbers, booleans and null stay as they are
    } else if (Array.isArray(node)) {
      // Every member, whatever its kind, is one level deeper: the first one is too deep already.
      if (node.length > 0 && depth + 1 > opts.maxDepth) return tooDeep();
      for (let i = 0; i < node.length; i++) {
        const child = node[i];
        // Scalars other than strings need no visit (and no stack push): the common bulk of a big body.
        if (typeof child !== 'object' && typeof child !== 'string') continue;
        if (child === null) continue;
        stack.push(i);
        const go = visit(child, depth + 1);
        stack.pop();
        if (!go) return false;
      }
    } else if (isDefinitionShape(node)) {
      if (++leaves > opts.cap) {
        stop = 'too_many';
        return false;
      }
      const path = pathOf(stack);
      callerTemplates(node, path, templates);
      const def = parseDefinition(node, path, errors, opts.now);
      if (def) definitions.push(def);
    } else {
      const keys = Object.keys(node);
      if (keys.length > 0 && depth + 1 > opts.maxDepth) return tooDeep();
      for (let i = 0; i < keys.length; i++) {
        const child = (node as Record<string, unknown>)[keys[i]!];
        if (typeof child !== 'object' && typeof child !== 'string') continue;
        if (child === null) continue;
        stack.push(keys[i]!);
        const go = visit(child, depth + 1);
        stack.pop();
        if (!go) return false;
      }
    }
    return true;
  };
  visit(body, 1);
  return { leaves, definitions, errors: boundErrors(errors), templates: boundErrors(templates), single: isDefinitionShape(body), stop };
}

function boundErrors(errors: FieldErrors): FieldErrors {
  const keys = Object.keys(errors);
  if (keys.length <= MAX_ERROR_FIELDS) return errors;
  const out: FieldErrors = Object.create(null) as FieldErrors;
  for (const k of keys.slice(0, MAX_ERROR_FIELDS)) out[k] = errors[k]!;
  return out;
}

function tooMany(max: number): ServiceError {
  return new ServiceError('too_many_tokens', { detail: `At most ${max} tokens can be created in one request` });
}

/** The request's limits applied to a summary: the same answer as a walk that stops at maxTokens. */
export function planFromSummary(s: WalkSummary, opts: PlanOptions): Plan {
  // Leaves are counted in walk order, so more than maxTokens of them means the walk would have
  // stopped there first, before any later nesting error.
  if (s.leaves > opts.maxTokens || s.stop === 'too_many') throw tooMany(opts.maxTokens);
  if (s.stop === 'too_deep') {
    throw new ServiceError('nesting_too_deep', { detail: `The body may be nested at most ${opts.maxDepth} levels deep` });
  }
  // Before validation: whether the values are valid must not decide the answer of a caller that
  // may not compute on them.
  if (opts.templates !== undefined && opts.templates !== 'caller' && Object.keys(s.templates).length > 0) {
    throw new ServiceError('expression_not_allowed', {
      detail: 'This key may not send expressions over values it did not send in the clear: use the type\'s defaults and named aliases; no token was created',
      errors: s.templates,
    });
  }
  if (Object.keys(s.errors).length > 0) {
    throw new ServiceError('validation_failed', { detail: 'One or more token definitions are invalid; no token was created', errors: s.errors });
  }
  return { definitions: s.definitions, single: s.single };
}

/** Builds the plan; throws nesting_too_deep, too_many_tokens or validation_failed (all errors at once). */
export function planTokenize(body: unknown, opts: PlanOptions): Plan {
  if (body instanceof PreplannedBody) return planFromSummary(body.summary, opts);
  return planFromSummary(summarizeTokenize(body, { maxDepth: opts.maxDepth, cap: opts.maxTokens, now: opts.now }), opts);
}

/** Rebuilds the body with the k-th string/definition replaced by `results[k]` (same walk order). */
export function assemble(body: unknown, results: readonly unknown[]): unknown {
  if (body instanceof PreplannedBody) return body.assembled(results);
  return rebuild(body, results);
}

/**
 * The answer of a walked body: unchanged subtrees are shared, not copied (JSON.stringify of the
 * answer reads them the same), so a body of a million numbers costs one pass and no allocation.
 */
export function rebuild(body: unknown, results: readonly unknown[]): unknown {
  if (results.length === 0) return body;
  let k = 0;
  const visit = (node: unknown): unknown => {
    if (typeof node === 'string' || isDefinitionShape(node)) return results[k++];
    if (typeof node !== 'object' || node === null) return node;
    if (Array.isArray(node)) {
      let out: unknown[] | undefined;
      for (let i = 0; i < node.length; i++) {
        const child = node[i];
        // Once every result is placed, the rest is only copied (or shared when nothing changed).
        const next = k < results.length && (typeof child === 'object' || typeof child === 'string') ? visit(child) : child;
        if (out) out.push(next);
        else if (next !== child) {
          out = node.slice(0, i);
          out.push(next);
        }
      }
      return out ?? node;
    }
    const keys = Object.keys(node);
    let out: Record<string, unknown> | undefined;
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i]!;
      const child = (node as Record<string, unknown>)[key];
      const next = k < results.length && (typeof child === 'object' || typeof child === 'string') ? visit(child) : child;
      if (!out && next !== child) {
        out = {};
        for (let j = 0; j < i; j++) define(out, keys[j]!, (node as Record<string, unknown>)[keys[j]!]);
      }
      if (out) define(out, key, next);
    }
    return out ?? node;
  };
  return visit(body);
}

/** Defines an own member, so one named "__proto__" stays a member instead of setting the prototype. */
function define(obj: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
  else obj[key] = value;
}
