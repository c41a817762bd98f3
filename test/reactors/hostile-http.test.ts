/**
 * Hostile reactor code over HTTP. Each bomb runs while another client keeps calling /tokenize:
 * every /tokenize call must still answer 200, the bomb must get an error response, the main
 * process must never exit (it is this test process), and a normal reactor must work afterwards.
 */
import t from 'tap';
import { baseConfig, startTestService, type TestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

const wrap = (body: string) => `module.exports = async function (req) { ${body} };`;
/**
 * Each bomb and what it must end in, by the README's error table (a timeout is 504
 * reactor_timeout, an uncaught error 500 reactor_runtime_error, a result over 5 MB 500
 * reactor_invalid_output). Heap growth ends as 500 reactor_out_of_memory or, through isolated-vm's
 * catastrophic path, 503 reactor_unavailable: which one is isolated-vm's choice, not the bomb's
 * (see test/reactors/hostile.test.ts). Those bombs get the longest timeout (30 s) and a 16 MB heap,
 * so memory, not the clock, stops them (with 1 s and 64 MB they all ended as 504 timeouts here,
 * and a faster machine would have ended some as memory: the code depended on the machine).
 */
const TIMEOUT = { reactor_timeout: 504 };
const THROWN = { reactor_runtime_error: 500 };
const HEAP = { reactor_out_of_memory: 500, reactor_unavailable: 503 };
/**
 * `new Array(1e8).fill(…)` on isolated-vm 6.2 (Node 24) takes 18.4 s to reach a 16 MB limit in a
 * bare isolate (measured without tokenproxy), and past the 30 s maximum under load: stopped by the
 * timeout is a documented end for it too (see test/reactors/hostile.test.ts).
 */
const HEAP_OR_SLOW = { ...HEAP, ...TIMEOUT };
const BOMBS: Record<string, [string, Record<string, number>]> = {
  busy_loop: [wrap('while (true) {}'), TIMEOUT],
  async_loop: [wrap('for (;;) { await Promise.resolve(); }'), TIMEOUT],
  object_growth: [wrap('const o = {}; for (let i = 0; ; i++) o["k" + i] = i;'), HEAP],
  map_growth: [wrap('const m = new Map(); for (let i = 0; ; i++) m.set(i, { i });'), HEAP],
  huge_array: [wrap('const a = new Array(1e8); a.fill(1); return { raw: a.length };'), HEAP_OR_SLOW],
  string_doubling: [wrap('let s = "x"; for (;;) s = s + s;'), THROWN],
  array_buffer_1gb: [wrap('const b = new ArrayBuffer(1024 * 1024 * 1024); return { raw: b.byteLength };'), THROWN],
  reach_process: [wrap('return { raw: typeof process === "undefined" ? "none" : process.pid };'), {}],
  reach_require: [wrap('return { raw: require("fs").readdirSync("/") };'), THROWN],
  constructor_escape: [wrap('return { raw: globalThis.constructor.constructor("return process")().pid };'), THROWN],
  function_escape: [wrap('return { raw: Function("return this")().process.mainModule.require("child_process").execSync("id").toString() };'), THROWN],
  output_over_5mb: [wrap('return { raw: "x".repeat(6 * 1024 * 1024) };'), { reactor_invalid_output: 500 }],
};
const NORMAL = wrap('return { raw: { ok: req.args } };');

function config(): Record<string, unknown> {
  const cfg = baseConfig() as { tenants: Array<Record<string, unknown>>; server?: unknown };
  cfg.tenants[0]!.reactors = [
    ...Object.entries(BOMBS).map(([id, [code, codes]]) =>
      // HEAP_OR_SLOW, for which a timeout is itself a documented end, gets 10 s (it ran to 30 s
      // under load on isolated-vm 6.2, a core busy all the while).
      codes === HEAP ? { id, name: id, code, timeout_ms: 30_000, memory_limit_mb: 16 }
        : codes === HEAP_OR_SLOW ? { id, name: id, code, timeout_ms: 10_000, memory_limit_mb: 16 }
          : { id, name: id, code, timeout_ms: 1000, memory_limit_mb: 64 },
    ),
    { id: 'normal', name: 'normal', code: NORMAL },
  ];
  return cfg;
}

async function whileTokenizing(s: TestService, work: () => Promise<void>): Promise<{ calls: number; failures: number }> {
  let done = false;
  let calls = 0;
  let failures = 0;
  const loop = (async () => {
    while (!done) {
      const r = await s.call('POST', '/tokenize', { body: { v: 'keep-serving' } }).catch(() => ({ status: 0 }));
      calls++;
      if (r.status !== 200) failures++;
      await new Promise((res) => setTimeout(res, 10));
    }
  })();
  try {
    await work();
  } finally {
    done = true;
    await loop;
  }
  return { calls, failures };
}

/** A normal reactor call answers 200 with its result (after a host restart, once the new host serves). */
async function normalServes(s: TestService): Promise<boolean> {
  const r = await s.call('POST', '/reactors/normal/react', { body: { args: 1 } });
  return r.status === 200 && r.body?.raw?.ok === 1;
}

/**
 * The service's own word that it is the same running service (issue 30: the check compared this
 * test's `process.pid` with itself): from its /metrics, the process start time and how many
 * requests it has answered. The service runs in this process, so a crash would end the test; what
 * can go wrong unseen is the service no longer answering, or a fresh instance answering: the start
 * time would change or the request count start over.
 */
async function servingProcess(s: TestService): Promise<{ start: string; requests: number }> {
  const r = await s.call('GET', '/metrics', { key: null });
  const start = /^process_start_time_seconds (\S+)$/m.exec(r.text)?.[1];
  const counts = [...r.text.matchAll(/^tokenproxy_http_request_duration_seconds_count(?:\{[^}]*\})? (\d+)$/gm)].map((m) => Number(m[1]));
  if (r.status !== 200 || start === undefined) throw new Error(`GET /metrics: ${r.status}, no process_start_time_seconds`);
  return { start, requests: counts.reduce((a, b) => a + b, 0) };
}

