// Smoke test of a fresh install, as a new user runs it: `npm start` on the embedded defaults, then
// the first steps of the README and docs/getting-started.md (tokenize, read the card back, a
// reactor, the inbound and outbound proxy walkthroughs with scripts/echo-upstream.mjs on :9090).
// test/docs/examples.test.ts runs the documents' own commands; this script needs only Node. Used by .ci/run on each Node version; run
// it from the repository root after `npm ci`: `node scripts/smoke.mjs`. Exits 0 when every answer
// is as the README shows, 1 with the first difference otherwise. Plain Node, no dependencies.
import { spawn } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const KEY = 'key_dev_private_change_me_0000000000';
const PROXY_KEY = 'proxy_dev_change_me_000000000000000';
const CARD = '4242424242424242';

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const children = [];
function start(cmd, args, env, cwd) {
  const child = spawn(cmd, args, { env: { ...process.env, ...env }, cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  child.stdout.on('data', (c) => (out += c));
  child.stderr.on('data', (c) => (out += c));
  children.push(child);
  return { child, output: () => out };
}

function stopAll() {
  for (const c of children) {
    try {
      process.kill(-c.pid, 'SIGTERM');
    } catch {
      // already gone
    }
  }
}

function check(cond, what, detail) {
  if (!cond) throw new Error(`${what}${detail === undefined ? '' : `: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`}`);
  console.log(`ok - ${what}`);
}

async function waitFor(url, ms, service) {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      const r = await fetch(url);
      if (r.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${url} did not answer within ${ms} ms; output:\n${service.output().slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

// The service runs in a copy of the repository so its ./data/ (store, dev master key) is new.
const work = mkdtempSync(join(tmpdir(), 'tokenproxy-smoke-'));
let service;
try {
  cpSync(process.cwd(), work, { recursive: true, filter: (src) => !/\/(node_modules|data|dist|\.tap|\.test-build|coverage|\.git)$/.test(src) });
  symlinkSync(join(process.cwd(), 'node_modules'), join(work, 'node_modules'));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  service = start('npm', ['start'], { PORT: String(port) }, work);
  const upstream = start(process.execPath, ['scripts/echo-upstream.mjs'], { PORT: '9090' }, work);
  await waitFor(`${base}/healthz`, 120_000, service);
  await waitFor(`${base}/readyz`, 10_000, service);
  console.log(`node ${process.version}: tokenproxy answers on ${base}`);

  const headers = { 'SVC-API-KEY': KEY, 'Content-Type': 'application/json' };
  const body = {
    first_name: 'John',
    last_name: 'Doe',
    primary_card: { type: 'card', data: { number: CARD, expiration_month: 12, expiration_year: 2030, cvc: '123' } },
    sensitive_tags: ['preferred', { type: 'token', data: 'vip', metadata: { tier: 'gold' } }],
  };
  let r = await fetch(`${base}/tokenize`, { method: 'POST', headers, body: JSON.stringify(body) });
  let j = await r.json();
  check(r.status === 200, 'POST /tokenize answers 200', j);
  check(/^[0-9a-f-]{36}$/.test(j.first_name), 'a plain string becomes a token id', j.first_name);
  check(j.primary_card?.data?.number === 'XXXXXXXXXXXX4242', 'the card comes back masked', j.primary_card?.data);
  check(!JSON.stringify(j).includes(CARD) && !JSON.stringify(j).includes('"123"'), 'no card number or cvc in the answer');

  r = await fetch(`${base}/tokens/${j.primary_card.id}`, { headers: { 'SVC-API-KEY': KEY } });
  const token = await r.json();
  check(r.status === 200 && token.data?.number === CARD, 'GET /tokens/{id} reveals the card to the development key', r.status);
  check(token.data?.cvc === undefined, 'the cvc is never returned');

  // docs/api.md "Idempotent retries": the same call twice, the second a replay.
  const idem = { ...headers, 'SVC-IDEMPOTENCY-KEY': `order-${Date.now()}` };
  const first = await fetch(`${base}/tokenize`, { method: 'POST', headers: idem, body: '{"email":"a@example.com"}' });
  const again = await fetch(`${base}/tokenize`, { method: 'POST', headers: idem, body: '{"email":"a@example.com"}' });
  const [firstText, againText] = [await first.text(), await again.text()];
  check(first.status === 200 && again.status === 200 && firstText === againText && again.headers.get('svc-idempotent-replayed') === 'true',
    'a retry with the same SVC-IDEMPOTENCY-KEY replays the first answer', { first: first.status, again: again.status });

  r = await fetch(`${base}/reactors/card-brand/react`, {
    method: 'POST', headers, body: JSON.stringify({ args: { card: { number: CARD, expiration_month: 12, expiration_year: 2030 } } }),
  });
  j = await r.json();
  check(r.status === 200 && j.raw?.brand === 'visa', 'the card-brand reactor runs in isolated-vm', { status: r.status, raw: j.raw });

  await waitFor('http://127.0.0.1:9090/', 10_000, upstream);
  r = await fetch(`${base}/proxy/charges?order=42`, {
    method: 'POST',
    headers: { ...headers, 'SVC-PROXY-KEY': PROXY_KEY },
    body: JSON.stringify({ card: { number: CARD, expiration_month: 12, expiration_year: 2030, cvc: '123' }, customer: { name: 'Ada', ssn: '123-45-6789' }, amount: 1299 }),
  });
  j = await r.json();
  check(r.status === 200 && r.headers.get('svc-proxy-destination-status') === '200', 'the inbound proxy forwards to the upstream', r.status);
  check(/^[0-9a-f-]{36}$/.test(j.received?.card) && /^[0-9a-f-]{36}$/.test(j.received?.customer?.ssn), 'the upstream received token ids, not the card or the ssn', j.received);

  // The outbound proxy walkthrough: charge the card token at the "processor" (the upstream under
  // /processor/) with an expression; the upstream prints the card, the caller never sees it.
  const cardToken = r.headers.get('x-card-token');
  check(/^[0-9a-f-]{36}$/.test(cardToken ?? ''), 'the inbound proxy answers with the card token id in x-card-token', cardToken);
  const printedBefore = upstream.output().length;
  r = await fetch(`${base}/proxy/charges`, {
    method: 'POST',
    headers: { ...headers, 'SVC-PROXY-URL': 'http://127.0.0.1:9090/processor' },
    body: JSON.stringify({
      number: `{{ token: ${cardToken} | json: '$.data.number' }}`,
      exp: `{{ ${cardToken} | json: '$.expiration_month' }}/{{ ${cardToken} | json: '$.expiration_year' }}`,
      amount: 1299,
    }),
  });
  const charged = await r.text();
  check(r.status === 200 && r.headers.get('svc-proxy-destination-status') === '200', 'the outbound proxy forwards to the allowed upstream', { status: r.status, body: charged });
  check(JSON.parse(charged).status === 'succeeded' && !charged.includes(CARD), "the caller gets the processor's answer, without the card", charged);
  const printed = await (async () => {
    for (let i = 0; i < 40; i++) {
      const out = upstream.output().slice(printedBefore);
      if (out.includes('"amount":1299')) return out;
      await new Promise((res) => setTimeout(res, 100));
    }
    return upstream.output().slice(printedBefore);
  })();
  check(printed.includes(`{"number":"${CARD}","exp":"12/2030","amount":1299}`), 'the upstream received (and printed) the card number', printed.slice(0, 300));
  r = await fetch(`${base}/proxy/charges`, { method: 'POST', headers: { ...headers, 'SVC-PROXY-URL': 'http://169.254.169.254/latest' }, body: '{}' });
  j = await r.json();
  check(r.status === 403 && j.proxy_error?.code === 'destination_not_allowed', 'a destination off the allow-list is refused', j);
  console.log(`smoke: all checks passed on node ${process.version}`);
} catch (err) {
  console.error(`smoke FAILED on node ${process.version}: ${err.message}`);
  if (service) console.error(service.output().slice(-3000));
  process.exitCode = 1;
} finally {
  stopAll();
  rmSync(work, { recursive: true, force: true });
}
