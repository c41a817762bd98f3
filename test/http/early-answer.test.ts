/**
 * Early answers on a body that was not read (issue 16): the client reads its answer, never a
 * connection reset.
 *
 * - A real node:http client (no Expect) writes a 6 MB body as fast as the socket allows and reads
 *   the 413 problem body, 50 times in a row, while another process keeps a core busy; the same for
 *   a 429 answered before a 6 MB body and for a proxy route with a tokenize transform.
 * - A client trickling an endless body is cut off at the time bound; a client sending an endless
 *   body as fast as it can is cut off at the byte bound, and memory stays flat.
 * - A small unread body (<= 64 KB) is still drained and the keep-alive connection stays open.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { connect } from 'node:net';
import { Client } from 'undici';
import t, { type Test } from 'tap';
import { baseConfig, KEYS, startTestService } from '../helpers/service.js';
import { configWithProxies, PROXY_KEY } from '../helpers/proxy.js';
import { startUpstream } from '../helpers/upstream.js';
import { limitedConfig, tenant } from '../rate-limit/http-helpers.js';

const SIX_MB = 6 * 1024 * 1024;
const ROUNDS = 50;

/**
 * A busy loop in another process: the scheduling that made the reset show. Only while a client
 * runs its rounds (issue 30: it pinned a core for the whole file, beside two other test files on
 * a 2-core machine, and slowed every other timing in them).
 */
function busyLoop(): ChildProcess {
  const child = spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' });
  t.teardown(() => {
    child.kill('SIGKILL');
  });
  return child;
}

interface Round {
  /** The status read, or the socket error met before the answer was read. */
  status?: number;
  error?: string;
  connection?: string;
  code?: string;
}

/**
 * The client, in its own process (as a real client is: the reset races the client reading its
 * answer, which an in-process client on the server's event loop hides). For each round it POSTs
 * `total` bytes (a JSON string) as fast as the socket takes them on a fresh connection, without
 * Expect, and records the answer it read, or the socket error it met before reading it.
 */
const CLIENT = `
const { request } = require('node:http');
const [url, path, headersJson, total, rounds, chunkedEvery] = process.argv.slice(1);
const headers = JSON.parse(headersJson);
function round(chunked) {
  return new Promise((resolve) => {
    let done = false;
    const settle = (r) => { if (!done) { done = true; resolve(r); } };
    const req = request(url + path, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', ...(chunked ? {} : { 'content-length': String(total) }), ...headers } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let code; try { const b = JSON.parse(text); code = b.code ?? b.proxy_error?.code; } catch {}
        settle({ status: res.statusCode, connection: res.headers.connection, code });
      });
      res.on('error', (e) => settle({ error: e.code ?? String(e) }));
    });
    req.on('error', (e) => settle({ error: e.code ?? String(e) }));
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    req.write('"');
    let sent = 1;
    const pump = () => {
      while (sent < Number(total)) {
        const n = Math.min(chunk.length, Number(total) - sent);
        sent += n;
        if (!req.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}
(async () => {
  const out = [];
  for (let i = 0; i < Number(rounds); i++) out.push(await round(Number(chunkedEvery) > 0 && i % Number(chunkedEvery) === Number(chunkedEvery) - 1));
  process.stdout.write(JSON.stringify(out));
})();
`;

function runClient(url: string, path: string, headers: Record<string, string>, opts: { chunkedEvery?: number } = {}): Promise<Round[]> {
  const busy = busyLoop();
  return new Promise<Round[]>((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', CLIENT, url, path, JSON.stringify(headers), String(SIX_MB), String(ROUNDS), String(opts.chunkedEvery ?? 0)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d: string) => (out += d));
    child.on('error', reject);
    child.on('exit', (code) => {
      try {
        resolve(JSON.parse(out) as Round[]);
      } catch {
        reject(new Error(`the client process exited with ${code} and printed ${out.slice(0, 200)}`));
      }
    });
  }).finally(() => busy.kill('SIGKILL'));
}

