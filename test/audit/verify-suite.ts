/**
 * Shared by test/audit/verify.test.ts (embedded) and test/audit/verify-redis.test.ts.
 * Issue 23 finding 6: the audit chain resists someone who can write the store. A real service
 * writes a tenant's trail (reveals), then the store is tampered with DIRECTLY (the SQLite file with
 * better-sqlite3, the Redis keys with ioredis) the way a store writer can: the tail deleted and the
 * head rewritten, an event edited or two reordered with the whole chain and head recomputed, the
 * anchor removed (the service then refuses to append until `tokenproxy migrate` anchors the
 * head), the whole trail removed. `tokenproxy verify-audit` (the real CLI, a child
 * process) exits 1 on each (2 for a trail that is gone: no chain head) and 0 on the untouched
 * trail. A rollback to an older, validly signed head is caught by `--expect-head` with the head the
 * service logged.
 */
import type { Test } from 'tap';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { runCli, type Io } from '../../src/cli.js';
import { chain, decodeEvent, eventHash, type AuditEvent } from '../../src/store/audit.js';
import { Sqlite as Database } from '../../src/store/embedded/sqlite.js';
import { spawnCli } from '../helpers/cli-entry.js';
import { baseConfig, KEYS, TENANT_A, type TestService } from '../helpers/service.js';

interface Run {
  code: number | null;
  out: string;
}

/** The test's environment without TOKENPROXY_MASTER_KEY: the config's key file is what the command uses. */
function withoutMasterKeyEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.TOKENPROXY_MASTER_KEY;
  return env;
}

/** `tokenproxy verify-audit ARGS` as a child process (helpers/cli-entry.ts). */
function child(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawnCli(['verify-audit', ...args], withoutMasterKeyEnv(), {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('exit', (code) => resolve({ code, out }));
  });
}

/** What the test needs of a store, written directly (no tokenproxy code in between). */
export interface RawStore {
  /** The tenant's events as stored, oldest first. */
  events(): Promise<string[]>;
  /** Replaces every event of the tenant. */
  setEvents(events: string[]): Promise<void>;
  /** Moves the head to (seq, hash), keeping whatever else the head holds. */
  setHead(seq: number, hash: string): Promise<void>;
  /** Drops everything the head holds beyond seq and hash (what an anchor-less version wrote). */
  stripHead(): Promise<void>;
  /** Removes the tenant's events and head. */
  wipe(): Promise<void>;
  snapshot(): Promise<() => Promise<void>>;
  /** The store section of a config that reaches it. */
  storeConfig: Record<string, unknown>;
}

/**
 * The same command in this process (runCli with captured streams): most cases run here, since each
 * child process compiles the TypeScript again (seconds on a busy machine).
 */
async function inProcess(args: string[]): Promise<Run> {
  let out = '';
  const io: Io = { out: (x) => void (out += x), err: (x) => void (out += x), stdin: () => '' };
  const code = await runCli(['verify-audit', ...args], io);
  return { code, out };
}

export function sqliteStore(file: string, tenant: string): RawStore {
  const withDb = <T>(fn: (db: InstanceType<typeof Database>) => T): T => {
    const db = new Database(file, { fileMustExist: true });
    try {
      db.pragma('busy_timeout = 5000');
      return db.transaction(() => fn(db))();
    } finally {
      db.close();
    }
  };
  const setEvents = async (events: string[]) => withDb((db) => {
    db.prepare('DELETE FROM audit_events WHERE tenant_id = ?').run(tenant);
    const ins = db.prepare('INSERT INTO audit_events (tenant_id, seq, created_ms, event) VALUES (?, ?, ?, ?)');
    for (const [i, e] of events.entries()) ins.run(tenant, i + 1, Date.parse((JSON.parse(e) as AuditEvent).created_at), e);
  });
  const headRow = () => withDb((db) => db.prepare('SELECT * FROM audit_heads WHERE tenant_id = ?').get(tenant) as Record<string, unknown> | undefined);
  const putHead = (row: Record<string, unknown> | undefined) => withDb((db) => {
    db.prepare('DELETE FROM audit_heads WHERE tenant_id = ?').run(tenant);
    if (!row) return;
    const cols = Object.keys(row);
    db.prepare(`INSERT INTO audit_heads (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`).run(...cols.map((c) => row[c]));
  });
  const events = async () => withDb((db) => (db.prepare('SELECT event FROM audit_events WHERE tenant_id = ? ORDER BY seq').all(tenant) as Array<{ event: string }>).map((r) => r.event));
  return {
    events,
    setEvents,
    setHead: async (seq, hash) => withDb((db) => void db.prepare('UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant_id = ?').run(seq, hash, tenant)),
    stripHead: async () => {
      const row = headRow()!;
      putHead({ tenant_id: row.tenant_id, seq: row.seq, hash: row.hash });
    },
    wipe: async () => {
      await setEvents([]);
      putHead(undefined);
    },
    snapshot: async () => {
      const saved = await events();
      const head = headRow();
      return async () => {
        await setEvents(saved);
        putHead(head);
      };
    },
    storeConfig: { kind: 'embedded', path: file },
  };
}

