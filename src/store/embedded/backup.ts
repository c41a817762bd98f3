/**
 * `tokenproxy backup FILE` and `tokenproxy restore FILE` for the embedded store.
 *
 * Backup uses SQLite's online backup API (better-sqlite3's `backup`) on a connection of its own,
 * while the service runs and writes: all pages are copied in ONE step, i.e. inside one read
 * transaction, so the copy is the database as of one commit (every write acknowledged before
 * the command started is in it), and WAL mode lets the service go on writing meanwhile (copied
 * step by step, another process's commit between two steps would restart the copy). The copy is
 * written to a temporary file created 0600 beside FILE (whatever the umask: the store is 0600 and
 * so must its copy be), switched to a single self-contained file (rollback journal, no -wal
 * beside it), checked, fsynced and only then put in place: by a hard link that fails if FILE
 * appeared meanwhile, or, with --force, a rename over it. FILE's directory must exist: the
 * command creates no directory (which mode? whose?), it names the missing one.
 *
 * Restore puts a backup in place of a stopped service's store: it refuses while the service's
 * pid file names a live process or while any process has the store open (SQLite's lock), and
 * over an existing store without --force. The backup is copied to a temporary file beside the
 * store (0600), which must open as SQLite, pass quick_check and hold tokenproxy's schema (at most
 * this version's) before it replaces the store; the old store's -wal and -shm go with it.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, constants, existsSync, fsyncSync, linkSync, mkdirSync, openSync, readFileSync, readSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type Database from 'better-sqlite3';
import { SCHEMA_VERSION } from './schema.js';
import { sqliteCode } from './writer.js';
import { Sqlite } from './sqlite.js';

/** A refusal the operator resolves (exit 2): a missing directory, a file in the way, a running service. */
export class BackupRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BackupRefusedError';
  }
}

export interface BackupResult {
  pages: number;
  bytes: number;
}

export interface RestoreResult {
  bytes: number;
  schemaVersion: number;
  tokens: number;
  /** The master key ids that wrapped the backup's data keys (the service needs that key). */
  masterKeyIds: string[];
}

function errno(err: unknown): string {
  return err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : 'error';
}

function tempBeside(path: string): string {
  return join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
}

/** Creates `path` empty with mode 0600: the mode given to open is masked by the umask, chmod is not. */
function createPrivate(path: string): void {
  const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
  closeSync(fd);
}

function fsyncPath(path: string, flags: number = constants.O_RDONLY): void {
  const fd = openSync(path, flags);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function removeQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // Not there: nothing to remove.
  }
}

function removeDatabase(path: string): void {
  for (const p of [path, `${path}-wal`, `${path}-shm`, `${path}-journal`]) removeQuietly(p);
}

/** `file`'s directory must exist and be a directory; named when it is not. */
function requireDirectory(file: string): void {
  const dir = dirname(file);
  let isDir: boolean;
  try {
    isDir = statSync(dir).isDirectory();
  } catch (err) {
    throw new BackupRefusedError(`the directory ${dir} does not exist (${errno(err)}): create it first, readable by the service's user only (mkdir -m 700 ${dir})`);
  }
  if (!isDir) throw new BackupRefusedError(`${dir} is not a directory`);
}

