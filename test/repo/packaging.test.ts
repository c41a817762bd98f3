/**
 * The container files (issue 13, packaging). Docker is not on CI's machine, so these are parsed
 * and checked, not built: the Dockerfile's stages, user, health check and the files it copies;
 * compose.yaml's Redis durability and two instances; and config/compose.yaml, which must load and
 * differ from the default config only in where tokens and counters live.
 */
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { loadConfigFile } from '../../src/config/load.js';

t.test('Dockerfile: two stages, native build tools in the first, non-root user and a /healthz check in the last', async (t) => {
  const text = readFileSync('Dockerfile', 'utf8');
  const lines = text.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  const froms = lines.map((l, i) => [l, i] as const).filter(([l]) => /^FROM /.test(l));
  t.equal(froms.length, 2, 'two stages');
  t.match(froms[0]![0], /^FROM node:\$\{NODE_VERSION\}-slim AS build$/);
  const last = lines.slice(froms[1]![1]);
  const build = lines.slice(froms[0]![1], froms[1]![1]);
  t.ok(build.some((l) => /apt-get install .*python3 make g\+\+/.test(l)), 'the build stage installs python3, make, g++');
  t.ok(build.some((l) => /npm ci/.test(l)), 'the build stage runs npm ci (native builds, prepare builds dist)');
  t.ok(last.includes('USER node'), 'the image runs as the non-root user node');
  t.notOk(last.some((l) => /^USER root/.test(l)), 'and never switches back');
  t.ok(last.some((l) => /^HEALTHCHECK /.test(l)) && text.includes('/healthz'), 'a health check on /healthz');
  t.match(last.at(-1), /^CMD \["node", "dist\/main\.js", "start"\]$/);
  for (const l of lines.filter((x) => /^COPY (?!--from)/.test(x))) {
    const parts = l.split(/\s+/).slice(1, -1);
    for (const p of parts) t.ok(existsSync(p), `${p} (copied by the Dockerfile) exists`);
  }
});

t.test('compose.yaml: Redis with appendfsync always, two instances of one image on its config', async (t) => {
  const doc = parseYaml(readFileSync('compose.yaml', 'utf8'), { merge: true }) as { services: Record<string, Record<string, unknown>> };
  const redis = doc.services.redis!;
  const command = (redis.command as string[]).join(' ');
  t.match(command, /--appendonly yes/);
  t.match(command, /--appendfsync always/);
  const instances = Object.entries(doc.services).filter(([name]) => name.startsWith('tokenproxy'));
  t.equal(instances.length, 2, 'two tokenproxy instances');
  const ports = new Set<string>();
  for (const [name, svc] of instances) {
    t.equal(svc.build, '.', `${name} builds this repository`);
    const env = svc.environment as Record<string, string>;
    t.equal(env.TOKENPROXY_CONFIG, '/app/config/compose.yaml', `${name} runs on config/compose.yaml`);
    t.match(env.TOKENPROXY_MASTER_KEY, /^\$\{TOKENPROXY_MASTER_KEY:\?/, `${name}: the master key must be given, not defaulted`);
    for (const p of svc.ports as string[]) ports.add(p);
  }
  t.equal(ports.size, 2, 'each instance on its own host port');
});

t.test('config/compose.yaml loads and is the default config with tokens and counters in Redis', async (t) => {
  const compose = loadConfigFile({ path: 'config/compose.yaml', env: {} });
  const base = loadConfigFile({ path: 'config/tokenproxy.yaml', env: {} });
  t.equal(compose.store.kind, 'redis');
  t.equal(compose.store.url, 'redis://redis:6379');
  t.equal(compose.rate_limits.store, 'redis');
  const strip = (c: typeof base) => {
    const { source: _s, store, rate_limits, ...rest } = JSON.parse(JSON.stringify(c)) as typeof base;
    const { kind: _k, url: _u, ...storeRest } = store;
    const { store: _r, url: _ru, ...limitsRest } = rate_limits as typeof rate_limits & { url?: string };
    return { ...rest, store: storeRest, rate_limits: limitsRest };
  };
  t.same(strip(compose), strip(base), 'nothing else differs from config/tokenproxy.yaml');
});
