/**
 * What the first-hour tests share (test/server/first-hour.test.ts, production-mode.test.ts):
 * a copy of a clone's config in a directory of its own, the CLI (cli-entry.ts: dist/main.js, or
 * src/main.ts when dist/ is stale) run there as its own process group, and its JSON log lines.
 */
import type { Test } from 'tap';
import type { ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { spawnCli } from './cli-entry.js';

const root = resolve('.');

/** A scratch directory for one test file, removed at its end. */
export function scratch(t: Test): string {
  const base = mkdtempSync(join(tmpdir(), 'tp-first-hour-'));
  t.teardown(() => rmSync(base, { recursive: true, force: true }));
  return base;
}

/** A copy of what a clone holds for `npm start`: config/ and reactors/ (node_modules linked, for the test's loader). */
export function clone(base: string, name: string, edit?: (yaml: string) => string): string {
  const dir = join(base, name);
  mkdirSync(dir);
  cpSync(join(root, 'config'), join(dir, 'config'), { recursive: true });
  cpSync(join(root, 'reactors'), join(dir, 'reactors'), { recursive: true });
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
  if (edit) {
    const file = join(dir, 'config/tokenproxy.yaml');
    writeFileSync(file, edit(readFileSync(file, 'utf8')));
  }
  return dir;
}

/** The environment without the test runner's NODE_ENV or config choices. */
function env(extra: Record<string, string>): NodeJS.ProcessEnv {
  const e: NodeJS.ProcessEnv = { ...process.env, PORT: '0', ...extra };
  for (const k of ['NODE_ENV', 'TOKENPROXY_CONFIG', 'TOKENPROXY_MASTER_KEY', 'HOST']) if (!(k in extra)) delete e[k];
  return e;
}

export interface Proc {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<number | null>;
}

/** `tokenproxy ARGS` in `cwd`, detached (it leads its own process group, as under a terminal). */
export function run(t: Test, cwd: string, args: string[], extra: Record<string, string> = {}): Proc {
  const child = spawnCli(args, env(extra), {
    cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: true,
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  child.stderr!.on('data', (d: Buffer) => (err += d));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  t.teardown(() => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // the group is gone
    }
  });
  return { child, stdout: () => out, stderr: () => err, exited };
}

export type Line = Record<string, unknown> & { level?: number; msg?: string };
export function lines(text: string): Line[] {
  return text.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
}


export const OWN_KEY = 'tp_private_first_hour_operator_key_0001';
export const MASTER_KEY = Buffer.alloc(32, 9).toString('base64');
export const sha = (k: string) => createHash('sha256').update(k).digest('hex');

/** A config file of its own in `dir` (JSON is YAML), with one application holding `keys`. */
export function ownConfig(dir: string, keys: unknown[], extra: Record<string, unknown> = {}): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'tokenproxy.json');
  writeFileSync(file, JSON.stringify({
    store: { kind: 'embedded', path: './data/tokens.db' },
    tenants: [{
      id: '7f1c6b3e-0d2a-4c59-9a4e-3b8d2f6a1c10', name: 't',
      applications: [{ id: '0b7d5c2a-9e41-4f3b-8c6d-1a2b3c4d5e6f', name: 'a', type: 'private', keys, permissions: ['token:create'] }],
    }],
    ...extra,
  }));
  return file;
}

