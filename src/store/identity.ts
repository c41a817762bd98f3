/**
 * A store that forgets: noticed, never written to, and named.
 *
 * Every store carries a marker (store/types.ts StoreMarker: a random id and the time it was made)
 * beside its format marker. A Redis restarted without persistence, a FLUSHALL, a PostgreSQL
 * database dropped and recreated, an embedded file replaced under the running service: each
 * leaves a store that answers but no longer holds what the service wrote. Writing on into it
 * would seal new tokens under a data key the store no longer holds (lost for good at the next
 * start), so the service checks the store's identity:
 *
 *   - at start (openIdentified): a marker that is a tombstone, a marker without data keys, or
 *     records without a marker and without data keys: the store is lost, and the start refuses,
 *     naming what it found. No marker and data keys: a store written before markers existed; it
 *     gets one. Nothing at all: a new store (its first data key, then its marker).
 *   - while serving (StoreGuard): after any dropped connection, before the next store call;
 *     every CHECK_EVERY_MS; at each /readyz; and, on Redis, inside every write script (a slot that
 *     lost its marker runs nothing: redis/connection.ts). A store found lost makes every call
 *     answer StoreLostError (503 store_unavailable), /readyz 503 with the cause, one error line in
 *     the log, and a tombstone marker in the emptied store, so the next start names the loss
 *     instead of beginning a new vault. The guard keeps checking: a store restored from a backup
 *     of itself (its own marker, not a tombstone, its data keys) is served again.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from '../log.js';
import type { AuditPort, DataKeyPort, Store, StoreMarker, TokenPort, WrappedDataKey } from './types.js';
import type { IdempotencyPort } from './idempotency.js';
import type { ReactorResultPort } from './reactor-results.js';
import { StoreLostError } from './unavailable.js';

export { StoreLostError } from './unavailable.js';

/** How often a serving instance re-reads the marker when nothing else made it check. */
export const CHECK_EVERY_MS = 2_000;

/** What the operator does about a lost store (every message that reports one ends with it). */
export const LOST_STORE_ADVICE =
  'Restore the store from a backup and start the service on it; or, to begin a new, empty vault there instead (every token it held stays lost), run `tokenproxy init`';

function describe(m: StoreMarker): string {
  return `store ${m.id}, created ${m.created_at}`;
}

/**
 * Why the store is lost, from what it holds (its marker, data keys and records), or null when it
 * is not: the checks a start makes, and `tokenproxy migrate` before it converts anything.
 */
export async function findLoss(store: Pick<Store, 'marker' | 'dataKeys'>): Promise<{ lost: string | null; marker: StoreMarker | null; keys: number }> {
  const marker = await store.marker.readMarker();
  const keys = (await store.dataKeys.listDataKeys()).length;
  const lost = (why: string) => ({ lost: `the store is lost: ${why}. ${LOST_STORE_ADVICE}`, marker, keys });
  if (marker?.lost_at) return lost(`a running tokenproxy found it emptied at ${marker.lost_at} (it had been ${describe(marker)}); its tokens are gone`);
  if (marker && keys === 0) return lost(`it carries its marker (${describe(marker)}) but no data keys, so nothing it holds can be opened`);
  if (!marker && keys === 0 && (await store.marker.holdsRecords())) {
    return lost('it holds tokens or audit events but neither its marker nor its data keys, so nothing it holds can be opened (it was emptied and written to since, or only part of it was restored)');
  }
  return { lost: null, marker, keys };
}

/**
 * The checks a start makes before the key ring opens (findLoss: a lost store is StoreLostError,
 * and nothing is written to it); `openRing` opens the ring (making the first data key of a new
 * store). Returns the store's marker and the ring. `create` false (the CLI's tools): no marker is
 * written.
 */
export async function openIdentified<T>(
  store: Pick<Store, 'marker' | 'dataKeys'>, opts: { create: boolean; log?: Logger | undefined }, openRing: () => Promise<T>,
): Promise<{ marker: StoreMarker | null; ring: T }> {
  const { lost, marker: found, keys } = await findLoss(store);
  if (lost) throw new StoreLostError(lost);
  const ring = await openRing();
  if (found || !opts.create) return { marker: found, ring };
  // A new store (its first data key was made by openRing), or one written before markers
  // existed: it gets its marker now. Instances starting together agree on the first written.
  const made = await store.marker.createMarker({ id: randomUUID(), created_at: new Date().toISOString() });
  opts.log?.info({ store_id: made.id }, keys === 0 ? 'a new store: its marker is written' : 'the store had no marker (an earlier version wrote it): its marker is written');
  return { marker: made, ring };
}

// Every method of each port (a Record: a method added to a port and not listed here fails to compile).
const PORT_METHODS = {
  tokens: { insertMany: true, get: true, getMany: true, update: true, delete: true, list: true, purgeCvc: true } satisfies Record<keyof TokenPort, true>,
  audit: { appendAudit: true, listAudit: true, auditRange: true, auditHead: true, anchorAuditHead: true } satisfies Record<keyof AuditPort, true>,
  dataKeys: { listDataKeys: true, addDataKey: true } satisfies Record<keyof DataKeyPort, true>,
  idempotency: {
    claimIdempotencyKey: true, completeIdempotencyKey: true, releaseIdempotencyKey: true, purgeIdempotencyKeys: true,
  } satisfies Record<keyof IdempotencyPort, true>,
  reactorResults: { putReactorResult: true, getReactorResult: true, purgeReactorResults: true } satisfies Record<keyof ReactorResultPort, true>,
};

