/**
 * What the benchmarks read of a server process from Linux /proc: the CPU time of a process and
 * its descendants (a cluster's workers, nginx's worker, a service's threads are inside the
 * process's own figure), and resident memory. NaN where /proc is not there.
 */
import { spawnSync, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, statfsSync } from 'node:fs';

export const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout?.trim()) || 100;

/** Every process's parent and CPU ticks (utime + stime, all its threads). */
export function processTable(): Map<number, { ppid: number; ticks: number }> {
  const procs = new Map<number, { ppid: number; ticks: number }>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      procs.set(Number(name), { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) });
    } catch {
      // gone meanwhile
    }
  }
  return procs;
}

/** `root` and its descendants, from a process table. */
export function descendants(procs: Map<number, { ppid: number }>, root: number): Set<number> {
  const set = new Set([root]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [pid, p] of procs) if (!set.has(pid) && set.has(p.ppid)) (set.add(pid), (grew = true));
  }
  return set;
}

/** CPU ticks of `root` and its descendants (NaN without /proc). */
export function treeTicks(root: number, procs = safeTable()): number {
  if (!procs) return NaN;
  let ticks = 0;
  for (const pid of descendants(procs, root)) ticks += procs.get(pid)?.ticks ?? 0;
  return ticks;
}

function safeTable(): Map<number, { ppid: number; ticks: number }> | null {
  try {
    return processTable();
  } catch {
    return null;
  }
}

/** VmRSS of one process in bytes (NaN when unknown). */
export function rssOf(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : NaN;
  } catch {
    return NaN;
  }
}

/** The summed VmRSS of `root` and its descendants, in bytes. */
export function treeRss(root: number): number {
  const procs = safeTable();
  if (!procs) return rssOf(root);
  let sum = 0;
  for (const pid of descendants(procs, root)) sum += rssOf(pid) || 0;
  return sum;
}

/** The soft and hard limits on open files of a process (/proc/<pid>/limits). */
export function openFilesLimit(pid: number): { soft: number; hard: number } | null {
  try {
    const m = /^Max open files\s+(\S+)\s+(\S+)/m.exec(readFileSync(`/proc/${pid}/limits`, 'utf8'));
    if (!m) return null;
    const n = (s: string) => (s === 'unlimited' ? Infinity : Number(s));
    return { soft: n(m[1]!), hard: n(m[2]!) };
  } catch {
    return null;
  }
}

/** The number of child processes of `pid` (a cluster's workers, say). */
export function childCount(pid: number): number {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).length;
  } catch {
    return 0;
  }
}

/** Resolves once the child has exited (at once if it has). */
export function exited(child: ChildProcess): Promise<void> {
  return new Promise((res) => (child.exitCode !== null || child.signalCode !== null ? res() : child.once('exit', () => res())));
}

/**
 * CPU ticks of the whole machine (all busy time, all cores) and of this process with all its
 * descendants (load generator, upstream, nginx, redis-server, the servers under test) plus the
 * kernel's threads: their difference over a window is what other user processes on the machine
 * used, e.g. a test run or a compiler sharing the cores. Null where /proc is not there.
 */
export function machineTicks(): { machine: number; ours: number; procs: ReturnType<typeof processTable> } | null {
  try {
    // cpu  user nice system idle iowait irq softirq steal ...: a task's own ticks include the
    // softirq work done in its context (loopback TCP), so irq and softirq count as busy here.
    const [user, nice, system, , , irq, softirq] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 8).map(Number);
    const procs = processTable();
    // Kernel threads (kthreadd, pid 2, and its children: ksoftirqd, kworkers) do this run's
    // network work too: counted as ours, not as another process's.
    return { machine: user! + nice! + system! + irq! + softirq!, ours: treeTicks(process.pid, procs) + treeTicks(2, procs), procs };
  } catch {
    return null;
  }
}

const TMPFS_MAGIC = 0x01021994;

/** Whether `path` is on tmpfs (a token store there is not on the normal disk; the benches say so). */
export function isTmpfs(path: string): boolean {
  try {
    return statfsSync(path).type === TMPFS_MAGIC;
  } catch {
    return false;
  }
}
