/**
 * Claims of the README's "Reactors" section that no other test pinned down: the console capture
 * caps (100 lines per call, 2,048 characters per line), a queued call waits at most its
 * timeout_ms and then gets reactor_busy, globals do not outlive a call on a warm isolate (issue 23), and the output limit
 * counts UTF-8 bytes.
 */
import t from 'tap';
import { MAX_LOG_LINE_CHARS, MAX_LOG_LINES, MAX_OUTPUT_BYTES } from '../../src/reactors/protocol.js';
import { ReactorRuntime } from '../../src/reactors/runtime.js';
import { captureLog, fn, reactor, serviceError } from './helpers.js';
import { testReactorHost } from '../helpers/cli-entry.js';

const cap = captureLog();
const runtime = await ReactorRuntime.start({ log: cap.log, ...testReactorHost() });
t.teardown(() => runtime.close());

t.before(() =>
  runtime.register([
    reactor('r/console', fn(`for (let i = 0; i < req.args.lines; i++) console.log(i === 0 ? 'y'.repeat(req.args.chars) : 'line ' + i); return null;`)),
    // Blocks its isolate for args.hold ms without burning CPU.
    reactor('r/queue', fn(`Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, req.args.hold); return { raw: req.args.name };`), {
      timeout_ms: 1500,
      max_concurrency: 1,
      queue_limit: 10,
    }),
    reactor('r/global', fn(`globalThis.seen = (globalThis.seen || 0) + 1; return { seen: globalThis.seen };`), { max_concurrency: 1 }),
    reactor('r/wide', fn(`return 'é'.repeat(req.args.n);`), { memory_limit_mb: 64 }),
  ]),
);

t.test('console: at most 100 lines per call, each cut to 2,048 characters', async (t) => {
  t.equal(MAX_LOG_LINES, 100);
  t.equal(MAX_LOG_LINE_CHARS, 2048);
  await runtime.invoke('r/console', { args: { lines: 150, chars: 5000 } });
  const lines = cap.entries().filter((e) => e.reactor === 'r/console');
  t.equal(lines.length, 101, '100 lines and one note');
  t.equal(lines[0]?.msg, 'y'.repeat(2048) + '…');
  t.equal(lines[99]?.msg, 'line 99');
  t.match(lines[100], { console: 'warn', msg: '[50 more console lines dropped]' });
});

t.test('a queued call waits at most its timeout_ms, then gets reactor_busy', async (t) => {
  // Timeout 1.5 s. a holds 0.5 s; b waits for a (0.5 s, 1 s under its timeout) and then holds 1.1 s
  // (0.4 s under its own timeout, which starts again when it runs); c waits for both, at least
  // 1.6 s: reactor_busy. Load can only make c's wait longer; the margins are for a and b (issue 30:
  // with 400 ms holds and a 600 ms timeout, b had 200 ms to spare).
  const started = Date.now();
  const [a, b, c] = await Promise.allSettled(
    ([['a', 500], ['b', 1100], ['c', 100]] as const).map(([name, hold]) => runtime.invoke('r/queue', { args: { hold, name } })),
  );
  t.match(a, { status: 'fulfilled', value: { raw: 'a' } }, 'the running call');
  t.match(b, { status: 'fulfilled', value: { raw: 'b' } }, 'queued, served after 500 ms');
  t.equal(c?.status, 'rejected', 'queued behind 1.6 s of work with a 1.5 s timeout');
  if (c?.status === 'rejected') {
    t.match(c.reason, { code: 'reactor_busy', status: 503 });
  }
  t.ok(Date.now() - started >= 1550, 'b ran to its end');
});

t.test('globals set by one call are gone by the next on the same warm isolate', async (t) => {
  const first = (await runtime.invoke('r/global', { args: null })) as { seen: number };
  const second = (await runtime.invoke('r/global', { args: null })) as { seen: number };
  t.equal(first.seen, 1);
  t.equal(second.seen, 1, 'the second call starts from the code alone');
});

t.test('the output limit counts UTF-8 bytes of the JSON', async (t) => {
  // 'é' is one character and two bytes; the JSON adds two quotes.
  const fits = (await runtime.invoke('r/wide', { args: { n: MAX_OUTPUT_BYTES / 2 - 1 } })) as string;
  t.equal(Buffer.byteLength(JSON.stringify(fits)), MAX_OUTPUT_BYTES);
  const err = await serviceError(runtime.invoke('r/wide', { args: { n: MAX_OUTPUT_BYTES / 2 } }));
  t.equal(err.code, 'reactor_invalid_output', 'about 2.5 M characters, but 5 MB + 2 bytes');
});
