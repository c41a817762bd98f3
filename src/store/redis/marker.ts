/**
 * The Redis store's marker (store/identity.ts): `P {dk}:store`, a hash {id, created_at, lost_at?}
 * in the data keys' slot. Every slot a write script touches carries the marker's id too, in
 * `<the slot's first key up to its hash tag>:sid` (`P t:{T}:sid`, `P {dk}:sid`): once the marker is
 * enforced, a write script first checks its slot's copy and runs nothing when it is missing or
 * another (connection.ts), so a FLUSHALL or a Redis restarted empty is noticed by the first write
 * after it, whatever the topology (a Cluster cannot read the marker's slot from a tenant's).
 * A slot's copy is written on its first write after the store's marker was checked.
 */
import type { MarkerPort, StoreMarker } from '../types.js';
import { StoreUnavailableError } from '../types.js';
import type { RedisConnection } from './connection.js';

const CREATE = `
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('HSET', KEYS[1], 'id', ARGV[1], 'created_at', ARGV[2]) end
return redis.call('HGETALL', KEYS[1])`;

const MARK_LOST = `
if redis.call('HSETNX', KEYS[1], 'id', ARGV[1]) == 1 then redis.call('HSET', KEYS[1], 'created_at', ARGV[2]) end
if redis.call('HGET', KEYS[1], 'id') == ARGV[1] then redis.call('HSET', KEYS[1], 'lost_at', ARGV[3]) end
return 1`;

function decode(raw: unknown): StoreMarker | null {
  const fields: Record<string, string> = {};
  if (Array.isArray(raw)) {
    for (let i = 0; i + 1 < raw.length; i += 2) fields[String(raw[i])] = String(raw[i + 1]);
  } else if (raw && typeof raw === 'object') {
    Object.assign(fields, raw);
  }
  if (!fields.id) return null;
  if (!fields.created_at) throw new StoreUnavailableError('the Redis store marker is corrupt');
  return { id: fields.id, created_at: fields.created_at, ...(fields.lost_at ? { lost_at: fields.lost_at } : {}) };
}

export class RedisMarker implements MarkerPort {
  readonly #c: RedisConnection;

  constructor(connection: RedisConnection) {
    this.#c = connection;
  }

  async readMarker(): Promise<StoreMarker | null> {
    return decode(await this.#c.call(() => this.#c.client.hgetall(this.#c.dk('store'))));
  }

  async createMarker(marker: StoreMarker): Promise<StoreMarker> {
    const found = decode(await this.#c.eval(CREATE, [this.#c.dk('store')], [marker.id, marker.created_at]));
    if (!found) throw new StoreUnavailableError('the Redis store marker could not be written');
    return found;
  }

  async markLost(marker: StoreMarker): Promise<void> {
    await this.#c.eval(MARK_LOST, [this.#c.dk('store')], [marker.id, marker.created_at, marker.lost_at ?? new Date().toISOString()]);
  }

  async clearMarker(): Promise<void> {
    await this.#c.call(() => this.#c.client.del(this.#c.dk('store'), this.#c.dk('sid')));
  }

  async holdsRecords(): Promise<boolean> {
    // Any key of a tenant but a slot's copy of the marker.
    for await (const found of this.#c.scan('t:*', (k) => !k.endsWith(':sid'))) if (found.length > 0) return true;
    return false;
  }

  enforce(marker: StoreMarker, recheck: () => Promise<boolean>): void {
    this.#c.enforceMarker(marker.id, recheck);
  }

  onDisconnect(fn: () => void): void {
    this.#c.onDisconnect(fn);
  }
}
