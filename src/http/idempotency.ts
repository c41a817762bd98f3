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
 *      422 idempotency_key_reused, whatever the request (issue 31: a stored answer is the key's,
 *      not the application's). Same key, same request → 409 idempotency_key_in_flight (with
 *      Retry-After) while it runs; once answered, the answer is REPLAYED (status, body, content
 *      type, plus `SVC-IDEMPOTENT-REPLAYED: true`, with this request's own trace id and rate-limit
 *      headers) and the route does not run. A different request → 422.
 *   4. The route runs, writing its answer into a capture (not the socket). A 2xx answer is sealed
 *      and stored for 24 h BEFORE it is sent, so a client that got it and retries gets the replay,
 *      and a client that went away (the timeout case) still finds it. Any other answer, or a
 *      thrown error, releases the claim first: a failed request stores nothing and a retry runs
 *      again. A claim left by a crashed process expires after IN_FLIGHT_TTL_MS.
 *
 * Stored answers never hold plaintext (issue 23). Those of POST /tokenize and POST /tokens hold
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
import type { ServerResponse } from 'node:http';
import { ServiceError } from '../errors.js';
import type { Logger } from '../log.js';
import type { IdempotencyPort, IdempotencySlot } from '../store/idempotency.js';
import { storeErrorName } from '../store/service-errors.js';
import type { Context, Route } from './context.js';

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

/** Thrown out of the route (through readJson) when a stored answer is replayed instead. */
class Replay {
  constructor(readonly entry: Answered) {}
}

interface Answer {
  status: number;
  headers: Record<string, string | number | string[]>;
  body: Buffer;
}

export class Idempotency {
  readonly #o: Required<IdempotencyOptions>;
  readonly #purge: NodeJS.Timeout;

