/**
 * PATCH /tokens/{id} as an RFC 7396 merge patch: members replace, `null` removes, objects merge
 * (card `data`, `metadata`). `type`, `id`, `containers` and `created_*` cannot change. The result
 * is validated exactly like a new definition. It also says which expressions the patch changes
 * and whether it supplies the token's whole data: the access rule for expressions (an expression
 * over `data` is a read of `data`) is decided on those in auth/access.ts.
 */
import type { ExpressionField } from '../auth/access.js';
import { ServiceError, type FieldErrors } from '../errors.js';
import type { StoredToken } from '../store/types.js';
import { addFieldError, parseDefinition, type Definition, type TokenData } from './definition.js';
import { storedType } from './token-types.js';

const IMMUTABLE = ['type', 'id', 'containers', 'tenant_id', 'created_by', 'created_at'];

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** RFC 7396 MergePatch. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isObject(patch)) return patch;
  const out: Record<string, unknown> = isObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else Object.defineProperty(out, k, { value: mergePatch(out[k], v), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

export interface PatchResult {
  def: Definition;
  keepCvc: boolean;
  /** Expression fields whose effective value differs from the stored token's (a removal too). */
  changedExpressions: ExpressionField[];
  /**
   * Whether every member of the resulting data comes from the patch (a `token`'s string, or every
   * field of the card): then the expressions run over data the caller supplied.
   */
  suppliesData: boolean;
}

export function applyPatch(t: StoredToken, current: TokenData, patch: unknown, now: number): PatchResult {
  if (!isObject(patch)) throw new ServiceError('validation_failed', { detail: 'A merge patch must be a JSON object' });
  const errors: FieldErrors = {};
  for (const k of IMMUTABLE) {
    if (k in patch && patch[k] !== (k === 'containers' ? undefined : (t as unknown as Record<string, unknown>)[k])) {
      addFieldError(errors, k, 'cannot be changed');
    }
  }
  if (Object.keys(errors).length) throw new ServiceError('validation_failed', { detail: 'The patch is invalid; the token is unchanged', errors });

  const existing: Record<string, unknown> = { type: t.type, data: current, metadata: t.metadata, search_indexes: t.search_indexes };
  if (t.fingerprint_expression !== null && t.fingerprint_expression !== storedType(t.type).fingerprint) {
    existing.fingerprint_expression = t.fingerprint_expression;
  }
  if (t.mask !== null) existing.mask = t.mask;
  const { type: _t, id: _i, containers: _c, tenant_id: _ti, created_by: _cb, created_at: _ca, ...rest } = patch;
  const merged = mergePatch(existing, rest) as Record<string, unknown>;
  const def = parseDefinition(merged, '', errors, now);
  if (!def) throw new ServiceError('validation_failed', { detail: 'The patch is invalid; the token is unchanged', errors });
  // Untouched by the patch, the expiry stays as it was (and is not re-checked against now).
  if (!('expires_at' in rest)) def.expires_at = t.expires_at;
  def.container = t.container;
  // A new card number or cvc replaces the retained cvc; otherwise it is kept as it was.
  const dataPatch = rest.data;
  const keepCvc = !(isObject(dataPatch) && ('cvc' in dataPatch || 'number' in dataPatch));
  const changedExpressions: ExpressionField[] = [];
  if (def.fingerprint_expression !== t.fingerprint_expression) changedExpressions.push('fingerprint_expression');
  if (JSON.stringify(def.search_indexes) !== JSON.stringify(t.search_indexes)) changedExpressions.push('search_indexes');
  if (def.mask !== t.mask) changedExpressions.push('mask');
  const suppliesData = typeof def.data === 'string'
    ? typeof dataPatch === 'string'
    : isObject(dataPatch) && Object.keys(def.data).every((k) => Object.hasOwn(dataPatch, k) && dataPatch[k] !== null);
  return { def, keepCvc, changedExpressions, suppliesData };
}
