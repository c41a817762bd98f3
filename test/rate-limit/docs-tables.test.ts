/**
 * The tables of docs/rate-limits.md (the README's "Rate limits" section until issue 29) match the rules as data (src/rate-limit/rules.ts): every rule
 * once, its counter, and its points, window and mitigation in each tier. That guide is what
 * operators configure `custom_rate_limits` from, so it must not drift from the code.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { RULES, RULE_NAMES, TIERS, type Counter, type RuleLimits } from '../../src/rate-limit/rules.js';

const guide = readFileSync('docs/rate-limits.md', 'utf8');
const start = guide.indexOf('\n## Rules\n');
const section = guide.slice(start, guide.indexOf('\n## ', start + 1));

const COUNTERS: Record<string, Counter> = {
  'API key': 'api_key',
  'API key and client IP': 'api_key_ip',
  'proxy key': 'proxy_key',
  'client IP': 'ip',
};

function parseRate(cell: string): RuleLimits | undefined {
  const m = /^(\d+) \/ (\d+) s, (Throttle|Block (\d+) s)$/.exec(cell.trim());
  if (!m) return undefined;
  return {
    points: Number(m[1]),
    durationSeconds: Number(m[2]),
    mitigation: m[4] === undefined ? { kind: 'throttle' } : { kind: 'block', blockSeconds: Number(m[4]) },
  };
}

const rows = section
  .split('\n')
  .filter((l) => /^\| [^|]+ \| `[a-z_]+` \|/.test(l))
  .map((l) => l.slice(1, -1).split(' | ').map((c) => c.trim()));

t.ok(start > 0, 'docs/rate-limits.md has a "## Rules" section');

t.test('every rule is listed once, with its counter and both tiers\' limits', async (t) => {
  t.same(rows.map((r) => r[1].replace(/`/g, '')).sort(), [...RULE_NAMES].sort(), 'each rule name once');
  for (const row of rows) {
    const name = row[1].replace(/`/g, '');
    const rule = RULES.find((r) => r.name === name);
    if (!rule) continue;
    t.ok(rule.title.replace(/^Legacy: /, '').startsWith(row[0]), `${name}: title "${row[0]}"`);
    t.equal(COUNTERS[row[2]], rule.counter, `${name}: counter "${row[2]}"`);
    const legacy = name.startsWith('legacy_');
    const [def, higher] = legacy ? [row[4], row[4]] : [row[4], row[5]];
    t.same(parseRate(def), TIERS.default[rule.name], `${name}: default tier "${def}"`);
    t.same(parseRate(higher), TIERS.higher[rule.name], `${name}: higher tier "${higher}"`);
  }
});
