/**
 * Moving a vault from one store to another, on the
 * ports only (store/types.ts): whatever format a backend keeps inside, records move as the ports
 * hand them over. Nothing is decrypted: ciphertext, digests and wrapped data keys move as they are
 * (so the master key stays the same).
 *
 * What moves, in this order:
 * - the data key ring, kid by kid in the source's order (a target holding a ring of its own is
 *   refused: its tokens would be sealed under keys the source does not know);
 * - per tenant, the live tokens (an expired token is unreadable on every store, so it is not
 *   copied), oldest first, so the target lists them in the same order and deduplicates to the
 *   same (oldest) token;
 * - per tenant, the audit trail, appended event by event through `appendAudit`: the chain is a
 *   function of the events, so the target's events, hashes and head are the source's, and the
 *   head's anchor (an HMAC under the master key) is recomputed to the same value. So the source's
 *   head must carry its anchor first (checked before anything is written, and again at the end):
 *   the copy never anchors a head the service did not.
 * Idempotency entries do not move: the port has no way to list them and they live 24 hours.
 *
 * Resumable without a journal: a token batch is written in one atomic step and only the ids the
 * target lacks are written, and the audit trail goes on from the target's head; so a run killed
 * with -9 and run again goes on where it stood, with no duplicate and nothing lost. The walk of a
 * tenant's ids (the list port is newest first) is spooled to files, ids only, in a private
 * temporary directory, so the copy runs oldest first in bounded memory.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomInt } from 'node:crypto';
import { AuditHeadRefusedError, checkHeadAnchor, eventHash, GENESIS_HASH, type AuditAnchorSigner, type AuditEventInput, type StoredAuditHead } from './audit.js';
import { DuplicateTokenError, type Store, type StoredToken, type WrappedDataKey } from './types.js';

/** The target is not (a partial copy of) this source: nothing of the step that found it was written. */
export class CopyRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CopyRefusedError';
  }
}

export interface CopyProgress {
  tenant: string;
  phase: 'listing' | 'tokens' | 'audit' | 'verifying';
  done: number;
  /** Known once the tenant's ids are listed. */
  total: number | null;
}

export interface CopyOptions {
  /** The tenants to copy (the source config's): the ports have no list of tenants. */
  tenants: readonly string[];
  /** Tokens (and audit events) per atomic write. */
  batch: number;
  /** Computes the audit heads' anchors: the master key's signer (crypto/audit-anchor.ts). */
  sign: AuditAnchorSigner;
  /** How many tokens per tenant the final check reads back from both stores and compares. */
  sample?: number;
  progress?: (p: CopyProgress) => void;
}

export interface TenantReport {
  tenant: string;
  /** Live tokens of the source, as copied. */
  tokens: number;
  /** Written by this run (the rest were there from an earlier run). */
  written: number;
  /** Listed, then deleted or expired on the source before their batch was copied. */
  gone: number;
  auditEvents: number;
  auditWritten: number;
  head: StoredAuditHead | null;
  sampled: number;
}

export interface CopyReport {
  dataKeys: { total: number; written: number };
  tenants: TenantReport[];
}

/** Ids per spool file; a file is read whole, so this bounds the memory a tenant's walk takes. */
const SPOOL_CHUNK = 10_000;
const PAGE = 100;
const DEFAULT_SAMPLE = 200;

/**
 * A record as the comparison sees it: every field, byte for byte, except the order of the
 * metadata keys (PostgreSQL's jsonb keeps them sorted its own way: the same map).
 */
