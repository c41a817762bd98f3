/**
 * For the operations tests (reload, data-key rotation): a config file the test rewrites while a
 * child service runs, signals to it, and waiting for the log line each reload ends with.
 */
import { randomBytes } from 'node:crypto';
import { startChild, writeConfig, type ChildService } from './process.js';
import { randomMarker } from './secrets.js';
import { waitFor } from './wait.js';

export const OPS_TENANT = '33333333-3333-4333-8333-333333333333';
const ALL = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search', 'reactor:invoke', 'proxy:invoke'];

/** An application holding every permission and `reveal` on every container, with these keys. */
export function opsApp(n: number, keys: string[]): Record<string, unknown> {
  return {
    id: `aaaaaaaa-0000-4000-8000-${String(n).padStart(12, '0')}`, name: `app${n}`, type: 'private', keys, permissions: ALL,
    rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: ALL.slice(0, 5) }],
  };
}

export interface OpsFiles {
  dir: string;
  path: string;
  masterKey: string;
  /** Writes the config with these applications (and extra tenant fields / top-level sections). */
  write(apps: Array<Record<string, unknown>>, extra?: { tenant?: Record<string, unknown>; top?: Record<string, unknown> }): void;
}

export function opsFiles(
  dir: string,
  store: Record<string, unknown> = { kind: 'embedded', path: `${dir}/tokens.db` },
  masterKey = randomBytes(32).toString('base64'),
): OpsFiles {
  const files: OpsFiles = {
    dir,
    path: `${dir}/config.json`,
    masterKey,
    write(apps, extra = {}) {
      writeConfig(dir, {
        server: { host: '127.0.0.1', port: 0, pid_file: `${dir}/tokenproxy.pid` },
        log: { level: 'info' },
        rate_limits: { enabled: false },
        store,
        ...extra.top,
        tenants: [{ id: OPS_TENANT, name: 'ops', applications: apps, ...extra.tenant }],
      });
    },
  };
  return files;
}

/** A fresh API key for a test (never a fixed string, so an output scan can only find it if it leaked). */
export const newKey = () => randomMarker('tp_ops_key');

/** How many times `line` appears in the child's output. */
export function count(svc: ChildService, line: string): number {
  return svc.output().split(line).length - 1;
}

/** Sends SIGHUP and waits for the reload's outcome line (applied or refused); returns the new output. */
export async function hup(svc: ChildService): Promise<string> {
  const before = count(svc, 'configuration reloaded') + count(svc, 'reload refused');
  const seen = svc.output().length;
  svc.child.kill('SIGHUP');
  await waitFor(() => count(svc, 'configuration reloaded') + count(svc, 'reload refused') > before, { what: 'the reload outcome in the log', timeoutMs: 30_000 });
  return svc.output().slice(seen);
}

export async function call(url: string, method: string, path: string, key: string | null, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { ...(key ? { 'svc-api-key': key } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** Starts the CLI on the files' config with their master key; stopped on the test's teardown. */
export async function opsChild(t: { teardown(fn: () => unknown): void }, files: OpsFiles): Promise<ChildService> {
  const svc = await startChild(files.path, { TOKENPROXY_MASTER_KEY: files.masterKey });
  t.teardown(() => svc.stop());
  return svc;
}
