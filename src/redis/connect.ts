/**
 * One ioredis client from a Redis connection config, for the token store and the rate limiter:
 * one node (`url`), Redis Cluster (`cluster.nodes`: ioredis `Cluster`, which follows MOVED/ASK and
 * retries TRYAGAIN/CLUSTERDOWN itself) or Sentinel (`sentinel`: ioredis asks the sentinels for the
 * current primary and asks again after a failover). Exactly one topology; the config loader
 * refuses two (an absent one means the default `url`).
 *
 * The caller passes its own per-connection options (commandTimeout, maxRetriesPerRequest,
 * enableOfflineQueue, retryStrategy, …): on a Cluster they go to every node's connection, except
 * the ones ioredis takes at the cluster level (enableOfflineQueue, retryStrategy →
 * clusterRetryStrategy, lazyConnect).
 *
 * Closing: call disconnect() (after quit(), if at all): with Sentinel only disconnect() closes the
 * failover detector's subscriptions to the sentinels, which otherwise reconnect forever.
 *
 * Secrets: `password` is a string or `{ file }` (read here, trailing newline dropped); it never
 * appears in an error this module throws.
 */
import { readFileSync } from 'node:fs';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';

export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

/** A secret given inline or as a file holding it (the file keeps it out of the config). */
export type SecretRef = string | { file: string };

export interface RedisTopology {
  url?: string | undefined;
  cluster?: { nodes: string[] } | undefined;
  sentinel?: { sentinels: string[]; name: string; password?: SecretRef | undefined } | undefined;
  username?: string | undefined;
  password?: SecretRef | undefined;
  /** true: TLS with the system CAs; `{ ca_file }`: also trust that PEM file (a private CA). */
  tls?: boolean | { ca_file?: string | undefined } | undefined;
}

export type RedisClient = Redis | Cluster;

export type TopologyKind = 'node' | 'cluster' | 'sentinel';

export function topologyKind(t: RedisTopology): TopologyKind {
  return t.cluster ? 'cluster' : t.sentinel ? 'sentinel' : 'node';
}

/** The problems of a topology config (paths relative to its object); empty when valid. */
export function topologyProblems(t: RedisTopology): string[] {
  const given = [t.url !== undefined && 'url', t.cluster && 'cluster', t.sentinel && 'sentinel'].filter(Boolean);
  if (given.length > 1) return [`give one of url, cluster and sentinel, not ${given.join(' and ')}`];
  return [];
}

