/**
 * README "Coming from the hosted service" names SDK calls (issue 28 review): each call it names
 * in a row is a method of the original's Node SDK as installed (5.x), so the table promises
 * nothing the SDK cannot call. What each served call answers is tested through the SDK next
 * to this file (sdk-tokens, sdk-management); the calls not served answer 404 route_not_found,
 * but the tenant's update and delete, whose path GET /tenants/self serves: 405 method_not_allowed.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { KEYS, startTestService } from '../helpers/service.js';
import { sdkClient } from '../helpers/sdk.js';

const readme = readFileSync('README.md', 'utf8');
const section = readme.slice(readme.indexOf('## Coming from the hosted service'));
const rows = section.split('\n').filter((l) => l.startsWith('| `')).map((l) => l.split('|').map((c) => c.trim()));

/** `a.b`, `c`; `d.e` → a.b, a.c, d.e; `x`, `y`: `m`, `n` → x.m, x.n, y.m, y.n. */
function callsOf(cell: string): string[] {
  const names = (s: string) => [...s.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
  return cell.split(';').flatMap((group) => {
    if (group.includes(':')) {
      const [owners, methods] = group.split(':') as [string, string];
      return names(owners).flatMap((o) => names(methods).map((m) => `${o}.${m}`));
    }
    let prefix = '';
    return names(group).map((n) => {
      if (!n.includes('.')) return `${prefix}.${n}`;
      prefix = n.slice(0, n.lastIndexOf('.'));
      return n;
    });
  });
}

const { client } = sdkClient('http://127.0.0.1:1', KEYS.private);
const resolve = (path: string): unknown => path.split('.').reduce<unknown>((o, k) => (o === undefined || o === null ? undefined : (o as Record<string, unknown>)[k]), client);

t.test('every call a served or 405 row names is a method of the SDK', async (t) => {
  const named = rows.filter((r) => r[2] !== undefined && !r[2].startsWith('not served')).flatMap((r) => callsOf(r[1]!));
  t.ok(named.length >= 30, `${named.length} calls named`);
  for (const call of named) t.equal(typeof resolve(call), 'function', `client.${call} exists`);
});

t.test('tenants.self: getUsageReports is not served (404), update and delete answer 405', async (t) => {
  const row = rows.find((r) => r[2]?.startsWith('not served'))!;
  t.match(row[1], '`self.getUsageReports`');
  const svc = await startTestService(t);
  const { client: live } = sdkClient(svc.url, KEYS.private);
  const err = await live.tenants.self.getUsageReports().then(() => null, (e: unknown) => e as { statusCode?: number; body?: { code?: string } });
  t.equal(err?.statusCode, 404);
  t.equal(err?.body?.code, 'route_not_found');
  t.match(row[2], '`self.update`/`delete`: `405 method_not_allowed`', 'the row says the tenant writes answer 405');
  for (const [name, call] of [['update', () => live.tenants.self.update({ name: 'x' })], ['delete', () => live.tenants.self.delete()]] as const) {
    const e = await call().then(() => null, (x: unknown) => x as { statusCode?: number; body?: { code?: string } });
    t.equal(e?.statusCode, 405, `tenants.self.${name}: 405 (GET /tenants/self is served)`);
    t.equal(e?.body?.code, 'method_not_allowed');
  }
});
