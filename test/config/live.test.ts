/** What a reload may change (src/config/live.ts): restart-only settings keep their running value and are named. */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { buildConfig } from '../../src/config/load.js';
import { applyLive, LIVE_SETTINGS } from '../../src/config/live.js';

const tenant = (name: string) => ({ tenants: [{ id: '7f1c6b3e-0d2a-4c59-9a4e-3b8d2f6a1c10', name }] });

t.test('an unchanged file needs no restart', async (t) => {
  const a = buildConfig({ server: { port: 1234 }, ...tenant('x') }, { env: {} });
  const b = buildConfig({ server: { port: 1234 }, ...tenant('x') }, { env: {} });
  t.same(applyLive(a, b).restartNeeded, []);
});

t.test('live settings apply; restart-only ones are named and keep their running value', async (t) => {
  const running = buildConfig({ server: { port: 1234, trust_proxy: [] }, store: { path: './a.db' }, ...tenant('x') }, { env: {} });
  const next = buildConfig({
    server: { port: 4321, trust_proxy: ['10.0.0.0/8'], max_depth: 10, shutdown_grace_ms: 5 },
    store: { path: './b.db' },
    rate_limits: { enabled: false },
    ...tenant('y'),
  }, { env: {} });
  const { config, restartNeeded } = applyLive(running, next);
  t.same(restartNeeded, ['server.port', 'server.max_depth', 'store', 'rate_limits']);
  t.equal(config.server.port, 1234);
  t.equal(config.server.max_depth, running.server.max_depth);
  t.equal(config.store.path, './a.db');
  t.equal(config.rate_limits.enabled, true);
  t.same(config.server.trust_proxy, ['10.0.0.0/8'], 'trust_proxy is live');
  t.equal(config.server.shutdown_grace_ms, 5, 'shutdown_grace_ms is live');
  t.equal(config.tenants[0]!.name, 'y', 'tenants are live');
  t.ok(Object.isFrozen(config) && Object.isFrozen(config.server));
});

t.test('every live path names a setting of the schema', async (t) => {
  const schema = JSON.parse(readFileSync('config/tokenproxy.schema.json', 'utf8')) as { properties: Record<string, { properties?: Record<string, unknown> }> };
  for (const p of LIVE_SETTINGS) {
    const [section, key] = p.split('.');
    const props = schema.properties[section!];
    t.ok(props && (key === undefined || (props.properties !== undefined && key in props.properties)), p);
  }
});

t.test('a section not known to be live needs a restart', async (t) => {
  const running = buildConfig({}, { env: {} });
  const next = { ...buildConfig({}, { env: {} }), future_section: { x: 1 } } as typeof running;
  const { config, restartNeeded } = applyLive(running, next);
  t.same(restartNeeded, ['future_section']);
  t.notOk('future_section' in config, 'the running (absent) value is kept');
});
