/**
 * Restarts under load: what a client on keep-alive connections loses when the service is
 * restarted with SIGTERM (a deploy, `systemctl restart`).
 *
 * The built service (`node --no-node-snapshot dist/main.js`, as `npm start` runs it; dist/ rebuilt
 * first when src/ is newer; TOKENPROXY_BENCH_DIST=DIR runs another build, e.g. an older commit's
 * dist/ for a before/after) runs under a small supervisor here: on a fixed port with an embedded
 * store in a fresh directory (the same file and master key at every start), log level warn,
 * rate limits off. Once it answers /healthz, the client loads it for `--every` ms, then SIGTERM;
 * as soon as it has exited it is started again, `--restarts` times, and the client keeps going
 * through all of it.
 *
 * The client (`--client node`, the default): `--connections` loops, each sending POST /tokenize
 * (one string) one after the other over a node:http Agent with keepAlive, so every request but a
 * connection's first goes on a reused connection. Each request ends one of three ways:
 *
 *   answered        a whole response (any status; the figures say how many were not 200, and how
 *                   many carried `Connection: close`);
 *   never sent      the connection was refused (ECONNREFUSED: the service was down or not yet
 *                   listening): nothing reached the service, the client may send it again;
 *   dropped         anything else: a reset (ECONNRESET), the connection closed before the answer
 *                   (node reports "socket hang up"), EPIPE. The request may or may not have been
 *                   served: for POST /tokenize the client cannot tell whether the token was made.
 *
 * Dropped requests are listed with their error and how long after the last SIGTERM they failed.
 * `--client wrk`: the same loop with wrk (1 thread, `--connections` connections) for the whole
 * run. wrk counts socket errors: read (a reset or a close before the whole answer: dropped) and
 * timeouts; its connect is non-blocking, so a refused connection is counted as a write error,
 * with any write that failed on a reused connection: write errors are mostly "never sent".
 *
 *   npm run bench -- restarts [--restarts 3] [--connections 16] [--every 2000] [--workers 1]
 *                             [--client node|wrk] [--data-dir DIR]
 *
 * The exit code is 1 when a request was dropped (or the service failed to restart), else 0.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { freePort } from '../test/helpers/redis.js';
import { exited } from './lib/procs.js';
import { BENCH_KEY, benchConfig } from './lib/service.js';
import { ensureBuilt } from './lib/tokenproxy-process.js';
import { findWrk, wrkScript, runWrk } from './lib/wrk.js';

const { values: args } = parseArgs({
  options: {
    restarts: { type: 'string', default: '3' },
    connections: { type: 'string', default: '16' },
    every: { type: 'string', default: '2000' },
    workers: { type: 'string', default: '1' },
    client: { type: 'string', default: 'node' },
    'data-dir': { type: 'string', default: tmpdir() },
  },
});
const RESTARTS = Number(args.restarts);
const CONNECTIONS = Number(args.connections);
const EVERY_MS = Number(args.every);
const WORKERS = Number(args.workers);
const CLIENT = args.client;
if (CLIENT !== 'node' && CLIENT !== 'wrk') throw new Error('--client is node or wrk');

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const MAIN = process.env.TOKENPROXY_BENCH_DIST ? join(resolve(process.env.TOKENPROXY_BENCH_DIST), 'main.js') : join(ROOT, 'dist', 'main.js');
const BODY = JSON.stringify('customer-1-value');
const HEADERS = { 'content-type': 'application/json', 'svc-api-key': BENCH_KEY };
const log = (line: string): void => console.log(line);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

ensureBuilt(log);
const dir = mkdtempSync(join(args['data-dir'], 'tp-bench-restarts-'));
const port = await freePort();
const url = `http://127.0.0.1:${port}`;
const config = { ...benchConfig(), server: { host: '127.0.0.1', port, workers: WORKERS }, log: { level: 'warn' }, store: { kind: 'embedded', path: join(dir, 'tokens.db') } };
const configPath = join(dir, 'config.json');
writeFileSync(configPath, JSON.stringify(config));
const masterKey = randomBytes(32).toString('base64');
const logFile = join(dir, 'service.log');

async function startService(): Promise<ChildProcess> {
  const out = openSync(logFile, 'a');
  const child = spawn(process.execPath, ['--no-node-snapshot', MAIN, '--config', configPath], {
    cwd: ROOT,
    env: { ...process.env, TOKENPROXY_MASTER_KEY: masterKey, NODE_OPTIONS: '' },
    stdio: ['ignore', out, 'inherit'],
  });
  closeSync(out);
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the service exited with ${child.exitCode} at start: see ${logFile}`);
    const ok = await request(`${url}/healthz`, { reset: true }).then((r) => r.body.dump().then(() => r.statusCode === 200), () => false);
    // A cluster answers once one worker listens: give the others a moment.
    if (ok) return WORKERS > 1 ? sleep(2000).then(() => child) : child;
    if (Date.now() > deadline) throw new Error('the service did not answer /healthz within 120 s');
    await sleep(50);
  }
}

interface Dropped {
  error: string;
  /** ms since the last SIGTERM (null before the first). */
  afterSignalMs: number | null;
  reused: boolean;
}