/** Every round must have read the expected answer; the failures are listed. */
function expectRounds(t: Test, rounds: Round[], status: number, code: string): void {
  const bad = rounds.map((r, i) => ({ i, ...r })).filter((r) => r.status !== status || r.code !== code || r.connection !== 'close');
  t.equal(rounds.length, ROUNDS, `${ROUNDS} rounds ran`);
  t.same(bad, [], `every round read the ${status} ${code} answer (Connection: close); failures: ${bad.length}`);
}

t.test('a 6 MB body on /tokenize: the client reads the 413, 50 times in a row', async (t) => {
  const s = await startTestService(t);
  // Every fifth round without Content-Length: refused while streaming instead of up front.
  expectRounds(t, await runClient(s.url, '/tokenize', { 'svc-api-key': KEYS.private }, { chunkedEvery: 5 }), 413, 'body_too_large');
  t.equal((await s.call('GET', '/tokens')).body.data.length, 0, 'nothing created');
});

t.test('a 429 answered before a 6 MB body: the client reads the 429, 50 times in a row', async (t) => {
  const limited = tenant({ custom: { creating_tokens: { points: 1, duration_seconds: 600 } }, apps: [{ kind: 'private' }] });
  const s = await startTestService(t, { config: limitedConfig([limited]) });
  const key = limited.keys[0]![0]!;
  t.equal((await s.call('POST', '/tokenize', { key, body: { a: 'spend-the-one-point' } })).status, 200, 'the one admitted request');
  expectRounds(t, await runClient(s.url, '/tokenize', { 'svc-api-key': key }), 429, 'rate_limited');
});

