/**
 * Which isolated-vm the reactor host loads (issue: install and run on Node 20, 22 and 24).
 * package.json lists isolated-vm 6.2 and 5.0.4 (alias isolated-vm-v5) as optional dependencies;
 * npm keeps whichever built. This checks that the loader picks a build that works on this Node,
 * that an isolate really evaluates code with it, and what a user reads when none loads.
 */
import t from 'tap';
import { loadIsolatedVm } from '../../src/reactors/ivm.js';

const major = Number(process.versions.node.split('.')[0]);

t.test('the loaded build matches this Node line and runs code', async (t) => {
  const { ivm, name, version } = loadIsolatedVm();
  // 6.2 needs Node >= 22 (it does not build on 20); 5.0.4 does not build on 24.
  if (major >= 24) t.same([name, version.split('.')[0]], ['isolated-vm', '6'], 'Node 24 runs isolated-vm 6');
  else if (major === 20) t.same([name, version], ['isolated-vm-v5', '5.0.4'], 'Node 20 runs isolated-vm 5.0.4');
  else t.ok(name === 'isolated-vm' || name === 'isolated-vm-v5', `Node 22 runs either (${name} ${version})`);
  const isolate = new ivm.Isolate({ memoryLimit: 16 });
  t.teardown(() => isolate.dispose());
  const context = await isolate.createContext();
  t.equal(await context.eval('6 * 7', { timeout: 1000 }), 42, 'an isolate evaluates code');
});

t.test('no loadable build: the error names the Node version and what to do', async (t) => {
  const err = t.throws(() => loadIsolatedVm(['tokenproxy-no-such-isolated-vm'])) as Error;
  t.equal(err.name, 'IsolatedVmUnavailableError');
  t.match(err.message, `on Node ${process.version}`);
  t.match(err.message, /python3, make and g\+\+/);
  t.match(err.message, /tokenproxy-no-such-isolated-vm: not installed/);
});
