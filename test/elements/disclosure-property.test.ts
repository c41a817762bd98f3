/**
 * The disclosure property of the hosted fields, in Chromium: whatever template a shop page puts
 * into the tokenize body (expressions drawn from the template grammar: filters with numeric and
 * string arguments, alias forms with and without windows, placed in id, fingerprint_expression,
 * mask or search_indexes, at the root or nested), two values that agree on their type's
 * disclosure budget (a card's first 6 and last 4 digits; an SSN's last 4) look the same to the
 * page: ok, status, code, detail, field errors, and the answer with the ids' drawn characters
 * masked (shape, lengths and the budget-visible characters compared). And no answer holds more of
 * either value than its budget.
 *
 * fast-check draws the expressions; the seed is printed when a run fails (replay it with
 * TOKENPROXY_PROPERTY_SEED=<seed>).
 */
import t, { type Test } from 'tap';
import fc from 'fast-check';
import { browserSkip } from '../helpers/browser.js';
import { F, openElementsPage, type ElementsPage, type Outcome } from './page.js';
import { cardLeakWindows, ssnLeakWindows, twinCards, twinCvcs, twinSsns } from './twins.js';

const skip = browserSkip();
const CARD_RUNS = 40;
const SSN_RUNS = 40;

const num = fc.integer({ min: 0, max: 20 });
const quoted = fc.constantFrom('', 'x', 'xxxxxxxxxx', '0', '7', '-', 'X', 'ab');
const filter = fc.oneof(
  fc.tuple(num, fc.integer({ min: 1, max: 20 })).map(([a, b]) => `slice: ${a}, ${b}`),
  fc.tuple(fc.constantFrom('0', '1', '4', '7', '9', 'x', '-'), quoted).map(([a, b]) => `replace: '${a}', '${b}'`),
  fc.constantFrom('0', '3', '8', '-').map((c) => `remove: '${c}'`),
  quoted.map((s) => `append: '${s}'`),
  quoted.map((s) => `prepend: '${s}'`),
  fc.constantFrom('upcase', 'downcase', 'size', 'last4', 'digits'),
  num.map((n) => `truncate: ${n}`),
  num.map((n) => `reveal_last: ${n}`),
  num.map((n) => `reveal_first: ${n}`),
);
/** `{{ source | filter | … }}` over the given sources. */
const template = (sources: string[]) =>
  fc.tuple(fc.constantFrom(...sources), fc.array(filter, { maxLength: 5 })).map(([src, fs]) => `{{ ${[src, ...fs].join(' | ')} }}`);
const alias = (sources: string[]) =>
  fc.tuple(
    fc.constantFrom(...sources),
    fc.constantFrom('alias_card', 'alias_preserve_format', 'alias_preserve_length'),
    fc.option(fc.tuple(fc.integer({ min: 0, max: 12 }), fc.integer({ min: 0, max: 12 })), { nil: undefined }),
  ).map(([src, f, w]) => `{{ ${src} | ${f}${w ? `: ${w[0]}, ${w[1]}` : ''} }}`);

interface Case {
  place: 'id' | 'fingerprint_expression' | 'mask' | 'search_indexes' | 'none';
  expr: string;
  nest: 'root' | 'object' | 'array';
  metadata: boolean;
  dedupe: boolean;
}

function caseOf(sources: string[], defaultFingerprint: string): fc.Arbitrary<Case> {
  return fc.record({
    place: fc.constantFrom('id', 'fingerprint_expression', 'mask', 'search_indexes', 'none'),
    // Mostly drawn from the grammar; sometimes exactly the named forms a page may send.
    expr: fc.oneof(
      { weight: 5, arbitrary: template(sources) },
      { weight: 3, arbitrary: alias(sources) },
      { weight: 1, arbitrary: fc.constant(defaultFingerprint) },
    ),
    nest: fc.constantFrom('root', 'object', 'array'),
    metadata: fc.boolean(),
    dedupe: fc.boolean(),
  });
}

