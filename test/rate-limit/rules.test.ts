/**
 * The rule tables against the specification's "Limits" tables, row by row (README "Rate limits"):
 * default tier, higher tier, legacy rules.
 */
import t, { type Test } from 'tap';
import {
  RULES,
  RULE_NAMES,
  TIERS,
  resolveRules,
  ruleMatches,
  validateCustomRateLimits,
  type Counter,
  type RuleName,
  type MatchFacts,
} from '../../src/rate-limit/rules.js';

type Row = [RuleName, Counter, number, number, 'throttle' | number];

// [rule, counter, points, window seconds, 'throttle' | block seconds]
const DEFAULT_TABLE: Row[] = [
  ['test_tenant', 'api_key', 50, 10, 'throttle'],
  ['management_key', 'api_key', 200, 60, 60],
  ['public_key', 'api_key_ip', 50, 10, 10],
  ['proxy_endpoint', 'proxy_key', 500, 10, 'throttle'],
  ['private_key', 'api_key', 1000, 10, 'throttle'],
  ['listing_tokens', 'api_key_ip', 200, 10, 'throttle'],
  ['creating_tokens', 'api_key_ip', 200, 10, 'throttle'],
];
const HIGHER_TABLE: Row[] = [
  // "listed without values": the default tier's values are kept.
  ['test_tenant', 'api_key', 50, 10, 'throttle'],
  ['management_key', 'api_key', 400, 60, 60],
  ['public_key', 'api_key_ip', 100, 10, 10],
  ['proxy_endpoint', 'proxy_key', 1000, 10, 'throttle'],
  ['private_key', 'api_key', 2000, 10, 'throttle'],
  ['listing_tokens', 'api_key_ip', 400, 10, 'throttle'],
  ['creating_tokens', 'api_key_ip', 400, 10, 'throttle'],
];
const LEGACY_TABLE: Row[] = [
  ['legacy_global', 'ip', 1000, 10, 10],
  ['legacy_portal', 'ip', 600, 10, 10],
  ['legacy_tokens_search_post', 'ip', 50, 10, 10],
  ['legacy_tokens_list', 'ip', 100, 10, 10],
  ['legacy_tokens_create', 'ip', 200, 10, 10],
];

const def = (name: RuleName) => {
  const d = RULES.find((r) => r.name === name);
  if (!d) throw new Error(`no rule ${name}`);
  return d;
};

function checkRow(t: Test, tier: 'default' | 'higher', [name, counter, points, window, mitigation]: Row) {
  const limits = TIERS[tier][name];
  t.equal(def(name).counter, counter, `${tier} ${name}: counter`);
  t.equal(limits.points, points, `${tier} ${name}: points`);
  t.equal(limits.durationSeconds, window, `${tier} ${name}: window`);
  if (mitigation === 'throttle') t.same(limits.mitigation, { kind: 'throttle' }, `${tier} ${name}: throttle`);
  else t.same(limits.mitigation, { kind: 'block', blockSeconds: mitigation }, `${tier} ${name}: block ${mitigation} s`);
}

t.test('every rule name is defined once, in both tiers', async (t) => {
  t.same(RULES.map((r) => r.name), [...RULE_NAMES]);
  for (const tier of ['default', 'higher'] as const) t.same(Object.keys(TIERS[tier]).sort(), [...RULE_NAMES].sort());
});

t.test('default tier table', async (t) => {
  for (const row of DEFAULT_TABLE) checkRow(t, 'default', row);
  for (const row of LEGACY_TABLE) checkRow(t, 'default', row);
});

t.test('higher tier table (test tenant keeps default values)', async (t) => {
  for (const row of HIGHER_TABLE) checkRow(t, 'higher', row);
  for (const row of LEGACY_TABLE) checkRow(t, 'higher', row);
});

const facts = (f: Partial<MatchFacts> & Pick<MatchFacts, 'route'>): MatchFacts => ({ testTenant: false, ...f });
const matching = (f: MatchFacts) => RULES.filter((r) => ruleMatches(r.match, f)).map((r) => r.name);

