/**
 * SVC-IDEMPOTENCY-KEY on the routes that opt in (`idempotent: true`: POST /tokenize, POST /tokens,
 * PATCH /tokens/{id}). A retry after a timeout must not create its tokens twice:
 *
 *   1. The header is checked (1 to 255 of `A-Z a-z 0-9 . _ : ~ + / = -`; else 400
 *      invalid_idempotency_key). No header: the route runs as usual.
 *   2. Once the body has been read (before it is parsed), the slot (tenant, application, key) is
 *      CLAIMED in the token store in one atomic step, shared by every instance on the store. The
 *      claim holds a SHA-256 of method, path (with query) and body bytes, sealed.
 *   3. The slot holds another request's entry. Made with another API key of the application →
 *      422 idempotency_key_reused, whatever the request (a stored answer is the key's,
 *      not the application's). Same key, same request → 409 idempotency_key_in_flight (with
 *      Retry-After) while it runs; once answered, the answer is REPLAYED (status, body, content
 *      type, plus `SVC-IDEMPOTENT-REPLAYED: true`, with this request's own trace id and rate-limit
 *      headers) and the route does not run. A different request → 422.
 *   4. The route runs and returns its answer (a JsonAnswer; it does not write it). A 2xx answer is sealed
 *      and stored for 24 h BEFORE it is sent, so a client that got it and retries gets the replay,
 *      and a client that went away (the timeout case) still finds it. Any other answer, or a
 *      thrown error, releases the claim first: a failed request stores nothing and a retry runs
 *      again. A claim left by a crashed process expires after IN_FLIGHT_TTL_MS.
 *
 * Stored answers never hold plaintext. Those of POST /tokenize and POST /tokens hold
 * ids and masked card fields only. A route whose answer is a token read by the key (PATCH, which
 * reveals plaintext under a `reveal` rule) declares `replayRecord`: its answer is stored with the
 * record's `data` left out, and a replay shows the token again through that hook, i.e. through
 * the route's own access decision and audit, so a deleted or expired token answers 404 and every
 * replayed reveal is an audit event. Entries are sealed with the vault's key ring all the same
 * (AAD: the slot). The store keeps only ciphertext and digests: the client's key is kept as a
 * SHA-256 with the application id, the API key as its key id (a digest, auth/keys.ts) inside the
 * sealed entry. Entries written before this format (no `v`) may hold plaintext and name no API
 * key: they are never replayed (422; they expire within 24 h of the upgrade).
 */
import { hash, randomUUID } from 'node:crypto';
import { ServiceError } from '../errors.js';
import { errorFields, type Logger } from '../log.js';
import type { IdempotencyPort, IdempotencySlot } from '../store/idempotency.js';
import { storeErrorOf } from '../store/service-errors.js';
import type { ApiContext, ApiRoute, JsonAnswer } from './context.js';
import { jsonBytes } from './respond.js';

export const IDEMPOTENCY_HEADER = 'svc-idempotency-key';
/** Set on a replayed answer. */
export const REPLAYED_HEADER = 'svc-idempotent-replayed';
const KEY_PATTERN = /^[A-Za-z0-9._:~+/=-]{1,255}$/;
const KEY_RULE = 'SVC-IDEMPOTENCY-KEY must be 1 to 255 characters of letters, digits and . _ : ~ + / = -';

export const ANSWER_TTL_MS = 24 * 3_600_000;
/** Longer than any request may take; how long a crashed request's claim blocks its key. */
export const IN_FLIGHT_TTL_MS = 60_000;
const PURGE_INTERVAL_MS = 10 * 60_000;

/** What the stage needs of the key ring (crypto/keyring.ts). */
export interface Sealer {
  seal(plaintext: string, aad: string): string;
  unsealOrRefresh(sealed: string, aad: string): Promise<string>;
}

export interface IdempotencyOptions {
  store: IdempotencyPort;
  ring: Sealer;
  log: Logger;
  inFlightTtlMs?: number;
  answerTtlMs?: number;
  /** How often expired entries are purged (tests only: server.ts StartOptions). */
  purgeEveryMs?: number;
}

