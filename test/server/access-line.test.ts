/**
 * src/log.ts writeAccessLine: the access line formatted by hand (the hot path) is the line pino
 * writes for the same fields through a child bound to the request id, field for field and in the
 * same order; card numbers in the ids are scrubbed. And the asynchronous destination, which
 * buffers under load, still writes a quiet service's single line without more logging after it.
 */
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { asyncDestination, createLogger, writeAccessLine, CARD_CENSOR } from '../../src/log.js';
import { randomCard } from '../helpers/secrets.js';
import { waitFor } from '../helpers/wait.js';

function capture(level = 'info'): { log: ReturnType<typeof createLogger>; lines: () => string[] } {
  const chunks: string[] = [];
  const log = createLogger(level, { write: (s: string) => void chunks.push(s) } as never);
  return { log, lines: () => chunks.join('').split('\n').filter(Boolean) };
}

/** The line without its time (the two were written at different instants). */
const untimed = (line: string) => line.replace(/"time":"[^"]+"/, '"time":"T"');

t.test('the same line as pino through a child logger, in the same key order', async (t) => {
  const cases = [
    { method: 'POST', route: '/proxy/*', status: 200, ms: 1.25, tenant: '6f1c1a9e-0000-4000-8000-00000000be01' },
    { method: 'GET', route: '/tokens/:id', status: 404, ms: 0.5, tenant: 'tenant-a', app: 'app "quoted" \\ id' },
    { method: 'GET', route: '/proxy/* (upgrade)', status: 101 },
    { method: undefined, route: 'unmatched', status: 400, ms: 0 },
  ];
  for (const f of cases) {
    const ours = capture();
    const theirs = capture();
    writeAccessLine(ours.log, 'req-1', f);
    theirs.log.child({ req_id: 'req-1' }).info({ ...f, method: f.method ?? '' }, 'request');
    t.equal(untimed(ours.lines()[0]!), untimed(theirs.lines()[0]!), `${f.route} ${f.status}`);
    t.match(JSON.parse(ours.lines()[0]!), { level: 30, service: 'tokenproxy', req_id: 'req-1', msg: 'request' });
  }
});

t.test('card numbers in the ids are scrubbed like every logged string', async (t) => {
  const card = randomCard();
  const { log, lines } = capture();
  writeAccessLine(log, 'req-2', { method: 'POST', route: '/proxy/*', status: 200, tenant: `t-${card}`, app: card });
  t.notOk(lines()[0]!.includes(card));
  t.match(JSON.parse(lines()[0]!), { tenant: `t-${CARD_CENSOR}`, app: CARD_CENSOR });
});

t.test('a lone line reaches the file without further logging or an exit', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tp-access-line-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'out.log');
  const dest = asyncDestination(path);
  t.teardown(() => (dest as unknown as { end(): void }).end());
  const log = createLogger('info', dest);
  writeAccessLine(log, 'req-lone', { method: 'GET', route: '/healthz', status: 200 });
  const read = () => {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return '';
    }
  };
  await waitFor(() => read().includes('"req_id":"req-lone"'), { timeoutMs: 10_000, what: 'the lone access line in the file' });
  t.equal(read().split('\n').filter(Boolean).length, 1, 'exactly the one line');
});
