/**
 * Shared by test/audit/anchor-refusal*.test.ts (embedded, Redis, PostgreSQL). The audit chain
 * never signs what it did not write: a real service writes a tenant's trail (reveals), then the
 * store is tampered with DIRECTLY (SQL on the SQLite file or the database, Redis commands), and
 *
 *   - the last 3 events deleted and the head rewritten to the 5th, its anchor left in place: the
 *     next reveal through the HTTP API answers 503 store_unavailable and appends nothing (the
 *     service does not chain onto the forged head and anchor it anew, which would make
 *     `verify-audit` pass), the service logs an alert at error level naming `verify-audit`;
 *     `tokenproxy store copy` from that store exits 1 and writes nothing to the target; the trail
 *     put back as it was, reveals work again;
 *   - the head's anchor removed (what a version without anchors left): reveals are refused the
 *     same way, and so is a copy, until `tokenproxy migrate` anchors the head (the upgrade path);
 *   - the head removed, the events left: refused the same way (not taken for a first append).
 */
import type { Test } from 'tap';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { runCli as runCliInProcess, type Io } from '../../src/cli.js';
import { createStore } from '../../src/store/factory.js';
import { createLogger } from '../../src/log.js';
import { decodeEvent, eventHash, type AuditAction, type AuditEvent } from '../../src/store/audit.js';
import { runCli as runCliChild } from '../helpers/process.js';
import { baseConfig, KEYS, TENANT_A, type TestService } from '../helpers/service.js';
import type { RawStore } from './verify-suite.js';

/** What the tests do to a store, directly (no tokenproxy code in between). */
export interface Tamper {
  /** How many events of the tenant are stored. */
  count(): Promise<number>;
  /** Deletes the events after the first `keep` and moves the head to the last one kept; the anchor is left as it is. */
  truncate(keep: number): Promise<void>;
  /** Removes the head's anchor (what a version without anchors wrote). */
  stripAnchor(): Promise<void>;
  /** Removes the head, leaving the events. */
  removeHead(): Promise<void>;
  /** Deletes the last event, leaving the head as it is. */
  dropLastEvent(): Promise<void>;
  /** Saves the tenant's events and head; the function puts them back. */
  snapshot(): Promise<() => Promise<void>>;
  /** The store section of a config that reaches it. */
  storeConfig: Record<string, unknown>;
}

/** A Tamper over verify-suite.ts's raw stores (the SQLite file, the Redis keys). */
export function tamperOf(raw: RawStore): Tamper {
  return {
    count: async () => (await raw.events()).length,
    truncate: async (keep) => {
      const events = await raw.events();
      await raw.setEvents(events.slice(0, keep));
      await raw.setHead(keep, eventHash(decodeEvent(events[keep - 1]!)!));
    },
    stripAnchor: () => raw.stripHead(),
    removeHead: async () => {
      const events = await raw.events();
      await raw.wipe();
      await raw.setEvents(events);
    },
    dropLastEvent: async () => raw.setEvents((await raw.events()).slice(0, -1)),
    snapshot: () => raw.snapshot(),
    storeConfig: raw.storeConfig,
  };
}