/** The store slot of a client's key: its tenant, and a digest of its application and the key. */
export function slotOf(tenantId: string, appId: string, key: string): IdempotencySlot {
  return { tenant_id: tenantId, key: hash('sha256', JSON.stringify([appId, key]), 'hex') };
}

/** What identifies "the same request": a SHA-256 of method, path with query, and the body bytes. */
export function requestHash(method: string, pathAndQuery: string, body: Buffer): string {
  return hash('sha256', Buffer.concat([Buffer.from(`${method}\n${pathAndQuery}\n`), body]), 'hex');
}

/** The AAD an entry is sealed with: it opens only in its own slot. */
export function sealAad(slot: IdempotencySlot): string {
  return `idempotency:${slot.tenant_id}:${slot.key}`;
}

/** The format of the entries this code writes; an entry without it is an earlier version's. */
const ENTRY_VERSION = 2;

/** The sealed entry: the request's hash and the API key's id, and once answered the answer. */
interface Entry {
  v: typeof ENTRY_VERSION;
  h: string;
  /** The key id (Principal.keyId, a digest of the API key) that made the request: only it gets the replay. */
  k: string;
  status?: number;
  type?: string;
  /** The answer, the record's `data` left out when `left` is set. */
  body?: string;
  /** The record whose `data` was left out (routes with `replayRecord`): its id, and where `data` stood among its members (-1: it had none). */
  left?: { id: string; at: number };
}

type Answered = Entry & Required<Pick<Entry, 'status' | 'type' | 'body'>>;

/** What an entry may be once opened: this version's, or an earlier one ({h}, then {h, status, type, body}). */
type OpenedEntry = Entry | { v?: undefined; h: string; status?: number; type?: string; body?: string };

interface Answer {
  status: number;
  headers: Record<string, string | number>;
  body: Buffer;
}

/** A claimed slot: ours until the answer is stored or the claim released. */
interface Claim {
  slot: IdempotencySlot;
  aad: string;
  owner: string;
  h: string;
  k: string;
}

/**
 * What the stage needs of the body stage (http/stages.ts): the raw bytes, hashed before they are
 * parsed, then the parse.
 */
export interface BodyReader {
  read(ctx: ApiContext): Promise<Buffer>;
  parse(ctx: ApiContext, raw: Buffer): unknown;
}

/** The header's key: undefined without one; 400 invalid_idempotency_key for a malformed one. */
export function idempotencyKeyOf(ctx: ApiContext): string | undefined {
  const header = ctx.req.headers[IDEMPOTENCY_HEADER];
  if (header === undefined) return undefined;
  // Node joins repeated unknown headers with ", ": a repeated key fails the pattern.
  if (typeof header !== 'string' || !KEY_PATTERN.test(header)) throw new ServiceError('invalid_idempotency_key', { detail: KEY_RULE });
  return header;
}

export class Idempotency {
  readonly #o: Required<IdempotencyOptions>;
  readonly #purge: NodeJS.Timeout;

