/**
 * The search query language (docs/api.md "The token API"): whitespace-separated `field:value` terms, all of which
 * must match. Values may be double-quoted to hold spaces. Fields: `data` (an evaluated search
 * index, exact), `type`, `fingerprint`, `container` (prefix), `id`, `metadata.<key>`.
 */
import { ServiceError } from '../errors.js';
import { setOwn } from './definition.js';

export interface ParsedQuery {
  data: string[];
  type?: string;
  fingerprint?: string;
  container?: string;
  ids?: string[];
  metadata: Record<string, string>;
}

const TERM = /\s*([A-Za-z_][A-Za-z0-9_.-]*):("((?:[^"\\]|\\.)*)"|[^\s"]+)/y;

export function parseQuery(query: string): ParsedQuery {
  const out: ParsedQuery = { data: [], metadata: {} };
  if (query.length > 4096) throw new ServiceError('invalid_query', { detail: 'The query is longer than 4096 characters' });
  TERM.lastIndex = 0;
  let pos = 0;
  while (pos < query.length) {
    if (/^\s*$/.test(query.slice(pos))) break;
    TERM.lastIndex = pos;
    const m = TERM.exec(query);
    if (!m) throw new ServiceError('invalid_query', { detail: `Expected field:value at position ${pos}` });
    pos = TERM.lastIndex;
    const field = m[1]!;
    const value = m[3] !== undefined ? m[3].replace(/\\(.)/g, '$1') : m[2]!;
    if (field === 'data') out.data.push(value);
    else if (field === 'type') out.type = value;
    else if (field === 'fingerprint') out.fingerprint = value;
    else if (field === 'container') out.container = value;
    else if (field === 'id') (out.ids ??= []).push(value);
    else if (field.startsWith('metadata.') && field.length > 9) setOwn(out.metadata, field.slice(9), value);
    else throw new ServiceError('invalid_query', { detail: 'Unknown search field; use data, type, fingerprint, container, id or metadata.<key>' });
  }
  return out;
}