t.test('a 6 MB body on a proxy route with a tokenize transform: the client reads the 413, 50 times', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies([
    {
      id: 'tok', name: 'tok', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`,
      request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/card', token: { type: 'card' } }] }],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  expectRounds(t, await runClient(s.url, '/proxy/charges', { 'svc-proxy-key': PROXY_KEY }, { chunkedEvery: 5 }), 413, 'body_too_large');
  t.equal(up.received.length, 0, 'nothing reached the destination');
});

/**
 * Opens a chunked POST with a wrong key (401 before the body) on a raw socket (node:http's client
 * stops writing once it has a `Connection: close` answer; this one does not) and writes `next()`
 * chunks until the server closes the connection. Resolves with the answer, the bytes written and
 * when the connection closed relative to the answer.
 */
function endlessBody(url: string, next: (write: (b: Buffer) => boolean, go: () => void, drained: (fn: () => void) => void) => void): Promise<{ status: number; text: string; sent: number; closedAfterMs: number; closedAfterStartMs: number }> {
  const { hostname, port } = new URL(url);
  const startedAt = performance.now();
  return new Promise((resolve, reject) => {
    let sent = 0;
    let received = '';
    let answeredAt: number | undefined;
    let stopped = false;
    // allowHalfOpen: a hostile sender goes on writing after the server's FIN.
    const socket = connect({ host: hostname, port: Number(port), allowHalfOpen: true });
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => {
      received += d;
      if (answeredAt === undefined && /\r\n\r\n[\s\S]*\}$/.test(received)) answeredAt = performance.now();
    });
    const finish = () => {
      if (stopped) return;
      stopped = true;
      socket.destroy();
      if (answeredAt === undefined) return reject(new Error(`the connection closed before the answer was read: ${received.slice(0, 200)}`));
      const [head, body] = received.split('\r\n\r\n', 2) as [string, string];
      const now = performance.now();
      resolve({ status: Number(head.split(' ')[1]), text: body, sent, closedAfterMs: now - answeredAt, closedAfterStartMs: now - startedAt });
    };
    socket.on('error', finish);
    socket.on('close', finish);
    const write = (b: Buffer) => {
      if (stopped || socket.destroyed) return false;
      sent += b.length;
      socket.write(`${b.length.toString(16)}\r\n`);
      socket.write(b);
      return socket.write('\r\n');
    };
    const go = () => {
      if (!stopped && !socket.destroyed) next(write, go, (fn) => socket.once('drain', fn));
    };
    socket.write(`POST /tokenize HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\nSVC-API-KEY: not-a-key-of-anyone-000000\r\nTransfer-Encoding: chunked\r\n\r\n`);
    go();
  });
}

t.test('an endless trickled body is cut off at the time bound', async (t) => {
  const cfg = baseConfig();
  cfg.server = { ...(cfg.server as object), lingering_time_ms: 1000 };
  const s = await startTestService(t, { config: cfg });
  const piece = Buffer.alloc(1024, 0x61);
  const r = await endlessBody(s.url, (write, go) => {
    write(piece);
    setTimeout(go, 10);
  });
  t.equal(r.status, 401, 'the client read its 401');
  t.equal(JSON.parse(r.text).code, 'invalid_api_key');
  // The bound is 1 s from the answer, which the server sent after this client started: measured
  // from the start it is a lower bound a loaded machine cannot break (issue 30: measured from when
  // this client read the answer, a late read made the time look short).
  t.ok(r.closedAfterStartMs >= 990, `not cut off before the time bound (${Math.round(r.closedAfterStartMs)} ms after the request began)`);
  t.ok(r.closedAfterMs < 15_000, `cut off at the time bound (${Math.round(r.closedAfterMs)} ms)`);
});

t.test('an endless body sent as fast as possible is cut off at the byte bound, and memory stays flat', async (t) => {
  const BOUND = 256 * 1024 * 1024;
  const cfg = baseConfig();
  cfg.server = { ...(cfg.server as object), lingering_time_ms: 60_000, lingering_max_bytes: BOUND };
  const s = await startTestService(t, { config: cfg });
  const piece = Buffer.alloc(256 * 1024, 0x61);
  global.gc?.();
  const before = process.memoryUsage();
  let peak = 0;
  const sample = setInterval(() => {
    const m = process.memoryUsage();
    peak = Math.max(peak, m.arrayBuffers + m.heapUsed - before.arrayBuffers - before.heapUsed);
  }, 20);
  const r = await endlessBody(s.url, (write, go, drained) => {
    if (write(piece)) setImmediate(go);
    else drained(go);
  });
  clearInterval(sample);
  t.equal(r.status, 401, 'the client read its 401');
  t.ok(r.sent >= BOUND, `the server read ${BOUND} bytes before cutting off (client wrote ${r.sent})`);
  t.ok(r.sent < BOUND + 64 * 1024 * 1024, `and cut off near the bound (client wrote ${r.sent})`);
  // The discarded bytes are not kept: far less growth than the 256 MB that went through. The
  // client shares this process, and garbage not yet collected counts too (67 MB seen on Node 24
  // with three files at once): half the volume is the bound that still tells kept from dropped.
  t.ok(peak < 128 * 1024 * 1024, `heap + buffers grew by at most ${Math.round(peak / 1024 / 1024)} MB`);
});

t.test('a small unread body is drained and the keep-alive connection stays open', async (t) => {
  const s = await startTestService(t);
  const client = new Client(s.url, { pipelining: 1 });
  t.teardown(() => client.close());
  const small = JSON.stringify({ a: 'x'.repeat(32 * 1024) });
  const first = await client.request({ method: 'POST', path: '/tokenize', headers: { 'content-type': 'application/json', 'svc-api-key': 'not-a-key-of-anyone-000000' }, body: small });
  t.equal(first.statusCode, 401);
  t.not(first.headers.connection, 'close', 'no Connection: close');
  await first.body.text();
  let connects = 0;
  client.on('connect', () => connects++);
  const second = await client.request({ method: 'GET', path: '/healthz' });
  t.equal(second.statusCode, 200);
  await second.body.text();
  t.equal(connects, 0, 'the second request used the same connection');
});
