/**
 * The writes the embedded store sends to its writer thread, as types only: writer.ts
 * runs them and wire.ts encodes them, and neither needs the other for these.
 */
import type { WrappedDataKey } from '../types.js';
import type { AuditEvent, AuditHead, StoredAuditHead } from '../audit.js';
import type { IdempotencyOp } from './idempotency-writes.js';
import type { ReactorResultOp } from './reactor-results-writes.js';
import type { TokenColumns } from './format.js';

export type Params = Record<string, string | number | null>;

/** One record as the writer needs it (sent to the writer thread as wire.ts's encodeRow). */
export interface WriteRow {
  tenant_id: string;
  id: string;
  index_hashes: string[];
  metadata: Record<string, string>;
  /** Insert only: return the oldest live token of the same tenant, type, container and fingerprint instead, if any. */
  dedupe?: boolean;
  /** The token's columns in format 6 (format.ts toColumns). */
  columns: TokenColumns;
}

export type WriteOp =
  | { op: 'insert'; rows: WriteRow[] }
  | { op: 'update'; row: WriteRow }
  | { op: 'delete'; tenant_id: string; id: string }
  | { op: 'purgeCvc'; now: number }
  | { op: 'addKey'; key: WrappedDataKey }
  | IdempotencyOp
  | ReactorResultOp
  /**
   * Audit append as a compare-and-set (the main thread chained the events and anchored the new
   * head: the key never reaches the writer): written only while the head is still `expect`.
   */
  | { op: 'audit'; tenant_id: string; expect: AuditHead | null; events: AuditEvent[]; head: StoredAuditHead };

