/**
 * The audit trail's chain (docs/detokenization.md "Audit trail"), shared by both stores and the verifier.
 *
 * Every reveal and every use of a token appends one event per tenant: time, application, action,
 * token ids, destination origin, request id — never a value. Events of a tenant are numbered from
 * 1 (`seq`) and each carries `prev_hash`, the SHA-256 of the previous event of its tenant (64 zeros
 * for the first). A store keeps a head per tenant (the last seq and its hash), written in the same
 * atomic step as the events, so removing, editing or reordering any event, the last one included,
 * breaks the chain. Whoever can write the store could rewrite the head too, or recompute the whole
 * chain: so the head also carries an anchor, an HMAC under a key derived from the master key that
 * the store never sees (crypto/audit-anchor.ts), written in the same step. And an append
 * checks the anchor of the head it chains onto first (chainAnchored): the service never anchors a
 * head it did not write, so a rewritten head stays detectable instead of being signed over.
 */
import { hash, timingSafeEqual } from 'node:crypto';
import { StoreUnavailableError } from './unavailable.js';

export type AuditAction = 'token.reveal' | 'token.detokenize' | 'proxy.outbound' | 'proxy.detokenize' | 'reactor.args';

/** What a caller appends. */
export interface AuditEventInput {
  tenant_id: string;
  /** The application whose key asked. */
  application_id: string;
  action: AuditAction;
  token_ids: string[];
  /** The destination origin of a use (`https://api.example.com`), never a path or query; else null. */
  destination: string | null;
  request_id: string;
  /** ISO 8601. */
  created_at: string;
}

/** An event as stored: its place in the tenant's chain and the hash of the one before it. */
export interface AuditEvent extends AuditEventInput {
  seq: number;
  prev_hash: string;
}

export interface AuditHead {
  seq: number;
  hash: string;
}

/** A head as a store keeps it: with its anchor, or null for a head written before anchoring. */
export interface StoredAuditHead extends AuditHead {
  anchor: string | null;
}

export interface AuditFilter {
  /** Only events naming this token id. */
  entity_id?: string;
  /** Inclusive bounds on created_at (ms). */
  start_ms?: number;
  end_ms?: number;
}

export interface AuditPageResult {
  items: AuditEvent[];
  next: string | null;
}

/** Whether an event passes a filter (the stores that filter in code). */
export function auditMatches(e: AuditEvent, f: AuditFilter): boolean {
  if (f.entity_id !== undefined && !e.token_ids.includes(f.entity_id)) return false;
  if (f.start_ms !== undefined || f.end_ms !== undefined) {
    const t = Date.parse(e.created_at);
    if (f.start_ms !== undefined && !(t >= f.start_ms)) return false;
    if (f.end_ms !== undefined && !(t <= f.end_ms)) return false;
  }
  return true;
}

export const GENESIS_HASH = '0'.repeat(64);

/** The bytes an event's hash covers: every field, in a fixed order. */
export function canonicalEvent(e: AuditEvent): string {
  return JSON.stringify([e.seq, e.prev_hash, e.tenant_id, e.application_id, e.action, e.token_ids, e.destination, e.request_id, e.created_at]);
}

export function eventHash(e: AuditEvent): string {
  return hash('sha256', canonicalEvent(e), 'hex');
}

/** The events that follow `head` (null: an empty chain), linked, and the new head. */
export function chain(head: AuditHead | null, inputs: readonly AuditEventInput[]): { events: AuditEvent[]; head: AuditHead } {
  let seq = head?.seq ?? 0;
  let prev = head?.hash ?? GENESIS_HASH;
  const events = inputs.map((i) => {
    const e: AuditEvent = {
      seq: ++seq, prev_hash: prev, tenant_id: i.tenant_id, application_id: i.application_id, action: i.action,
      token_ids: [...i.token_ids], destination: i.destination, request_id: i.request_id, created_at: i.created_at,
    };
    prev = eventHash(e);
    return e;
  });
  return { events, head: { seq, hash: prev } };
}

/**
 * The head an append would chain onto is not one this master key anchored: its anchor does not
 * match (the head was rewritten in the store, or the store is another key's), or it has none (a
 * store from before anchoring, which `tokenproxy migrate` anchors, or an anchor removed). Nothing
 * was written. A StoreUnavailableError, so the request that needed the event fails as any audit
 * write failure does (503 store_unavailable); the message names the tenant, never a value.
 */
