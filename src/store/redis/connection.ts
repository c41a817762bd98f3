/**
 * The Redis store's connection, shared by its four ports: the ioredis client (one
 * node, a Cluster or a Sentinel-managed primary: src/redis/connect.ts), the key names of the layout
 * (index.ts), and every call to Redis, bounded by a deadline, with its failure turned into
 * StoreUnavailableError without the command's arguments (sanitize), carrying the code an operator
 * reads in the log (#mapError): the error reply's prefix (`READONLY`, `OOM`, `NOAUTH`), the
 * socket's error code while the connection is down (`ECONNREFUSED`), or `timeout`.
 */
import { createHash } from 'node:crypto';
import type { ChainableCommander } from 'ioredis';
import { Cluster } from 'ioredis';
import { createRedisClient, type RedisClient, type RedisTopology } from '../../redis/connect.js';
import type { Logger } from '../../log.js';
import { InvalidCursorError } from '../codec.js';
import { DuplicateTokenError, StoreUnavailableError } from '../types.js';
import { classify, codeOf, StoreLostError } from '../unavailable.js';

/** How often a compare-and-set write (audit append, update, delete) retries against a value another instance moved. */
export const CAS_ATTEMPTS = 100;

export interface RedisStoreOptions extends RedisTopology {
  keyPrefix: string;
  /** After each write script, WAIT for this many replicas (default 0: no wait). */
  waitReplicas?: number | undefined;
  /** How long that WAIT may take (default 500 ms); fewer acknowledgements: StoreUnavailableError. */
  waitTimeoutMs?: number | undefined;
  /** Per command, including time spent waiting for a reconnect (default 1500 ms). */
  commandTimeoutMs?: number;
  connectTimeoutMs?: number;
  log?: Logger;
}

/**
 * Key-name encoding: encodeURIComponent, except that a lone UTF-16 surrogate (legal in a JSON
 * string, so possible in metadata, but not in UTF-8) is written as the three bytes of its code
 * point (WTF-8) where encodeURIComponent would throw URIError (a 500 found by the fuzz suite).
 * Distinct strings stay distinct key names.
 */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function enc(s: string): string {
  if (!LONE_SURROGATE.test(s)) return encodeURIComponent(s);
  let out = '';
  for (const ch of s) {
    const c = ch.charCodeAt(0);
    if (ch.length === 1 && c >= 0xd800 && c <= 0xdfff) {
      out += [0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f)].map((b) => `%${b.toString(16).toUpperCase()}`).join('');
    } else {
      out += encodeURIComponent(ch);
    }
  }
  return out;
}

/**
 * The slot's copy of the store marker (marker.ts): the script's first key up to the end of its
 * hash tag, then `:sid`. Prepended to every write script once the marker is enforced: a slot
 * without the copy, or with another store's, runs nothing.
 */
const SLOT_MARKER = `local function tp_sid(k)
  local e = string.find(k, '}', 1, true)
  return (e and string.sub(k, 1, e) or k) .. ':sid'
end
`;

function markerChecked(script: string, id: string): string {
  return `${SLOT_MARKER}if redis.call('GET', tp_sid(KEYS[1])) ~= '${id}' then return redis.error_reply('TPSTORE the slot does not carry the store marker') end\n${script}`;
}

/** Writes the slot's copy unless it has one; returns the copy it holds. */
const SET_SLOT_MARKER = `${SLOT_MARKER}redis.call('SET', tp_sid(KEYS[1]), ARGV[1], 'NX')
return redis.call('GET', tp_sid(KEYS[1]))`;

/** The code of a Redis failure: the socket's (ECONNREFUSED, ETIMEDOUT, …), an error reply's prefix (READONLY, NOAUTH, …), or none. */
function redisCode(err: unknown): string | undefined {
  const code = codeOf(err);
  if (code !== undefined) return code;
  if (err instanceof Error && err.name === 'ReplyError') return /^[A-Z]+/.exec(err.message)?.[0];
  return undefined;
}

/**
 * Never carries the command's arguments (ioredis attaches them to reply errors); keeps the code
 * (redisCode), so a StoreUnavailableError made with it as the cause carries it too.
 */