  constructor(opts: IdempotencyOptions) {
    this.#o = { inFlightTtlMs: IN_FLIGHT_TTL_MS, answerTtlMs: ANSWER_TTL_MS, purgeEveryMs: PURGE_INTERVAL_MS, ...opts };
    // Expired entries: the embedded store deletes them here; Redis expires its keys itself.
    this.#purge = setInterval(() => {
      this.#o.store.purgeIdempotencyKeys(new Date()).catch(() => this.#o.log.warn('idempotency purge failed; will retry'));
    }, this.#o.purgeEveryMs);
    this.#purge.unref();
  }

  /** The routes, those with `idempotent` wrapped by this stage. */
  wrap(routes: Route[]): Route[] {
    return routes.map((r) => (r.idempotent ? { ...r, handle: (ctx: Context) => this.#handle(ctx, r) } : r));
  }

  close(): void {
    clearInterval(this.#purge);
  }

  async #handle(ctx: Context, route: Route): Promise<void> {
    const header = ctx.req.headers[IDEMPOTENCY_HEADER];
    if (header === undefined) return route.handle(ctx);
    // Node joins repeated unknown headers with ", ": a repeated key fails the pattern.
    if (typeof header !== 'string' || !KEY_PATTERN.test(header)) throw new ServiceError('invalid_idempotency_key', { detail: KEY_RULE });
    const principal = ctx.principal!;
    const slot = slotOf(principal.tenant.id, principal.app.id, header);
    const aad = sealAad(slot);
    const res = ctx.res;
    const k = principal.keyId;
    let claim: { owner: string; h: string } | null = null;

    const readJson = ctx.readJson.bind(ctx);
    ctx.readJson = (accept) => readJson(accept, async (raw) => {
      const h = requestHash(ctx.req.method ?? '', `${ctx.url.pathname}${ctx.url.search}`, raw);
      const owner = randomUUID();
      const found = await this.#o.store.claimIdempotencyKey(slot, owner, this.#seal({ v: ENTRY_VERSION, h, k }, aad), this.#o.inFlightTtlMs);
      if (found.state === 'claimed') {
        claim = { owner, h };
        return;
      }
      const entry = await this.#open(found.sealed, aad);
      // Another API key of the application: refused whatever its request was (issue 31).
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
      throw new Replay(entry as Answered);
    });

    const capture = captureResponse(res);
    ctx.res = capture.res;
    let answer: Answer | Replay;
    try {
      await route.handle(ctx);
      answer = await capture.answer;
    } catch (err) {
      if (!(err instanceof Replay)) {
        if (claim) await this.#release(slot, claim);
        throw err;
      }
      answer = err;
    } finally {
      ctx.res = res;
    }
    if (answer instanceof Replay) return replay(res, ctx.headers, await rendered(ctx, route, answer.entry));
    if (claim) await this.#settle(slot, claim, k, aad, answer, route);
    if (answer.status === 0) res.destroy();
    if (res.destroyed) return;
    res.writeHead(answer.status, answer.headers);
    res.end(answer.body);
  }

  /** Stores a 2xx answer (then it is sent), or releases the claim of any other. */
  async #settle(slot: IdempotencySlot, claim: { owner: string; h: string }, k: string, aad: string, a: Answer, route: Route): Promise<void> {
    if (a.status < 200 || a.status > 299) return this.#release(slot, claim);
    const type = a.headers['content-type'];
    const entry: Entry = { v: ENTRY_VERSION, h: claim.h, k, status: a.status, type: typeof type === 'string' ? type : 'application/json; charset=utf-8', body: a.body.toString('utf8') };
    if (route.replayRecord) {
      const kept = leaveOutData(entry.body!);
      // An answer that cannot be taken apart is not stored (its retry runs again): never stored whole.
      if (kept === null) {
        this.#o.log.warn('idempotent answer not stored: not a token record');
        return this.#release(slot, claim);
      }
      entry.body = kept.body;
      entry.left = kept.left;
    }
    let stored = false;
    try {
      stored = await this.#o.store.completeIdempotencyKey(slot, claim.owner, this.#seal(entry, aad), this.#o.answerTtlMs);
    } catch (err) {
      this.#o.log.warn({ error: storeErrorName(err) }, 'idempotent answer not stored');
    }
    // The work is done and its answer is sent either way; unstored, a retry would run again.
    if (!stored) await this.#release(slot, claim);
  }

  async #release(slot: IdempotencySlot, claim: { owner: string }): Promise<void> {
    try {
      await this.#o.store.releaseIdempotencyKey(slot, claim.owner);
    } catch {
      // The claim expires by itself (IN_FLIGHT_TTL_MS).
      this.#o.log.warn('idempotency claim not released; it expires by itself');
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
async function rendered(ctx: Context, route: Route, e: Answered): Promise<Answered> {
  if (e.left === undefined) return e;
  if (!route.replayRecord) throw new ServiceError('internal_error', { detail: 'A stored idempotent answer cannot be replayed by this route' });
  const fresh = await route.replayRecord(ctx, e.left.id);
  const stored = JSON.parse(e.body) as Record<string, unknown>;
  if (e.left.at < 0 || fresh.data === undefined) return { ...e, body: JSON.stringify(stored) };
  const members = Object.entries(stored);
  members.splice(e.left.at, 0, ['data', fresh.data]);
  return { ...e, body: JSON.stringify(Object.fromEntries(members)) };
}

function replay(res: ServerResponse, headers: Record<string, string>, e: Answered): void {
  if (res.destroyed) return;
  const body = Buffer.from(e.body, 'utf8');
  res.writeHead(e.status, { ...headers, 'content-type': e.type, 'content-length': body.length, [REPLAYED_HEADER]: 'true' });
  res.end(body);
}

/**
 * A stand-in for the route's ServerResponse that keeps what respond.ts writes (writeHead, then
 * end with the bytes) instead of sending it. Everything else reaches the real response. It is
 * never `destroyed`: a client that went away does not stop the answer from being stored.
 */
function captureResponse(real: ServerResponse): { res: ServerResponse; answer: Promise<Answer> } {
  let head: { status: number; headers: Answer['headers'] } | null = null;
  let done!: (a: Answer) => void;
  const answer = new Promise<Answer>((resolve) => (done = resolve));
  const own: Record<PropertyKey, unknown> = {
    destroyed: false,
    get headersSent() {
      return head !== null;
    },
    writeHead(status: number, ...rest: unknown[]) {
      const headers = rest.find((r): r is Answer['headers'] => typeof r === 'object' && r !== null && !Array.isArray(r));
      head = { status, headers: { ...(headers ?? {}) } };
      return proxy;
    },
    end(chunk?: unknown) {
      const body = Buffer.isBuffer(chunk) ? chunk : typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.alloc(0);
      done({ status: head?.status ?? 200, headers: head?.headers ?? {}, body });
      return proxy;
    },
    // respond.ts destroys a response it cannot answer (status 0: not stored, the real one is destroyed).
    destroy() {
      done({ status: 0, headers: {}, body: Buffer.alloc(0) });
      return proxy;
    },
  };
  const proxy: ServerResponse = new Proxy(real, {
    get(target, prop) {
      if (Object.hasOwn(own, prop)) return own[prop];
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return { res: proxy, answer };
}
