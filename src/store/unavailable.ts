/**
 * The store failed (connection, I/O, a timeout, a refusal). Messages never carry values.
 *
 * Every such error carries what an operator reads in the log to tell bad input from an outage:
 *
 *   - `code`: what the store or its driver said, never a value: a PostgreSQL SQLSTATE (`57P01`,
 *     `23505`), the prefix of a Redis error reply (`READONLY`, `OOM`, `NOAUTH`), a socket or
 *     SQLite error code (`ECONNREFUSED`, `SQLITE_FULL`), or `timeout` (no answer within the
 *     store's deadline) and `connection_closed` (the connection went away under the call).
 *     Undefined for a failure the service found itself (a corrupt record, a value that kept
 *     changing): its message says which.
 *   - `class`: one word for what to do about it (classify below).
 *
 * Both are set where the error is made (the store passes the code it read from the driver's error),
 * or else read from the cause's `code`; the log serializer writes them (log.ts errorFields).
 */
import { DESCRIBES_ITSELF } from '../log.js';

/**
 * - `input`: the request's values were refused (PostgreSQL classes 22, 23, 54); another request
 *   may succeed, retrying this one will not.
 * - `outage`: the store is down, unreachable, read-only, full or broken; nothing to change in the request.
 * - `timeout`: the store did not answer within the deadline (client side or its own timeouts).
 * - `auth`: the store refused the credentials or the role's privileges, or the TLS peer.
 */
export type StoreErrorClass = 'input' | 'outage' | 'timeout' | 'auth';

export const STORE_ERROR_CLASSES: readonly StoreErrorClass[] = ['input', 'outage', 'timeout', 'auth'];

/** A code as the store or the driver spells one (SQLSTATE, reply prefix, errno, SQLite): never free text. */
const CODE = /^[A-Za-z0-9_]{1,40}$/;

/** The classes of PostgreSQL SQLSTATEs (the first two characters) that are about the values sent. */
const PG_INPUT = /^(22|23|54)/;
/** query_canceled (statement_timeout), lock_not_available (lock_timeout), the idle timeouts. */
const PG_TIMEOUT = /^(57014|55P03|25P03|57P05)$/;
/** invalid_authorization_specification (28000, 28P01), insufficient_privilege. */
const PG_AUTH = /^(28...|42501)$/;
const SQLSTATE = /^[0-9A-Z]{5}$/;

/** Redis reply prefixes and socket codes. */
const AUTH_CODES = new Set(['NOAUTH', 'WRONGPASS', 'NOPERM', 'EACCES', 'EPERM', 'SQLITE_AUTH', 'SQLITE_PERM']);
const TIMEOUT_CODES = new Set(['timeout', 'ETIMEDOUT', 'ESOCKETTIMEDOUT', 'BUSY', 'SQLITE_BUSY', 'SQLITE_LOCKED']);
const INPUT_CODES = new Set(['SQLITE_CONSTRAINT', 'SQLITE_TOOBIG', 'SQLITE_MISMATCH']);
/** TLS: the server's certificate was refused (Node's and OpenSSL's codes). */
const TLS_REFUSED = /CERT|^ERR_TLS_|^ERR_SSL_|SELF_SIGNED|^HOSTNAME_MISMATCH$/;

/** The class of a store error code; `outage` for any code not known to mean something else, and for none. */
export function classify(code: string | undefined): StoreErrorClass {
  if (code === undefined) return 'outage';
  if (SQLSTATE.test(code) && /\d/.test(code)) {
    if (PG_TIMEOUT.test(code)) return 'timeout';
    if (PG_AUTH.test(code)) return 'auth';
    if (PG_INPUT.test(code)) return 'input';
    return 'outage';
  }
  const base = code.replace(/^(SQLITE_[A-Z]+)_.*$/, '$1'); // SQLITE_IOERR_WRITE → SQLITE_IOERR
  if (AUTH_CODES.has(base) || TLS_REFUSED.test(code)) return 'auth';
  if (TIMEOUT_CODES.has(base)) return 'timeout';
  if (INPUT_CODES.has(base)) return 'input';
  return 'outage';
}

/** The `code` of an error (a driver's), when it is a code and not free text. */
export function codeOf(err: unknown): string | undefined {
  const code = err && typeof err === 'object' ? (err as { code?: unknown }).code : undefined;
  return typeof code === 'string' && CODE.test(code) ? code : undefined;
}

export interface StoreUnavailableOptions {
  cause?: unknown;
  /** What the store said (see above); default: the cause's code. */
  code?: string | undefined;
  /** Default: classify(code). */
  class?: StoreErrorClass | undefined;
}

export class StoreUnavailableError extends Error {
  /** SQLSTATE, Redis reply prefix, socket or SQLite code, `timeout`, `connection_closed`; never a value. */
  readonly code: string | undefined;
  readonly class: StoreErrorClass;

  constructor(message: string, options?: StoreUnavailableOptions) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'StoreUnavailableError';
    const code = options?.code !== undefined && CODE.test(options.code) ? options.code : codeOf(options?.cause);
    this.code = code;
    this.class = options?.class ?? classify(code);
  }

  /** Its message, code and class carry no value: log lines write them (log.ts errorFields). */
  get [DESCRIBES_ITSELF](): true {
    return true;
  }
}

/**
 * The store is not the one the service was using: it lost its marker or its data keys, or carries
 * another store's marker (store/identity.ts). A kind of unavailability (503 store_unavailable),
 * with the cause in the message (never a value).
 */
export class StoreLostError extends StoreUnavailableError {
  constructor(message: string) {
    super(message);
    this.name = 'StoreLostError';
  }
}