export function sanitize(err: unknown): Error {
  const safe: Error & { code?: string } = new Error(err instanceof Error ? err.message.slice(0, 200) : 'unknown error');
  safe.name = err instanceof Error ? err.name : 'Error';
  const code = redisCode(err);
  if (code !== undefined) safe.code = code;
  return safe;
}

/** The connection's state as the client's events report it. */
interface Link {
  /** The code of the error that took the connection down (undefined when none was given), until it is ready again. */
  down: { code: string | undefined } | null;
}

export class RedisConnection {
  readonly client: RedisClient;
  /** `key_prefix`: every key of the store starts with it. */
  readonly prefix: string;
  readonly #waitReplicas: number;
  readonly #waitTimeoutMs: number;
  /** Bound on one store call, whatever the topology queues or retries underneath. */
  readonly #deadlineMs: number;
  readonly #scripts = new Map<string, string>();
  /** The store marker every write checks (marker.ts), and how the store as a whole is re-checked. */
  #marker: { id: string; recheck: () => Promise<boolean> } | null = null;
  #disconnectListeners: Array<() => void> = [];
  /** Each write script with the marker check in front (enforceMarker empties it). */
  readonly #checked = new Map<string, string>();
  readonly #link: Link;

  private constructor(client: RedisClient, link: Link, prefix: string, waitReplicas: number, waitTimeoutMs: number, deadlineMs: number) {
    this.client = client;
    this.#link = link;
    this.prefix = prefix;
    this.#waitReplicas = waitReplicas;
    this.#waitTimeoutMs = waitTimeoutMs;
    this.#deadlineMs = deadlineMs;
  }

  /** Connects (failing fast with StoreUnavailableError when Redis does not answer); migrates nothing (migrate.ts). */
  static async open(opts: RedisStoreOptions): Promise<RedisConnection> {
    const waitReplicas = opts.waitReplicas ?? 0;
    const waitTimeoutMs = opts.waitTimeoutMs ?? 500;
    // A WAIT is one command of its own: it gets its timeout plus a margin for the round trip.
    const commandTimeout = Math.max(opts.commandTimeoutMs ?? 1500, waitReplicas > 0 ? waitTimeoutMs + 1000 : 0);
    let client: RedisClient;
    try {
      client = createRedisClient(opts, {
        lazyConnect: true,
        connectTimeout: opts.connectTimeoutMs ?? 2000,
        commandTimeout,
        // 0: a command whose connection drops fails instead of being re-sent after a reconnect
        // (a re-sent insert script that had already run would report its own ids as duplicates).
        maxRetriesPerRequest: 0,
        // Queued while reconnecting, bounded by commandTimeout, so a blip is absorbed, an outage is not.
        enableOfflineQueue: true,
        retryStrategy: (times: number) => Math.min(times * 100, 1000),
      });
    } catch (err) {
      throw new StoreUnavailableError('cannot configure the Redis token store client', { cause: sanitize(err) });
    }
    const link: Link = { down: null };
    client.on('error', (err: unknown) => {
      const code = redisCode(err);
      if (link.down) {
        link.down.code ??= code;
        return; // logged once per outage, not once per reconnect attempt
      }
      link.down = { code };
      opts.log?.warn({ err: sanitize(err), code, class: classify(code) }, 'redis token store connection error');
    });
    client.on('ready', () => {
      if (link.down) opts.log?.info('redis token store reconnected');
      link.down = null;
    });
    try {
      await client.connect();
    } catch (err) {
      client.disconnect();
      throw new StoreUnavailableError('cannot connect to the Redis token store', { cause: sanitize(err), code: redisCode(err) ?? link.down?.code });
    }
    return new RedisConnection(client, link, opts.keyPrefix, waitReplicas, waitTimeoutMs, commandTimeout + 250);
  }

  /** From now on every write script checks its slot's copy of the marker `id` first (marker.ts). */
  enforceMarker(id: string, recheck: () => Promise<boolean>): void {
    if (!/^[A-Za-z0-9-]{1,64}$/.test(id)) throw new StoreUnavailableError('the Redis store marker is corrupt');
    this.#marker = { id, recheck };
    this.#checked.clear();
  }