export function redisStore(client: Redis, url: string, prefix: string, tenant: string): RawStore {
  const list = `${prefix}t:{${encodeURIComponent(tenant)}}:audit`;
  const headKey = `${prefix}t:{${encodeURIComponent(tenant)}}:audithead`;
  const setEvents = async (events: string[]) => {
    await client.del(list);
    if (events.length > 0) await client.rpush(list, ...events);
  };
  return {
    events: () => client.lrange(list, 0, -1),
    setEvents,
    setHead: async (seq, hash) => {
      const parts = (await client.get(headKey))!.split(' ');
      await client.set(headKey, [String(seq), hash, ...parts.slice(2)].join(' '));
    },
    stripHead: async () => {
      const parts = (await client.get(headKey))!.split(' ');
      await client.set(headKey, parts.slice(0, 2).join(' '));
    },
    wipe: async () => void (await client.del(list, headKey)),
    snapshot: async () => {
      const saved = await client.lrange(list, 0, -1);
      const head = await client.get(headKey);
      return async () => {
        await setEvents(saved);
        if (head === null) await client.del(headKey);
        else await client.set(headKey, head);
      };
    },
    storeConfig: { kind: 'redis', url, key_prefix: prefix },
  };
}

/** A tenant's trail forged from its stored events: `edit` reorders or changes them, then the chain and the head are recomputed. */
async function forge(raw: RawStore, edit: (events: AuditEvent[]) => AuditEvent[]): Promise<void> {
  const stored = (await raw.events()).map((e) => decodeEvent(e)!);
  const { events, head } = chain(null, edit(stored));
  await raw.setEvents(events.map((e) => JSON.stringify(e)));
  await raw.setHead(head.seq, head.hash);
}

/**
 * The last audit chain head the service logged (`<seq>:<hash>`), or null. Only the test's tenant
 * appends here; its id is not compared (the log censors it: an all-digit test id is Luhn-valid).
 */
function loggedHead(s: TestService): string | null {
  let head: string | null = null;
  for (const line of s.logs().split('\n')) {
    if (!line.includes('audit chain head')) continue;
    const entry = JSON.parse(line) as { audit_head?: string };
    if (typeof entry.audit_head === 'string') head = entry.audit_head;
  }
  return head;
}

async function reveal(t: Test, s: TestService, times: number): Promise<void> {
  const created = await s.call('POST', '/tokens', { body: { type: 'token', data: 'audit-anchor-test', containers: ['/general/'] } });
  t.equal(created.status, 201, created.text);
  for (let i = 0; i < times; i++) {
    const r = await s.call('GET', `/tokens/${created.body.id as string}`, { key: KEYS.private });
    t.equal(r.status, 200, r.text);
  }
}

