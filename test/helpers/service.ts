/**
 * Starts the real service for a test: port 0, its own temporary data directory (or Redis key
 * prefix), a generated master key, and a log stream captured in memory so tests can scan what
 * leaves the process. Teardown closes the server and removes the directory.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { buildConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/log.js';
import { startService, type RunningService } from '../../src/server.js';
import { testReactorHost } from './cli-entry.js';
import type { RedisHandle } from './redis.js';
import type { PostgresDatabase } from './postgres.js';

export const TENANT_A = '11111111-1111-4111-8111-111111111111';
export const TENANT_B = '22222222-2222-4222-8222-222222222222';
export const APP_PRIVATE = 'aaaaaaaa-0000-4000-8000-000000000001';
export const APP_PUBLIC = 'aaaaaaaa-0000-4000-8000-000000000002';
export const APP_MASKED = 'aaaaaaaa-0000-4000-8000-000000000003';
export const APP_B = 'bbbbbbbb-0000-4000-8000-000000000001';
export const APP_NOPERM = 'aaaaaaaa-0000-4000-8000-000000000004';

export const KEYS = {
  private: 'test_private_key_aaaaaaaaaaaaaaaa',
  public: 'test_public_key_bbbbbbbbbbbbbbbbb',
  masked: 'test_masked_key_cccccccccccccccccc',
  tenantB: 'test_tenant_b_key_dddddddddddddddd',
  noPerm: 'test_noperm_key_eeeeeeeeeeeeeeeeee',
};

const ALL = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search', 'reactor:invoke', 'proxy:invoke'];

export function baseConfig(): Record<string, unknown> {
  return {
    server: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    rate_limits: { enabled: false },
    tenants: [
      {
        id: TENANT_A,
        name: 'tenant-a',
        applications: [
          { id: APP_PRIVATE, name: 'private', type: 'private', keys: [KEYS.private], permissions: ALL,
            rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: ALL.slice(0, 5) }] },
          { id: APP_PUBLIC, name: 'public', type: 'public', keys: [KEYS.public], permissions: ['token:create'] },
          { id: APP_MASKED, name: 'masked', type: 'private', keys: [KEYS.masked], permissions: ['token:read', 'token:search', 'token:create'] },
          { id: APP_NOPERM, name: 'noperm', type: 'private', keys: [KEYS.noPerm], permissions: ['token:read'] },
        ],
      },
      {
        id: TENANT_B,
        name: 'tenant-b',
        applications: [{ id: APP_B, name: 'b', type: 'private', keys: [KEYS.tenantB], permissions: ALL }],
      },
    ],
  };
}

export interface TestService {
  svc: RunningService;
  url: string;
  dataDir: string;
  masterKey: string;
  /** Everything the service logged so far. */
  logs(): string;
  call(method: string, path: string, opts?: { key?: string | null; body?: unknown; raw?: string; headers?: Record<string, string> }): Promise<{ status: number; headers: Headers; body: any; text: string }>;
}

interface Tap {
  teardown(fn: () => unknown): void;
}

export interface StartTestOptions {
  config?: Record<string, unknown>;
  redis?: RedisHandle;
  /** The PostgreSQL store on this database (helpers/postgres.ts, issue 24). */
  postgres?: PostgresDatabase;
  dataDir?: string;
  masterKey?: string;
}

export async function startTestService(t: Tap, opts: StartTestOptions = {}): Promise<TestService> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'tp-svc-'));
  if (!opts.dataDir) t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const raw = opts.config ?? baseConfig();
  const store = opts.redis
    ? { kind: 'redis', url: opts.redis.url, key_prefix: opts.redis.prefix }
    : opts.postgres
      ? { kind: 'postgres', url: opts.postgres.url }
      : { kind: 'embedded', path: join(dataDir, 'tokens.db') };
  const masterKey = opts.masterKey ?? randomBytes(32).toString('base64');
  const config = buildConfig({ ...raw, store: { ...store, ...((raw.store as object) ?? {}) } }, { env: { TOKENPROXY_MASTER_KEY: masterKey } });
  const lines: string[] = [];
  const log = createLogger('info', { write: (s: string) => void lines.push(s) } as never);
  // drainIdleMs 0: the test's own keep-alive connections do not hold each close for a second
  // (the stop under load is tested on the real process: test/server/restart-keepalive.test.ts).
  const svc = await startService(config, { log, reactorHost: testReactorHost(), drainIdleMs: 0 });
  t.teardown(() => svc.close());
  return {
    svc,
    url: svc.url,
    dataDir,
    masterKey,
    logs: () => lines.join(''),
    call: (method, path, o = {}) => call(svc.url, method, path, o),
  };
}

export async function call(
  base: string,
  method: string,
  path: string,
  o: { key?: string | null; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; headers: Headers; body: any; text: string }> {
  const headers: Record<string, string> = { ...(o.headers ?? {}) };
  if (o.key !== null) headers['svc-api-key'] ??= o.key ?? KEYS.private;
  let body: string | undefined;
  if (o.raw !== undefined) body = o.raw;
  else if (o.body !== undefined) {
    body = JSON.stringify(o.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(base + path, { method, headers, body });
  const text = await res.text();
  let parsed: unknown = undefined;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  return { status: res.status, headers: res.headers, body: parsed, text };
}