export function canonicalToken(r: StoredToken): string {
  const metadata = Object.fromEntries(Object.entries(r.metadata).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  return JSON.stringify([
    r.tenant_id, r.id, r.type, r.container, r.sealed, r.cvc_sealed, r.cvc_expires_at, metadata, r.search_indexes, r.index_hashes,
    r.fingerprint, r.fingerprint_expression, r.mask, r.created_by, r.created_at, r.modified_by, r.modified_at, r.expires_at,
  ]);
}

const sameKey = (a: WrappedDataKey, b: WrappedDataKey): boolean => a.kid === b.kid && a.wrapped === b.wrapped && a.created_at === b.created_at;

/**
 * The source's audit chain head must carry its anchor under the master key: a head rewritten in
 * the source (events removed at the end) would otherwise be copied and anchored anew on the
 * target, which would then verify; a head without one (a store from before anchoring) is
 * anchored by `tokenproxy migrate` on the source first.
 */
function checkSourceHead(tenant: string, head: StoredAuditHead | null, sign: AuditAnchorSigner, orphanEvents = false): void {
  try {
    checkHeadAnchor(tenant, head, sign, orphanEvents);
  } catch (err) {
    if (!(err instanceof AuditHeadRefusedError)) throw err;
    throw new CopyRefusedError(err.reason === 'mismatch'
      ? `the source's audit chain head of tenant ${tenant} does not match its anchor (the head was rewritten in the source, or the source is another master key's): run tokenproxy verify-audit --tenant ${tenant} on the source`
      : err.reason === 'unanchored'
        ? `the source's audit chain head of tenant ${tenant} carries no anchor (a store from before anchoring, or the anchor was removed): run tokenproxy migrate on the source, which anchors it, and tokenproxy verify-audit --tenant ${tenant}`
        : `the source's audit trail of tenant ${tenant} holds events but no chain head (the head was removed from the source): run tokenproxy verify-audit --tenant ${tenant} on the source`);
  }
}

/**
 * Reads only: refuses a source whose audit chain heads do not carry their anchors, and a target
 * whose key ring, tokens or audit trail are not (a prefix of) the source's.
 */
export async function preflight(from: Store, to: Store, tenants: readonly string[], sign: AuditAnchorSigner): Promise<void> {
  for (const tenant of tenants) {
    const head = await from.audit.auditHead(tenant);
    checkSourceHead(tenant, head, sign, head === null && (await from.audit.auditRange(tenant, null, 1)).items.length > 0);
  }
  await ringPlan(from, to);
  for (const tenant of tenants) {
    // The target's newest tokens: each must be the source's, as it is there.
    const page = await to.tokens.list(tenant, {}, { size: PAGE, after: null });
    if (page.items.length > 0) {
      const mine = new Map((await from.tokens.getMany(tenant, page.items.map((r) => r.id))).map((r) => [r.id, r]));
      for (const r of page.items) checkSame(tenant, mine.get(r.id) ?? null, r);
    }
    const [src, dst] = await Promise.all([from.audit.auditHead(tenant), to.audit.auditHead(tenant)]);
    if (dst !== null && (src === null || dst.seq > src.seq)) {
      throw new CopyRefusedError(`the target's audit trail of tenant ${tenant} has ${dst.seq} event(s), the source's ${src?.seq ?? 0}: it is another vault's trail; copy into an empty store`);
    }
  }
}

async function ringPlan(from: Store, to: Store): Promise<{ source: WrappedDataKey[]; missing: WrappedDataKey[] }> {
  const [source, target] = await Promise.all([from.dataKeys.listDataKeys(), to.dataKeys.listDataKeys()]);
  if (source.length === 0) throw new CopyRefusedError('the source store holds no data keys: no tokenproxy service has used it (check the --from config\'s store section)');
  for (const [i, k] of target.entries()) {
    const s = source[i];
    if (s === undefined || !sameKey(s, k)) {
      throw new CopyRefusedError(
        `the target store holds a data key ring of its own (kid ${k.kid} is not the source's ${s ? `kid ${s.kid}` : 'ring'}): a service was started on it, or it is another vault. ` +
          'Copy into an empty store (tokens sealed under its keys could not be read with the source\'s)',
      );
    }
  }
  return { source, missing: source.slice(target.length) };
}

function checkSame(tenant: string, source: StoredToken | null, target: StoredToken): void {
  if (source === null) {
    throw new CopyRefusedError(`the target holds token ${target.id} of tenant ${tenant}, which the source does not (live): the target is another vault, or the token was deleted on the source since an earlier run; copy into an empty store`);
  }
  if (canonicalToken(source) !== canonicalToken(target)) {
    throw new CopyRefusedError(`the target holds token ${target.id} of tenant ${tenant} with other contents than the source's: the target is another vault, or the token changed on the source since an earlier run (stop the source's service while copying); copy into an empty store`);
  }
}

/** The data key ring: the kids the target lacks, in the source's order. */
export async function copyDataKeys(from: Store, to: Store): Promise<{ total: number; written: number }> {
  const { source, missing } = await ringPlan(from, to);
  for (const k of missing) await to.dataKeys.addDataKey(k);
  const after = await to.dataKeys.listDataKeys();
  if (after.length !== source.length || !after.every((k, i) => sameKey(k, source[i]!))) {
    throw new CopyRefusedError('the target\'s data key ring is not the source\'s after the copy (a service started on the target meanwhile?)');
  }
  return { total: source.length, written: missing.length };
}

/** Walks a tenant's live tokens newest first into spool files of ids; keeps a random sample of ids. */
async function spoolIds(from: Store, tenant: string, dir: string, sampleSize: number, progress: (n: number) => void): Promise<{ files: string[]; total: number; sample: string[] }> {
  const files: string[] = [];
  const sample: string[] = [];
  let chunk: string[] = [];
  let total = 0;
  const flush = (): void => {
    if (chunk.length === 0) return;
    const file = join(dir, `${tenant.replace(/[^A-Za-z0-9_-]/g, '_')}-${files.length}.ids`);
    writeFileSync(file, JSON.stringify(chunk), { mode: 0o600 });
    files.push(file);
    chunk = [];
  };
  let after: string | null = null;
  do {
    const page = await from.tokens.list(tenant, {}, { size: PAGE, after });
    for (const r of page.items) {
      chunk.push(r.id);
      total++;
      // Reservoir sampling: every listed id is equally likely to be among the sample.
      if (sample.length < sampleSize) sample.push(r.id);
      else {
        const j = randomInt(total);
        if (j < sampleSize) sample[j] = r.id;
      }
      if (chunk.length === SPOOL_CHUNK) flush();
    }
    progress(total);
    after = page.next;
  } while (after !== null);
  flush();
  return { files, total, sample };
}

async function copyTokens(from: Store, to: Store, tenant: string, ids: string[], gone: { n: number }): Promise<number> {
  const [source, target] = await Promise.all([from.tokens.getMany(tenant, ids), to.tokens.getMany(tenant, ids)]);
  const have = new Map(target.map((r) => [r.id, r]));
  const byId = new Map(source.map((r) => [r.id, r]));
  gone.n += ids.length - byId.size;
  for (const r of target) checkSame(tenant, byId.get(r.id) ?? null, r);
  // Oldest first, as listed (getMany's order is the store's).
  const write = ids.map((id) => byId.get(id)).filter((r): r is StoredToken => r !== undefined && !have.has(r.id));
  if (write.length === 0) return 0;
  try {
    await to.tokens.insertMany(write);
    return write.length;
  } catch (err) {
    if (!(err instanceof DuplicateTokenError)) throw err;
  }
  // An id the target holds but did not answer: expired there since the source's read. One by one,
  // so a token that expired meanwhile is left as it is and the rest are written.
  let written = 0;
  for (const r of write) {
    try {
      await to.tokens.insertMany([r]);
      written++;
    } catch (err) {
      if (!(err instanceof DuplicateTokenError)) throw err;
      if (r.expires_at === null || Date.parse(r.expires_at) > Date.now()) {
        throw new CopyRefusedError(`the target holds token ${r.id} of tenant ${tenant} but does not answer it (another writer on the target?)`);
      }
      gone.n++;
    }
  }
  return written;
}

/**
 * The tenant's trail from the target's head on. The source's events are walked from the first
 * (the ports' cursors are opaque) and checked as they go: the chain links, and the target's head
 * is the source's event at the same place (so the target holds a prefix of the source's trail).
 */
async function copyAudit(from: Store, to: Store, tenant: string, opts: CopyOptions, progress: (n: number) => void): Promise<{ events: number; written: number; head: StoredAuditHead | null }> {
  const targetHead = await to.audit.auditHead(tenant);
  const broken = (position: number, why: string) =>
    new CopyRefusedError(`the source's audit trail of tenant ${tenant} is broken at event ${position} (${why}): run tokenproxy verify-audit on the source; nothing of it was copied past event ${targetHead?.seq ?? 0}`);
  let prev = GENESIS_HASH;
  let position = 0;
  let written = 0;
  let pending: AuditEventInput[] = [];
  const flush = async (): Promise<void> => {
    if (pending.length === 0) return;
    const firstSeq = position - pending.length + 1;
    const stored = await to.audit.appendAudit(tenant, pending, opts.sign);
    if (stored[0]?.seq !== firstSeq) {
      throw new CopyRefusedError(`the target's audit trail of tenant ${tenant} moved while copying (a service writes to the target?)`);
    }
    written += pending.length;
    pending = [];
  };
  let after: string | null = null;
  do {
    const range = await from.audit.auditRange(tenant, after, opts.batch);
    for (const e of range.items) {
      position++;
      if (e === null) throw broken(position, 'the event is not a valid record');
      if (e.seq !== position || e.prev_hash !== prev || e.tenant_id !== tenant) throw broken(position, 'the chain does not link');
      prev = eventHash(e);
      if (targetHead !== null && position === targetHead.seq && prev !== targetHead.hash) {
        throw new CopyRefusedError(`the target's audit trail of tenant ${tenant} is not the source's (event ${position} differs): it is another vault's trail; copy into an empty store`);
      }
      if (position <= (targetHead?.seq ?? 0)) continue;
      pending.push({
        tenant_id: e.tenant_id, application_id: e.application_id, action: e.action, token_ids: e.token_ids, destination: e.destination,
        request_id: e.request_id, created_at: e.created_at,
      });
      if (pending.length >= opts.batch) await flush();
    }
    progress(position);
    after = range.next;
  } while (after !== null);
  await flush();
  if (targetHead !== null && position < targetHead.seq) {
    throw new CopyRefusedError(`the target's audit trail of tenant ${tenant} is longer than the source's: it is another vault's trail`);
  }
  const [src, dst] = await Promise.all([from.audit.auditHead(tenant), to.audit.auditHead(tenant)]);
  // Read again after the walk: a head rewritten in the source meanwhile is refused as at the start.
  checkSourceHead(tenant, src, opts.sign);
  if (src !== null && (src.seq !== position || src.hash !== prev)) throw broken(Math.max(1, position), 'the chain head does not match the last event');
  if (src === null && position > 0) throw broken(position, 'the trail has no chain head');
  if ((src === null) !== (dst === null) || (src && dst && (src.seq !== dst.seq || src.hash !== dst.hash))) {
    throw new CopyRefusedError(`the target's audit chain head of tenant ${tenant} is not the source's after the copy`);
  }
  return { events: position, written, head: dst };
}

/** Counts a tenant's live tokens in a store (a full walk of the list port). */
export async function countTokens(store: Store, tenant: string): Promise<number> {
  let n = 0;
  let after: string | null = null;
  do {
    const page = await store.tokens.list(tenant, {}, { size: PAGE, after });
    n += page.items.length;
    after = page.next;
  } while (after !== null);
  return n;
}

/** The whole copy, then the checks; throws CopyRefusedError (or the stores' errors) when it cannot finish. */
export async function copyStore(from: Store, to: Store, opts: CopyOptions): Promise<CopyReport> {
  const progress = opts.progress ?? (() => {});
  await preflight(from, to, opts.tenants, opts.sign);
  const dataKeys = await copyDataKeys(from, to);
  const tenants: TenantReport[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'tokenproxy-copy-'));
  try {
    for (const tenant of opts.tenants) {
      const spool = await spoolIds(from, tenant, dir, opts.sample ?? DEFAULT_SAMPLE, (n) => progress({ tenant, phase: 'listing', done: n, total: null }));
      const gone = { n: 0 };
      let written = 0;
      let done = 0;
      progress({ tenant, phase: 'tokens', done, total: spool.total });
      for (const file of [...spool.files].reverse()) {
        const ids = (JSON.parse(readFileSync(file, 'utf8')) as string[]).reverse();
        for (let i = 0; i < ids.length; i += opts.batch) {
          const batch = ids.slice(i, i + opts.batch);
          written += await copyTokens(from, to, tenant, batch, gone);
          done += batch.length;
          progress({ tenant, phase: 'tokens', done, total: spool.total });
        }
        rmSync(file);
      }
      const audit = await copyAudit(from, to, tenant, opts, (n) => progress({ tenant, phase: 'audit', done: n, total: null }));
      progress({ tenant, phase: 'verifying', done: 0, total: null });
      const tokens = spool.total - gone.n;
      const [sourceCount, targetCount] = await Promise.all([countTokens(from, tenant), countTokens(to, tenant)]);
      if (targetCount !== sourceCount) {
        throw new CopyRefusedError(`tenant ${tenant}: the target holds ${targetCount} live token(s), the source ${sourceCount} (the source was written to while copying, or the target holds tokens of its own): run the copy again with the source's service stopped`);
      }
      const sampled = await compareSample(from, to, tenant, spool.sample);
      tenants.push({ tenant, tokens, written, gone: gone.n, auditEvents: audit.events, auditWritten: audit.written, head: audit.head, sampled });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return { dataKeys, tenants };
}

/** Reads the sampled ids from both stores and compares the records field by field, byte for byte. */
async function compareSample(from: Store, to: Store, tenant: string, ids: string[]): Promise<number> {
  const [source, target] = await Promise.all([from.tokens.getMany(tenant, ids), to.tokens.getMany(tenant, ids)]);
  const there = new Map(target.map((r) => [r.id, r]));
  for (const r of source) {
    const t = there.get(r.id);
    if (t === undefined) throw new CopyRefusedError(`tenant ${tenant}: token ${r.id} is missing from the target after the copy`);
    checkSame(tenant, r, t);
  }
  return source.length;
}
