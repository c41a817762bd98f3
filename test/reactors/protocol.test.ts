/**
 * The pure parts of the reactor runtime: the IPC message guards (both directions drop anything
 * malformed) and the one mapping from a call failure to a ServiceError.
 */
import t from 'tap';
import { failureToError, PASS_THROUGH_STATUSES } from '../../src/reactors/failures.js';
import { parseFromHost, parseToHost, type CallFailure } from '../../src/reactors/protocol.js';

const def = {
  key: 'k',
  name: 'n',
  code: 'c',
  configuration: { a: 'b' },
  timeout_ms: 1,
  warm_concurrency: 1,
  max_concurrency: 1,
  queue_limit: 0,
  memory_limit_mb: 8,
};

t.test('messages to the host', async (t) => {
  const good = [
    { t: 'init', options: { idleMs: 5 } },
    { t: 'register', id: 1, def },
    { t: 'commit', id: 2, keys: ['a'] },
    { t: 'discard', id: 3, keys: [] },
    { t: 'invoke', id: 4, key: 'k', args: '{}' },
    { t: 'ping', id: 5 },
  ];
  for (const m of good) t.same(parseToHost(m), m, m.t);
  const bad: unknown[] = [
    null,
    [],
    'invoke',
    { t: 'nope', id: 1 },
    { t: 'init', options: {} },
    { t: 'register', id: 1, def: { ...def, configuration: { a: 1 } } },
    { t: 'register', id: 1, def: { ...def, timeout_ms: '1' } },
    { t: 'register', id: '1', def },
    { t: 'commit', id: 2, keys: [1] },
    { t: 'invoke', id: 4, key: 'k', args: {} },
    { t: 'ping' },
  ];
  for (const m of bad) t.equal(parseToHost(m), null, JSON.stringify(m));
});

t.test('messages from the host', async (t) => {
  const good = [
    { t: 'ready' },
    { t: 'ack', id: 1 },
    { t: 'ack', id: 1, error: 'bad code' },
    { t: 'done', id: 2, result: { ok: true, output: '1', logs: [{ level: 'log', msg: 'hi' }] } },
    { t: 'done', id: 2, result: { ok: false, failure: { kind: 'user_error', message: 'm', status: 400 }, logs: [] } },
    { t: 'done', id: 2, result: { ok: false, failure: { kind: 'timeout' }, logs: [] } },
    { t: 'log', level: 'warn', msg: 'x' },
    { t: 'log', level: 'error', msg: 'x', reactor: 'k' },
    { t: 'fatal', reactor: 'k', message: 'Catastrophic out-of-memory error' },
  ];
  for (const m of good) t.same(parseFromHost(m), m, JSON.stringify(m));
  const bad: unknown[] = [
    undefined,
    { t: 'ack' },
    { t: 'ack', id: 1, error: 5 },
    { t: 'done', id: 2, result: { ok: true, logs: [] } },
    { t: 'done', id: 2, result: { ok: true, output: '1', logs: [{ level: 'trace', msg: 'x' }] } },
    { t: 'done', id: 2, result: { ok: false, failure: { kind: 'weird' }, logs: [] } },
    { t: 'done', id: 2, result: { ok: false, failure: { kind: 'user_error' }, logs: [] } },
    { t: 'done', id: 2, result: { ok: true, output: '1', logs: Array.from({ length: 500 }, () => ({ level: 'log', msg: '' })) } },
    { t: 'log', level: 'fatal', msg: 'x' },
    { t: 'log', level: 'info', msg: 'x', reactor: 1 },
    { t: 'fatal', reactor: 'k' },
  ];
  for (const m of bad) t.equal(parseFromHost(m), null, JSON.stringify(m));
});

t.test('failure → ServiceError', async (t) => {
  const ctx = { timeout_ms: 200, memory_limit_mb: 16 };
  const cases: Array<[CallFailure, string, number]> = [
    [{ kind: 'user_error', message: 'boom' }, 'reactor_runtime_error', 500],
    [{ kind: 'user_error', message: 'boom', status: 404 }, 'reactor_runtime_error', 500],
    [{ kind: 'timeout' }, 'reactor_timeout', 504],
    [{ kind: 'out_of_memory' }, 'reactor_out_of_memory', 500],
    [{ kind: 'invalid_output', message: 'x' }, 'reactor_invalid_output', 500],
    [{ kind: 'output_too_large' }, 'reactor_invalid_output', 500],
    [{ kind: 'busy' }, 'reactor_busy', 503],
    [{ kind: 'unknown_reactor' }, 'reactor_unavailable', 503],
    [{ kind: 'internal', message: 'secret internals' }, 'reactor_runtime_error', 500],
  ];
  for (const [f, code, status] of cases) t.match(failureToError(f, ctx), { code, status }, f.kind);
  for (const status of PASS_THROUGH_STATUSES) {
    t.match(failureToError({ kind: 'user_error', message: 'm', status }, ctx), { code: 'reactor_error', status, detail: 'm' });
  }
  t.same(failureToError({ kind: 'user_error', message: 'boom' }, ctx).errors, { error: ['boom'] });
  t.match(failureToError({ kind: 'timeout' }, ctx).detail, /200 ms/);
  t.match(failureToError({ kind: 'out_of_memory' }, ctx).detail, /16 MB/);
  t.notMatch(JSON.stringify(failureToError({ kind: 'internal', message: 'secret internals' }, ctx).errors), /secret/);
});
