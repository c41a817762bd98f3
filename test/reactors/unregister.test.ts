/**
 * ReactorRuntime.unregister (a reload removed a reactor): calls to it get 404 not_found, the
 * others keep running, and a host restarted afterwards does not bring it back.
 */
import t from 'tap';
import { ReactorRuntime } from '../../src/reactors/runtime.js';
import { captureLog, fn, reactor, serviceError } from './helpers.js';
import { testReactorHost } from '../helpers/cli-entry.js';
import { waitFor } from '../helpers/wait.js';

const cap = captureLog();
const runtime = await ReactorRuntime.start({ log: cap.log, ...testReactorHost() });
t.teardown(() => runtime.close());

t.test('an unregistered reactor is gone; the others stay', async (t) => {
  await runtime.register([reactor('u/a', fn(`return 'a';`)), reactor('u/b', fn(`return 'b';`))]);
  t.equal(await runtime.invoke('u/a', { args: null }), 'a');
  await runtime.unregister(['u/a', 'u/unknown']);
  t.same(runtime.keys(), ['u/b']);
  t.equal((await serviceError(runtime.invoke('u/a', { args: null }))).code, 'not_found');
  t.equal(await runtime.invoke('u/b', { args: null }), 'b');
  // After a host restart only what is registered comes back.
  const pid = runtime.hostPid!;
  process.kill(pid, 'SIGKILL');
  await waitFor(() => runtime.hostPid !== undefined && runtime.hostPid !== pid, { what: 'a new reactor host', timeoutMs: 30_000 });
  t.equal(await runtime.invoke('u/b', { args: null }), 'b');
  t.same(runtime.keys(), ['u/b']);
  // Registered again under the same key, it runs again.
  await runtime.register([reactor('u/a', fn(`return 'a2';`))]);
  t.equal(await runtime.invoke('u/a', { args: null }), 'a2');
});
