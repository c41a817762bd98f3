/**
 * Durability stated, not assumed: what the Redis store's primaries do with a write, read when a
 * service starts (before it writes anything), and what production mode makes of it.
 *
 * A Redis without an append-only file keeps its data in RAM (and in an RDB snapshot, if snapshots
 * are on): a restart after a crash brings it back empty or as of its last snapshot, and every
 * token acknowledged since is gone for good. So on each primary (every master of a Cluster) the
 * service reads `appendonly` and `appendfsync` with CONFIG GET; where CONFIG is renamed, disabled
 * or denied to the service's user (managed Redis often does this: a ReplyError such as `ERR unknown
 * command` or `NOPERM`), it reads `aof_enabled` from INFO persistence, which does not show the fsync
 * policy (reported as `unknown`). Where INFO is refused too, both are `unknown`.
 *
 * The policy (`store.durability`):
 * - `require_aof` (the default): production mode refuses to start unless every primary has an
 *   append-only file, saying what it found and the two ways out; it warns when the fsync policy is
 *   not `always` (`everysec` loses up to about a second of acknowledged writes on an OS crash or a
 *   power loss of the Redis host, `no` what the OS has not written yet; neither loses anything
 *   when only the Redis process dies). Development mode logs what production would refuse.
 * - `accept_loss`: starts on any Redis and says once, at warn level, what can be lost.
 *
 * What was found is kept on the store (`durability`) for /readyz and the
 * `tokenproxy_store_durability` gauge. It is read at start only: a failover to a primary with
 * other settings is not noticed until the next start.
 *
 * Messages name settings and nodes (host:port of a Cluster master), never a URL or a password.
 */
import { Cluster, type Redis } from 'ioredis';
import type { Logger } from '../../log.js';
import { StoreDurabilityError, StoreUnavailableError, type StoreDurability } from '../types.js';
import type { RedisConnection } from './connection.js';

export type AppendOnly = StoreDurability['appendonly'];
export type AppendFsync = StoreDurability['appendfsync'];

/** One primary's settings and where they were read. */
export interface NodeDurability {
  /** host:port of a Cluster master; null for the one primary (a node or Sentinel's). */
  node: string | null;
  appendonly: AppendOnly;
  appendfsync: AppendFsync;
  source: 'config' | 'info' | 'none';
}

export type DurabilitySetting = 'require_aof' | 'accept_loss';

/** What the service asks of the store at start (server.ts); tools open the store without it. */
export interface DurabilityPolicy {
  mode: 'development' | 'production';
  setting: DurabilitySetting;
}

/** What the policy says about what was found: a refusal (production, require_aof) and lines to log. */
export interface DurabilityVerdict {
  refusal: string | null;
  warnings: Array<{ fields: Record<string, unknown>; msg: string }>;
}

/** True for an error Redis answered (unknown command, NOPERM), as the connection reports it. */
function refusedByRedis(err: unknown): boolean {
  const cause = err instanceof StoreUnavailableError ? err.cause : err;
  return cause instanceof Error && cause.name === 'ReplyError';
}

/** `CONFIG GET name` → its value; ioredis answers RESP2's flat [name, value]. */
async function configGet(c: RedisConnection, node: Redis | Cluster, name: string): Promise<string | undefined> {
  const reply = await c.call(() => node.config('GET', name) as Promise<unknown>);
  if (!Array.isArray(reply)) return undefined;
  const i = reply.findIndex((v, k) => k % 2 === 0 && String(v).toLowerCase() === name);
  return i >= 0 && reply[i + 1] !== undefined ? String(reply[i + 1]) : undefined;
}

function appendOnlyOf(value: string | undefined): AppendOnly {
  return value === 'yes' ? 'yes' : value === 'no' ? 'no' : 'unknown';
}

function appendFsyncOf(value: string | undefined): AppendFsync {
  return value === 'always' || value === 'everysec' || value === 'no' ? value : 'unknown';
}

