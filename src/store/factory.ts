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

export { InvalidCursorError } from './codec.js';

export interface StoreConfig {
  kind: 'embedded' | 'redis';
  path: string;
  url: string;
  key_prefix: string;
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
      return RedisStore.connect({ url: cfg.url, keyPrefix: cfg.key_prefix, log: opts.log, commandTimeoutMs: opts.commandTimeoutMs });
    default: {
      const kind: never = cfg.kind;
      throw new Error(`unknown store kind ${JSON.stringify(kind)}`);
    }
  }
}