/** The PostgreSQL tables, with SQL. */
export function postgresTamper(url: string, tenant: string): Tamper {
  const withClient = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end();
    }
  };
  const put = async (c: pg.Client, table: string, rows: Array<Record<string, unknown>>) => {
    for (const row of rows) {
      const cols = Object.keys(row);
      await c.query(`INSERT INTO tokenproxy.${table} (${cols.join(', ')}) VALUES (${cols.map((_, i) => `$${i + 1}`).join(', ')})`, cols.map((k) => row[k]));
    }
  };
  return {
    count: () => withClient(async (c) => Number((await c.query<{ n: string }>('SELECT count(*) AS n FROM tokenproxy.audit_events WHERE tenant_id = $1', [tenant])).rows[0]!.n)),
    truncate: (keep) => withClient(async (c) => {
      await c.query('DELETE FROM tokenproxy.audit_events WHERE tenant_id = $1 AND seq > $2', [tenant, keep]);
      const r = (await c.query<{ seq: string; prev_hash: Buffer; application_id: string; action: string; token_ids: string[]; destination: string | null; request_id: string; created_at: string }>(
        'SELECT seq, prev_hash, application_id, action, token_ids, destination, request_id, created_at FROM tokenproxy.audit_events WHERE tenant_id = $1 AND seq = $2',
        [tenant, keep],
      )).rows[0]!;
      const last: AuditEvent = {
        seq: Number(r.seq), prev_hash: r.prev_hash.toString('hex'), tenant_id: tenant, application_id: r.application_id, action: r.action as AuditAction,
        token_ids: r.token_ids, destination: r.destination, request_id: r.request_id, created_at: r.created_at,
      };
      await c.query('UPDATE tokenproxy.audit_heads SET seq = $2, hash = $3 WHERE tenant_id = $1', [tenant, keep, Buffer.from(eventHash(last), 'hex')]);
    }),
    stripAnchor: () => withClient(async (c) => void (await c.query('UPDATE tokenproxy.audit_heads SET anchor = NULL WHERE tenant_id = $1', [tenant]))),
    removeHead: () => withClient(async (c) => void (await c.query('DELETE FROM tokenproxy.audit_heads WHERE tenant_id = $1', [tenant]))),
    dropLastEvent: () => withClient(async (c) => void (await c.query(
      'DELETE FROM tokenproxy.audit_events WHERE tenant_id = $1 AND seq = (SELECT max(seq) FROM tokenproxy.audit_events WHERE tenant_id = $1)', [tenant],
    ))),
    snapshot: () => withClient(async (c) => {
      const events = (await c.query('SELECT * FROM tokenproxy.audit_events WHERE tenant_id = $1', [tenant])).rows as Array<Record<string, unknown>>;
      const heads = (await c.query('SELECT * FROM tokenproxy.audit_heads WHERE tenant_id = $1', [tenant])).rows as Array<Record<string, unknown>>;
      return () => withClient(async (c) => {
        await c.query('DELETE FROM tokenproxy.audit_events WHERE tenant_id = $1', [tenant]);
        await c.query('DELETE FROM tokenproxy.audit_heads WHERE tenant_id = $1', [tenant]);
        await put(c, 'audit_events', events);
        await put(c, 'audit_heads', heads);
      });
    }),
    storeConfig: { kind: 'postgres', url },
  };
}

interface Run {
  code: number | null;
  out: string;
}

/** A command of the CLI in this process (as verify-suite.ts runs most of its cases). */
async function inProcess(args: string[]): Promise<Run> {
  let out = '';
  const io: Io = { out: (x) => void (out += x), err: (x) => void (out += x), stdin: () => '' };
  const code = await runCliInProcess(args, io);
  return { code, out };
}

/** Creates a token and reveals it `times` times: one audit event each. */
async function reveals(t: Test, s: TestService, times: number): Promise<string> {
  const created = await s.call('POST', '/tokens', { body: { type: 'token', data: 'anchor-refusal-secret-value', containers: ['/general/'] } });
  t.equal(created.status, 201, created.text);
  const id = created.body.id as string;
  for (let i = 0; i < times; i++) {
    const r = await s.call('GET', `/tokens/${id}`, { key: KEYS.private });
    t.equal(r.status, 200, `reveal ${i + 1}: ${r.status}`);
  }
  return id;
}

/** The error-level lines the service logged after `from` characters of its log. */
function errorLines(s: TestService, from: number): Array<Record<string, unknown>> {
  return s.logs().slice(from).split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => (l.level as number) >= 50);
}

