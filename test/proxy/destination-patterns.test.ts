/**
 * Issue 23 finding 7: `https://*` passed validation and allowed every single-label host. A
 * destination pattern needs a fixed registrable domain after its last `*`; `*` alone, `*.*`,
 * `*.com`-style patterns (a wildcard over a public suffix) are refused when the config is loaded,
 * at start-up and on a reload, with the entry's config path and a message that says why.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../../src/config/load.js';
import { buildModel } from '../../src/model/compile.js';
import { call, hup, newKey, opsApp, opsChild, opsFiles } from '../helpers/ops.js';

const TENANT = '11111111-1111-4111-8111-111111111111';

function load(allowed: unknown[]) {
  return buildModel({ tenants: [{ id: TENANT, name: 't', outbound: { allowed_destinations: allowed } }] }, { env: {} }).model;
}

function problemsOf(allowed: unknown[]): string[] {
  try {
    load(allowed);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
}

const REFUSED = [
  'https://*', 'http://*:8080', 'https://*.', 'https://*.*', 'https://*.com', 'https://*.io', 'https://api.*.com', 'https://a.*',
  'https://*.*.com', 'https://*.co.uk', 'https://*.com.au', 'https://*.herokuapp.com', 'https://*.github.io',
  { origin: 'https://*', tls: { ca_file: '/nonexistent.pem' } },
];
const ACCEPTED = ['https://*.example.com', 'https://*.stripe.com', 'https://api.*.example.com', 'https://*.*.example.com', 'https://*.example.co.uk', 'https://example.com', 'http://localhost:9090'];

t.test('patterns without a fixed registrable domain are refused at config load', async (t) => {
  for (const entry of REFUSED) {
    const problems = problemsOf([entry]);
    const mine = problems.filter((p) => p.startsWith('tenants[0].outbound.allowed_destinations[0]:'));
    t.ok(mine.some((p) => /a wildcard needs a fixed (registrable )?domain/.test(p)), `${JSON.stringify(entry)} is refused`, { problems });
  }
  const all = problemsOf(['https://ok.example.com', 'https://*']);
  t.ok(all.some((p) => p.startsWith('tenants[0].outbound.allowed_destinations[1]:')), 'the problem names the entry', { all });
});

t.test('patterns with a fixed registrable domain are accepted and match one label per *', async (t) => {
  for (const entry of ACCEPTED) t.same(problemsOf([entry]), [], `${entry} is accepted`);
  const policy = load(['https://*.example.com']).egress;
  t.teardown(() => policy.close());
  t.doesNotThrow(() => policy.match(TENANT, new URL('https://api.example.com/')));
  t.throws(() => policy.match(TENANT, new URL('https://example.com/')), { code: 'destination_not_allowed' });
  t.throws(() => policy.match(TENANT, new URL('https://intranet/')), { code: 'destination_not_allowed' });
});

t.test('a reload with such a pattern is refused and the running list kept', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'tp-dest-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const files = opsFiles(root);
  const key = newKey();
  const app = { ...opsApp(1, [key]), permissions: ['token:create', 'token:read', 'token:search', 'token:use', 'proxy:invoke'] };
  files.write([app], { tenant: { outbound: { allowed_destinations: ['https://*.example.com'] } } });
  const svc = await opsChild(t, files);
  files.write([app], { tenant: { outbound: { allowed_destinations: ['https://*.example.com', 'https://*'] } } });
  const out = await hup(svc);
  t.match(out, 'reload refused');
  t.match(out, 'tenants[0].outbound.allowed_destinations[1]: a wildcard needs a fixed domain');
  t.equal((await call(svc.url, 'GET', '/tokens', key)).status, 200, 'the service keeps serving');
});
