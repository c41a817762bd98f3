/**
 * Runs the real CLI as a child process (dist/main.js, or src/main.ts under the test's loader when
 * dist/ is stale: cli-entry.ts), with a config file written for the test, and stdout/stderr
 * captured. Used where only a separate process will do: kill -9 durability, exit codes, and
 * scanning everything the process writes.
 */
import type { ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnCli } from './cli-entry.js';

export interface ChildService {
  child: ChildProcess;
  url: string;
  output(): string;
  kill9(): Promise<void>;
  stop(): Promise<void>;
}

export function writeConfig(dir: string, config: unknown, name = 'config.json'): string {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify(config, null, 2));
  return path;
}

/**
 * Kills what is left of a child's process group (it was spawned detached, so it leads one): a
 * cluster worker that outlived its primary keeps the test's stdout pipe open, and the test
 * process then never exits (seen once: a file whose tests had passed waited 6 minutes on one).
 */
function killGroup(child: ChildProcess): void {
  try {
    process.kill(-child.pid!, 'SIGKILL');
  } catch {
    // no process left in the group
  }
}

/** Runs the CLI to completion (e.g. a config error) and returns its exit code and output. */
export function runCli(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawnCli(args, { ...process.env, ...env }, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let output = '';
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    child.on('exit', (code) => {
      killGroup(child);
      resolve({ code, output });
    });
  });
}

/** `startTimeoutMs`: how long it may take to say it listens (a cluster's workers start after their primary); 60 s by default, as a start took 17 s at a load average of 18 on 2 cores. */
export async function startChild(configPath: string, env: Record<string, string> = {}, startTimeoutMs = 60_000): Promise<ChildService> {
  const child = spawnCli(['--config', configPath], { ...process.env, PORT: '0', ...env }, {
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`service did not start:\n${output}`));
    }, startTimeoutMs);
    const onData = (d: Buffer) => {
      output += d;
      const m = /"url":"(http:\/\/[^"]+)"[^\n]*tokenproxy listening|tokenproxy listening[^\n]*"url":"(http:\/\/[^"]+)"/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve(m[1] ?? m[2]!);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (d: Buffer) => (output += d));
    child.on('exit', (code) => {
      clearTimeout(timer);
      killGroup(child);
      reject(new Error(`service exited with ${code}:\n${output}`));
    });
  });
  child.removeAllListeners('exit');
  const waitExit = () => new Promise<void>((res) => (child.exitCode !== null || child.signalCode !== null ? res() : child.once('exit', () => res())));
  return {
    child,
    url,
    output: () => output,
    kill9: async () => {
      child.kill('SIGKILL');
      await waitExit();
      killGroup(child);
    },
    stop: async () => {
      child.kill('SIGTERM');
      await waitExit();
      killGroup(child);
    },
  };
}
