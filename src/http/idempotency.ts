/**
 * SVC-IDEMPOTENCY-KEY on the routes that opt in (`idempotent: true`: POST /tokenize, POST /tokens,
 * PATCH /tokens/{id}). A retry after a timeout must not create its tokens twice:
 *
 *   1. The header is checked (1 to 255 of `A-Z a-z 0-9 . _ : ~ + / = -`; else 400
 *      invalid_idempotency_key). No header: the route runs as usual.
 *   2. Once the body has been read (before it is parsed), the slot (tenant, application, key) is
 *      CLAIMED in the token store in one atomic step, shared by every instance on the store. The
 *      claim holds a SHA-256 of method, path (with query) and body bytes, sealed.
 *   3. Another request holding the slot: same request → 409 idempotency_key_in_flight (with
 *      Retry-After); different → 422 idempotency_key_reused. A stored answer: same request → the
 *      answer is REPLAYED (status, body, content type, plus `SVC-IDEMPOTENT-REPLAYED: true`, with
 *      this request's own trace id and rate-limit headers) and the route does not run; different
 *      → 422.
 *   4. The route runs, writing its answer into a capture (not the socket). A 2xx answer is sealed
 *      and stored for 24 h BEFORE it is sent, so a client that got it and retries gets the replay,
 *      and a client that went away (the timeout case) still finds it. Any other answer, or a
 *      thrown error, releases the claim first: a failed request stores nothing and a retry runs
 *      again. A claim left by a crashed process expires after IN_FLIGHT_TTL_MS.
 *
 * Stored answers hold ids and masked values, never plaintext, and are sealed with the vault's key
 * ring all the same (AAD: the slot). The store keeps only ciphertext and digests: the client's key
 * is kept as a SHA-256 with the application id.
 */
import { hash, randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { ServiceError } from '../errors.js';
import type { Logger } from '../log.js';
import type { IdempotencySlot, IdempotencyStore } from '../store/idempotency.js';
import { StoreUnavailableError } from '../store/types.js';
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
  store: IdempotencyStore;
  ring: Sealer;
  log: Logger;
  inFlightTtlMs?: number;
  answerTtlMs?: number;
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

/** The sealed entry: the request's hash, and once answered the answer. */
interface Entry {
  h: string;
  status?: number;
  type?: string;
  body?: string;
}

/** Thrown out of the route (through readJson) when a stored answer is replayed instead. */
class Replay {
  constructor(readonly entry: Required<Entry>) {}
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
    this.#o = { inFlightTtlMs: IN_FLIGHT_TTL_MS, answerTtlMs: ANSWER_TTL_MS, ...opts };
    // Expired entries: the embedded store deletes them here; Redis expires its keys itself.
    this.#purge = setInterval(() => {
      this.#o.store.purgeIdempotencyKeys(new Date()).catch(() => this.#o.log.warn('idempotency purge failed; will retry'));
    }, PURGE_INTERVAL_MS);
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
    let claim: { owner: string; h: string } | null = null;

    const readJson = ctx.readJson.bind(ctx);
    ctx.readJson = (accept) => readJson(accept, async (raw) => {
      const h = requestHash(ctx.req.method ?? '', `${ctx.url.pathname}${ctx.url.search}`, raw);
      const owner = randomUUID();
      const found = await this.#store(() => this.#o.store.claimIdempotencyKey(slot, owner, this.#seal({ h }, aad), this.#o.inFlightTtlMs));
      if (found.state === 'claimed') {
        claim = { owner, h };
        return;
      }
      const entry = await this.#open(found.sealed, aad);
      if (entry.h !== h) {
        throw new ServiceError('idempotency_key_reused', { detail: 'This SVC-IDEMPOTENCY-KEY was used with another method, path or body; use a new key' });
      }
      if (found.state === 'in_flight' || entry.status === undefined) {
        throw new ServiceError('idempotency_key_in_flight', { detail: 'A request with this SVC-IDEMPOTENCY-KEY has not finished; retry later', headers: { 'retry-after': '1' } });
      }
      throw new Replay(entry as Required<Entry>);
    });

    const capture = captureResponse(res);
    ctx.res = capture.res;
    let answer: Answer;
    try {
      await route.handle(ctx);
      answer = await capture.answer;
    } catch (err) {
      if (err instanceof Replay) return replay(res, ctx.headers, err.entry);
      if (claim) await this.#release(slot, claim);
      throw err;
    } finally {
      ctx.res = res;
    }
    if (claim) await this.#settle(slot, claim, aad, answer);
    if (answer.status === 0) res.destroy();
    if (res.destroyed) return;
    res.writeHead(answer.status, answer.headers);
    res.end(answer.body);
  }

  /** Stores a 2xx answer (then it is sent), or releases the claim of any other. */
  async #settle(slot: IdempotencySlot, claim: { owner: string; h: string }, aad: string, a: Answer): Promise<void> {
    if (a.status < 200 || a.status > 299) return this.#release(slot, claim);
    const type = a.headers['content-type'];
    const entry: Entry = { h: claim.h, status: a.status, type: typeof type === 'string' ? type : 'application/json; charset=utf-8', body: a.body.toString('utf8') };
    let stored = false;
    try {
      stored = await this.#o.store.completeIdempotencyKey(slot, claim.owner, this.#seal(entry, aad), this.#o.answerTtlMs);
    } catch (err) {
      this.#o.log.warn({ error: err instanceof Error ? err.name : 'unknown' }, 'idempotent answer not stored');
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

  async #open(sealed: string, aad: string): Promise<Entry> {
    try {
      const v = JSON.parse(await this.#o.ring.unsealOrRefresh(sealed, aad)) as Entry;
      if (typeof v.h !== 'string') throw new TypeError('no hash');
      return v;
    } catch (err) {
      throw new ServiceError('internal_error', { detail: 'A stored idempotency entry cannot be opened', cause: err });
    }
  }

  async #store<T>(op: () => Promise<T>): Promise<T> {
    try {
      return await op();
    } catch (err) {
      if (err instanceof StoreUnavailableError) throw new ServiceError('store_unavailable', { cause: err });
      throw err;
    }
  }
}

function replay(res: ServerResponse, headers: Record<string, string>, e: Required<Entry>): void {
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
