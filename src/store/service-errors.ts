/**
 * Store errors become service errors here, in one place: the ports the request
 * path uses (the vault, the detokenizer, the audit trail behind them and GET /logs, the
 * idempotency stage) are wrapped so that every call that fails with
 *
 *   - StoreUnavailableError (the store failed: connection, I/O, a timeout) → 503 store_unavailable,
 *     the store's error kept as the cause (logged with its code, class and message by
 *     log.ts errorFields, never in the problem body);
 *   - InvalidCursorError (a page cursor the store cannot read) → 400 invalid_cursor;
 *
 * and everything else passes as it is: DuplicateTokenError is the vault's to decide (409
 * token_conflict), a TypeError or RangeError is a bug (500 internal_error). Wiring and tools
 * (server.ts's timers, the key ring, /readyz, the CLI) keep the store's own errors.
 * The wrappers look the port's method up at each call, so a port instrumented in place
 * (metrics/store.ts) is still the one called.
 */
import { ServiceError } from '../errors.js';
import { InvalidCursorError } from './codec.js';
import type { IdempotencyPort } from './idempotency.js';
import { StoreLostError } from './unavailable.js';
import type { ReactorResultPort } from './reactor-results.js';
import { StoreUnavailableError, type AuditPort, type DataKeyPort, type Store, type TokenPort } from './types.js';

/** The four ports of a store, as the request path sees them. */
export type ServicePorts = Pick<Store, 'tokens' | 'audit' | 'dataKeys' | 'idempotency' | 'reactorResults'>;

/** The service error a store failure is answered with; anything else is returned as it is. */
export function toServiceError(err: unknown): unknown {
  // A lost store says so (its message names the cause, never a value): retrying will not help.
  if (err instanceof StoreLostError) return new ServiceError('store_unavailable', { cause: err, detail: 'The token store is not the one the service opened (it was emptied or replaced); an operator must restore it' });
  if (err instanceof StoreUnavailableError) return new ServiceError('store_unavailable', { cause: err });
  if (err instanceof InvalidCursorError) return new ServiceError('invalid_cursor', { detail: 'Pass the pagination.next value of a previous page as start' });
  return err;
}

/**
 * The store's own error behind `err` (a mapped ServiceError's cause), for log lines about a store
 * call that failed behind the mapping (http/idempotency.ts): log.ts errorFields then writes its
 * code and class.
 */
export function storeErrorOf(err: unknown): unknown {
  return err instanceof ServiceError && err.cause !== undefined ? err.cause : err;
}

/** The name of the store's own error behind `err`. */
export function storeErrorName(err: unknown): string {
  const own = storeErrorOf(err);
  return own instanceof Error ? own.name : 'unknown';
}

// Every method of each port (a Record: a method added to a port and not listed here fails to compile).
const TOKEN_METHODS: Record<keyof TokenPort, true> = { insertMany: true, get: true, getMany: true, update: true, delete: true, list: true, purgeCvc: true };
const AUDIT_METHODS: Record<keyof AuditPort, true> = { appendAudit: true, listAudit: true, auditRange: true, auditHead: true, anchorAuditHead: true };
const DATA_KEY_METHODS: Record<keyof DataKeyPort, true> = { listDataKeys: true, addDataKey: true };
const IDEMPOTENCY_METHODS: Record<keyof IdempotencyPort, true> = {
  claimIdempotencyKey: true, completeIdempotencyKey: true, releaseIdempotencyKey: true, purgeIdempotencyKeys: true,
};
const REACTOR_RESULT_METHODS: Record<keyof ReactorResultPort, true> = { putReactorResult: true, getReactorResult: true, purgeReactorResults: true };

type Method = (...args: unknown[]) => Promise<unknown>;

function mapped<P extends object>(port: P, methods: Record<keyof P, true>): P {
  const out: Record<string, Method> = {};
  for (const name of Object.keys(methods)) {
    out[name] = async (...args: unknown[]) => {
      try {
        return await ((port as Record<string, Method>)[name]!).apply(port, args);
      } catch (err) {
        throw toServiceError(err);
      }
    };
  }
  return out as P;
}

/** The store's ports with their failures mapped to service errors (see above). */
export function servicePorts(store: ServicePorts): ServicePorts {
  return {
    tokens: mapped(store.tokens, TOKEN_METHODS),
    audit: mapped(store.audit, AUDIT_METHODS),
    dataKeys: mapped(store.dataKeys, DATA_KEY_METHODS),
    idempotency: mapped(store.idempotency, IDEMPOTENCY_METHODS),
    reactorResults: mapped(store.reactorResults, REACTOR_RESULT_METHODS),
  };
}
