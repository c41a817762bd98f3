/**
 * Shared by both token stores (EmbeddedStore, RedisStore): cursors, page checks, the record codec.
 */
import type { Page, ScopeRule, StoredToken, WrappedDataKey } from './types.js';
import { StoreUnavailableError } from './types.js';

/** A cursor that does not decode: the API answers 400 invalid_cursor. */
export class InvalidCursorError extends Error {
  constructor() {
    super('invalid pagination cursor');
    this.name = 'InvalidCursorError';
  }
}

/** Cursors are opaque to clients: base64url of the last returned item's sequence number. */
export function encodeCursor(seq: number): string {
  return Buffer.from(`s${seq}`, 'latin1').toString('base64url');
}

export function decodeCursor(cursor: string): number {
  if (!/^[A-Za-z0-9_-]{1,32}$/.test(cursor)) throw new InvalidCursorError();
  const m = /^s([1-9][0-9]{0,15})$/.exec(Buffer.from(cursor, 'base64url').toString('latin1'));
  const seq = m ? Number(m[1]) : NaN;
  // Canonical form only: a cursor that decodes but is not what encodeCursor writes is rejected.
  if (!Number.isSafeInteger(seq) || encodeCursor(seq) !== cursor) throw new InvalidCursorError();
  return seq;
}

/** Whether a TokenFilter.scope admits `container` (first matching prefix decides; none: no). */
export function scopeAllows(scope: readonly ScopeRule[] | undefined, container: string): boolean {
  if (scope === undefined) return true;
  for (const r of scope) if (container.startsWith(r.prefix)) return r.allow;
  return false;
}

export function checkPage(page: Page & { skip?: number }): void {
  if (!Number.isInteger(page.size) || page.size < 1 || page.size > 100) {
    throw new RangeError('page size must be an integer from 1 to 100');
  }
  if (page.skip !== undefined && !(Number.isSafeInteger(page.skip) && page.skip >= 0)) throw new RangeError('skip must be a non-negative integer');
}

/** ISO 8601 → epoch ms (null stays null); the vault validated it, this refuses garbage anyway. */
export function timeMs(iso: string | null, field: string): number | null {
  if (iso === null) return null;
  const ms = Date.parse(iso);
  if (!Number.isFinite(ms)) throw new TypeError(`${field} is not a valid ISO 8601 date`);
  return ms;
}

export function isLive(expiresMs: number | null, now: number): boolean {
  return expiresMs === null || expiresMs > now;
}

/** A cvc past cvc_expires_at is never returned, whether or not purgeCvc has run yet. */
export const cvcVisible = isLive;

/** The record as stored: every field but cvc_sealed (kept apart so it can be purged alone). */
export function encodeRecord(r: StoredToken): string {
  return JSON.stringify({
    tenant_id: r.tenant_id, id: r.id, type: r.type, container: r.container, sealed: r.sealed,
    cvc_expires_at: r.cvc_expires_at, metadata: r.metadata, search_indexes: r.search_indexes,
    index_hashes: r.index_hashes, fingerprint: r.fingerprint, fingerprint_expression: r.fingerprint_expression,
    mask: r.mask, created_by: r.created_by, created_at: r.created_at, modified_by: r.modified_by,
    modified_at: r.modified_at, expires_at: r.expires_at,
  });
}

const isStr = (v: unknown): v is string => typeof v === 'string';
const isStrOrNull = (v: unknown): v is string | null => v === null || typeof v === 'string';
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isStrArray = (v: unknown): v is string[] => Array.isArray(v) && v.every(isStr);
const isStrMap = (v: unknown): v is Record<string, string> => isObject(v) && Object.values(v).every(isStr);

function corrupt(what: string): StoreUnavailableError {
  return new StoreUnavailableError(`a stored ${what} is corrupt`);
}

export function decodeRecord(json: string, cvcSealed: string | null): StoredToken {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch {
    throw corrupt('token record');
  }
  if (!isObject(v)) throw corrupt('token record');
  const { tenant_id, id, type, container, sealed, cvc_expires_at, metadata, search_indexes, index_hashes } = v;
  const { fingerprint, fingerprint_expression, mask, created_by, created_at, modified_by, modified_at, expires_at } = v;
  if (
    !isStr(tenant_id) || !isStr(id) || !isStr(type) || !isStr(container) || !isStr(sealed) || !isStrOrNull(cvc_expires_at) ||
    !isStrMap(metadata) || !isStrArray(search_indexes) || !isStrArray(index_hashes) || !isStrOrNull(fingerprint) ||
    !isStrOrNull(fingerprint_expression) || !isStrOrNull(mask) || !isStr(created_by) || !isStr(created_at) ||
    !isStrOrNull(modified_by) || !isStrOrNull(modified_at) || !isStrOrNull(expires_at)
  ) {
    throw corrupt('token record');
  }
  return {
    tenant_id, id, type, container, sealed, cvc_sealed: cvcSealed, cvc_expires_at, metadata, search_indexes,
    index_hashes, fingerprint, fingerprint_expression, mask, created_by, created_at, modified_by, modified_at, expires_at,
  };
}

export function decodeDataKey(v: unknown): WrappedDataKey {
  if (!isObject(v) || !isStr(v.kid) || !isStr(v.wrapped) || !isStr(v.created_at)) throw corrupt('data key');
  return { kid: v.kid, wrapped: v.wrapped, created_at: v.created_at };
}
