/** auth/access.ts: the token access decisions, and the search and fingerprint scopes the stores apply. */
import t from 'tap';
import fc from 'fast-check';
import type { Application } from '../../src/auth/tenancy.js';
import type { ApplicationConfig, Permission } from '../../src/config/schema.js';
import { compileApplication } from '../../src/model/tenants.js';
import {
  fingerprintScope, grant, mayDeduplicate, readTransform, requireExpressionWrite, requireGrant, searchScope, showsFingerprint,
} from '../../src/auth/access.js';
import { scopeAllows } from '../../src/store/codec.js';

const PERMS: Permission[] = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search'];
const CONTAINERS = ['/', '/a/', '/a/b/', '/a/b/c/', '/ab/', '/x/', '/x/y/', '/general/high/', '/pci/high/'];

/** An application as the compiler makes it (issue 25: rules sorted and scopes computed there). */
function app(permissions: Permission[], rules: ApplicationConfig['rules']): Application {
  return compileApplication({ id: 'app', name: 'app', type: 'private', keys: ['k'.repeat(16)], permissions, rules, legacy: false, allowed_origins: [] });
}

t.test('the search scope admits exactly the containers search is granted on', async (t) => {
  const rule = fc.record({
    priority: fc.integer({ min: 0, max: 3 }),
    container: fc.constantFrom(...CONTAINERS),
    permissions: fc.subarray(PERMS),
    transform: fc.constantFrom('reveal' as const, 'mask' as const, 'redact' as const),
  });
  const seed = Number(process.env.ACCESS_SEED ?? Date.now() % 2 ** 31);
  t.comment(`seed ${seed}`);
  fc.assert(
    fc.property(fc.subarray(PERMS), fc.array(rule, { maxLength: 5 }), (perms, rules) => {
      const a = app(perms, rules);
      const scope = searchScope(a);
      for (const c of [...CONTAINERS, '/abc/', '/a/bc/', '/zz/']) {
        if (scopeAllows(scope, c) !== (grant(a, 'token:search', c) !== null)) throw new Error(`scope ${JSON.stringify(scope)} disagrees on ${c}`);
      }
    }),
    { seed, numRuns: 500 },
  );
  t.pass('500 generated applications');
  t.equal(searchScope(app(['token:search'], [])), undefined, 'no rules, search held: every container');
  t.same(searchScope(app(['token:read'], [])), [], 'no rules, no search: none');
  t.equal(searchScope(app([], [{ priority: 1, container: '/', permissions: ['token:search'], transform: 'mask' }])), undefined, 'a rule on / grants all');
});

t.test('the fingerprint scope admits exactly the containers the key may search and read (issue 31)', async (t) => {
  const rule = fc.record({
    priority: fc.integer({ min: 0, max: 3 }),
    container: fc.constantFrom(...CONTAINERS),
    permissions: fc.subarray(PERMS),
    transform: fc.constantFrom('reveal' as const, 'mask' as const, 'redact' as const),
  });
  const seed = Number(process.env.ACCESS_SEED ?? Date.now() % 2 ** 31);
  t.comment(`seed ${seed}`);
  fc.assert(
    fc.property(fc.subarray(PERMS), fc.array(rule, { maxLength: 5 }), (perms, rules) => {
      const a = app(perms, rules);
      const scope = fingerprintScope(a);
      for (const c of [...CONTAINERS, '/abc/', '/a/bc/', '/zz/']) {
        const want = grant(a, 'token:search', c) !== null && showsFingerprint(a, c);
        if (scopeAllows(scope, c) !== want) throw new Error(`scope ${JSON.stringify(scope)} disagrees on ${c}`);
      }
    }),
    { seed, numRuns: 500 },
  );
  t.pass('500 generated applications');
  t.equal(fingerprintScope(app(['token:search', 'token:read'], [])), undefined, 'no rules, search and read held: every container');
  t.same(fingerprintScope(app(['token:search'], [])), [], 'no rules, search without read: none');
  t.same(
    fingerprintScope(app([], [
      { priority: 1, container: '/pci/', permissions: ['token:search'], transform: 'redact' },
      { priority: 2, container: '/general/', permissions: ['token:search', 'token:read'], transform: 'reveal' },
    ])),
    [{ prefix: '/pci/', allow: false }, { prefix: '/general/', allow: true }],
    'the lister of issue 31: /general/ only',
  );
});

t.test('reads, fingerprints and deduplication follow token:read; expressions need reveal', async (t) => {
  const a = app([], [
    { priority: 1, container: '/pci/', permissions: ['token:read', 'token:update'], transform: 'mask' },
    { priority: 2, container: '/general/', permissions: ['token:read', 'token:update'], transform: 'reveal' },
    { priority: 3, container: '/', permissions: ['token:create', 'token:update'], transform: 'reveal' },
  ]);
  t.equal(readTransform(a, '/pci/high/'), 'mask');
  t.equal(readTransform(a, '/other/'), 'redact', 'no read: redact');
  t.ok(showsFingerprint(a, '/pci/high/') && mayDeduplicate(a, '/pci/high/'));
  t.notOk(showsFingerprint(a, '/other/') || mayDeduplicate(a, '/other/'), 'no read: no fingerprint, no dedupe');
  t.throws(() => requireGrant(a, 'token:delete', '/pci/high/'), { code: 'forbidden' });
  t.doesNotThrow(() => requireExpressionWrite(a, '/general/x/', ['mask'], false), 'reveal may change expressions');
  t.throws(() => requireExpressionWrite(a, '/pci/high/', ['fingerprint_expression'], false), { code: 'forbidden' }, 'mask may not');
  t.throws(() => requireExpressionWrite(a, '/other/', ['search_indexes'], false), { code: 'forbidden' }, 'update alone may not');
  t.doesNotThrow(() => requireExpressionWrite(a, '/other/', ['search_indexes'], true), 'unless the data is supplied');
  t.doesNotThrow(() => requireExpressionWrite(a, '/other/', [], false), 'nothing changed: nothing to check');
});