t.test('what each rule applies to', async (t) => {
  t.same(matching(facts({ route: 'tokenize', keyKind: 'private' })), ['private_key', 'creating_tokens']);
  t.same(matching(facts({ route: 'tokens.create', keyKind: 'public' })), ['public_key', 'public_key_total', 'creating_tokens']);
  t.same(matching(facts({ route: 'tokens.list', keyKind: 'private' })), ['private_key', 'listing_tokens']);
  t.same(matching(facts({ route: 'tokens.search.get', keyKind: 'private' })), ['private_key', 'listing_tokens']);
  t.same(matching(facts({ route: 'tokens.search.post', keyKind: 'private' })), ['private_key']);
  t.same(matching(facts({ route: 'tokens.read', keyKind: 'private' })), ['private_key']);
  t.same(matching(facts({ route: 'reactor', keyKind: 'private' })), ['private_key']);
  // Issue 31: a reactor's tokenize counts on the creating rules only (the call itself already
  // counted on the key's rule).
  t.same(matching(facts({ route: 'reactor.tokenize', keyKind: 'private' })), ['creating_tokens']);
  t.same(matching(facts({ route: 'reactor.tokenize', keyKind: 'public', testTenant: true, legacy: true })), ['creating_tokens', 'legacy_tokens_create']);
  t.same(matching(facts({ route: 'management', keyKind: 'management' })), ['management_key']);
  t.same(matching(facts({ route: 'proxy' })), ['proxy_endpoint']);
  t.same(matching(facts({ route: 'tokenize', keyKind: 'private', testTenant: true })), ['test_tenant', 'private_key', 'creating_tokens']);
  t.same(matching(facts({ route: 'tokenize', keyKind: 'private', legacy: true })), [
    'private_key',
    'creating_tokens',
    'legacy_global',
    'legacy_tokens_create',
  ]);
  t.same(matching(facts({ route: 'tokens.list', keyKind: 'private', legacy: true })), [
    'private_key',
    'listing_tokens',
    'legacy_global',
    'legacy_tokens_list',
  ]);
  t.same(matching(facts({ route: 'tokens.search.get', keyKind: 'private', legacy: true })), ['private_key', 'listing_tokens', 'legacy_global']);
  t.same(matching(facts({ route: 'tokens.search.post', keyKind: 'private', legacy: true })), [
    'private_key',
    'legacy_global',
    'legacy_tokens_search_post',
  ]);
  t.same(matching(facts({ route: 'health', keyKind: 'private', legacy: true, testTenant: true })), [], 'health is never limited');
  t.same(def('legacy_portal').match.routes, [], 'legacy_portal is attached to no route');
});

t.test('custom overrides merge over the tier', async (t) => {
  const rules = resolveRules('higher', {
    private_key: { points: 3 },
    public_key: { duration_seconds: 1, block_seconds: 2 },
    listing_tokens: { mitigation: 'block' },
    management_key: { mitigation: 'throttle' },
  });
  const get = (n: RuleName) => rules.find((r) => r.name === n)!.limits;
  t.same(get('private_key'), { points: 3, durationSeconds: 10, mitigation: { kind: 'throttle' } });
  t.same(get('public_key'), { points: 100, durationSeconds: 1, mitigation: { kind: 'block', blockSeconds: 2 } });
  t.same(get('listing_tokens'), { points: 400, durationSeconds: 10, mitigation: { kind: 'block', blockSeconds: 10 } }, 'block defaults to the window');
  t.same(get('management_key'), { points: 400, durationSeconds: 60, mitigation: { kind: 'throttle' } });
  t.same(get('creating_tokens'), TIERS.higher.creating_tokens, 'untouched rules keep the tier');
  t.same(TIERS.higher.private_key.points, 2000, 'the tier itself is not mutated');
});

t.test('validateCustomRateLimits', async (t) => {
  t.same(validateCustomRateLimits('default', { private_key: { points: 1 } }), []);
  t.match(validateCustomRateLimits('default', { privat_key: { points: 1 } }), [/unknown rate-limit rule "privat_key"/]);
  t.match(validateCustomRateLimits('default', { private_key: { block_seconds: 5 } }), [/block_seconds needs mitigation: block/]);
  t.same(validateCustomRateLimits('default', { private_key: { block_seconds: 5, mitigation: 'block' } }), []);
  t.same(validateCustomRateLimits('default', { public_key: { block_seconds: 5 } }), []);
});