function bodyOf(c: Case, type: string, field: string): unknown {
  const def: Record<string, unknown> = { type, data: F(field) };
  if (c.place === 'search_indexes') def.search_indexes = [c.expr];
  else if (c.place !== 'none') def[c.place] = c.expr;
  if (c.metadata) def.metadata = { order: 'o-1' };
  if (c.dedupe) def.deduplicate_token = true;
  return c.nest === 'root' ? def : c.nest === 'object' ? { payment: def, note: 'plain' } : { list: [def, 7] };
}

/** A value's budget: which positions of it a page may see. */
interface Budget {
  visible(i: number, length: number): boolean;
}
const CARD: Budget = { visible: (i, n) => i < 6 || i >= n - 4 };
const SSN: Budget = { visible: (i, n) => i >= n - 4 };

const ALIAS = /^\{\{\s*data(?:\.number)?\s*\|\s*(alias_card|alias_preserve_format|alias_preserve_length)\s*(?::\s*(\d+)\s*,\s*(\d+)\s*)?\}\}$/;

/** The characters an alias id asked for by `c` keeps, first and last (the rest it draws at random); null: not an alias. */
function kept(c: Case): [number, number] | null {
  const m = c.place === 'id' ? ALIAS.exec(c.expr) : null;
  if (!m) return null;
  return m[1] === 'alias_card' ? [6, 4] : [Number(m[2] ?? 0), Number(m[3] ?? 0)];
}

/**
 * An id with the characters its alias draws at random masked (`#`); the characters the alias
 * keeps stay, so a kept character beyond the budget differs between the two values. Any other id
 * (a UUID, a refusal's) has every letter and digit masked.
 */
function maskId(id: string, valueLength: number, window: [number, number] | null): string {
  let out = '';
  for (let i = 0; i < id.length; i++) {
    const c = id[i]!;
    const keeps = window !== null && id.length === valueLength && (i < window[0] || i >= id.length - window[1]);
    out += /[A-Za-z0-9]/.test(c) && !keeps ? '#' : c;
  }
  return out;
}

/** What the page can compare between the two values: ids' drawn characters masked, times by their length. */
function observed(o: Outcome, valueLength: number, window: [number, number] | null, ids: string[]): string {
  return JSON.stringify(o, (k, v: unknown) => {
    if (typeof v !== 'string') return v;
    if (k === 'id') {
      ids.push(v);
      return maskId(v, valueLength, window);
    }
    // A plain string's token is answered as its id alone (a random UUID).
    if (/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(v)) return '<uuid>';
    return k.endsWith('_at') ? `<time:${v.length}>` : v;
  });
}

/**
 * Whether an id of the value's length matches the value at (nearly) all the positions beyond the
 * budget: an alias draws each of those digits at random (a chance match of 5 of a card's 6 middle
 * digits is about 5e-5; of all 5 hidden SSN digits 1e-5), a window over them keeps them all.
 */
function idReveals(id: string, value: string, budget: Budget, atLeast: (hidden: number) => number): boolean {
  if (id.length !== value.length) return false;
  let hidden = 0;
  let same = 0;
  for (let i = 0; i < value.length; i++) {
    if (budget.visible(i, value.length) || !/\d/.test(value[i]!)) continue;
    hidden++;
    if (id[i] === value[i]) same++;
  }
  return same >= atLeast(hidden);
}

async function fillCard(p: ElementsPage, name: string, number: string, cvc: string): Promise<void> {
  const f = p.field(name);
  await f.locator('#number').fill(number);
  await f.locator('#exp').fill('1230');
  await f.locator('#cvc').fill(cvc);
  await p.page.waitForFunction((n) => (window as unknown as { __changes: Record<string, { complete: boolean }> }).__changes[n]?.complete === true, name);
}

async function fillText(p: ElementsPage, name: string, value: string): Promise<void> {
  await p.field(name).locator('#value').fill(value);
  await p.page.waitForFunction((n) => (window as unknown as { __changes: Record<string, { complete: boolean }> }).__changes[n]?.complete === true, name);
}

interface Subject {
  type: string;
  fields: [string, string];
  values: [string, string];
  budget: Budget;
  windows: (v: string) => string[];
  atLeast: (hidden: number) => number;
}