/** One primary's settings: CONFIG GET, else INFO persistence, else unknown. Other failures (timeouts) propagate. */
export async function readNode(c: RedisConnection, node: Redis | Cluster, name: string | null): Promise<NodeDurability> {
  try {
    const appendonly = appendOnlyOf(await configGet(c, node, 'appendonly'));
    const appendfsync = appendFsyncOf(await configGet(c, node, 'appendfsync'));
    return { node: name, appendonly, appendfsync, source: 'config' };
  } catch (err) {
    if (!refusedByRedis(err)) throw err;
  }
  try {
    const info = await c.call(() => node.info('persistence'));
    const enabled = /^aof_enabled:(\d+)\s*$/m.exec(info)?.[1];
    const appendonly: AppendOnly = enabled === undefined ? 'unknown' : enabled === '0' ? 'no' : 'yes';
    return { node: name, appendonly, appendfsync: 'unknown', source: 'info' };
  } catch (err) {
    if (!refusedByRedis(err)) throw err;
  }
  return { node: name, appendonly: 'unknown', appendfsync: 'unknown', source: 'none' };
}

/** Every primary's settings: on a Cluster each master (host:port), else the one primary. */
export async function readDurability(c: RedisConnection): Promise<NodeDurability[]> {
  if (!(c.client instanceof Cluster)) return [await readNode(c, c.client, null)];
  const masters = c.client.nodes('master');
  // No master known (yet): nothing was read, which is not "every master has one".
  if (masters.length === 0) return [{ node: null, appendonly: 'unknown', appendfsync: 'unknown', source: 'none' }];
  return Promise.all(masters.map((n) => readNode(c, n, `${n.options.host ?? '?'}:${n.options.port ?? '?'}`)));
}

/** The weakest setting over the primaries: the one a loss follows. */
export function summarize(nodes: readonly NodeDurability[], setting: DurabilitySetting): StoreDurability {
  const weakest = <T extends string>(values: T[], order: readonly T[]): T => order.find((v) => values.includes(v)) ?? order[order.length - 1]!;
  return {
    appendonly: weakest(nodes.map((n) => n.appendonly), ['no', 'unknown', 'yes']),
    appendfsync: weakest(nodes.map((n) => n.appendfsync), ['no', 'unknown', 'everysec', 'always']),
    accepted_loss: setting === 'accept_loss',
  };
}

/** "the primary" or "masters a:1 and b:2", for the nodes that `pick` selects. */
function where(nodes: readonly NodeDurability[], pick: (n: NodeDurability) => boolean): string {
  const names = nodes.filter(pick).map((n) => n.node);
  if (names.some((n) => n === null)) return 'on the Redis primary';
  if (names.length === nodes.length && names.length > 1) return `on every master of the Cluster (${names.join(', ')})`;
  return `on ${names.length === 1 ? 'master' : 'masters'} ${names.join(', ')}`;
}

const DOCS = 'docs/storage.md, "Durability by store and setting"';

/** What production mode refuses (null: nothing), from the weakest primary. */
function refusalOf(nodes: readonly NodeDurability[]): string | null {
  if (nodes.some((n) => n.appendonly === 'no')) {
    return `the Redis store has no append-only file (appendonly no ${where(nodes, (n) => n.appendonly === 'no')}): ` +
      'a Redis restart after a crash loses every token written since its last RDB snapshot, if there is one, and the tokens handed out for them stop resolving; ' +
      `turn it on (appendonly yes, appendfsync always), or set store.durability: accept_loss to start on it all the same (${DOCS})`;
  }
  if (nodes.some((n) => n.appendonly === 'unknown')) {
    return `the Redis store's persistence could not be read (neither CONFIG GET nor INFO persistence said whether there is an append-only file ${where(nodes, (n) => n.appendonly === 'unknown')}): ` +
      'without an append-only file a Redis restart loses every token written since its last snapshot; ' +
      `let the service's Redis user run INFO (or CONFIG GET) on a primary with appendonly yes, or set store.durability: accept_loss to start without knowing (${DOCS})`;
  }
  return null;
}

