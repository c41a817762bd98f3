/**
 * Bounded work for the leak guard's part-by-part scan of a multipart body. One `multipart/mixed`
 * body of 490,000 one-byte parts (4.9 MB, within the body limit) sent to a `leak_guard: block`
 * proxy held the event loop for about 3 s (the worst /healthz latency meanwhile 2.3-3.2 s; the
 * same bytes as text/plain 25-80 ms): each part was scanned as a body of its own, with no turn for
 * other requests between parts. Now the guard reads at most 1,000 parts (every level of nesting
 * counted together); more is `413 body_too_large` under `block` (nothing forwarded) and a warning
 * under `log`; and the scan lets the event loop go every few milliseconds.
 *
 * The stall is measured as test/server/event-loop.test.ts measures it (the service in this
 * process, `monitorEventLoopDelay` and a /healthz poller; a body over the bound is sent twice more
 * and its best run counts; the bounds are that test's generous ones). The figures are printed.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Client } from 'undici';
import t, { type Test } from 'tap';
import { startTestService, type TestService } from '../helpers/service.js';
import { rawRequest, startUpstream, type Upstream } from '../helpers/upstream.js';
import { assertProxyError, configWithProxies } from '../helpers/proxy.js';
import { cardPattern, grouped, randomCard } from '../helpers/secrets.js';
import { waitFor } from '../helpers/wait.js';

t.setTimeout(600_000);

const KEY = { block: 'proxy_key_mpart_blk_0123456789', log: 'proxy_key_mpart_log_0123456789' };
const MAX_PARTS = 1_000;
/** event-loop.test.ts's bounds: the loop delay, and 4× that for a /healthz answer. */
const BOUND_MS = 500;
const BOUNDARY = 'b';
const MIXED = `multipart/mixed; boundary=${BOUNDARY}`;

/** A multipart body of `parts` (each `headers` then its content). */
function multipart(parts: Array<{ headers?: string; content: string | Buffer }>, boundary = BOUNDARY): Buffer {
  const out: Buffer[] = [];
  for (const p of parts) out.push(Buffer.from(`--${boundary}\r\n${p.headers ?? ''}\r\n`), Buffer.from(p.content), Buffer.from('\r\n'));
  out.push(Buffer.from(`--${boundary}--\r\n`));
  return Buffer.concat(out);
}

const plain = (n: number, content = 'x') => Array.from({ length: n }, () => ({ content }));
const base64Part = (text: string) => ({ headers: 'Content-Transfer-Encoding: base64\r\n', content: Buffer.from(text).toString('base64') });

async function start(t: Test, record = true): Promise<{ s: TestService; up: Upstream }> {
  const up = await startUpstream(t, { record });
  const s = await startTestService(t, {
    config: configWithProxies([
      { id: 'block', name: 'block', key: KEY.block, require_auth: false, destination_url: `${up.url}/block/`, leak_guard: 'block' },
      // A code transform that changes nothing: the body is read, and `log` scans it as `block` does.
      { id: 'log', name: 'log', key: KEY.log, require_auth: false, destination_url: `${up.url}/log/`, leak_guard: 'log',
        request_transforms: [{ type: 'code', code: 'module.exports = async function (req) { return { body: req.args.body, headers: req.args.headers }; };' }] },
    ]),
  });
  return { s, up };
}

function send(s: TestService, key: string, body: Buffer, type = MIXED) {
  return rawRequest(s.url, { method: 'POST', path: '/proxy/upload', headers: { 'svc-proxy-key': key, 'content-type': type }, body });
}

function leakLines(s: TestService): Array<Record<string, any>> {
  return s.logs().split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((l) => typeof l.msg === 'string' && l.msg.startsWith('leak guard'));
}

t.test(`the part bound: ${MAX_PARTS} parts are read one by one, one more is refused`, async (t) => {
  const { s, up } = await start(t);
  const card = randomCard('4');
  // The card only a part-by-part read finds: base64 in the last part the guard reads.
  const atBound = multipart([...plain(MAX_PARTS - 1), base64Part(`pan ${grouped(card)}`)]);
  assertProxyError(t, await send(s, KEY.block, atBound), 422, 'leak_detected', `a card in part ${MAX_PARTS}:`);
  const clean = await send(s, KEY.block, multipart(plain(MAX_PARTS)));
  t.equal(clean.status, 200, `${MAX_PARTS} clean parts are forwarded: ${clean.text.slice(0, 200)}`);
  t.equal(up.received.length, 1);

  const over = await send(s, KEY.block, multipart(plain(MAX_PARTS + 1)));
  assertProxyError(t, over, 413, 'body_too_large', `${MAX_PARTS + 1} parts:`);
  t.match(over.json.proxy_error.detail, new RegExp(`more than ${MAX_PARTS.toLocaleString('en-US')} parts`), 'the detail names the bound');
  // Nesting does not multiply the bound: two parts of 600 parts each are 1,202 parts.
  const inner = multipart(plain(600), 'inner');
  const nested = multipart([{ headers: 'Content-Type: multipart/mixed; boundary=inner\r\n', content: inner }, { headers: 'Content-Type: multipart/mixed; boundary=inner\r\n', content: inner }]);
  assertProxyError(t, await send(s, KEY.block, nested), 413, 'body_too_large', 'nested parts counted together:');
  t.equal(up.received.length, 1, 'nothing more forwarded');

  // `log` forwards such a body and says so (the whole body is still scanned as bytes).
  const logged = await send(s, KEY.log, multipart([...plain(MAX_PARTS + 1), { content: `pan ${card}` }]));
  t.equal(logged.status, 200, `log forwards: ${logged.text.slice(0, 200)}`);
  t.equal(up.received.length, 2);
  const warned = await waitFor(() => {
    const lines = leakLines(s).filter((l) => l.proxy === 'log');
    return lines.some((l) => l.too_many_parts === true) && lines.some((l) => l.findings === 1) ? lines : undefined;
  }, { timeoutMs: 10_000, what: 'the log warnings' });
  t.ok(warned.every((l) => l.action === 'forwarded'), 'log: forwarded, with a warning for the parts and one for the card');
  t.notOk(cardPattern(card).test(s.logs()), 'no form of the card in the logs');
});

