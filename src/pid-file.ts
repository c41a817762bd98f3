/**
 * server.pid_file and the reload status file beside it.
 *
 * The pid file is written only by the process that owns the listener, once it listens (in
 * workers mode the primary, once every worker listens), and removed at exit only while it still
 * holds that process's id: a second start that fails (EADDRINUSE) never touches the running
 * service's file.
 *
 * The status file (`<pid_file>.reload`, JSON) is how `tokenproxy reload` learns the outcome:
 * `generation` counts the reload signals the service has received; each process (the single
 * process, or each worker) has the generation whose file it serves and the outcome of its last
 * reload. A process serves the file as of generation g once its entry's generation is g or more
 * and its outcome is not `starting`.
 */
import { readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';

export type ProcessOutcome = 'starting' | 'started' | 'applied' | 'refused' | 'failed';

export interface ProcessStatus {
  /** The cluster worker slot (1..n), null for a single process. */
  worker: number | null;
  pid: number | null;
  generation: number;
  outcome: ProcessOutcome;
}

export interface ReloadStatus {
  pid: number;
  generation: number;
  processes: ProcessStatus[];
}

export function statusFileOf(pidFile: string): string {
  return `${pidFile}.reload`;
}

/** Written under a temporary name and renamed: a reader never sees half a file. */
function writeAtomically(path: string, text: string): void {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, text, { mode: 0o644 });
  renameSync(tmp, path);
}

function holdsPid(path: string, pid: number): boolean {
  try {
    return readFileSync(path, 'utf8').trim() === String(pid);
  } catch {
    return false;
  }
}

function statusHoldsPid(path: string, pid: number): boolean {
  try {
    return (JSON.parse(readFileSync(path, 'utf8')) as ReloadStatus).pid === pid;
  } catch {
    return false;
  }
}

/**
 * Writes this process's id to `pidFile` and removes it (and the status file) at exit, each only
 * if it still names this process. Call once the listener is up.
 */
export function writePidFile(pidFile: string): void {
  writeAtomically(pidFile, `${process.pid}\n`);
  process.on('exit', () => {
    const status = statusFileOf(pidFile);
    for (const [path, ours] of [[pidFile, holdsPid(pidFile, process.pid)], [status, statusHoldsPid(status, process.pid)]] as const) {
      if (!ours) continue;
      try {
        unlinkSync(path);
      } catch {
        // Already gone: nothing to clean.
      }
    }
  });
}

export function writeReloadStatus(pidFile: string, status: ReloadStatus): void {
  try {
    writeAtomically(statusFileOf(pidFile), `${JSON.stringify(status)}\n`);
  } catch {
    // The directory became unwritable: `tokenproxy reload` reports the reload as unconfirmed.
  }
}

export function readReloadStatus(pidFile: string): ReloadStatus | null {
  try {
    const s = JSON.parse(readFileSync(statusFileOf(pidFile), 'utf8')) as ReloadStatus;
    return typeof s.pid === 'number' && typeof s.generation === 'number' && Array.isArray(s.processes) ? s : null;
  } catch {
    return null;
  }
}

/** Whether every process serves the file as of `generation`. */
export function confirmed(status: ReloadStatus, generation: number): boolean {
  return status.processes.length > 0 && status.processes.every((p) => p.outcome !== 'starting' && p.generation >= generation);
}