export class AuditHeadRefusedError extends StoreUnavailableError {
  constructor(readonly tenantId: string, readonly reason: 'mismatch' | 'unanchored' | 'missing') {
    super(reason === 'mismatch'
      ? `the audit chain head of tenant ${tenantId} does not match its anchor: the head was rewritten in the store (events removed or changed at the end), or the store was written under another master key; nothing was appended. Run tokenproxy verify-audit --tenant ${tenantId}`
      : reason === 'unanchored'
        ? `the audit chain head of tenant ${tenantId} carries no anchor: a store written before anchoring (tokenproxy migrate anchors it), or the anchor was removed; nothing was appended. Run tokenproxy verify-audit --tenant ${tenantId}`
        : `the audit trail of tenant ${tenantId} holds events but no chain head: the head was removed from the store; nothing was appended. Run tokenproxy verify-audit --tenant ${tenantId}`);
    this.name = 'AuditHeadRefusedError';
  }
}

/** Whether `anchor` is the anchor of `head` (constant time). */
export function anchorMatches(sign: AuditAnchorSigner, tenantId: string, head: AuditHead, anchor: string): boolean {
  const want = Buffer.from(sign(tenantId, head));
  const got = Buffer.from(anchor);
  return want.length === got.length && timingSafeEqual(want, got);
}

/**
 * Throws AuditHeadRefusedError unless `head` carries its anchor under `sign`. A null head is an
 * empty chain, unless `orphanEvents` (the store holds events of the tenant all the same: the head
 * was removed).
 */
export function checkHeadAnchor(tenantId: string, head: StoredAuditHead | null, sign: AuditAnchorSigner, orphanEvents = false): void {
  if (head === null) {
    if (orphanEvents) throw new AuditHeadRefusedError(tenantId, 'missing');
    return;
  }
  if (head.anchor === null) throw new AuditHeadRefusedError(tenantId, 'unanchored');
  if (!anchorMatches(sign, tenantId, head, head.anchor)) throw new AuditHeadRefusedError(tenantId, 'mismatch');
}

/**
 * chain() for an append: the current head's anchor checked first (from the head the store already
 * read in the same step: no extra round trip), the new head anchored.
 */
export function chainAnchored(
  tenantId: string, current: StoredAuditHead | null, inputs: readonly AuditEventInput[], sign: AuditAnchorSigner, orphanEvents = false,
): { events: AuditEvent[]; head: StoredAuditHead } {
  checkHeadAnchor(tenantId, current, sign, orphanEvents);
  const { events, head } = chain(current, inputs);
  return { events, head: { ...head, anchor: sign(tenantId, head) } };
}

/** Parses a stored event, or null when it is not one (a corrupted or edited record). */
export function decodeEvent(json: string): AuditEvent | null {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch {
    return null;
  }
  if (typeof v !== 'object' || v === null) return null;
  const e = v as Record<string, unknown>;
  const str = (x: unknown) => typeof x === 'string';
  if (!Number.isSafeInteger(e.seq) || !str(e.prev_hash) || !str(e.tenant_id) || !str(e.application_id) || !str(e.action)
    || !Array.isArray(e.token_ids) || !e.token_ids.every(str) || !(e.destination === null || str(e.destination))
    || !str(e.request_id) || !str(e.created_at)) return null;
  return e as unknown as AuditEvent;
}

export function encodeEvent(e: AuditEvent): string {
  return JSON.stringify(e);
}

export type ChainCheck =
  | { ok: true; events: number; /** The head has no anchor and `allowUnanchored` accepted that. */ unanchored: boolean }
  | { ok: false; events: number; /** 1-based position of the first bad event in the stored order. */ position: number; reason: string };

export interface VerifyOptions {
  /** Recomputes the head's anchor (crypto/audit-anchor.ts); null: the anchor is not checked (store contract tests only). */
  anchor: ((tenantId: string, head: AuditHead, anchor: string) => boolean) | null;
  /** A head the trail must still pass through (it or a successor is the current head): closes a rollback. */
  expect?: AuditHead;
  /** Accept a head without an anchor (a store not appended to since anchoring was added). */
  allowUnanchored?: boolean;
}

/**
 * Walks a tenant's stored events oldest first (decoded, or null for one that does not parse) and
 * checks them against each other, the head, the head's anchor and the expected head.
 */
