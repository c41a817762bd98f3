/**
 * The Redis token store, shared by many tokenproxy instances (ioredis): one node, a Redis Cluster
 * or a Sentinel-managed primary (src/redis/connect.ts).
 *
 * DURABILITY: run every primary with `appendonly yes` and `appendfsync always`. A resolved insert
 * then survives a tokenproxy kill -9 (Redis already has it) AND a Redis crash: with `always` Redis
 * fsyncs the AOF before it replies. With the default `everysec` a Redis crash can lose the last
 * second of tokens that clients already hold. Replication is asynchronous: a failover (Sentinel
 * or Cluster promoting a replica) can lose the last writes the primary acknowledged, unless
 * `waitReplicas` is set: then every write script is followed by `WAIT n timeout` on the same
 * connection, and fewer acknowledgements answer StoreUnavailableError (503 store_unavailable;
 * the write did happen on the primary and may or may not survive a failover).
 *
 * Layout 3 (P = key_prefix, T = tenant id; every component URI-encoded, so ':' '{' '}' never
 * appear inside one). Every key of one tenant carries `{T}` as its Redis Cluster hash tag, so
 * each script touches one slot, tenants spread over the shards, and one tenant lives on one shard:
 *   P t:{T}:rec:<id>     hash {r: record JSON without cvc, k: JSON list of its index zsets, s: seq, e: expires ms}
 *   P t:{T}:cvc:<id>     the cvc ciphertext, PEXPIREAT cvc_expires_at (Redis drops it by itself)
 *   P t:{T}:cvcdue       zset cvc key → cvc expiry ms (purgeCvc)
 *   P t:{T}:seq          per-tenant sequence (INCR); zset scores, newest-first cursors
 *   P t:{T}:all | type:<type> | fp:<fingerprint> | md:<key>:<value> | ix:<hash>   zsets id → seq
 *   P t:{T}:ct:<container>                        zset id → seq: the tokens of one container
 *   P t:{T}:dd:<type>:<container>:<fingerprint>   zset id → seq: what a deduplicating insert matches
 *   P t:{T}:containers   set of the tenant's containers (a container is never removed from it)
 *   P t:{T}:idem:<key>   hash {s, o, v}: an idempotency entry, expiring by itself (idempotency-scripts.ts)
 *   P t:{T}:audit        list of the tenant's audit events (JSON), oldest first (store/audit.ts)
 *   P t:{T}:audithead    "<seq> <hash> <anchor>": the tenant's audit chain head and its anchor
 *                        (crypto/audit-anchor.ts; "<seq> <hash>" when written before anchoring, issue 23)
 *   P tenants            set of tenant ids with a cvc to purge (purgeCvc walks it; plain SADD, no script)
 *   P {dk}, P {dk}:order data keys: hash kid → JSON, list of kids oldest first (one slot of their own)
 *   P meta               hash {version}: the layout version (3), migrated on connect
 * On a Cluster the prefix must not contain '{' or '}' (the config refuses it): Redis hashes the
 * first {…} of a key, which must be the tenant's. Writes are Lua scripts, so a batch and its index
 * entries appear atomically and search serves them at once. A script's KEYS[1] is always a key
 * of the tenant (it routes the script to the tenant's shard); the keys it computes (the insert
 * script derives record keys of the ids in a dd zset) share that hash tag. One insert batch holds
 * records of one tenant.
 *
 * Deduplication is a compare-and-set inside the insert script: it looks for the oldest live member
 * of the record's dd zset and returns it instead of writing, in the same atomic step as the write,
 * so N concurrent identical inserts leave one token.
 *
 * Migration on connect (`migrate`), from layout 1 (no ct/dd zsets, no containers set) or 2 (keys
 * `P t:T:…` without the hash tag, one `P cvc:due` zset, `P dk`, `P dk:order`): every key is copied
 * to its layout 3 name (DUMP/RESTORE with its TTL, then the old one deleted; a key already there is
 * kept), the cvc due entries are split per tenant, and every record gets the zsets it lacks and a
 * zset list naming the new keys, each a check-and-set against the record it was computed from.
 * Idempotent: an interrupted migration resumes on the next connect. Upgrade every instance sharing
 * a prefix together: an older instance still writing would write the old names.
 */
import type { Store } from '../types.js';
import { StoreUnavailableError } from '../types.js';
import { RedisAudit } from './audit.js';
import { RedisConnection, sanitize, type RedisStoreOptions } from './connection.js';
import { RedisDataKeys } from './data-keys.js';
import { RedisIdempotency } from './idempotency.js';
import { LAYOUT_VERSION, migrate } from './migrate.js';
import { RedisTokens } from './tokens.js';

export type { RedisStoreOptions } from './connection.js';

/** The four ports (issue 24 item 5: tokens.ts, audit.ts, data-keys.ts, idempotency.ts) over one connection (connection.ts). */
export class RedisStore implements Store {
  readonly kind = 'redis' as const;
  readonly tokens: RedisTokens;
  readonly audit: RedisAudit;
  readonly dataKeys: RedisDataKeys;
  readonly idempotency: RedisIdempotency;
  readonly #c: RedisConnection;

  private constructor(connection: RedisConnection) {
    this.#c = connection;
    this.tokens = new RedisTokens(connection);
    this.audit = new RedisAudit(connection);
    this.dataKeys = new RedisDataKeys(connection);
    this.idempotency = new RedisIdempotency(connection);
  }

  /** Connects (failing fast with StoreUnavailableError when Redis does not answer) and migrates the layout. */
  static async connect(opts: RedisStoreOptions): Promise<RedisStore> {
    const connection = await RedisConnection.open(opts);
    const client = connection.client;
    const store = new RedisStore(connection);
    try {
      const migrated = await store.migrate();
      if (migrated > 0) opts.log?.info({ changes: migrated }, `redis token store migrated to layout ${LAYOUT_VERSION}`);
    } catch (err) {
      client.disconnect();
      throw err instanceof StoreUnavailableError ? err : new StoreUnavailableError('cannot migrate the Redis token store', { cause: sanitize(err) });
    }
    return store;
  }

  /**
   * Brings keys written by layouts 1 and 2 to layout 3 (file header); returns how many keys and
   * records changed. Idempotent; a no-op once `P meta` says version 3.
   */
  migrate(): Promise<number> {
    return migrate(this.#c);
  }

  async ping(): Promise<void> {
    await this.#c.call(() => this.#c.client.ping());
  }

  close(): Promise<void> {
    return this.#c.close();
  }
}
