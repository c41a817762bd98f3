/**
 * Builds the token store the config names. A relative embedded `store.path` is resolved against
 * the working directory (docs/configuration.md), by the service and by every CLI command alike:
 * both go through resolveStorePath.
 */
import { existsSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import type { Logger } from '../log.js';
import type { Store } from './types.js';
import { EmbeddedStore } from './embedded/index.js';
import type { RedisTopology } from '../redis/connect.js';
import type { DurabilityPolicy } from './redis/durability.js';

export { InvalidCursorError } from './codec.js';

/** The `store` section: for Redis, one of url, cluster and sentinel (src/redis/connect.ts). */
export interface StoreConfig extends RedisTopology {
  kind: 'embedded' | 'redis' | 'postgres';
  path: string;
  key_prefix: string;
  wait_replicas?: number;
  wait_timeout_ms?: number;
  /** PostgreSQL: the pool's size. */
  pool_size?: number;
}

export interface CreateStoreOptions {
  /** Directory a relative embedded `path` is resolved against (default: the working directory). */
  baseDir?: string;
  /**
   * The CLI's tools (verify-audit, rotate-data-key): an embedded store that does not exist is
   * StoreMissingError, never created with its directory.
   */
  mustExist?: boolean;
  log?: Logger;
  /**
   * `tokenproxy migrate`: open a store that holds an older format without the
   * StoreFormatError a service start gives, so its migrator() can convert it.
   */
  forMigration?: boolean;
  /** Redis: per-command timeout in ms (default 1500). */
  commandTimeoutMs?: number;
  /** Redis, a service start: check the primaries' persistence before anything is written (store/redis/durability.ts). */
  durability?: DurabilityPolicy;
}

/** The store a tool was pointed at does not exist; the message names the path as resolved. */
export class StoreMissingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StoreMissingError';
  }
}

/** The embedded database file the config names, as the service opens it. */
export function resolveStorePath(cfg: Pick<StoreConfig, 'path'>, baseDir: string = process.cwd()): string {
  return cfg.path === ':memory:' ? cfg.path : resolve(baseDir, cfg.path);
}

/** Throws StoreMissingError when the config names an embedded store that does not exist (Redis: nothing to check here). */
export function assertStoreExists(cfg: StoreConfig, baseDir: string = process.cwd()): void {
  if (cfg.kind !== 'embedded') return;
  const path = resolveStorePath(cfg, baseDir);
  if (path !== ':memory:' && existsSync(path)) return;
  const relative = path !== ':memory:' && !isAbsolute(cfg.path);
  throw new StoreMissingError(
    `there is no embedded store at ${path}` +
      (relative ? ` (store.path ${JSON.stringify(cfg.path)} is relative to the working directory ${baseDir}; run from the service's directory or give an absolute path)` : ''),
  );
}

export async function createStore(cfg: StoreConfig, opts: CreateStoreOptions = {}): Promise<Store> {
  if (opts.mustExist) assertStoreExists(cfg, opts.baseDir);
  switch (cfg.kind) {
    case 'embedded': {
      const path = resolveStorePath(cfg, opts.baseDir);
      return new EmbeddedStore(path, { forMigration: opts.forMigration });
    }
    // Redis and PostgreSQL load their client (ioredis, pg) here, when the config names them: a
    // service or command on the embedded store loads neither.
    case 'redis': {
      const { RedisStore } = await import('./redis/index.js');
      return RedisStore.connect({
        url: cfg.url, cluster: cfg.cluster, sentinel: cfg.sentinel, username: cfg.username, password: cfg.password, tls: cfg.tls,
        keyPrefix: cfg.key_prefix, waitReplicas: cfg.wait_replicas, waitTimeoutMs: cfg.wait_timeout_ms,
        log: opts.log, commandTimeoutMs: opts.commandTimeoutMs, forMigration: opts.forMigration, durability: opts.durability,
      });
    }
    case 'postgres': {
      // The config loader requires url for postgres and puts TOKENPROXY_STORE_PASSWORD into password.
      const { PostgresStore } = await import('./postgres/index.js');
      return PostgresStore.connect({ url: cfg.url ?? '', password: cfg.password, poolSize: cfg.pool_size, log: opts.log });
    }
    default: {
      const kind: never = cfg.kind;
      throw new Error(`unknown store kind ${JSON.stringify(kind)}`);
    }
  }
}