  /** Calls `fn` whenever the connection (or, on a Cluster, a node's) closes. */
  onDisconnect(fn: () => void): void {
    if (this.#disconnectListeners.length === 0) {
      const notify = (): void => {
        for (const l of this.#disconnectListeners) l();
      };
      this.client.on('close', notify);
      this.client.on('reconnecting', notify);
      this.client.on('-node', notify);
    }
    this.#disconnectListeners.push(fn);
  }

  async close(): Promise<void> {
    if (this.client.status === 'ready') {
      try {
        await this.client.quit();
      } catch {
        // fall through: drop the connection
      }
    }
    // Also after QUIT: with Sentinel only disconnect() closes the failover detector's
    // connections to the sentinels (they would reconnect forever).
    this.client.disconnect();
  }

  /** A key of the tenant: its hash tag is the encoded tenant id (no braces inside). */
  t(tenantId: string, ...parts: string[]): string {
    return `${this.prefix}t:{${enc(tenantId)}}:${parts.map(enc).join(':')}`;
  }

  /** A key of the tenant ending in raw bytes (layout 4's digest-named index zsets). */
  tb(tenantId: string, part: string, tail: Buffer): Buffer {
    return Buffer.concat([Buffer.from(`${this.t(tenantId, part)}:`, 'utf8'), tail]);
  }

  /** The data keys' hash and order list, in one slot of their own. */
  dk(part?: string): string {
    return `${this.prefix}{dk}${part === undefined ? '' : `:${part}`}`;
  }

  tenantsKey(): string {
    return `${this.prefix}tenants`;
  }

  /**
   * The keys under the prefix matching `pattern` (relative to it, glob) for which `keep` (given
   * the key without the prefix) holds, a SCAN page at a time; on a Cluster, every master's.
   */
  async *scan(pattern: string, keep: (rel: string) => boolean): AsyncGenerator<string[]> {
    const match = `${this.prefix.replace(/[*?[\]\\]/g, '\\$&')}${pattern}`;
    const nodes = this.client instanceof Cluster ? this.client.nodes('master') : [this.client];
    for (const node of nodes) {
      let cursor = '0';
      do {
        const [next, keys] = await this.call(() => node.scan(cursor, 'MATCH', match, 'COUNT', 1000));
        cursor = next;
        const kept = keys.filter((k) => k.startsWith(this.prefix) && keep(k.slice(this.prefix.length)));
        if (kept.length > 0) yield kept;
      } while (cursor !== '0');
    }
  }

  async pipeline(build: (p: ChainableCommander) => void): Promise<unknown[]> {
    const p = this.client.pipeline();
    build(p);
    const results = await this.call(() => p.exec());
    if (!results) throw new StoreUnavailableError('the Redis token store aborted a pipeline');
    return results.map(([err, value]) => {
      if (err) throw this.#mapError(err);
      return value;
    });
  }

  /**
   * EVALSHA, falling back to EVAL once when the server has not cached the script (NOSCRIPT).
   * `write` with waitReplicas > 0: the script and `WAIT n timeout` go in one pipeline, so the WAIT
   * runs on the connection (the node) that ran the script, right after it.
   */
  async eval(script: string, keys: Array<string | Buffer>, args: Array<string | Buffer>, write = false): Promise<unknown> {
    return this.#eval(script, keys, args, write, false);
  }

  /** eval, with the reply's strings as Buffers (layout 4's binary records and ids). */
  async evalBuffer(script: string, keys: Array<string | Buffer>, args: Array<string | Buffer>, write = false): Promise<unknown> {
    return this.#eval(script, keys, args, write, true);
  }

  async #eval(script: string, keys: Array<string | Buffer>, args: Array<string | Buffer>, write: boolean, buffers: boolean): Promise<unknown> {
    const marker = write ? this.#marker : null;
    if (!marker) return this.#evalOnce(script, keys, args, write, buffers);
    // Built once per script (not per write: a new string would be hashed again for its SHA lookup).
    let checked = this.#checked.get(script);
    if (!checked) this.#checked.set(script, (checked = markerChecked(script, marker.id)));
    try {
      return await this.#evalOnce(checked, keys, args, write, buffers);
    } catch (err) {
      if (!(err instanceof StoreUnavailableError && err.cause instanceof Error && err.cause.message.startsWith('TPSTORE'))) throw err;
    }
    // The slot has no copy of the marker: its first write since the marker was checked, or the
    // store was emptied. Only a store that still carries the marker gets the slot's copy.
    if (!(await marker.recheck())) throw new StoreLostError('the Redis token store no longer carries the marker of the store the service opened');
    const held = await this.call(() => this.client.eval(SET_SLOT_MARKER, 1, keys[0]!, marker.id));
    if (held !== marker.id) throw new StoreLostError('the Redis token store carries another store\'s marker');
    return this.#evalOnce(checked, keys, args, write, buffers);
  }

