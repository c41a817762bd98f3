/**
 * Real multi-node Redis setups for a test file, on free ports, each node in its own temporary
 * directory, stopped on teardown:
 *   - a 3-master Redis Cluster (`cluster-enabled yes`, AOF with appendfsync always, no replicas);
 *   - Sentinel: one primary, one replica and 3 sentinels (quorum 2, down-after 1000 ms,
 *     failover-timeout 3000 ms, so a failover after kill -9 of the primary takes seconds).
 * Skips like test/helpers/redis.ts: without redis-server/redis-cli the file's plan is 0, or it
 * fails under TOKENPROXY_REQUIRE_REDIS=1. REDIS_URL is not used: these need servers of their own.
 * Sentinels run as `redis-server <conf> --sentinel` (the same binary; Debian's redis-sentinel
 * package only adds a service around it).
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { freePort } from './redis.js';
import { waitFor } from './wait.js';

const HOST = '127.0.0.1';
export const SENTINEL_NAME = 'tpmain';

/** Runs redis-cli against one port; resolves its trimmed output ('' when it failed). */
export function cli(port: number, ...args: string[]): Promise<string> {
  return new Promise((resolve) => {
    execFile('redis-cli', ['-h', HOST, '-p', String(port), ...args], { encoding: 'utf8', timeout: 5000 }, (err, stdout) => {
      resolve(err ? '' : stdout.trim());
    });
  });
}

function installed(cmd: string): boolean {
  return spawnSync(cmd, ['--version']).status === 0;
}

/** The reason to skip, or false to run; throws when Redis is required (TOKENPROXY_REQUIRE_REDIS=1) but missing. */
export function topologySkip(): string | false {
  const missing = ['redis-server', 'redis-cli'].filter((c) => !installed(c));
  if (missing.length === 0) return false;
  const reason = `${missing.join(' and ')} not installed (a Redis Cluster or Sentinel setup needs them)`;
  if (process.env.TOKENPROXY_REQUIRE_REDIS === '1') throw new Error(`${reason}; required by TOKENPROXY_REQUIRE_REDIS=1`);
  return reason;
}

interface Node {
  port: number;
  dir: string;
  argv: string[];
  child: ChildProcess | null;
}

async function startNode(args: string[], port: number, dir: string, sentinel = false): Promise<Node> {
  const argv = sentinel ? [join(dir, 'sentinel.conf'), '--sentinel'] : ['--port', String(port), '--bind', HOST, '--dir', dir, '--save', '', '--protected-mode', 'no', ...args];
  return launch({ port, dir, argv, child: null });
}

/** Starts (or starts again, after kill) the node's process and waits for PONG. */
async function launch(node: Node): Promise<Node> {
  const { port } = node;
  const child = spawn('redis-server', node.argv, { stdio: 'ignore' });
  node.child = child;
  child.once('exit', () => {
    if (node.child === child) node.child = null;
  });
  await waitFor(async () => (await cli(port, 'ping')) === 'PONG' || (node.child === null ? Promise.reject(new Error(`redis-server on ${port} exited`)) : false), {
    timeoutMs: 15_000, intervalMs: 50, what: `redis on port ${port} answers PING`,
  });
  return node;
}

async function killNode(node: Node): Promise<void> {
  const c = node.child;
  node.child = null;
  if (!c || c.exitCode !== null || c.signalCode !== null) return;
  await new Promise<void>((res) => {
    c.once('exit', () => res());
    c.kill('SIGKILL');
  });
}

const DURABLE = ['--appendonly', 'yes', '--appendfsync', 'always'];

function prefix(): string {
  return `t${randomBytes(6).toString('hex')}:`;
}

export interface ClusterHandle {
  /** `redis://127.0.0.1:<port>` of the three masters. */
  nodes: string[];
  ports: number[];
  /** A key prefix unique to this call (no braces: the store refuses them on a Cluster). */
  prefix: string;
  stop(): Promise<void>;
}

