/**
 * nginx as the native reference of the proxy benchmark: one worker, `proxy_pass` to one upstream
 * through an `upstream {}` block with `keepalive 64`, HTTP/1.1 with the Connection header cleared
 * (so the upstream connections are kept alive), no access log. Its config, pid file, error log and
 * temp paths live in a fresh temporary directory; it runs in the foreground (`daemon off`) as a
 * child process that `close()` ends.
 *
 * `findNginx` looks for the binary and, when it is missing and this process is root, installs
 * Debian's nginx-light (then nginx) with apt-get, with a policy-rc.d in place during the install
 * so the package's own service is not started. It never throws: it says why nginx is unavailable.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../test/helpers/redis.js';

export type NginxLookup = { bin: string; version: string; installed: string | null } | { bin: null; reason: string };

export interface Nginx {
  url: string;
  pid: number;
  config: string;
  close(): Promise<void>;
}

function which(): string | null {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/local/sbin', '/usr/local/nginx/sbin']) {
    if (dir && existsSync(join(dir, 'nginx'))) return join(dir, 'nginx');
  }
  return null;
}

function version(bin: string): string {
  const r = spawnSync(bin, ['-v'], { encoding: 'utf8' });
  return `${r.stderr ?? ''}${r.stdout ?? ''}`.trim().replace(/^nginx version:\s*/, '');
}

function tail(text: string, lines = 6): string {
  return text.trim().split('\n').slice(-lines).join('\n');
}

/** Finds nginx; installs it with apt-get when missing, allowed, and possible. */
export function findNginx(opts: { install: boolean; log: (line: string) => void }): NginxLookup {
  const found = which();
  if (found) return { bin: found, version: version(found), installed: null };
  if (!opts.install) return { bin: null, reason: 'nginx is not on PATH (install disabled by --no-install)' };
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return { bin: null, reason: 'nginx is not on PATH and this process is not root, so it cannot apt-get install it' };
  if (spawnSync('apt-get', ['--version']).status !== 0) return { bin: null, reason: 'nginx is not on PATH and there is no apt-get' };

  // A policy-rc.d that refuses every start keeps the package's postinst from starting the system
  // nginx service (on port 80) during the install; removed afterwards if it was not already there.
  const policy = '/usr/sbin/policy-rc.d';
  const ownPolicy = !existsSync(policy);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  try {
    if (ownPolicy) {
      writeFileSync(policy, '#!/bin/sh\n# written by tokenproxy bench/lib/nginx.ts during an install; removed after it\nexit 101\n');
      chmodSync(policy, 0o755);
    }
    opts.log('nginx is not installed: apt-get update && apt-get install -y nginx-light (once; about 10-30 s)');
    const update = spawnSync('apt-get', ['update'], { encoding: 'utf8', env, timeout: 180_000 });
    if (update.status !== 0) return { bin: null, reason: `apt-get update failed (${update.status ?? update.signal}): ${tail(update.stderr || update.stdout || '')}` };
    let lastError = '';
    for (const pkg of ['nginx-light', 'nginx']) {
      const r = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', pkg], { encoding: 'utf8', env, timeout: 300_000 });
      const bin = which();
      if (r.status === 0 && bin) return { bin, version: version(bin), installed: pkg };
      lastError = `apt-get install ${pkg} failed (${r.status ?? r.signal}): ${tail(r.stderr || r.stdout || '')}`;
    }
    return { bin: null, reason: lastError };
  } finally {
    if (ownPolicy && existsSync(policy)) unlinkSync(policy);
  }
}

function waitForPort(port: number, child: ChildProcess, deadlineMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const deadline = Date.now() + deadlineMs;
    const attempt = () => {
      if (child.exitCode !== null || child.signalCode !== null) return reject(new Error(`nginx exited (${child.exitCode ?? child.signalCode})`));
      const sock = connect(port, '127.0.0.1');
      sock.once('connect', () => {
        sock.destroy();
        resolve();
      });
      sock.once('error', () => {
        sock.destroy();
        if (Date.now() > deadline) reject(new Error(`nginx did not listen on ${port} within ${deadlineMs} ms`));
        else setTimeout(attempt, 50);
      });
    };
    attempt();
  });
}

/** Starts nginx in front of `upstreamUrl` (http://127.0.0.1:port) on a free loopback port. */
export async function startNginx(bin: string, upstreamUrl: string): Promise<Nginx> {
  const upstream = new URL(upstreamUrl);
  const dir = mkdtempSync(join(tmpdir(), 'tp-bench-nginx-'));
  // nginx's workers run as an unprivileged user when the master is root: they must reach the
  // temp paths inside this directory.
  chmodSync(dir, 0o755);
  const port = await freePort();
  const config = `# tokenproxy proxy benchmark: the native reference
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events {
  worker_connections 1024;
}
http {
  access_log off;
  keepalive_requests 100000;
  keepalive_timeout 65s;
  client_body_temp_path ${dir}/client_body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream bench_upstream {
    server ${upstream.hostname}:${upstream.port};
    keepalive 64;
    keepalive_requests 100000;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://bench_upstream;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`;
  const confPath = join(dir, 'nginx.conf');
  writeFileSync(confPath, config);
  const errorLog = join(dir, 'error.log');
  const child = spawn(bin, ['-p', dir, '-e', errorLog, '-c', confPath, '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  const exited = new Promise<void>((res) => child.once('exit', () => res()));
  const close = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM'); // nginx: fast shutdown of the master and its worker
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitForPort(port, child, 10_000);
  } catch (err) {
    const log = existsSync(errorLog) ? readFileSync(errorLog, 'utf8') : '';
    await close();
    throw new Error(`${(err as Error).message}: ${tail(stderr + log)}`);
  }
  return { url: `http://127.0.0.1:${port}`, pid: child.pid ?? -1, config, close };
}