function readSecret(ref: SecretRef | undefined, what: string): string | undefined {
  if (ref === undefined || typeof ref === 'string') return ref;
  try {
    return readFileSync(ref.file, 'utf8').replace(/\r?\n$/, '');
  } catch (err) {
    // The path is config, not a secret; the error code says why (ENOENT, EACCES).
    throw new Error(`cannot read the ${what} file ${ref.file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

function tlsOptions(tls: RedisTopology['tls']): RedisOptions['tls'] | undefined {
  if (!tls) return undefined;
  if (tls === true || tls.ca_file === undefined) return {};
  try {
    return { ca: readFileSync(tls.ca_file) };
  } catch (err) {
    throw new Error(`cannot read the Redis CA file ${tls.ca_file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

/** `host:port` or `redis://host:port` (rediss:// for TLS) → ioredis node address. */
function address(s: string): { host: string; port: number; tls: boolean } {
  const url = new URL(/^[a-z]+:\/\//i.test(s) ? s : `redis://${s}`);
  return { host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port || 6379), tls: url.protocol === 'rediss:' };
}

/**
 * The client (not connected when `options.lazyConnect` is true). `clusterOptions` add to or
 * override the cluster-level defaults below (redirect and retry delays).
 */
export function createRedisClient(t: RedisTopology, options: RedisOptions = {}, clusterOptions: Partial<ClusterOptions> = {}): RedisClient {
  const problems = topologyProblems(t);
  if (problems.length) throw new Error(`invalid Redis topology: ${problems.join('; ')}`);
  const password = readSecret(t.password, 'Redis password');
  const tls = tlsOptions(t.tls);
  const auth: RedisOptions = {
    ...(t.username !== undefined ? { username: t.username } : {}),
    ...(password !== undefined ? { password } : {}),
  };
  if (t.cluster) {
    const nodes = t.cluster.nodes.map(address);
    const { enableOfflineQueue, retryStrategy, lazyConnect, ...perNode } = options;
    const nodeTls = tls ?? (nodes.some((n) => n.tls) ? {} : undefined);
    return new Cluster(nodes.map(({ host, port }) => ({ host, port })), {
      // A MOVED during a resharding is followed at once; TRYAGAIN (a multi-key command during a
      // slot migration) and CLUSTERDOWN (a failover in progress) are retried after a short delay,
      // all within the command's own timeout (commandTimeout of the node connection).
      retryDelayOnMoved: 0,
      retryDelayOnTryAgain: 100,
      retryDelayOnClusterDown: 100,
      retryDelayOnFailover: 100,
      maxRedirections: 16,
      slotsRefreshTimeout: 1000,
      ...(enableOfflineQueue !== undefined ? { enableOfflineQueue } : {}),
      ...(retryStrategy ? { clusterRetryStrategy: (times: number) => retryStrategy(times) ?? null } : {}),
      ...(lazyConnect !== undefined ? { lazyConnect } : {}),
      ...clusterOptions,
      redisOptions: { ...perNode, ...auth, ...(nodeTls ? { tls: nodeTls } : {}) },
    });
  }
  if (t.sentinel) {
    const sentinelPassword = readSecret(t.sentinel.password, 'Redis Sentinel password');
    return guardStreamErrors(new Redis({
      ...options,
      ...auth,
      name: t.sentinel.name,
      sentinels: t.sentinel.sentinels.map((s) => {
        const { host, port } = address(s);
        return { host, port };
      }),
      ...(sentinelPassword !== undefined ? { sentinelPassword } : {}),
      // No failoverDetector (asking the sentinels again on +switch-master): in ioredis 6 it ends
      // the client for good when it fires while a reconnect is still resolving the primary
      // ('Connection is closed.', seen in about one failover in three with 40 clients). A failed
      // primary drops the connection, and a demoted one answers READONLY (below): both reconnect
      // through the sentinels, which name the promoted replica.
      // A connection still on a demoted primary (now a replica) answers READONLY: reconnect, which
      // asks the sentinels for the primary again (1: without re-sending the refused command).
      reconnectOnError: (err: Error) => (err.message.startsWith('READONLY') ? 1 : false),
      sentinelRetryStrategy: (times: number) => Math.min(times * 100, 1000),
      ...(tls ? { tls, enableTLSForSentinelMode: true, sentinelTLS: tls } : {}),
    }));
  }
  return guardStreamErrors(new Redis(t.url ?? DEFAULT_REDIS_URL, { ...options, ...auth, ...(tls ? { tls } : {}) }));
}

const ignore = (): void => {};

/**
 * ioredis listens to its socket's 'error' once (`stream.once`, ioredis 5 and 6). A TLS socket can
 * emit a second error: after a refused certificate the server's alert arrives as another error
 * ("tlsv1 alert decode error"), with no listener left, and an unhandled 'error' ends the process
 * (ioredis). The first error already reached the client's 'error' event, which the
 * callers log: on it, the socket gets a listener that drops the rest.
 */
function guardStreamErrors(client: Redis): Redis {
  client.on('error', () => {
    const stream = (client as unknown as { stream?: { on(event: 'error', fn: () => void): unknown; listeners(event: 'error'): unknown[] } }).stream;
    if (stream && !stream.listeners('error').includes(ignore)) stream.on('error', ignore);
  });
  return client;
}