/** What the file holds, when it is a tokenproxy store; throws (exit 1) when it is not. */
function checkStore(db: Database.Database, what: string): Omit<RestoreResult, 'bytes'> {
  let check: unknown;
  try {
    check = db.pragma('quick_check', { simple: true });
  } catch (err) {
    throw new Error(`${what} is not an SQLite database (${sqliteCode(err) ?? errno(err)})`);
  }
  if (check !== 'ok') throw new Error(`${what} is damaged: SQLite's quick_check failed`);
  const version = Number(db.pragma('user_version', { simple: true }));
  const tables = new Set((db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((r) => r.name));
  // Format 6 keeps tokens in vault_tokens; older formats in tokens.
  const tokenTable = version >= 6 ? 'vault_tokens' : 'tokens';
  if (version < 1 || !tables.has(tokenTable) || !tables.has('data_keys')) {
    throw new Error(`${what} is an SQLite database but not a tokenproxy store (no tokens and data_keys tables of a known schema version)`);
  }
  if (version > SCHEMA_VERSION) {
    throw new Error(`${what} has schema version ${version}, newer than this tokenproxy understands (${SCHEMA_VERSION}): restore it with the version that made it`);
  }
  const tokens = (db.prepare(`SELECT count(*) AS n FROM ${tokenTable}`).get() as { n: number }).n;
  const wrapped = (db.prepare('SELECT wrapped FROM data_keys ORDER BY ord').all() as Array<{ wrapped: string }>).map((r) => r.wrapped.split('.')[1] ?? '?');
  return { schemaVersion: version, tokens, masterKeyIds: [...new Set(wrapped)] };
}

/** Copies the store at `storePath` (open or not) to `file`; see the module comment. */
export async function backupStore(storePath: string, file: string, opts: { force: boolean }): Promise<BackupResult> {
  if (!existsSync(storePath)) throw new Error(`there is no embedded store at ${storePath}`);
  requireDirectory(file);
  if (existsSync(file)) {
    if (!opts.force) throw new BackupRefusedError(`${file} exists: give --force to replace it, or another file name`);
    if (statSync(file).ino === statSync(storePath).ino) throw new BackupRefusedError(`${file} is the store itself`);
  }
  const tmp = tempBeside(file);
  createPrivate(tmp);
  try {
    const source = new Sqlite(storePath, { fileMustExist: true });
    let pages: number;
    try {
      source.pragma('busy_timeout = 5000');
      // The first step only starts the copy; returning the page limit makes the next step copy all of them at once.
      const done = await source.backup(tmp, { progress: () => 0x7fffffff });
      pages = done.totalPages;
    } finally {
      source.close();
    }
    const copy = new Sqlite(tmp, { fileMustExist: true });
    try {
      // One self-contained file: a backup must not need a -wal file beside it.
      copy.pragma('journal_mode = DELETE');
      checkStore(copy, `the copy of ${storePath}`);
    } finally {
      copy.close();
    }
    fsyncPath(tmp);
    if (opts.force) renameSync(tmp, file);
    else {
      try {
        linkSync(tmp, file);
      } catch (err) {
        if (errno(err) === 'EEXIST') throw new BackupRefusedError(`${file} exists: give --force to replace it, or another file name`);
        throw err;
      }
    }
    fsyncPath(dirname(file));
    return { pages, bytes: statSync(file).size };
  } finally {
    removeDatabase(tmp);
  }
}

/** The process the pid file names, when it is alive (the service runs). */
function livePid(pidFile: string): number | null {
  let text: string;
  try {
    text = readFileSync(pidFile, 'utf8').trim();
  } catch {
    return null;
  }
  if (!/^[1-9][0-9]{0,9}$/.test(text)) return null;
  const pid = Number(text);
  try {
    process.kill(pid, 0);
    return pid;
  } catch (err) {
    // EPERM: it exists, as another user's process.
    return errno(err) === 'EPERM' ? pid : null;
  }
}

/**
 * Whether another connection (any process) has the store open: an exclusive lock cannot be had
 * then (in WAL mode every open connection holds a shared lock on the file). Leaves the file as it
 * was when no one else had it: the connection closes without writing.
 */
function openElsewhere(storePath: string): boolean {
  let db: Database.Database | undefined;
  try {
    db = new Sqlite(storePath, { fileMustExist: true, timeout: 0 });
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('BEGIN EXCLUSIVE');
    db.exec('ROLLBACK');
    return false;
  } catch (err) {
    if (sqliteCode(err) === 'SQLITE_BUSY' || sqliteCode(err) === 'SQLITE_LOCKED') return true;
    throw err;
  } finally {
    db?.close();
  }
}

/** Copies `from` to a new 0600 file `to`, fsynced, by bytes (fs.copyFile would give `to` the source's mode). */
function copyPrivate(from: string, to: string): number {
  const input = openSync(from, 'r');
  try {
    createPrivate(to);
    const output = openSync(to, 'w');
    try {
      const buf = Buffer.alloc(1 << 20);
      let total = 0;
      for (let n = readSync(input, buf); n > 0; n = readSync(input, buf)) {
        for (let off = 0; off < n; ) off += writeSync(output, buf, off, n - off);
        total += n;
      }
      fsyncSync(output);
      return total;
    } finally {
      closeSync(output);
    }
  } finally {
    closeSync(input);
  }
}

/** Replaces (or creates) the store at `storePath` with the backup `file`; see the module comment. */
export function restoreStore(file: string, storePath: string, opts: { force: boolean; pidFile?: string | undefined }): RestoreResult {
  let isFile: boolean;
  try {
    isFile = statSync(file).isFile();
  } catch (err) {
    throw new BackupRefusedError(`cannot read the backup ${file} (${errno(err)})`);
  }
  if (!isFile) throw new BackupRefusedError(`the backup ${file} is not a regular file`);
  if (opts.pidFile) {
    const pid = livePid(opts.pidFile);
    if (pid !== null) throw new BackupRefusedError(`the service runs (process ${pid}, pid file ${opts.pidFile}): stop it before restoring its store`);
  }
  const exists = existsSync(storePath);
  if (exists && !opts.force) {
    throw new BackupRefusedError(`there is already a store at ${storePath}: give --force to replace it (its tokens are lost unless it was backed up)`);
  }
  if (exists && openElsewhere(storePath)) {
    throw new BackupRefusedError(`the store ${storePath} is open in another process (a running service?): stop it before restoring`);
  }
  mkdirSync(dirname(storePath), { recursive: true, mode: 0o700 });
  const tmp = tempBeside(storePath);
  try {
    const bytes = copyPrivate(file, tmp);
    const db = new Sqlite(tmp, { fileMustExist: true });
    let found: Omit<RestoreResult, 'bytes'>;
    try {
      found = checkStore(db, `the backup ${file}`);
      // The copy may be a WAL-mode file (another tool's backup): fold it into one file before the rename.
      db.pragma('journal_mode = DELETE');
    } finally {
      db.close();
    }
    fsyncPath(tmp);
    // The old store's -wal and -shm belong to the old file: SQLite would apply them to the new one.
    for (const side of [`${storePath}-wal`, `${storePath}-shm`, `${storePath}-journal`]) removeQuietly(side);
    renameSync(tmp, storePath);
    fsyncPath(dirname(storePath));
    return { bytes, ...found };
  } finally {
    removeDatabase(tmp);
  }
}
