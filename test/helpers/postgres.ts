/**
 * A real PostgreSQL server for a test file (issue 24), in the style of helpers/redis.ts.
 *
 * TOKENPROXY_TEST_PG_URL set (a superuser's or a role with CREATEDB's URL): that server is used.
 * Otherwise the helper starts a private cluster for the file: initdb in a temporary directory
 * (fsync on, as in production), a free TCP port on 127.0.0.1, the unix socket in the same
 * directory, run as the `postgres` user when the tests run as root (PostgreSQL refuses root).
 * Either way every `database()` is a fresh database with a random name, dropped on teardown.
 * TOKENPROXY_REQUIRE_POSTGRES=1 (set by .ci/run): a missing PostgreSQL fails instead of skipping.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { freePort } from './redis.js';

export interface PostgresDatabase {
  /** postgres://… of this test's own database. */
  url: string;
  name: string;
}

export interface PostgresServer {
  /** The server's maintenance database (`postgres`), for CREATE / DROP DATABASE. */
  adminUrl: string;
  /** The cluster's data directory (null for a server given by TOKENPROXY_TEST_PG_URL). */
  dataDir: string | null;
  /** Whether a wrong password is refused: a cluster started here requires scram-sha-256 on TCP (the URLs carry the password); a given server is probed. */
  checksPasswords: boolean;
  /** A fresh database for `t`, dropped on its teardown. */
  database(t: { teardown(fn: () => unknown): void }): Promise<PostgresDatabase>;
  /** `pg_ctl stop -m immediate` (only for clusters this helper started): no shutdown checkpoint, as a crash. */
  kill(): Promise<void>;
  /** Starts it again on the same port and data directory (after kill). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** The directory of initdb / pg_ctl: PATH, or Debian's /usr/lib/postgresql/<newest>/bin. */
function binDir(): string | null {
  if (spawnSync('pg_ctl', ['--version']).status === 0) return '';
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return null;
  const versions = readdirSync(base).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
  for (const v of versions) if (existsSync(join(base, v, 'bin', 'pg_ctl'))) return join(base, v, 'bin');
  return null;
}

/** The reason to skip PostgreSQL tests, or false to run them. Throws when PostgreSQL is required but missing. */
export function postgresSkip(opts: { own?: boolean } = {}): string | false {
  if (process.env.TOKENPROXY_TEST_PG_URL && !opts.own) return false;
  if (binDir() !== null) return false;
  const reason = opts.own && process.env.TOKENPROXY_TEST_PG_URL
    ? 'kill/restart need a PostgreSQL cluster started by the helper; TOKENPROXY_TEST_PG_URL is set but initdb/pg_ctl are not installed'
    : 'PostgreSQL (initdb, pg_ctl) not installed and TOKENPROXY_TEST_PG_URL not set';
  if (process.env.TOKENPROXY_REQUIRE_POSTGRES === '1') throw new Error(`${reason} (TOKENPROXY_REQUIRE_POSTGRES=1)`);
  return reason;
}

async function admin<T>(adminUrl: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 10_000 });
  client.on('error', () => {}); // a server killed under it: the query in flight rejects
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * DROP DATABASE waits for a checkpoint (about a second here): a test's teardown starts the drop and
 * goes on; the server's stop() waits for every drop still running (`pending`).
 */
function databases(adminUrl: string, pending: Set<Promise<unknown>>): PostgresServer['database'] {
  return async (t) => {
    const name = `tp_${randomBytes(6).toString('hex')}`;
    await admin(adminUrl, (c) => c.query(`CREATE DATABASE ${name}`));
    t.teardown(() => {
      const drop = admin(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).catch(() => {});
      pending.add(drop);
      void drop.finally(() => pending.delete(drop));
    });
    const url = new URL(adminUrl);
    url.pathname = `/${name}`;
    return { url: url.toString(), name };
  };
}