let lastSignalAt: number | null = null;
const tally = { answered: 0, non200: 0, connectionClose: 0, neverSent: 0 };
const dropped: Dropped[] = [];

/** One POST /tokenize on the keep-alive agent, classified as above. */
function once(agent: Agent): Promise<void> {
  return new Promise((done) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: '/tokenize', method: 'POST', agent, headers: { ...HEADERS, 'content-length': Buffer.byteLength(BODY) } }, (res) => {
      res.on('data', () => undefined);
      res.on('end', () => {
        tally.answered++;
        if (res.statusCode !== 200) tally.non200++;
        if (res.headers.connection === 'close') tally.connectionClose++;
        done();
      });
      res.on('error', (err) => fail(err));
    });
    let failed = false;
    const fail = (err: NodeJS.ErrnoException): void => {
      if (failed) return;
      failed = true;
      if (err.code === 'ECONNREFUSED') tally.neverSent++;
      else dropped.push({ error: `${err.code ?? ''} ${err.message}`.trim(), afterSignalMs: lastSignalAt === null ? null : Date.now() - lastSignalAt, reused: req.reusedSocket });
      // Refused: the service is down; do not spin while it starts again.
      setTimeout(done, err.code === 'ECONNREFUSED' ? 20 : 0);
    };
    req.on('error', fail);
    req.end(BODY);
  });
}

let running = true;
let wrkRun: Promise<Awaited<ReturnType<typeof runWrk>>> | null = null;
const loops: Promise<void>[] = [];
let service = await startService();
log(`tokenproxy ${MAIN} on ${url}, workers ${WORKERS}; client ${CLIENT}, ${CONNECTIONS} keep-alive connections, POST /tokenize; ${RESTARTS} restarts, SIGTERM every ${EVERY_MS} ms of load`);
if (CLIENT === 'node') {
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  for (let i = 0; i < CONNECTIONS; i++) {
    loops.push((async () => {
      while (running) await once(agent);
    })());
  }
} else {
  const wrk = findWrk({ install: false, log });
  if (wrk.bin === null) throw new Error(wrk.reason);
  const scriptPath = join(dir, 'post.lua');
  writeFileSync(scriptPath, wrkScript({ url: `${url}/tokenize`, method: 'POST', headers: HEADERS, body: BODY }));
  // Long enough for every restart; stopped by its -d (the restarts take what they take).
  const seconds = Math.ceil(((RESTARTS + 1) * EVERY_MS) / 1000) + RESTARTS * 3 + 2;
  wrkRun = runWrk(wrk.bin, scriptPath, url, CONNECTIONS, seconds, 10_000);
}

const downtimes: number[] = [];
const stops: number[] = [];
let failedRestart = false;
try {
  for (let i = 0; i < RESTARTS; i++) {
    await sleep(EVERY_MS);
    lastSignalAt = Date.now();
    service.kill('SIGTERM');
    await exited(service);
    stops.push(Date.now() - lastSignalAt);
    if (service.exitCode !== 0) {
      log(`restart ${i + 1}: the service exited with ${service.exitCode ?? service.signalCode} after SIGTERM`);
      failedRestart = true;
    }
    service = await startService();
    downtimes.push(Date.now() - lastSignalAt);
  }
  await sleep(EVERY_MS);
} finally {
  running = false;
  await Promise.all(loops);
  const summary = wrkRun ? await wrkRun : null;
  service.kill('SIGTERM');
  await exited(service);
  log(`signal to exit: ${stops.map((d) => `${d} ms`).join(', ')}; signal to answering again: ${downtimes.map((d) => `${d} ms`).join(', ')}`);
  if (summary) {
    log(`wrk: ${summary.requests} answered (${summary.status} with a status above 399); socket errors: read ${summary.read}, timeout ${summary.timeout}; connect ${summary.connect}, write ${summary.write} (mostly refused connections)`);
    if (summary.read + summary.timeout > 0) process.exitCode = 1;
  } else {
    log(`answered ${tally.answered} (not 200: ${tally.non200}; with Connection: close: ${tally.connectionClose}); never sent (refused) ${tally.neverSent}; dropped ${dropped.length}`);
    const byError = new Map<string, number[]>();
    for (const d of dropped) {
      const key = `${d.error}${d.reused ? ' (on a reused connection)' : ''}`;
      byError.set(key, [...(byError.get(key) ?? []), d.afterSignalMs ?? NaN]);
    }
    for (const [error, after] of byError) log(`  dropped: ${after.length} × ${error}, ${Math.min(...after)}–${Math.max(...after)} ms after the signal`);
    if (dropped.length > 0) process.exitCode = 1;
  }
  const problems = readFileSync(logFile, 'utf8').split('\n').filter((l) => /"level":(?:50|60)[,}]/.test(l));
  if (problems.length) log(`service log: ${problems.length} error lines, e.g. ${problems[0]!.slice(0, 300)}`);
  if (failedRestart) process.exitCode = 1;
  rmSync(dir, { recursive: true, force: true });
}
