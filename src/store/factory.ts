/**
 * Builds the token store the config names. The embedded path is resolved against `baseDir`
 * (normally the config file's directory) so `./data/tokens.db` means the same file wherever the
 * process was started from.
 */
import { resolve } from 'node:path';
import type { Logger } from '../log.js';
import type { TokenStore } from './types.js';
import { EmbeddedStore } from './embedded.js';
import { RedisStore } from './redis.js';
import type { RedisTopology } from '../redis/connect.js';

export { InvalidCursorError } from './codec.js';

/** The `store` section: for Redis, one of url, cluster and sentinel (src/redis/connect.ts). */
export interface StoreConfig extends RedisTopology {
  kind: 'embedded' | 'redis';
  path: string;
  key_prefix: string;
  wait_replicas?: number;
  wait_timeout_ms?: number;
}

export interface CreateStoreOptions {
  /** Directory a relative embedded `path` is resolved against (default: the working directory). */
  baseDir?: string;
  log?: Logger;
  /** Redis: per-command timeout in ms (default 1500). */
  commandTimeoutMs?: number;
}

export async function createStore(cfg: StoreConfig, opts: CreateStoreOptions = {}): Promise<TokenStore> {
  switch (cfg.kind) {
    case 'embedded':
      return new EmbeddedStore(cfg.path === ':memory:' ? cfg.path : resolve(opts.baseDir ?? process.cwd(), cfg.path));
    case 'redis':
      return RedisStore.connect({
        url: cfg.url, cluster: cfg.cluster, sentinel: cfg.sentinel, username: cfg.username, password: cfg.password, tls: cfg.tls,
        keyPrefix: cfg.key_prefix, waitReplicas: cfg.wait_replicas, waitTimeoutMs: cfg.wait_timeout_ms,
        log: opts.log, commandTimeoutMs: opts.commandTimeoutMs,
      });
    default: {
      const kind: never = cfg.kind;
      throw new Error(`unknown store kind ${JSON.stringify(kind)}`);
    }
  }
}
