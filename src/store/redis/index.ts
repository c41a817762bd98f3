/**
 * The Redis token store, shared by many tokenproxy instances (ioredis): one node, a Redis Cluster
 * or a Sentinel-managed primary (src/redis/connect.ts).
 *
 * DURABILITY: run every primary with `appendonly yes` and `appendfsync always`. A resolved insert
 * then survives a tokenproxy kill -9 (Redis already has it) AND a Redis crash: with `always` Redis
 * fsyncs the AOF before it replies. With the default `everysec` a Redis crash can lose the last
 * second of tokens that clients already hold. Replication is asynchronous: a failover (Sentinel
 * or Cluster promoting a replica) can lose the last writes the primary acknowledged. With
 * `waitReplicas` every write script is followed by `WAIT n timeout` on the same connection, and
 * fewer acknowledgements answer StoreUnavailableError (503 store_unavailable; the write did happen
 * on the primary and may or may not survive a failover). WAIT narrows the window, it does not close
 * it: it is not consensus (a failover may promote a replica that had not acknowledged), and a
 * replica acknowledges receiving a write, not writing it to disk. A service start reads the
 * primaries' `appendonly`/`appendfsync` before writing anything (durability.ts): production mode
 * refuses a Redis without an append-only file unless `store.durability: accept_loss`.
 *
 * Layout 4 (P = key_prefix, T = tenant id; every text component URI-encoded, so
 * ':' '{' '}' never appear inside one). Every key of one tenant carries `{T}` as its Redis Cluster
 * hash tag, so each script touches one slot, tenants spread over the shards, and one tenant lives
 * on one shard (a batch stays all or nothing). Ids, digests and ciphertext are raw bytes (record.ts):
 * an id is its 16 bytes when it is a lowercase UUID, a fingerprint or search hash its 32 bytes.
 *   P t:{T}:r            hash id → the binary record (record.ts), the cvc at its end
 *   P t:{T}:o:<container>     zset bucket → bucket: the container's non-empty order buckets
 *   P t:{T}:o:<container>:<b> zset id → seq for seq div 128 = b (a listpack): the container's
 *                        tokens, newest-first pages; an unfiltered list merges the containers'
 *                        (there is no zset of all tokens)
 *   P t:{T}:m:<key>:<value>   zset id → seq: tokens with that metadata pair
 *   P t:{T}:x:<hash bytes>    zset id → seq: tokens with that search index hash
 *   P t:{T}:f            hash fingerprint (its first 8 bytes) → the ids with it (each a u16 length and
 *                        the id; the records hold the whole fingerprint, compared by every reader), what
 *                        deduplication and fingerprint search read (one field, not a key, each)
 *   P t:{T}:d, P t:{T}:d:<b>  the cvc purge times the same way: bucket b's zset id → ms, the
 *                        directory bucket → its earliest (purgeCvc cuts the cvc off the record)
 *   P t:{T}:seq          per-tenant sequence (INCR); zset scores, newest-first cursors
 *   P t:{T}:containers   set of the tenant's containers (a container is never removed from it)
 *   P t:{T}:idem:<key>   hash {s, o, v}: an idempotency entry, expiring by itself (idempotency-scripts.ts)
 *   P t:{T}:rr:<id>      string: an asynchronous reactor call's sealed result, expiring by itself (reactor-results.ts)
 *   P t:{T}:audit        list of the tenant's audit events (JSON), oldest first (store/audit.ts)
 *   P t:{T}:audithead    "<seq> <hash> <anchor>": the tenant's audit chain head and its anchor
 *                        (crypto/audit-anchor.ts; "<seq> <hash>" when written before anchoring)
 *   P tenants            set of tenant ids with a cvc to purge (purgeCvc walks it; plain SADD, no script)
 *   P {dk}, P {dk}:order data keys: hash kid → JSON, list of kids oldest first (one slot of their own)
 *   P meta               hash {version}: the layout version (4)
 *   P {dk}:store         hash {id, created_at, lost_at?}: the store marker (marker.ts, store/identity.ts)
 *   P {dk}:sid, P t:{T}:sid   the marker's id, in each slot a write script touches (marker.ts)
 * A type filter is checked on the records (types are few; a zset per type cost ~100 bytes a token).
 * On a Cluster the prefix must not contain '{' or '}' (the config refuses it): Redis hashes the
 * first {…} of a key, which must be the tenant's. Writes are Lua scripts (scripts.ts), so a batch
 * and its index entries appear atomically and search serves them at once. A script's KEYS[1] is
 * always a key of the tenant (it routes the script to the tenant's shard), and every key it writes
 * is declared. One insert batch holds records of one tenant.
 *
 * Deduplication is a compare-and-set inside the insert script: among the ids of the record's
 * fingerprint it takes the oldest live token of the same type and container (the record header's
 * bytes, compared as they are) and returns it instead of writing, in the same atomic step as the
 * write, so N concurrent identical inserts leave one token.
 *
 * Formats: a service starts on layout 4 only. Connect on an older layout throws StoreFormatError
 * naming `tokenproxy migrate`, unless the store is opened for it (`forMigration`): then layouts 1
 * and 2 are first brought to layout 3 (migrate.ts: key names and index zsets, quick), and
 * migrator() converts layout 3 to 4 a batch at a time, resumably (migrate-v4.ts). Stop every
 * instance sharing the prefix before migrating: an older instance still writing would write layout 3.
 */
