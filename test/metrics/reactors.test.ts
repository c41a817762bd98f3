/**
 * Reactor metrics over real HTTP (README "Metrics"): calls counted by outcome (ok, timeout), and a
 * restart of the reactor host after it was killed. A file of its own: starting (and restarting)
 * the host process takes long on a loaded machine.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { baseConfig, startTestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';
import { scrape } from './scrape.js';

/** The reactor host processes among this process's children (Linux /proc). */
function reactorHosts(): number[] {
  const children = readFileSync(`/proc/${process.pid}/task/${process.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  return children.filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('host');
    } catch {
      return false;
    }
  });
}

t.test('reactor calls by outcome, and a host restart', async (t) => {
  const cfg = baseConfig() as Record<string, any>;
  cfg.tenants[0].reactors = [
    { id: 'echo', name: 'echo', code: 'module.exports = async function (req) { return { raw: req.args }; };' },
    { id: 'spin', name: 'spin', code: 'module.exports = async function () { for (;;) {} };', timeout_ms: 100 },
  ];
  const s = await startTestService(t, { config: cfg });
  t.equal((await s.call('POST', '/reactors/echo/react', { body: { args: { a: 1 } } })).status, 200);
  const spin = await s.call('POST', '/reactors/spin/react', { body: { args: {} } });
  t.equal(spin.status, 504, spin.text);
  const m = await scrape(s.url);
  t.equal(m.value('tokenproxy_reactor_calls_total', { outcome: 'ok' }), 1);
  t.equal(m.value('tokenproxy_reactor_calls_total', { outcome: 'timeout' }), 1);
  t.equal(m.value('tokenproxy_reactor_host_restarts_total'), 0);
  const hosts = reactorHosts();
  t.equal(hosts.length, 1, 'one reactor host process');
  process.kill(hosts[0]!, 'SIGKILL');
  // A restart spawns a Node process and compiles the reactors again: slow on a loaded machine.
  await waitFor(async () => (await scrape(s.url)).value('tokenproxy_reactor_host_restarts_total') === 1, { what: 'the host restart', timeoutMs: 90_000, intervalMs: 100 });
  t.equal((await s.call('POST', '/reactors/echo/react', { body: { args: { a: 2 } } })).status, 200, 'serving again');
  t.equal((await scrape(s.url)).value('tokenproxy_reactor_calls_total', { outcome: 'ok' }), 2);
});