export function runAnchorRefusalSuite(t: Test, name: string, dir: string, start: (t: Test) => Promise<{ s: TestService; tamper: Tamper }>): void {
  let n = 0;
  /** A config file for the store the service runs on, with its master key in a file (the CLI reads that). */
  const configFor = (s: TestService, store: Record<string, unknown>, what: string): string => {
    const sub = join(dir, `${name}-${what}-${++n}`);
    mkdirSync(sub, { recursive: true });
    const keyFile = join(sub, 'master.key.secret');
    writeFileSync(keyFile, `${s.masterKey}\n`, { mode: 0o600 });
    const config = join(sub, 'config.json');
    writeFileSync(config, JSON.stringify({ ...baseConfig(), store, secrets: { master_key_file: keyFile } }));
    return config;
  };

  /** `store copy` from the service's store to a new embedded store: refused, and nothing is in the target. */
  const copyRefused = async (t: Test, s: TestService, tamper: Tamper, why: RegExp) => {
    const from = configFor(s, tamper.storeConfig, 'source');
    const targetFile = join(dir, `${name}-target-${++n}`, 'tokens.db');
    const to = configFor(s, { kind: 'embedded', path: targetFile }, 'target');
    const r = await runCliChild(['store', 'copy', '--from', from, '--to', to]);
    t.equal(r.code, 1, `store copy refuses the source: ${r.output}`);
    t.match(r.output, why);
    t.match(r.output, /verify-audit|migrate/, 'says what to run');
    t.notMatch(r.output, /\n\s+at /, 'no stack trace');
    const target = await createStore({ kind: 'embedded', path: targetFile, key_prefix: '' } as never, { log: createLogger('silent') });
    try {
      t.same(await target.dataKeys.listDataKeys(), [], 'the target holds no data key: nothing was copied');
      t.equal(await target.audit.auditHead(TENANT_A), null, 'nor an audit event');
      t.same((await target.tokens.list(TENANT_A, {}, { size: 10, after: null })).items, [], 'nor a token');
    } finally {
      await target.close();
    }
  };

  t.test(`${name}: a head rewritten in the store is not chained onto, anchored anew or copied`, async (t) => {
    const { s, tamper } = await start(t);
    const id = await reveals(t, s, 8);
    t.equal(await tamper.count(), 8, 'eight reveals, eight events');
    const restore = await tamper.snapshot();

    await tamper.truncate(5);
    const config = configFor(s, tamper.storeConfig, 'verify');
    const before = await inProcess(['verify-audit', '--tenant', TENANT_A, '--config', config]);
    t.equal(before.code, 1, `verify-audit sees the rewritten head: ${before.out}`);

    const logged = s.logs().length;
    const r = await s.call('GET', `/tokens/${id}`, { key: KEYS.private });
    t.equal(r.status, 503, `a reveal onto the rewritten head is refused: ${r.text}`);
    t.equal(r.body?.code, 'store_unavailable', 'with the code of an audit write failure');
    t.notOk(r.text.includes('anchor-refusal-secret-value'), 'and without the value');
    t.equal(await tamper.count(), 5, 'nothing was appended');
    const alerts = errorLines(s, logged).filter((l) => typeof l.msg === 'string' && l.msg.includes('verify-audit'));
    t.equal(alerts.length, 1, `one alert at error level naming verify-audit: ${s.logs().slice(logged)}`);
    t.ok(alerts[0] && 'tenant_id' in alerts[0], 'the alert names the tenant');
    t.match(alerts[0]?.msg, /anchor/, 'and says the head does not carry its anchor');

    const after = await inProcess(['verify-audit', '--tenant', TENANT_A, '--config', config]);
    t.equal(after.code, 1, `verify-audit still fails: the service signed nothing onto the forged head: ${after.out}`);
    t.notMatch(after.out, /chain intact/);

    await copyRefused(t, s, tamper, /anchor/);

    await restore();
    const again = await s.call('GET', `/tokens/${id}`, { key: KEYS.private });
    t.equal(again.status, 200, 'the trail put back as it was: reveals work again');
    t.equal(await tamper.count(), 9);
    t.equal((await inProcess(['verify-audit', '--tenant', TENANT_A, '--config', config])).code, 0, 'and verify');
  });

  t.test(`${name}: a head without an anchor is refused until tokenproxy migrate anchors it`, async (t) => {
    const { s, tamper } = await start(t);
    const id = await reveals(t, s, 3);
    await tamper.stripAnchor();

    const logged = s.logs().length;
    const r = await s.call('GET', `/tokens/${id}`, { key: KEYS.private });
    t.equal(r.status, 503, `a reveal onto an unanchored head is refused: ${r.text}`);
    t.equal(r.body?.code, 'store_unavailable');
    t.equal(await tamper.count(), 3, 'nothing was appended');
    const alerts = errorLines(s, logged).filter((l) => typeof l.msg === 'string' && l.msg.includes('verify-audit'));
    t.equal(alerts.length, 1, `one alert at error level: ${s.logs().slice(logged)}`);
    t.match(alerts[0]?.msg, /tokenproxy migrate/, 'naming the upgrade path');

    await copyRefused(t, s, tamper, /no anchor/);

    const config = configFor(s, tamper.storeConfig, 'migrate');
    // migrate anchors only a chain that checks: with its last event gone, it names the tenant and leaves the head.
    const unbroken = await tamper.snapshot();
    await tamper.dropLastEvent();
    const refused = await inProcess(['migrate', '--config', config]);
    t.equal(refused.code, 1, `migrate does not anchor a chain that does not check: ${refused.out}`);
    t.match(refused.out, /the audit chain of tenant \S+ does not check .*its head was not anchored/);
    t.notMatch(refused.out, /anchored the audit chain head/);
    await unbroken();
    t.match((await inProcess(['verify-audit', '--tenant', TENANT_A, '--config', config])).out, /carries no anchor/, 'the head is still unanchored');

    const migrated = await inProcess(['migrate', '--config', config]);
    t.equal(migrated.code, 0, `migrate: ${migrated.out}`);
    t.match(migrated.out, /anchored the audit chain head of 1 tenant/);
    const verified = await inProcess(['verify-audit', '--tenant', TENANT_A, '--config', config]);
    t.equal(verified.code, 0, verified.out);
    t.match(verified.out, /3 audit event\(s\), chain intact, head 3:\S+ \(anchored\)/);
    const twice = await inProcess(['migrate', '--config', config]);
    t.equal(twice.code, 0, twice.out);
    t.notMatch(twice.out, /anchored/, 'a second run has no head to anchor');

    const served = await s.call('GET', `/tokens/${id}`, { key: KEYS.private });
    t.equal(served.status, 200, 'once anchored, reveals are served');
    t.equal(await tamper.count(), 4);
  });

  t.test(`${name}: events whose head was removed are not chained onto or copied`, async (t) => {
    const { s, tamper } = await start(t);
    const id = await reveals(t, s, 3);
    const restore = await tamper.snapshot();
    await tamper.removeHead();

    const logged = s.logs().length;
    const r = await s.call('GET', `/tokens/${id}`, { key: KEYS.private });
    t.equal(r.status, 503, `a reveal onto events without a head is refused: ${r.text}`);
    t.equal(r.body?.code, 'store_unavailable');
    t.equal(await tamper.count(), 3, 'nothing was appended');
    const alerts = errorLines(s, logged).filter((l) => typeof l.msg === 'string' && l.msg.includes('verify-audit'));
    t.equal(alerts.length, 1, `one alert at error level: ${s.logs().slice(logged)}`);
    t.equal(alerts[0]?.audit_refused, 'missing');

    await copyRefused(t, s, tamper, /no chain head/);

    await restore();
    const again = await s.call('GET', `/tokens/${id}`, { key: KEYS.private });
    t.equal(again.status, 200, 'the head put back: reveals work again');
    t.equal(await tamper.count(), 4);
  });
}
