/**
 * Starts tokenproxy for a benchmark: the real startService on 127.0.0.1 port 0, one tenant with
 * one private key, rate limits off, logging silent, a fresh master key, and either a fresh
 * embedded store in a temporary directory or a Redis store under a unique key prefix.
 * (A minimal copy of the test helper's config: benchmarks do not import test helpers.)
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/log.js';
import { startService, type RunningService } from '../../src/server.js';

export const BENCH_TENANT = '6f1c1a9e-0000-4000-8000-00000000be01';
export const BENCH_APP = '6f1c1a9e-0000-4000-8000-00000000be02';
export const BENCH_KEY = 'bench_private_key_0123456789abcdef';

export type StoreChoice = { kind: 'embedded' } | { kind: 'redis'; url: string };

export interface BenchService {
  svc: RunningService;
  url: string;
  /** What the store is, for the printout. */
  storeLabel: string;
  stop(): Promise<void>;
}

/** The bench tenant with one private key; `permissions` and `tenant` add to it (e.g. reactors). */
export function benchConfig(extra: { permissions?: string[]; tenant?: Record<string, unknown> } = {}): Record<string, unknown> {
  return {
    server: { host: '127.0.0.1', port: 0 },
    log: { level: 'silent' },
    rate_limits: { enabled: false },
    tenants: [
      {
        id: BENCH_TENANT,
        name: 'bench',
        applications: [
          { id: BENCH_APP, name: 'bench-private', type: 'private', keys: [BENCH_KEY], permissions: ['token:create', 'token:read', ...(extra.permissions ?? [])] },
        ],
        ...extra.tenant,
      },
    ],
  };
}

export async function startBenchService(store: StoreChoice, raw: Record<string, unknown> = benchConfig()): Promise<BenchService> {
  const dir = store.kind === 'embedded' ? mkdtempSync(join(tmpdir(), 'tp-bench-')) : null;
  const storeCfg = store.kind === 'embedded'
    ? { kind: 'embedded', path: join(dir!, 'tokens.db') }
    : { kind: 'redis', url: store.url, key_prefix: `bench${randomBytes(4).toString('hex')}:` };
  // TOKENPROXY_BENCH_METRICS=off measures without the metrics registry (README "Metrics"), for a before/after.
  const metrics = { enabled: process.env.TOKENPROXY_BENCH_METRICS !== 'off' };
  const config = buildConfig({ ...raw, metrics, store: storeCfg }, { env: { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') } });
  const svc = await startService(config, { log: createLogger('silent') });
  return {
    svc,
    url: svc.url,
    storeLabel: store.kind === 'embedded' ? 'embedded (SQLite WAL, synchronous=FULL)' : 'redis',
    stop: async () => {
      await svc.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}