/** Runs a PostgreSQL binary, as `postgres` when this process is root. */
function runPg(bin: string, args: string[]): void {
  const cmd = bin === '' ? args[0]! : join(bin, args[0]!);
  const asRoot = process.getuid?.() === 0;
  const r = asRoot
    ? spawnSync('runuser', ['-u', 'postgres', '--', cmd, ...args.slice(1)], { encoding: 'utf8' })
    : spawnSync(cmd, args.slice(1), { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${args.join(' ')} failed (${r.status}): ${r.stderr || r.stdout}`);
}

/** runPg without blocking the event loop (a service under test in this process keeps serving meanwhile). */
function runPgAsync(bin: string, args: string[]): Promise<void> {
  const cmd = bin === '' ? args[0]! : join(bin, args[0]!);
  const asRoot = process.getuid?.() === 0;
  const child = asRoot ? spawn('runuser', ['-u', 'postgres', '--', cmd, ...args.slice(1)]) : spawn(cmd, args.slice(1));
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${args.join(' ')} failed (${code}): ${output}`))));
  });
}

/** `own`: start a cluster even when TOKENPROXY_TEST_PG_URL is set (one this helper can kill and restart). */
export async function startPostgres(opts: { own?: boolean } = {}): Promise<PostgresServer> {
  const given = process.env.TOKENPROXY_TEST_PG_URL;
  if (given && !opts.own) {
    const unsupported = async () => {
      throw new Error('kill/restart need a cluster started by the helper (unset TOKENPROXY_TEST_PG_URL)');
    };
    const pending = new Set<Promise<unknown>>();
    // Whether the server checks passwords: a wrong one is refused (28P01) or let in (trust).
    const wrong = new URL(given);
    wrong.password = 'not-the-password';
    const checksPasswords = await admin(wrong.toString(), async () => false).catch((err: unknown) => (err as { code?: string }).code === '28P01');
    return {
      adminUrl: given, dataDir: null, checksPasswords, database: databases(given, pending), kill: unsupported, restart: unsupported,
      stop: async () => {
        await Promise.all([...pending]);
      },
    };
  }
  const bin = binDir();
  if (bin === null) throw new Error('initdb / pg_ctl not found');
  const dir = mkdtempSync(join(tmpdir(), 'tp-pg-'));
  if (process.getuid?.() === 0) {
    const r = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
    const g = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
    chownSync(dir, Number(r.stdout.trim()), Number(g.stdout.trim()));
  }
  const data = join(dir, 'data');
  const port = await freePort();
  // TCP connections need the password (scram-sha-256), so a test can show the store sends the one
  // it is given; the unix socket stays trust for pg_ctl.
  const password = randomBytes(12).toString('hex');
  const pwfile = join(dir, 'pw');
  writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
  if (process.getuid?.() === 0) chownSync(pwfile, statSync(dir).uid, statSync(dir).gid);
  // fsync on (initdb syncs its files; the server's fsync defaults to on and is set explicitly).
  runPg(bin, ['initdb', '-D', data, '-U', 'postgres', '--auth-local=trust', '--auth-host=scram-sha-256', `--pwfile=${pwfile}`, '-E', 'UTF8', '--no-locale']);
  rmSync(pwfile);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c max_connections=200`;
  let running = false;
  const launch = async () => {
    await runPgAsync(bin, ['pg_ctl', '-D', data, '-l', join(dir, 'server.log'), '-w', '-t', '60', '-o', options, 'start']);
    running = true;
  };
  const halt = async (mode: 'immediate' | 'fast') => {
    if (!running) return;
    running = false;
    await runPgAsync(bin, ['pg_ctl', '-D', data, '-w', '-m', mode, 'stop']);
  };
  await launch();
  const adminUrl = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
  const pending = new Set<Promise<unknown>>();
  return {
    adminUrl,
    dataDir: data,
    checksPasswords: true,
    database: databases(adminUrl, pending),
    kill: () => halt('immediate'),
    restart: launch,
    stop: async () => {
      await Promise.all([...pending]);
      await halt('fast').catch(() => halt('immediate'));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface PlannableTest {
  plan(n: number, comment?: string): void;
  teardown(fn: () => unknown): void;
}

/**
 * The PostgreSQL server of one test file, stopped on the file's teardown, or null when the file
 * must skip (its plan is set to 0 with the reason). `killable`: the file kills and restarts the
 * server, so it gets a cluster of its own even when TOKENPROXY_TEST_PG_URL is set.
 */
export async function postgresForFile(t: PlannableTest, opts: { killable?: boolean } = {}): Promise<PostgresServer | null> {
  const own = opts.killable === true;
  const skip = postgresSkip({ own });
  if (skip) {
    t.plan(0, skip);
    return null;
  }
  const server = await startPostgres({ own });
  t.teardown(() => server.stop());
  return server;
}
