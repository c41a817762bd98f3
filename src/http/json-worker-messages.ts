/**
 * The messages between large-json.ts and the JSON worker (json-worker.ts), in a file of their own
 * so that neither side imports the other (the worker imports body.ts, which imports large-json.ts).
 */
import type { ServiceError } from '../errors.js';
import type { WalkSummary } from '../vault/walk.js';

export type WorkerTask =
  | { id: number; op: 'plan'; bytes: Uint8Array; maxDepth: number; now: number }
  | { id: number; op: 'render'; bytes: Uint8Array; results: unknown[] }
  | { id: number; op: 'value'; bytes: Uint8Array; maxDepth: number; maxValues: number }
  | { id: number; op: 'args'; bytes: Uint8Array; maxDepth: number };

export type WorkerAnswer =
  /** `members`: which of `type` and `data` the body (an object) has, for POST /tokens's check. */
  | { id: number; ok: true; summary: WalkSummary; members: Array<'type' | 'data'> }
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: true; argsJson: string }
  | { id: number; ok: true; json: Uint8Array }
  | { id: number; ok: false; error: { code: ServiceError['code']; detail?: string | undefined; errors?: ServiceError['errors'] } | null };