  constructor(opts: IdempotencyOptions) {
    this.#o = { inFlightTtlMs: IN_FLIGHT_TTL_MS, answerTtlMs: ANSWER_TTL_MS, purgeEveryMs: PURGE_INTERVAL_MS, ...opts };
    // Expired entries: the embedded store deletes them here; Redis expires its keys itself.
    this.#purge = setInterval(() => {
      this.#o.store.purgeIdempotencyKeys(new Date()).catch((err: unknown) => this.#o.log.warn({ error: errorFields(storeErrorOf(err)) }, 'idempotency purge failed; will retry'));
    }, this.#o.purgeEveryMs);
    this.#purge.unref();
  }

  close(): void {
    clearInterval(this.#purge);
  }

  /**
   * The stage, for a request with a key (idempotencyKeyOf): the body is read, the slot claimed
   * (or the stored answer replayed, and the route does not run), the body parsed, the route run,
   * its answer stored (a 2xx) or the claim released, and the answer sent.
   */
  async answer(ctx: ApiContext, route: ApiRoute, key: string, body: BodyReader): Promise<void> {
    const raw = await body.read(ctx);
    const claimed = await this.#claim(ctx, key, raw);
    if (!('owner' in claimed)) return replay(ctx, await rendered(ctx, route, claimed));
    let answer: Answer;
    try {
      ctx.body = body.parse(ctx, raw);
      if (ctx.body instanceof Promise) ctx.body = await ctx.body;
      answer = await bytesOf(ctx, await route.handle(ctx));
    } catch (err) {
      await this.#release(claimed);
      throw err;
    }
    await this.#settle(claimed, answer, route);
    // A client that went away does not stop the answer from being stored; it is not sent.
    if (ctx.res.destroyed) return;
    ctx.res.writeHead(answer.status, answer.headers);
    ctx.res.end(answer.body);
  }

  /** Claims the slot for this request, or returns the answer to replay; throws 409 / 422. */
  async #claim(ctx: ApiContext, key: string, raw: Buffer): Promise<Claim | Answered> {
    const principal = ctx.principal;
    const slot = slotOf(principal.tenant.id, principal.app.id, key);
    const aad = sealAad(slot);
    const k = principal.keyId;
    const h = requestHash(ctx.req.method ?? '', `${ctx.url.pathname}${ctx.url.search}`, raw);
    const owner = randomUUID();
    const found = await this.#o.store.claimIdempotencyKey(slot, owner, this.#seal({ v: ENTRY_VERSION, h, k }, aad), this.#o.inFlightTtlMs);
    if (found.state === 'claimed') return { slot, aad, owner, h, k };
    const entry = await this.#open(found.sealed, aad);
    // Another API key of the application: refused whatever its request was.
    if (entry.v === ENTRY_VERSION && entry.k !== k) {
      throw new ServiceError('idempotency_key_reused', { detail: 'This SVC-IDEMPOTENCY-KEY was used by another API key of the application; use a new key' });
    }
    if (entry.h !== h) {
      throw new ServiceError('idempotency_key_reused', { detail: 'This SVC-IDEMPOTENCY-KEY was used with another method, path or body; use a new key' });
    }
    if (found.state === 'in_flight' || entry.status === undefined) {
      throw new ServiceError('idempotency_key_in_flight', { detail: 'A request with this SVC-IDEMPOTENCY-KEY has not finished; retry later', headers: { 'retry-after': '1' } });
    }
    // An earlier version's answer may hold plaintext and names no API key: never replayed.
    if (entry.v !== ENTRY_VERSION) {
      throw new ServiceError('idempotency_key_reused', { detail: 'This SVC-IDEMPOTENCY-KEY was answered by an earlier version of the service; use a new key' });
    }
    return entry as Answered;
  }

  /** Stores a 2xx answer (then it is sent), or releases the claim of any other. */
  async #settle(claim: Claim, a: Answer, route: ApiRoute): Promise<void> {
    const { slot, aad, k } = claim;
    if (a.status < 200 || a.status > 299) return this.#release(claim);
    const type = a.headers['content-type'];
    const entry: Entry = { v: ENTRY_VERSION, h: claim.h, k, status: a.status, type: typeof type === 'string' ? type : 'application/json; charset=utf-8', body: a.body.toString('utf8') };
    if (route.replayRecord) {
      const kept = leaveOutData(entry.body!);
      // An answer that cannot be taken apart is not stored (its retry runs again): never stored whole.
      if (kept === null) {
        this.#o.log.warn('idempotent answer not stored: not a token record');
        return this.#release(claim);
      }
      entry.body = kept.body;
      entry.left = kept.left;
    }
    let stored = false;
    try {
      stored = await this.#o.store.completeIdempotencyKey(slot, claim.owner, this.#seal(entry, aad), this.#o.answerTtlMs);
    } catch (err) {
      this.#o.log.warn({ error: errorFields(storeErrorOf(err)) }, 'idempotent answer not stored');
    }
    // The work is done and its answer is sent either way; unstored, a retry would run again.
    if (!stored) await this.#release(claim);
  }

  async #release(claim: Claim): Promise<void> {
    try {
      await this.#o.store.releaseIdempotencyKey(claim.slot, claim.owner);
    } catch (err) {
      // The claim expires by itself (IN_FLIGHT_TTL_MS).
      this.#o.log.warn({ error: errorFields(storeErrorOf(err)) }, 'idempotency claim not released; it expires by itself');
    }
  }

  #seal(entry: Entry, aad: string): string {
    return this.#o.ring.seal(JSON.stringify(entry), aad);
  }

  async #open(sealed: string, aad: string): Promise<OpenedEntry> {
    try {
      const v = JSON.parse(await this.#o.ring.unsealOrRefresh(sealed, aad)) as OpenedEntry;
      if (typeof v.h !== 'string') throw new TypeError('no hash');
      if (v.v !== undefined && (v.v !== ENTRY_VERSION || typeof v.k !== 'string')) throw new TypeError('unknown entry format');
      return v;
    } catch (err) {
      throw new ServiceError('internal_error', { detail: 'A stored idempotency entry cannot be opened', cause: err });
    }
  }
}