export async function verifyChain(events: AsyncIterable<AuditEvent | null>, head: StoredAuditHead | null, tenantId: string, opts: VerifyOptions): Promise<ChainCheck> {
  let position = 0;
  let prev = GENESIS_HASH;
  let expectedAt: string | null = null;
  for await (const e of events) {
    position++;
    if (e === null) return { ok: false, events: position, position, reason: 'the event is not a valid record' };
    if (e.tenant_id !== tenantId) return { ok: false, events: position, position, reason: 'the event belongs to another tenant' };
    if (e.seq !== position) return { ok: false, events: position, position, reason: `expected event number ${position}, found ${e.seq} (an event is missing or out of place)` };
    if (e.prev_hash !== prev) return { ok: false, events: position, position, reason: 'prev_hash does not match the event before it (that event was changed or removed)' };
    prev = eventHash(e);
    if (opts.expect?.seq === position) expectedAt = prev;
  }
  const headSeq = head?.seq ?? 0;
  const headHash = head?.hash ?? GENESIS_HASH;
  const last = Math.max(1, position);
  if (headSeq !== position || headHash !== prev) {
    // Fewer events than the head counts: the first missing one; more: the first beyond the head;
    // as many: the last one was changed.
    const at = headSeq > position ? position + 1 : headSeq < position ? headSeq + 1 : position;
    return { ok: false, events: position, position: Math.max(1, at), reason: 'the chain head does not match the last event (an event was changed or removed at the end)' };
  }
  let unanchored = false;
  if (head !== null && opts.anchor !== null) {
    if (head.anchor === null) {
      if (!opts.allowUnanchored) {
        return {
          ok: false, events: position, position: last,
          reason: 'the chain head carries no anchor (the anchor was removed, or the store was written by a version without anchors and tokenproxy migrate has not anchored it yet: then --allow-unanchored accepts it)',
        };
      }
      unanchored = true;
    } else if (!opts.anchor(tenantId, head, head.anchor)) {
      return {
        ok: false, events: position, position: last,
        reason: 'the anchor of the chain head does not match it: the head was rewritten (events removed or changed at the end, or the chain recomputed), or this is not the master key the service uses',
      };
    }
  }
  if (opts.expect !== undefined && expectedAt !== opts.expect.hash) {
    const want = formatHead(opts.expect);
    return {
      ok: false, events: position, position: Math.min(opts.expect.seq, position + 1),
      reason: expectedAt === null
        ? `the trail ends at event ${position}, before the expected head ${want} (rolled back to an older state?)`
        : `event ${opts.expect.seq} is not the expected head ${want} (the trail was replaced or rolled back)`,
    };
  }
  return { ok: true, events: position, unanchored };
}

/**
 * Appends per tenant one batch at a time: calls for the same tenant that arrive while a batch is
 * being written wait and go together in the next one, so appends from one process never race each
 * other (a store that also shares the chain with other processes retries on a stale head).
 */
export class TenantSerialAppender {
  readonly #pending = new Map<string, Array<{ input: AuditEventInput[]; sign: AuditAnchorSigner; resolve: (e: AuditEvent[]) => void; reject: (err: unknown) => void }>>();
  readonly #busy = new Set<string>();

  constructor(private readonly write: (tenantId: string, inputs: AuditEventInput[], sign: AuditAnchorSigner) => Promise<AuditEvent[]>) {}

  append(tenantId: string, inputs: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    return new Promise((resolve, reject) => {
      let q = this.#pending.get(tenantId);
      if (!q) this.#pending.set(tenantId, (q = []));
      q.push({ input: inputs, sign, resolve, reject });
      if (!this.#busy.has(tenantId)) void this.#drain(tenantId);
    });
  }

  async #drain(tenantId: string): Promise<void> {
    this.#busy.add(tenantId);
    try {
      for (;;) {
        const waiting = this.#pending.get(tenantId);
        if (!waiting || waiting.length === 0) break;
        // A batch shares one anchor signer (a service has one master key); others wait for the next.
        const sign = waiting[0]!.sign;
        const batch = waiting.filter((b) => b.sign === sign);
        const rest = waiting.filter((b) => b.sign !== sign);
        if (rest.length > 0) this.#pending.set(tenantId, rest);
        else this.#pending.delete(tenantId);
        try {
          const written = await this.write(tenantId, batch.flatMap((b) => b.input), sign);
          let at = 0;
          for (const b of batch) {
            b.resolve(written.slice(at, at + b.input.length));
            at += b.input.length;
          }
        } catch (err) {
          for (const b of batch) b.reject(err);
        }
      }
    } finally {
      this.#busy.delete(tenantId);
    }
  }
}

/** Computes a head's anchor for a tenant; the store keeps what it returns and nothing else of it. */
export type AuditAnchorSigner = (tenantId: string, head: AuditHead) => string;

/**
 * A head as operators see it in the log and give it to `verify-audit --expect-head`:
 * `<seq>:<hash in base64url>`. Not hex: the log censors Luhn-valid runs of 13+ digits in every
 * string (log.ts), and 64 hex characters hold such a run in a few percent of heads.
 */
export function formatHead(head: AuditHead): string {
  return `${head.seq}:${Buffer.from(head.hash, 'hex').toString('base64url')}`;
}

/** `<seq>:<hash>` (base64url as logged, or hex as in `prev_hash`) back to a head, or null when it is not one. */
export function parseHead(text: string): AuditHead | null {
  const m = /^([1-9][0-9]{0,15}):([0-9a-f]{64}|[A-Za-z0-9_-]{43})$/.exec(text.trim());
  if (!m) return null;
  const seq = Number(m[1]);
  const hash = m[2]!.length === 64 ? m[2]! : Buffer.from(m[2]!, 'base64url').toString('hex');
  return Number.isSafeInteger(seq) && hash.length === 64 ? { seq, hash } : null;
}