async function checkProperty(t: Test, p: ElementsPage, s: Subject, arb: fc.Arbitrary<Case>, runs: number, seed: number): Promise<void> {
  const tally = { ok: 0, refused: 0, other: 0 };
  const retried: string[] = [];
  const len = s.values[0].length;
  try {
    await fc.assert(
      fc.asyncProperty(arb, async (c) => {
        const pair = async (): Promise<string[]> => {
          const outs: string[] = [];
          for (let k = 0; k < 2; k++) {
            const out = await p.tk(bodyOf(c, s.type, s.fields[k]!));
            const ids: string[] = [];
            const seen = observed(out, len, kept(c), ids);
            outs.push(seen);
            if (out.ok) tally.ok++;
            else if ((out.body as { code?: string }).code === 'expression_not_allowed') tally.refused++;
            else tally.other++;
            for (const v of s.values) {
              const leak = s.windows(v).find((w) => seen.includes(w));
              if (leak !== undefined) throw new Error(`the answer holds ${leak.length} characters of a value beyond its budget: ${JSON.stringify(c)}`);
              if (ids.some((id) => idReveals(id, v, s.budget, s.atLeast))) throw new Error(`an id keeps a value's hidden digits: ${JSON.stringify(c)}`);
            }
          }
          return outs;
        };
        let outs = await pair();
        if (outs[0] !== outs[1]) {
          // Once more: what a value decides comes out the same again, while a render the service
          // cut at its 50 ms renderLimit on a loaded machine (seen: the default SSN fingerprint,
          // 400 "could not be evaluated", with four browser test files at once) does not.
          retried.push(`${outs[0]}\n${outs[1]}`);
          outs = await pair();
        }
        if (outs[0] !== outs[1]) throw new Error(`the page tells the two values apart:\n${outs[0]}\n${outs[1]}`);
      }),
      { numRuns: runs, seed, endOnFailure: true },
    );
    t.pass(`${runs} expressions, each on both values: the same observations, nothing beyond the budget (answered ${tally.ok}, refused ${tally.refused}, other ${tally.other})`);
    for (const r of retried) t.comment(`differed once, then agreed:\n${r}`);
  } catch (err) {
    t.comment(`seed ${seed} (replay: TOKENPROXY_PROPERTY_SEED=${seed})`);
    const cause = (err as Error & { cause?: unknown }).cause;
    t.fail(`${(err as Error).message}${cause instanceof Error ? `\n${cause.message}` : ''}`);
  }
}

const seed = process.env.TOKENPROXY_PROPERTY_SEED ? Number(process.env.TOKENPROXY_PROPERTY_SEED) : Math.floor(Math.random() * 2 ** 31);

t.test('two cards and two SSNs that agree on their budgets look the same to the page', { skip }, async (t) => {
  const p = await openElementsPage(t, {
    cardA: { kind: 'card' }, cardB: { kind: 'card' },
    ssnA: { kind: 'text', type: 'social_security_number' }, ssnB: { kind: 'text', type: 'social_security_number' },
  });
  const cards = twinCards();
  const cvcs = twinCvcs();
  const ssns = twinSsns();
  await fillCard(p, 'cardA', cards[0], cvcs[0]);
  await fillCard(p, 'cardB', cards[1], cvcs[1]);
  await fillText(p, 'ssnA', ssns[0]);
  await fillText(p, 'ssnB', ssns[1]);
  t.comment(`seed ${seed}`);

  await checkProperty(t, p, {
    type: 'card', fields: ['cardA', 'cardB'], values: cards, budget: CARD,
    windows: cardLeakWindows, atLeast: (hidden) => hidden - 1,
  }, caseOf(['data.number', 'data.cvc', 'data', 'data.expiration_year'], '{{ data.number }}'), CARD_RUNS, seed);
  // The cvc is outside every budget: no answer may hold either cvc as a value of its own.
  const all = await p.messages();
  t.notOk(cvcs.some((c) => all.includes(`"${c}"`)), 'no message to the page held a cvc');

  await checkProperty(t, p, {
    type: 'social_security_number', fields: ['ssnA', 'ssnB'], values: ssns, budget: SSN,
    windows: ssnLeakWindows, atLeast: (hidden) => hidden,
  }, caseOf(['data'], '{{ data | digits }}'), SSN_RUNS, seed + 1);
});