export function runVerifyAuditSuite(t: Test, name: string, dir: string, start: (t: Test) => Promise<{ s: TestService; raw: RawStore }>): void {
  t.test(`${name}: verify-audit detects a store writer's tampering`, async (t) => {
    const { s, raw } = await start(t);
    await reveal(t, s, 8);
    t.equal((await raw.events()).length, 8, 'eight reveals, eight events');
    const keyFile = join(dir, `${name}-master.key`);
    writeFileSync(keyFile, `${s.masterKey}\n`, { mode: 0o600 });
    const config = join(dir, `${name}.json`);
    writeFileSync(config, JSON.stringify({ ...baseConfig(), store: raw.storeConfig, secrets: { master_key_file: keyFile } }));
    const args = (extra: string[]) => ['--tenant', TENANT_A, '--config', config, ...extra];
    const verify = (...extra: string[]) => inProcess(args(extra));
    const verifyChild = (...extra: string[]) => child(args(extra));

    const intact = await verifyChild();
    t.equal(intact.code, 0, `untouched: ${intact.out}`);
    t.match(intact.out, /8 audit event\(s\), chain intact/);

    const restore = await raw.snapshot();
    const broken = async (what: string, tamper: () => Promise<void>, code = 1) => {
      await tamper();
      const r = await verify();
      t.equal(r.code, code, `${what}: ${r.out}`);
      t.notMatch(r.out, /chain intact/, `${what}: not reported intact`);
      await restore();
    };

    // The finding as reported, through the real command line.
    const events = await raw.events();
    await raw.setEvents(events.slice(0, 5));
    await raw.setHead(5, eventHash(decodeEvent(events[4]!)!));
    const truncated = await verifyChild();
    t.equal(truncated.code, 1, `the last 3 events deleted and the head rewritten: ${truncated.out}`);
    t.match(truncated.out, /BROKEN/);
    await restore();
    t.equal((await verify()).code, 0, 'restored, intact again');

    await broken('an event edited, the chain and the head recomputed', () => forge(raw, (events) => events.map((e, i) => (i === 2 ? { ...e, application_id: 'someone-else' } : e))));
    await broken('two events reordered, the chain and the head recomputed', () => forge(raw, (events) => [events[0]!, events[1]!, events[3]!, events[2]!, ...events.slice(4)]));
    await broken('the last event removed, the head rewritten, the anchor removed', async () => {
      const events = await raw.events();
      await raw.setEvents(events.slice(0, 7));
      await raw.setHead(7, eventHash(decodeEvent(events[6]!)!));
      await raw.stripHead();
    });
    await broken('an event edited without recomputing anything', async () => {
      const events = await raw.events();
      await raw.setEvents(events.map((e, i) => (i === 3 ? e.replace('token.reveal', 'token.detokenize') : e)));
    });
    await broken('the whole trail removed', () => raw.wipe(), 2);

    // Rollback: a writer who kept the store as it was (a validly anchored old head) puts it back.
    const head8 = loggedHead(s);
    t.match(head8, /^8:[A-Za-z0-9_-]{43}$/, 'the service logs the signed head after each append');
    await reveal(t, s, 2);
    const head10 = loggedHead(s);
    t.match(head10, /^10:[A-Za-z0-9_-]{43}$/);
    const successor = await verify('--expect-head', head8!);
    t.equal(successor.code, 0, `a later head is a successor of the expected one: ${successor.out}`);
    t.equal((await verify('--expect-head', head10!)).code, 0, 'the current head');
    await restore();
    const rolledBack = await verify();
    t.equal(rolledBack.code, 0, 'a rollback to an old signed head is not detectable without an expected head (SECURITY.md)');
    const caught = await verifyChild('--expect-head', head10!);
    t.equal(caught.code, 1, `--expect-head catches the rollback: ${caught.out}`);
    t.match(caught.out, /10:[A-Za-z0-9_-]{43}/, 'names the expected head');
    t.equal((await verify('--expect-head', `8:${'0'.repeat(64)}`)).code, 1, 'a head this trail never had');
    t.equal((await verify('--expect-head', 'nonsense')).code, 2, 'a malformed head is a usage error');

    // Upgrade: a head written before anchoring has none. Refused unless accepted explicitly (a
    // writer could strip an anchor otherwise). The service appends nothing onto it (it would
    // anchor a head it did not write): `tokenproxy migrate` anchors it, then the next append goes on.
    await raw.stripHead();
    const old = await verify();
    t.equal(old.code, 1, `an unanchored head: ${old.out}`);
    t.match(old.out, /carries no anchor.*--allow-unanchored/);
    const accepted = await verify('--allow-unanchored');
    t.equal(accepted.code, 0, `--allow-unanchored: ${accepted.out}`);
    t.match(accepted.out, /WARNING.*no anchor.*tokenproxy migrate anchors it/);
    const created = await s.call('POST', '/tokens', { body: { type: 'token', data: 'audit-anchor-test', containers: ['/general/'] } });
    const refused = await s.call('GET', `/tokens/${created.body.id as string}`, { key: KEYS.private });
    t.equal(refused.status, 503, 'a reveal onto the unanchored head is refused');
    let migrateOut = '';
    const migrated = await runCli(['migrate', '--config', config], { out: (x) => void (migrateOut += x), err: (x) => void (migrateOut += x), stdin: () => '' });
    t.equal(migrated, 0, `tokenproxy migrate: ${migrateOut}`);
    t.match(migrateOut, /anchored the audit chain head of 1 tenant/);
    t.equal((await verify()).code, 0, 'migrate anchored the head');
    await reveal(t, s, 1);
    const upgraded = await verify();
    t.equal(upgraded.code, 0, `appends go on from the anchored head: ${upgraded.out}`);
    t.match(upgraded.out, /9 audit event\(s\), chain intact, head 9:\S+ \(anchored\)/);

    // The signed head is logged once more at shutdown.
    const before = s.logs().split('\n').filter((l) => l.includes('audit chain head')).length;
    await s.svc.close();
    const lines = s.logs().split('\n').filter((l) => l.includes('audit chain head'));
    t.ok(lines.length > before, 'logged at shutdown');
    t.match(lines.at(-1), /"audit_head":"9:[A-Za-z0-9_-]{43}","msg":"audit chain head at shutdown"/);
  });
}