import type { FormatMigrator, Store, StoreDurability } from '../types.js';
import { StoreDurabilityError, StoreFormatError, StoreUnavailableError } from '../types.js';
import { RedisAudit } from './audit.js';
import { RedisConnection, sanitize, type RedisStoreOptions } from './connection.js';
import { RedisDataKeys } from './data-keys.js';
import { checkDurability, type DurabilityPolicy } from './durability.js';
import { RedisIdempotency } from './idempotency.js';
import { RedisMarker } from './marker.js';
import { migrate } from './migrate.js';
import { RedisReactorResults } from './reactor-results.js';
import { LAYOUT_VERSION, RedisMigratorV4 } from './migrate-v4.js';
import { RedisTokens } from './tokens.js';

export type { RedisStoreOptions } from './connection.js';

/** The four ports over one connection (connection.ts). */
export class RedisStore implements Store {
  readonly kind = 'redis' as const;
  readonly tokens: RedisTokens;
  readonly audit: RedisAudit;
  readonly dataKeys: RedisDataKeys;
  readonly idempotency: RedisIdempotency;
  readonly reactorResults: RedisReactorResults;
  readonly marker: RedisMarker;
  /** What connect's durability check found (durability.ts); absent when the store was opened without one (the CLI's tools). */
  durability?: StoreDurability;
  readonly #c: RedisConnection;

  private constructor(connection: RedisConnection) {
    this.#c = connection;
    this.tokens = new RedisTokens(connection);
    this.audit = new RedisAudit(connection);
    this.dataKeys = new RedisDataKeys(connection);
    this.idempotency = new RedisIdempotency(connection);
    this.reactorResults = new RedisReactorResults(connection);
    this.marker = new RedisMarker(connection);
  }

  /**
   * Connects (failing fast with StoreUnavailableError when Redis does not answer) and checks the
   * layout: a fresh prefix gets layout 4; an older layout is StoreFormatError unless
   * `forMigration` (then layouts 1 and 2 become 3 here, and migrator() does the rest).
   * `durability` (a service start): the primaries' persistence is checked first, before anything
   * is written, and StoreDurabilityError is production mode's refusal (durability.ts).
   */
  static async connect(opts: RedisStoreOptions & { forMigration?: boolean; durability?: DurabilityPolicy }): Promise<RedisStore> {
    const connection = await RedisConnection.open(opts);
    const client = connection.client;
    const store = new RedisStore(connection);
    try {
      if (opts.durability) store.durability = await checkDurability(connection, opts.durability, opts.log);
      const found = await layoutOf(connection);
      if (found > LAYOUT_VERSION) {
        throw new StoreFormatError(found, LAYOUT_VERSION, 'it was written by a newer tokenproxy; run that version (or newer) on it');
      }
      if (found < LAYOUT_VERSION) {
        if (!opts.forMigration) {
          throw new StoreFormatError(found, LAYOUT_VERSION,
            `run \`tokenproxy migrate\` with this configuration to convert the Redis keyspace under prefix ${JSON.stringify(connection.prefix)} (docs/storage.md, "Migrating a Redis store"), then start the service`);
        }
        const migrated = await migrate(connection);
        if (migrated > 0) opts.log?.info({ changes: migrated }, 'redis token store brought to layout 3 (layout 4 next: tokenproxy migrate)');
      }
    } catch (err) {
      client.disconnect();
      if (err instanceof StoreFormatError || err instanceof StoreUnavailableError || err instanceof StoreDurabilityError) throw err;
      throw new StoreUnavailableError('cannot check the Redis token store\'s layout', { cause: sanitize(err) });
    }
    return store;
  }

  /** Layout 3 → 4, for `tokenproxy migrate` (migrate-v4.ts); a no-op once the store says 4. */
  migrator(): FormatMigrator {
    return new RedisMigratorV4(this.#c);
  }

  async ping(): Promise<void> {
    await this.#c.call(() => this.#c.client.ping());
  }

  close(): Promise<void> {
    return this.#c.close();
  }
}

/**
 * The layout `P meta` records. None recorded: a prefix with no data keys, no tenants and no tenant keys is fresh
 * (it gets layout 4: HSETNX, so instances starting together agree); else layout 1 (which predates it).
 */
async function layoutOf(c: RedisConnection): Promise<number> {
  const meta = `${c.prefix}meta`;
  const recorded = Number(await c.call(() => c.client.hget(meta, 'version')));
  if (recorded > 0) return recorded;
  const old = [`${c.prefix}dk`, c.dk(), c.tenantsKey()];
  // One EXISTS a key: on a Cluster these live in different slots.
  const used = await Promise.all(old.map((k) => c.call(() => c.client.exists(k))));
  if (used.some((n) => n > 0)) return 1;
  // Layout 1 wrote tenant keys before any of those existed (a store used without a key ring).
  for await (const found of c.scan('t:*', () => true)) if (found.length > 0) return 1;
  await c.call(() => c.client.hsetnx(meta, 'version', String(LAYOUT_VERSION)));
  return Number(await c.call(() => c.client.hget(meta, 'version')));
}