/** The fsync warning of a store that has an append-only file (null: appendfsync always everywhere). */
function fsyncWarning(nodes: readonly NodeDurability[]): string | null {
  if (nodes.some((n) => n.appendfsync === 'no')) {
    return `the Redis store's append-only file is left to the OS to flush (appendfsync no ${where(nodes, (n) => n.appendfsync === 'no')}): ` +
      `an OS crash or power loss of the Redis host loses the writes not yet flushed (on Linux up to about 30 s); a Redis process crash loses none; appendfsync always closes the gap (${DOCS})`;
  }
  if (nodes.some((n) => n.appendfsync === 'everysec')) {
    return `the Redis store fsyncs its append-only file once a second (appendfsync everysec ${where(nodes, (n) => n.appendfsync === 'everysec')}): ` +
      `an OS crash or power loss of the Redis host can lose about the last second of acknowledged tokens; a Redis process crash loses none; appendfsync always closes the gap (${DOCS})`;
  }
  if (nodes.some((n) => n.appendfsync === 'unknown')) {
    return `the Redis store's fsync policy could not be read (CONFIG GET is not available ${where(nodes, (n) => n.appendfsync === 'unknown')}; INFO does not show it): ` +
      `unless it is appendfsync always, an OS crash or power loss of the Redis host can lose the last acknowledged tokens (${DOCS})`;
  }
  return null;
}

/**
 * What start-up does with what it found. Production: require_aof refuses a primary without an
 * append-only file (or whose setting is unreadable) and warns about an fsync policy other than
 * `always`; accept_loss turns the refusal into one warning and says nothing of fsync. Development:
 * one warning naming what production would refuse (accept_loss: none), as src/production.ts does.
 */
export function durabilityVerdict(nodes: readonly NodeDurability[], policy: DurabilityPolicy): DurabilityVerdict {
  const summary = summarize(nodes, policy.setting);
  const found = { store: 'redis', appendonly: summary.appendonly, appendfsync: summary.appendfsync };
  const refusal = refusalOf(nodes);
  if (policy.setting === 'accept_loss') {
    const loss = refusal ?? fsyncWarning(nodes);
    if (policy.mode === 'development' || loss === null) return { refusal: null, warnings: [] };
    return { refusal: null, warnings: [{ fields: { mode: policy.mode, ...found, durability: 'accept_loss' }, msg: `store.durability: accept_loss: ${loss}` }] };
  }
  if (policy.mode === 'development') {
    if (refusal === null) return { refusal: null, warnings: [] };
    return {
      refusal: null,
      warnings: [{
        fields: { mode: policy.mode, ...found, would_refuse: [refusal] },
        msg: 'development mode: production mode (NODE_ENV=production or server.mode: production) would refuse to start on this Redis',
      }],
    };
  }
  if (refusal !== null) return { refusal, warnings: [] };
  const fsync = fsyncWarning(nodes);
  return { refusal: null, warnings: fsync === null ? [] : [{ fields: { mode: policy.mode, ...found }, msg: fsync }] };
}

/**
 * Reads every primary's settings and applies the policy: throws StoreDurabilityError (production
 * refuses), or logs the verdict's warnings and returns what /readyz and the gauge report.
 */
export async function checkDurability(c: RedisConnection, policy: DurabilityPolicy, log?: Logger): Promise<StoreDurability> {
  const nodes = await readDurability(c);
  const verdict = durabilityVerdict(nodes, policy);
  if (verdict.refusal !== null) throw new StoreDurabilityError(verdict.refusal);
  for (const w of verdict.warnings) log?.warn(w.fields, w.msg);
  return summarize(nodes, policy.setting);
}