  async #evalOnce(script: string, keys: Array<string | Buffer>, args: Array<string | Buffer>, write: boolean, buffers: boolean): Promise<unknown> {
    let sha = this.#scripts.get(script);
    if (!sha) this.#scripts.set(script, (sha = createHash('sha1').update(script).digest('hex')));
    const evalsha = sha;
    const wait = write && this.#waitReplicas > 0;
    const run = async (cached: boolean): Promise<unknown> => {
      if (!wait) {
        if (buffers) return this.client.callBuffer(cached ? 'EVALSHA' : 'EVAL', cached ? evalsha : script, keys.length, ...keys, ...args);
        return cached ? this.client.evalsha(evalsha, keys.length, ...keys, ...args) : this.client.eval(script, keys.length, ...keys, ...args);
      }
      const p = this.client.pipeline();
      if (buffers) p.callBuffer(cached ? 'EVALSHA' : 'EVAL', cached ? evalsha : script, keys.length, ...keys, ...args);
      else if (cached) p.evalsha(evalsha, keys.length, ...keys, ...args);
      else p.eval(script, keys.length, ...keys, ...args);
      p.wait(this.#waitReplicas, this.#waitTimeoutMs);
      const results = await p.exec();
      if (!results) throw new StoreUnavailableError('the Redis token store aborted a pipeline');
      const [[err, value], [waitErr, acked]] = results as [[Error | null, unknown], [Error | null, unknown]];
      if (err) throw err;
      if (waitErr) throw waitErr;
      if (Number(acked) < this.#waitReplicas) {
        throw new StoreUnavailableError(`the write was acknowledged by ${Number(acked)} of ${this.#waitReplicas} Redis replicas in time (it is on the primary)`);
      }
      return value;
    };
    return this.call(async () => {
      try {
        return await run(true);
      } catch (err) {
        if (!(err instanceof Error && err.message.startsWith('NOSCRIPT'))) throw err;
        return run(false);
      }
    });
  }

  /** Every store call: bounded by the deadline (a Cluster may queue a command while it refreshes its slots). */
  async call<T>(fn: () => Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('the store call timed out')), this.#deadlineMs);
    });
    try {
      return await Promise.race([fn(), deadline]);
    } catch (err) {
      throw this.#mapError(err);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * A failed call as StoreUnavailableError with its code: an error reply's prefix (READONLY, OOM,
   * NOAUTH, …); while the connection is down, the code of the error that took it down
   * (ECONNREFUSED: a command queued for the reconnect and timed out failed because of it); a
   * timeout on a connection that is up (the server did not answer in time); else the error's own
   * code, or `connection_closed`.
   */
  #mapError(err: unknown): Error {
    if (err instanceof DuplicateTokenError || err instanceof InvalidCursorError || err instanceof StoreUnavailableError) return err;
    const message = err instanceof Error ? err.message : '';
    if (err instanceof Error && err.name === 'ReplyError') {
      const kind = /^[A-Z]+/.exec(message)?.[0] ?? 'ERR';
      return new StoreUnavailableError(`the Redis token store refused the command (${kind})`, { cause: sanitize(err), code: kind });
    }
    const down = this.#link.down;
    if (down?.code !== undefined) return new StoreUnavailableError(`the Redis token store is unavailable (${down.code})`, { cause: sanitize(err), code: down.code });
    if (/timed out/i.test(message)) return new StoreUnavailableError('the Redis token store did not answer in time', { cause: sanitize(err), code: 'timeout' });
    const code = codeOf(err) ?? 'connection_closed';
    return new StoreUnavailableError(`the Redis token store is unavailable (${code})`, { cause: sanitize(err), code });
  }
}
