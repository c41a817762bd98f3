/**
 * What the store command tests share (not a test file: tap runs only *.test.ts). Issue 31
 * finding 7: the CLI commands that read a store never create one. Run as child processes from
 * chosen working directories: a relative `store.path` is resolved against the working directory
 * by the service and by the commands alike. The two parts are files of their own that tap runs
 * in parallel (issue 30): store-commands-elsewhere.test.ts (from another directory `verify-audit`,
 * `rotate-data-key` and `migrate` (issue 24) exit 1 naming the path they looked at, and create
 * neither the file, its directory nor a development master key) and
 * store-commands-service-dir.test.ts (from the service's directory they find its store; an
 * unknown tenant or one without a chain head exits 2 naming it).
 */
import type { Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnCli } from '../helpers/cli-entry.js';
import { baseConfig } from '../helpers/service.js';


/** The test's environment without TOKENPROXY_MASTER_KEY, plus `env`. */
function envWith(env: Record<string, string>): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = { ...process.env, ...env };
  if (!('TOKENPROXY_MASTER_KEY' in env)) delete out.TOKENPROXY_MASTER_KEY;
  return out;
}

export function cli(cwd: string, args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; out: string }> {
  return new Promise((done) => {
    const child = spawnCli(args, envWith(env), { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('exit', (code) => done({ code, out }));
  });
}

/** The service as a child process in `cwd`; resolves with its URL once it listens, and a stop function. */
export function service(cwd: string, config: string, env: Record<string, string>): Promise<{ url: string; stop: () => Promise<void> }> {
  return new Promise((done, fail) => {
    const child = spawnCli(['--config', config], envWith({ ...env, PORT: '0' }), { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const onData = (d: Buffer) => {
      out += d;
      const m = /"url":"(http:\/\/[^"]+)"[^\n]*tokenproxy listening/.exec(out);
      if (m) {
        child.stdout.off('data', onData);
        child.removeAllListeners('exit');
        done({
          url: m[1]!,
          stop: () => new Promise<void>((r) => {
            child.once('exit', () => r());
            child.kill('SIGTERM');
          }),
        });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', (d: Buffer) => (out += d));
    child.on('exit', (code) => fail(new Error(`service exited with ${code}:\n${out}`)));
  });
}

/** A directory for the service, another one, a config with a relative store path, a master key. */
export function dirs(t: Test): { serviceDir: string; otherDir: string; config: string; masterKey: string } {
  const root = mkdtempSync(join(tmpdir(), 'tp-store-commands-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const serviceDir = join(root, 'service');
  const otherDir = join(root, 'elsewhere');
  mkdirSync(serviceDir);
  mkdirSync(otherDir);
  const config = join(root, 'tokenproxy.json');
  writeFileSync(config, JSON.stringify({ ...baseConfig(), store: { kind: 'embedded', path: './data/tokens.db' } }));
  const masterKey = randomBytes(32).toString('base64');
  return { serviceDir, otherDir, config, masterKey };
}