/** Three masters, every slot assigned, `cluster_state:ok` on each. */
export async function startCluster(): Promise<ClusterHandle> {
  const nodes: Node[] = [];
  const stop = async () => {
    await Promise.all(nodes.map(killNode));
    for (const n of nodes) rmSync(n.dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < 3; i++) {
      const dir = mkdtempSync(join(tmpdir(), 'tp-rcluster-'));
      const port = await freePort();
      // The cluster bus gets a free port of its own (the default port+10000 may be taken or beyond 65535).
      const bus = await freePort();
      nodes.push(await startNode(['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, 'nodes.conf'), '--cluster-port', String(bus),
        '--cluster-node-timeout', '2000', ...DURABLE], port, dir));
    }
    const ports = nodes.map((n) => n.port);
    const create = await new Promise<{ code: number | null; out: string }>((resolve) => {
      execFile('redis-cli', ['--cluster', 'create', ...ports.map((p) => `${HOST}:${p}`), '--cluster-replicas', '0', '--cluster-yes'],
        { encoding: 'utf8', timeout: 30_000 }, (err, stdout, stderr) => resolve({ code: err ? 1 : 0, out: `${stdout}${stderr}` }));
    });
    if (create.code !== 0) throw new Error(`redis-cli --cluster create failed: ${create.out.slice(-500)}`);
    for (const p of ports) {
      await waitFor(async () => /cluster_state:ok/.test(await cli(p, 'cluster', 'info')), { timeoutMs: 20_000, intervalMs: 100, what: `cluster_state:ok on ${p}` });
      // Every node must know all three masters' slots before a client asks it for the map.
      await waitFor(async () => (await cli(p, 'cluster', 'nodes')).split('\n').filter((l) => /master/.test(l) && /\d+-\d+/.test(l)).length === 3,
        { timeoutMs: 20_000, intervalMs: 100, what: `three masters with slots seen from ${p}` });
    }
    return { nodes: ports.map((p) => `redis://${HOST}:${p}`), ports, prefix: prefix(), stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

export interface SentinelHandle {
  /** `127.0.0.1:<port>` of the three sentinels. */
  sentinels: string[];
  name: string;
  prefix: string;
  /** The port of the current primary, as the sentinels report it. */
  primaryPort(): Promise<number>;
  /** kill -9 of the current primary; resolves with its port. */
  killPrimary(): Promise<number>;
  /**
   * Starts a killed data node again (same port, directory and AOF) and resolves once it is a
   * replica in sync: the sentinels turn a returning old primary into a replica of the new one.
   */
  restartNode(port: number): Promise<void>;
  /** Resolves with the new primary's port once the sentinels have promoted another node. */
  waitForPromotion(oldPort: number, timeoutMs?: number): Promise<number>;
  stop(): Promise<void>;
}

/** One primary, one replica (in sync), three sentinels that know both and each other. */
export async function startSentinel(): Promise<SentinelHandle> {
  const data: Node[] = [];
  const sentinels: Node[] = [];
  const stop = async () => {
    await Promise.all([...sentinels, ...data].map(killNode));
    for (const n of [...sentinels, ...data]) rmSync(n.dir, { recursive: true, force: true });
  };
  try {
    const primaryDir = mkdtempSync(join(tmpdir(), 'tp-rsentinel-'));
    const primaryPort = await freePort();
    data.push(await startNode(DURABLE, primaryPort, primaryDir));
    const replicaDir = mkdtempSync(join(tmpdir(), 'tp-rsentinel-'));
    const replicaPort = await freePort();
    data.push(await startNode([...DURABLE, '--replicaof', HOST, String(primaryPort)], replicaPort, replicaDir));
    await waitFor(async () => /master_link_status:up/.test(await cli(replicaPort, 'info', 'replication')), {
      timeoutMs: 15_000, intervalMs: 100, what: 'the replica is in sync',
    });
    for (let i = 0; i < 3; i++) {
      const dir = mkdtempSync(join(tmpdir(), 'tp-rsentinel-'));
      const port = await freePort();
      // Sentinel rewrites its config file (the replicas and sentinels it learns): one per process.
      writeFileSync(join(dir, 'sentinel.conf'), [
        `port ${port}`, `bind ${HOST}`, 'protected-mode no', `dir ${dir}`,
        `sentinel monitor ${SENTINEL_NAME} ${HOST} ${primaryPort} 2`,
        `sentinel down-after-milliseconds ${SENTINEL_NAME} 1000`,
        `sentinel failover-timeout ${SENTINEL_NAME} 3000`,
        `sentinel parallel-syncs ${SENTINEL_NAME} 1`, '',
      ].join('\n'));
      sentinels.push(await startNode([], port, dir, true));
    }
    // A failover needs every sentinel to see the replica and the two other sentinels (hello messages).
    for (const s of sentinels) {
      await waitFor(async () => {
        const info = await cli(s.port, 'sentinel', 'master', SENTINEL_NAME);
        const field = (name: string) => Number(new RegExp(`(?:^|\\n)${name}\\n(\\d+)`).exec(info)?.[1] ?? -1);
        return field('num-slaves') === 1 && field('num-other-sentinels') === 2;
      }, { timeoutMs: 20_000, intervalMs: 100, what: `sentinel ${s.port} knows the replica and the other sentinels` });
    }
    const primary = async (): Promise<number> => {
      for (const s of sentinels) {
        const out = await cli(s.port, 'sentinel', 'get-master-addr-by-name', SENTINEL_NAME);
        const port = Number(out.split('\n')[1]);
        if (port > 0) return port;
      }
      throw new Error('no sentinel reports a primary');
    };
    return {
      sentinels: sentinels.map((s) => `${HOST}:${s.port}`),
      name: SENTINEL_NAME,
      prefix: prefix(),
      primaryPort: primary,
      killPrimary: async () => {
        const port = await primary();
        const node = data.find((n) => n.port === port);
        if (!node) throw new Error(`the primary ${port} is not a node of this setup`);
        await killNode(node);
        return port;
      },
      restartNode: async (port) => {
        const node = data.find((n) => n.port === port);
        if (!node || node.child) throw new Error(`no killed node on port ${port}`);
        // Without its original --replicaof (a returning old primary must not follow itself).
        node.argv = node.argv.filter((a, i, all) => a !== '--replicaof' && all[i - 1] !== '--replicaof' && all[i - 2] !== '--replicaof');
        await launch(node);
        await waitFor(async () => /role:slave[\s\S]*master_link_status:up/.test(await cli(port, 'info', 'replication')), {
          timeoutMs: 30_000, intervalMs: 100, what: `the returning node ${port} replicates the new primary`,
        });
      },
      waitForPromotion: (oldPort, timeoutMs = 30_000) => waitFor(async () => {
        // Every sentinel agrees on the new primary and the node itself says it is one.
        const ports = await Promise.all(sentinels.map(async (s) => Number((await cli(s.port, 'sentinel', 'get-master-addr-by-name', SENTINEL_NAME)).split('\n')[1])));
        const p = ports[0]!;
        if (p === oldPort || !(p > 0) || ports.some((x) => x !== p)) return false;
        return /role:master/.test(await cli(p, 'info', 'replication')) ? p : false;
      }, { timeoutMs, intervalMs: 100, what: 'the sentinels promote the replica' }),
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** What the *ForFile helpers need of a tap test. */
interface PlannableTest {
  plan(n: number, comment?: string): void;
  teardown(fn: () => unknown): void;
}

/** A setup of one test file (stopped on its teardown), or null when the file must skip. */
async function forFile<H extends { stop(): Promise<void> }>(t: PlannableTest, start: () => Promise<H>): Promise<H | null> {
  const skip = topologySkip();
  if (skip) {
    t.plan(0, skip);
    return null;
  }
  const handle = await start();
  t.teardown(() => handle.stop());
  return handle;
}

export const clusterForFile = (t: PlannableTest): Promise<ClusterHandle | null> => forFile(t, startCluster);
export const sentinelForFile = (t: PlannableTest): Promise<SentinelHandle | null> => forFile(t, startSentinel);
