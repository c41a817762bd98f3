/**
 * The Redis store's data key port: `P {dk}` (kid → JSON) and `P {dk}:order`
 * (kids, oldest first), in one slot of their own; the first write of a kid wins.
 */
import { decodeDataKey } from '../codec.js';
import type { DataKeyPort, WrappedDataKey } from '../types.js';
import { StoreUnavailableError } from '../types.js';
import type { RedisConnection } from './connection.js';

const ADD_KEY = `
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then redis.call('RPUSH', KEYS[2], ARGV[1]) end
local kids = redis.call('LRANGE', KEYS[2], 0, -1)
if #kids == 0 then return {} end
return redis.call('HMGET', KEYS[1], unpack(kids))`;

const LIST_KEYS = `
local kids = redis.call('LRANGE', KEYS[2], 0, -1)
if #kids == 0 then return {} end
return redis.call('HMGET', KEYS[1], unpack(kids))`;

export class RedisDataKeys implements DataKeyPort {
  readonly #c: RedisConnection;

  constructor(connection: RedisConnection) {
    this.#c = connection;
  }

  async listDataKeys(): Promise<WrappedDataKey[]> {
    return this.#decodeKeys(await this.#c.eval(LIST_KEYS, [this.#c.dk(), this.#c.dk('order')], []));
  }

  async addDataKey(key: WrappedDataKey): Promise<WrappedDataKey[]> {
    const value = JSON.stringify({ kid: key.kid, wrapped: key.wrapped, created_at: key.created_at });
    return this.#decodeKeys(await this.#c.eval(ADD_KEY, [this.#c.dk(), this.#c.dk('order')], [key.kid, value], true));
  }

  #decodeKeys(raw: unknown): WrappedDataKey[] {
    if (!Array.isArray(raw)) throw new StoreUnavailableError('a stored data key list is corrupt');
    return raw.map((v: unknown) => {
      if (typeof v !== 'string') throw new StoreUnavailableError('a stored data key is corrupt');
      let parsed: unknown;
      try {
        parsed = JSON.parse(v);
      } catch {
        throw new StoreUnavailableError('a stored data key is corrupt');
      }
      return decodeDataKey(parsed);
    });
  }
}