type Method = (...args: unknown[]) => Promise<unknown>;

/** The serving instance's watch over its store (file header). */
export class StoreGuard {
  readonly #store: Store;
  /** Null until armed: the gates let every call through. */
  #marker: StoreMarker | null = null;
  readonly #log: Logger;
  /** The data key port's own listDataKeys, not the gated one (the check must not wait for itself). */
  readonly #listKeys: () => Promise<WrappedDataKey[]>;
  #lost: StoreLostError | null = null;
  /** A connection dropped since the last check: the next call checks first. */
  #dirty = false;
  #checking: Promise<void> | null = null;
  #timer: NodeJS.Timeout | null = null;

  /** `store` as its backend made it (before other wrappers: their counts then include the guard's refusals). */
  constructor(store: Store, log: Logger) {
    this.#store = store;
    this.#log = log;
    this.#listKeys = store.dataKeys.listDataKeys.bind(store.dataKeys);
  }

  /** Gates every port method of the store in place; the gates let every call through until arm(). */
  install(): this {
    for (const [port, methods] of Object.entries(PORT_METHODS)) {
      const target = (this.#store as unknown as Record<string, Record<string, Method>>)[port]!;
      for (const name of Object.keys(methods)) {
        const original = target[name]!.bind(target);
        target[name] = (...args: unknown[]) => {
          const wait = this.#gate();
          return wait ? wait.then(() => original(...args)) : original(...args);
        };
      }
    }
    return this;
  }

  /** From now on the store must carry `marker`: enforced in writes where the backend can, and checked (file header). */
  arm(marker: StoreMarker, everyMs = CHECK_EVERY_MS): this {
    this.#marker = marker;
    this.#store.marker.enforce?.(marker, () => this.check().then(() => this.#lost === null));
    this.#store.marker.onDisconnect?.(() => {
      this.#dirty = true;
    });
    this.#timer = setInterval(() => {
      this.check().catch(() => {});
    }, everyMs);
    this.#timer.unref();
    return this;
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** The loss found by the last check, or null while the store is the one the service opened. */
  get lost(): StoreLostError | null {
    return this.#lost;
  }

  /**
   * Reads the store's marker and data keys (concurrent calls share one read). A store that does
   * not answer rejects (StoreUnavailableError): down is not lost, and the next call checks again.
   */
  check(): Promise<void> {
    this.#checking ??= this.#check().finally(() => {
      this.#checking = null;
    });
    return this.#checking;
  }

  #gate(): Promise<void> | undefined {
    if (this.#lost) return Promise.reject(this.#lost);
    if (!this.#dirty) return undefined;
    return this.check().then(() => {
      if (this.#lost) throw this.#lost;
    });
  }

  async #check(): Promise<void> {
    const mine = this.#marker;
    if (!mine) return;
    this.#dirty = false;
    try {
      const replaced = this.#store.marker.replaced?.();
      if (replaced) return this.#lose(replaced, false);
      const found = await this.#store.marker.readMarker();
      if (!found) return await this.#lose('it no longer carries its marker: it was emptied (a Redis restarted without persistence or flushed, a database dropped and recreated, a file replaced)', true);
      if (found.id !== mine.id) return this.#lose(`it carries another store's marker (${describe(found)}): it was replaced by another store`, false);
      if (found.lost_at) return this.#lose(`a tokenproxy instance found it emptied at ${found.lost_at}`, false);
      if ((await this.#listKeys()).length === 0) return await this.#lose('its data keys are gone, so nothing it holds can be opened', true);
    } catch (err) {
      this.#dirty = true;
      throw err;
    }
    if (this.#lost) {
      this.#log.warn({ store_id: mine.id }, 'the token store carries its own marker and data keys again (restored): serving it');
      this.#lost = null;
    }
  }

  async #lose(reason: string, tombstone: boolean): Promise<void> {
    const mine = this.#marker!;
    if (!this.#lost) {
      this.#lost = new StoreLostError(`the token store the service opened (${describe(mine)}) is lost: ${reason}`);
      this.#log.error(
        { store_id: mine.id, store: this.#store.kind },
        `${this.#lost.message}. Every request that needs the store answers 503 store_unavailable and /readyz answers 503 until it is back; nothing is written to it. ${LOST_STORE_ADVICE}`,
      );
    }
    if (!tombstone) return;
    // The emptied store says so to the next start (and to the other instances): best effort.
    await this.#store.marker.markLost({ ...mine, lost_at: new Date().toISOString() }).catch((err: unknown) => {
      this.#log.warn({ error: { type: (err as Error).name } }, 'could not mark the lost store as lost');
    });
  }
}
