/**
 * Which fields of a token definition are templates a caller chose, as opposed to named options.
 *
 * A template (a `mask`, `search_indexes`, a `fingerprint_expression` other than the type's own, an
 * alias id with a window) computes on the value; its outcome (an id's characters, a render that
 * fails or yields too much, a search that matches) tells the caller something of the value. A
 * caller that did not send the value in the clear (a public key, whose values may come from a
 * hosted field; a reactor's tokenize of detokenized values) gets the type's defaults and named
 * options only: auth/access.ts templatePolicy decides, the walk refuses before any value is looked
 * at, so the refusal is the same for every value.
 *
 * Pure: reads the definition's shape only, never its data.
 */
import type { FieldErrors } from '../errors.js';
import { addFieldError } from '../errors.js';
import { isNamedAlias } from './alias.js';
import { tokenType } from './token-types.js';

const at = (path: string, field: string) => (path ? `${path}.${field}` : field);

/** Records under `into` each field of `obj` (a `{type, data, …}` object at `path`) that is a caller's template. */
export function callerTemplates(obj: Record<string, unknown>, path: string, into: FieldErrors): void {
  if (obj.mask !== undefined) addFieldError(into, at(path, 'mask'), 'a mask expression runs over the value: this key may not send one for a value it did not send in the clear');
  const indexes = obj.search_indexes;
  if (indexes !== undefined && !(Array.isArray(indexes) && indexes.length === 0)) {
    addFieldError(into, at(path, 'search_indexes'), 'search index expressions run over the value: this key may not send them for a value it did not send in the clear');
  }
  if (obj.fingerprint_expression !== undefined) {
    const spec = typeof obj.type === 'string' ? tokenType(obj.type) : undefined;
    if (spec === undefined || obj.fingerprint_expression !== spec.fingerprint) {
      addFieldError(into, at(path, 'fingerprint_expression'), 'only the type\'s default fingerprint expression may be sent for a value this key did not send in the clear');
    }
  }
  if (typeof obj.id === 'string' && (obj.id.includes('{{') || obj.id.includes('}}')) && !isNamedAlias(obj.id)) {
    addFieldError(into, at(path, 'id'), 'only an alias without a window ({{ data | alias_card }}, {{ data | alias_preserve_format }}, {{ data | alias_preserve_length }}) may be asked for a value this key did not send in the clear');
  }
}
