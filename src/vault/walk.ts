/**
 * The tokenize walk (spec "Endpoints"): a pure function from a request body to a plan — which
 * definitions, in which order, at which JSON paths — and back from results to a response of the
 * same shape. Objects with `type` and `data` are definitions; plain strings become `token`
 * tokens; other objects and arrays are walked; numbers, booleans and null stay as they are.
 * Nothing is written until the whole plan is valid.
 */
import { ServiceError, type FieldErrors } from '../errors.js';
import { isDefinitionShape, parseDefinition, plainStringDefinition, type Definition } from './definition.js';

export interface PlanOptions {
  maxDepth: number;
  maxTokens: number;
  now: number;
}

export interface Plan {
  definitions: Definition[];
  /** spec: a body that is a single definition answers with `mask`; anything else with `data`. */
  single: boolean;
}

function member(path: string, key: string): string {
  return path ? `${path}.${key}` : key;
}

/** Builds the plan; throws nesting_too_deep, too_many_tokens or validation_failed (all errors at once). */
export function planTokenize(body: unknown, opts: PlanOptions): Plan {
  const definitions: Definition[] = [];
  const errors: FieldErrors = {};
  let count = 0;
  const countOne = () => {
    if (++count > opts.maxTokens) {
      throw new ServiceError('too_many_tokens', { detail: `At most ${opts.maxTokens} tokens can be created in one request` });
    }
  };
  const visit = (node: unknown, path: string, depth: number): void => {
    if (depth > opts.maxDepth) {
      throw new ServiceError('nesting_too_deep', { detail: `The body may be nested at most ${opts.maxDepth} levels deep` });
    }
    if (typeof node === 'string') {
      countOne();
      definitions.push(plainStringDefinition(path, node));
    } else if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) visit(node[i], `${path}[${i}]`, depth + 1);
    } else if (isDefinitionShape(node)) {
      countOne();
      const def = parseDefinition(node, path, errors, opts.now);
      if (def) definitions.push(def);
    } else if (typeof node === 'object' && node !== null) {
      for (const [k, v] of Object.entries(node)) visit(v, member(path, k), depth + 1);
    }
  };
  visit(body, '', 1);
  if (Object.keys(errors).length > 0) {
    throw new ServiceError('validation_failed', { detail: 'One or more token definitions are invalid; no token was created', errors });
  }
  return { definitions, single: isDefinitionShape(body) };
}

/** Rebuilds the body with the k-th string/definition replaced by `results[k]` (same walk order). */
export function assemble(body: unknown, results: readonly unknown[]): unknown {
  let k = 0;
  const visit = (node: unknown): unknown => {
    if (typeof node === 'string' || isDefinitionShape(node)) return results[k++];
    if (Array.isArray(node)) return node.map(visit);
    if (typeof node === 'object' && node !== null) {
      // fromEntries defines own properties, so a member named "__proto__" stays a member.
      return Object.fromEntries(Object.entries(node).map(([key, v]) => [key, visit(v)]));
    }
    return node;
  };
  return visit(body);
}