t.test('hostile reactors never take the service down', async (t) => {
  const s = await startTestService(t, { config: config() });
  let serving = await servingProcess(s);
  for (const id of Object.keys(BOMBS)) {
    await t.test(id, async (t) => {
      let status = 0;
      let code = '';
      let text = '';
      const served = await whileTokenizing(s, async () => {
        // A call in flight when the host dies gets 503 reactor_unavailable (documented). A host
        // can still be going down from the previous bomb (seen once in CI: a host died ~1 s after
        // array_buffer_1gb had answered), so a harmless probe retries that 503 once the new host
        // serves (waited for, not slept: issue 30), at most 3 times; a 503 left over fails below.
        for (let attempt = 1; ; attempt++) {
          const r = await s.call('POST', `/reactors/${id}/react`, { body: { args: {} } });
          status = r.status;
          code = r.body?.code;
          text = r.text;
          if (!(id.startsWith('reach_') && code === 'reactor_unavailable') || attempt === 3) break;
          t.comment(`attempt ${attempt}: 503 reactor_unavailable (a host going down); again once a new host serves`);
          await waitFor(() => normalServes(s), { timeoutMs: 30_000, intervalMs: 100, what: 'a normal reactor call served by a new host' });
        }
      });
      if (id === 'reach_process') t.same(JSON.parse(text), { raw: 'none', tokens: null }, 'process does not exist in the sandbox');
      else {
        const codes = BOMBS[id]![1];
        t.ok(code in codes, `the bomb got ${status} ${code}, one of ${Object.keys(codes).join(', ')}`);
        t.equal(status, codes[code], `the README's status for ${code}`);
      }
      t.notMatch(text, /uid=\d+/, 'no command ran');
      t.ok(served.calls > 0, `/tokenize was called ${served.calls} times meanwhile`);
      t.equal(served.failures, 0, '/tokenize kept answering 200');
      t.equal((await s.call('GET', '/healthz', { key: null })).status, 200, 'the service still answers');
      const now = await servingProcess(s);
      t.equal(now.start, serving.start, 'the same service process (its start time, as /metrics reports it)');
      t.ok(now.requests > serving.requests, `the same instance, still counting (${serving.requests} -> ${now.requests} requests answered)`);
      serving = now;
      // The host may be restarting after a catastrophic error: a normal call must succeed soon
      // (waitFor fails the test, naming what it waited for, if it never does).
      t.ok(await waitFor(() => normalServes(s), { timeoutMs: 30_000, intervalMs: 100, what: 'a normal reactor call served after the bomb' }), 'a normal reactor works afterwards');
    });
  }
});