/**
 * A token record's answer without its `data` member, and where it stood (-1: none). Null when the
 * answer is not a JSON object with a string id.
 */
function leaveOutData(body: string): { body: string; left: { id: string; at: number } } | null {
  let record: unknown;
  try {
    record = JSON.parse(body);
  } catch {
    return null;
  }
  if (typeof record !== 'object' || record === null || Array.isArray(record)) return null;
  const r = record as Record<string, unknown>;
  if (typeof r.id !== 'string') return null;
  const at = Object.keys(r).indexOf('data');
  delete r.data;
  return { body: JSON.stringify(r), left: { id: r.id, at } };
}

/**
 * A stored answer as it is replayed: a record whose `data` was left out gets it again from the
 * route (its access decision and audit; a token gone since throws 404), in the same place, so the
 * replay is byte for byte the first answer while the token and the key's rules are unchanged.
 * The first answer had no data (-1): the replay shows none either.
 */
async function rendered(ctx: ApiContext, route: ApiRoute, e: Answered): Promise<Answered> {
  if (e.left === undefined) return e;
  if (!route.replayRecord) throw new ServiceError('internal_error', { detail: 'A stored idempotent answer cannot be replayed by this route' });
  const fresh = await route.replayRecord(ctx, e.left.id);
  const stored = JSON.parse(e.body) as Record<string, unknown>;
  if (e.left.at < 0 || fresh.data === undefined) return { ...e, body: JSON.stringify(stored) };
  const members = Object.entries(stored);
  members.splice(e.left.at, 0, ['data', fresh.data]);
  return { ...e, body: JSON.stringify(Object.fromEntries(members)) };
}

function replay(ctx: ApiContext, e: Answered): void {
  if (ctx.res.destroyed) return;
  const body = Buffer.from(e.body, 'utf8');
  ctx.res.writeHead(e.status, { ...ctx.headers, 'content-type': e.type, 'content-length': body.length, [REPLAYED_HEADER]: 'true' });
  ctx.res.end(body);
}

/** The route's answer as it is stored and sent: a handler of an idempotent route returns it. */
async function bytesOf(ctx: ApiContext, answer: JsonAnswer | void): Promise<Answer> {
  if (!answer) throw new ServiceError('internal_error', { detail: 'An idempotent route must return its answer' });
  let body: Buffer;
  try {
    body = await jsonBytes(answer.json);
  } catch (err) {
    // As respond.ts answers a body the JSON worker failed to serialize.
    throw err instanceof ServiceError ? err : new ServiceError('internal_error', { cause: err });
  }
  return { status: answer.status, headers: { ...ctx.headers, 'content-type': 'application/json; charset=utf-8', 'content-length': body.length }, body };
}