t.test('regression: a multipart body of 490,000 one-byte parts held the event loop for seconds', async (t) => {
  const { s, up } = await start(t, false);
  const client = new Client(s.url, { headersTimeout: 120_000, bodyTimeout: 120_000 });
  const poller = new Client(s.url);
  t.teardown(async () => {
    await client.close();
    await poller.close();
  });
  // Built before anything is measured (the client's own work must not count).
  const parts490k = multipart(plain(490_000));
  t.equal(parts490k.length, 4_900_007, '4.9 MB, within the 5 MB body limit');
  // Single digits one space apart: every window of 13-19 of them is checked, none is a card (a
  // run of 13-19 fives fails Luhn), so the scan does its most work and the body is forwarded.
  const digits = '5 '.repeat(2_400);
  const bodies: Array<{ name: string; body: Buffer; type: string; status: number; code?: string }> = [
    { name: '490,000 one-byte parts', body: parts490k, type: MIXED, status: 413, code: 'body_too_large' },
    { name: 'the same bytes as text/plain', body: parts490k, type: 'text/plain', status: 200 },
    { name: `${MAX_PARTS} parts of short digit groups`, body: multipart(plain(MAX_PARTS, digits)), type: MIXED, status: 200 },
    { name: `${MAX_PARTS} base64 parts of short digit groups`, body: multipart(Array.from({ length: MAX_PARTS }, () => base64Part(digits.slice(0, 3_600)))), type: MIXED, status: 200 },
    { name: 'one quoted-printable part of short digit groups', body: multipart([{ headers: 'Content-Transfer-Encoding: quoted-printable\r\n', content: '1=20'.repeat(1_200_000) }]), type: MIXED, status: 200 },
  ];
  for (const b of bodies) t.ok(b.body.length <= 5 * 1024 * 1024, `${b.name}: ${b.body.length} bytes, within the limit`);

  // Warm up outside the measurement; then the noise floor over an idle second.
  await (await client.request({ method: 'POST', path: '/proxy/w', headers: { 'svc-proxy-key': KEY.block, 'content-type': MIXED }, body: multipart(plain(10)) })).body.arrayBuffer();
  const idle = monitorEventLoopDelay({ resolution: 5 });
  idle.enable();
  await new Promise((res) => setTimeout(res, 1000));
  idle.disable();

  let polling = true;
  let worstPoll = 0;
  const poll = (async () => {
    while (polling) {
      const started = performance.now();
      await (await poller.request({ method: 'GET', path: '/healthz' })).body.text();
      worstPoll = Math.max(worstPoll, performance.now() - started);
      await new Promise((res) => setTimeout(res, 5));
    }
  })();

  async function measure(b: (typeof bodies)[number]): Promise<{ ms: number; pollMs: number; status: number; text: string }> {
    worstPoll = 0;
    const h = monitorEventLoopDelay({ resolution: 5 });
    h.enable();
    const r = await client.request({ method: 'POST', path: '/proxy/upload', headers: { 'svc-proxy-key': KEY.block, 'content-type': b.type }, body: b.body });
    const text = await r.body.text();
    h.disable();
    return { ms: h.max / 1e6, pollMs: worstPoll, status: r.statusCode, text };
  }

  const worst: Array<{ name: string; ms: number; pollMs: number; tries: number; status: number }> = [];
  for (const b of bodies) {
    const first = await measure(b);
    let { ms, pollMs } = first;
    let tries = 1;
    // A loaded machine can stall any timer once; a body that holds the loop holds it every time.
    while ((ms >= BOUND_MS || pollMs >= BOUND_MS * 4) && tries < 3) {
      const again = await measure(b);
      ms = Math.min(ms, again.ms);
      pollMs = Math.min(pollMs, again.pollMs);
      tries++;
    }
    worst.push({ name: b.name, ms, pollMs, tries, status: first.status });
    t.equal(first.status, b.status, `${b.name}: ${first.status} ${first.text.slice(0, 200)}`);
    if (b.code) t.equal(JSON.parse(first.text).proxy_error?.code, b.code, `${b.name}: ${b.code}`);
  }
  polling = false;
  await poll;
  const forwarded = worst.filter((w) => w.status === 200).reduce((n, w) => n + w.tries, 0);
  t.equal(up.received.length, forwarded + 1, 'only the bodies within the bound were forwarded (and the warm-up)');
  for (const w of worst) t.comment(`${w.name}: worst event-loop delay ${w.ms.toFixed(1)} ms, worst /healthz latency ${w.pollMs.toFixed(1)} ms${w.tries > 1 ? ` (best of ${w.tries})` : ''}`);
  t.comment(`idle for a second: event-loop delay ${(idle.max / 1e6).toFixed(1)} ms`);
  const max = Math.max(...worst.map((w) => w.ms));
  const maxPoll = Math.max(...worst.map((w) => w.pollMs));
  t.ok(max < BOUND_MS, `the worst event-loop delay (${max.toFixed(1)} ms) is under ${BOUND_MS} ms`);
  t.ok(maxPoll < BOUND_MS * 4, `the worst /healthz latency (${maxPoll.toFixed(1)} ms) is under ${BOUND_MS * 4} ms`);
});
