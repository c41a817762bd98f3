/**
 * The disclosure property, run against each store (disclosure-property.test.ts,
 * disclosure-property-postgres.test.ts): each token type has a budget of what may be shown to
 * someone who may not read the value (cards: first 6 and last 4 digits; SSNs: last 4). For two
 * values that agree on that budget (disclosure-grammar.ts) and random expressions of the template
 * grammar in a definition's id, fingerprint_expression, mask, search_indexes and
 * deduplicate_token, everything the caller observes (disclosure-observe.ts) must be the same for
 * both values, and no answer may hold more of either value than the budget. Entry points:
 *
 * (a) a public key (a browser's: its values may come from a hosted field it cannot read):
 *     POST /tokenize and POST /tokens;
 * (b) a private key without reveal (rule `mask` or `redact`) reading, listing and detokenizing
 *     tokens a reveal key created with those expressions;
 * (c) a use-only key (reactor:invoke, token:use, token:create, no read) through a reactor whose
 *     `tokenize` is its args, the args naming the values by detokenization expressions and
 *     carrying the definition's expressions escaped (`\{{`) so they reach the reactor as written;
 *     and the value cut by the filters such a key may use and tokenized as another type, then read
 *     by a mask key;
 * (d) a pre-configured proxy's tokenize transform (templates drawn from the grammar at start-up;
 *     one the config refuses is left out, a refusal that does not depend on any value), and the
 *     detokenize transform for a key that may use and read masked (test/detokenize/oracle.test.ts
 *     covers a key without read on `token` and `card` tokens; this adds typed string tokens, pairs
 *     within a budget, a mask reader, and `size`, `digits`, `truncate`, `remove`).
 *
 * DISCLOSURE_SEED=<n> reproduces a run (the seed is in every test name and failure);
 * DISCLOSURE_RUNS sets the runs per property (default 20).
 */
import fc from 'fast-check';
import type { Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { buildConfig } from '../../src/config/load.js';
import { compileOrThrow } from '../../src/model/compile.js';
import { call, type TestService } from '../helpers/service.js';
import { startUpstream } from '../helpers/upstream.js';
import { observed } from '../detokenize/fixture.js';
import {
  aliasArb, chainArb, definition, defRecipeArb, describe, short, expression, filterArb, KINDS, PAIRS, pairArb, probeArb,
  type DefRecipe, type IdKind, type Kind, type Pair, type Recipe, type Value,
} from './disclosure-grammar.js';
import { maskedId, observe, overBudgetIn, recordIds, type Answer, type Seen } from './disclosure-observe.js';

export const SEED = process.env.DISCLOSURE_SEED !== undefined ? Number(process.env.DISCLOSURE_SEED) : Math.floor(Math.random() * 2 ** 31);
export const RUNS = Number(process.env.DISCLOSURE_RUNS ?? 20);

const TENANT = '77777777-7777-4777-8777-777777777777';
const app = (n: number) => `dddddddd-0000-4000-8000-00000000000${n}`;
export const K = {
  creator: 'disc_creator_key_aaaaaaaaaaaaaaaaaa',
  public: 'disc_public_key_bbbbbbbbbbbbbbbbbbb',
  masked: 'disc_masked_key_cccccccccccccccccc',
  redact: 'disc_redact_key_dddddddddddddddddd',
  useOnly: 'disc_useonly_key_eeeeeeeeeeeeeeeee',
};
const PAY_KEY = 'disc_proxy_pay_0123456789abcdef';
const tokKey = (i: number) => `disc_proxy_tok${i}_0123456789abcdef`;

const CRUD = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search', 'token:use'];

/** A proxy tokenize template drawn from the grammar, for values of `kind`. */
interface ProxyTemplate {
  kind: Kind;
  token: Record<string, unknown>;
  id: IdKind;
}

function config(upstream: string, templates: readonly ProxyTemplate[]): Record<string, unknown> {
  return {
    server: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    rate_limits: { enabled: false },
    tenants: [{
      id: TENANT,
      name: 'disclosure',
      applications: [
        { id: app(1), name: 'creator', type: 'private', keys: [K.creator], permissions: [...CRUD, 'proxy:invoke'],
          rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: CRUD }] },
        { id: app(2), name: 'public', type: 'public', keys: [K.public], permissions: ['token:create'] },
        // May read masked, list, and send (token:use) without reveal.
        { id: app(3), name: 'masked', type: 'private', keys: [K.masked], permissions: ['proxy:invoke'],
          rules: [{ priority: 1, container: '/', transform: 'mask', permissions: ['token:read', 'token:search', 'token:use'] }] },
        { id: app(4), name: 'redact', type: 'private', keys: [K.redact], permissions: [],
          rules: [{ priority: 1, container: '/', transform: 'redact', permissions: ['token:read', 'token:search'] }] },
        { id: app(5), name: 'use-only', type: 'private', keys: [K.useOnly], permissions: ['reactor:invoke', 'token:use', 'token:create'] },
      ],
      reactors: [{ id: 'tok', name: 'tok', code: 'module.exports = async function (req) { return { raw: { ok: true }, tokenize: req.args }; };' }],
      proxies: [
        { id: 'pay', name: 'pay', key: PAY_KEY, destination_url: `${upstream}/pay`, require_auth: true, request_transforms: [{ type: 'detokenize' }] },
        ...templates.map((p, i) => ({
          id: `tok${i}`, name: `tok${i}`, key: tokKey(i), destination_url: `${upstream}/tok`, require_auth: false,
          request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/v', token: p.token }] }],
        })),
      ],
    }],
  };
}

/** Whether the config takes this template (a refusal at start-up is the same for every value). */
function accepted(p: ProxyTemplate): boolean {
  try {
    const raw = { ...config('http://127.0.0.1:9', [p]), store: { kind: 'embedded', path: '/nonexistent/tokens.db' } };
    compileOrThrow(buildConfig(raw, { env: { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') } }));
    return true;
  } catch {
    return false;
  }
}

/**
 * Templates for the proxies, per kind: an alias id with a window (at the budget's edge or past
 * it), and the first of a few random definitions the config takes (alias filters only in `id`: a
 * proxy reads no token, so no deduplication, and makes a token per request, so no fixed id).
 */
function proxyTemplates(): { kept: ProxyTemplate[]; refused: number } {
  const windows: Record<Kind, [number[], number[]]> = {
    card: [[0, 6, 7, 10], [0, 4, 5]], card_number: [[0, 6, 7, 10], [0, 4, 5]], social_security_number: [[0, 3], [0, 4, 5]],
  };
  const notAlias = (r: Recipe): Recipe => (r.form === 'alias' ? { form: 'chain', select: r.select, filters: [] } : r);
  const templates: ProxyTemplate[] = [];
  let refused = 0;
  KINDS.forEach((kind, i) => {
    const [firsts, lasts] = windows[kind];
    const windowed = fc
      .record({ filter: fc.constantFrom('alias_preserve_format' as const, 'alias_preserve_length' as const), first: fc.constantFrom(...firsts), last: fc.constantFrom(...lasts) })
      .map(({ filter, first, last }): Recipe => ({ form: 'alias', select: 'main', filter, window: [first, last] }));
    const [[alias, guess]] = fc.sample(fc.tuple(windowed, PAIRS[kind]), { seed: SEED + i, numRuns: 1 });
    const random = fc.sample(fc.tuple(defRecipeArb, aliasArb), { seed: SEED + 10 + i, numRuns: 4 });
    const candidates: DefRecipe[] = [
      { id: alias!, fingerprint: null, mask: null, search: [], dedupe: null, nested: false },
      ...random.map(([r, id]) => ({
        ...r, id: { ...id, select: 'main' as const }, dedupe: null,
        fingerprint: r.fingerprint === null || r.fingerprint === 'default' ? r.fingerprint : notAlias(r.fingerprint),
        mask: r.mask === null ? null : notAlias(r.mask), search: r.search.map(notAlias),
      })),
    ];
    let randomKept = false;
    for (const [j, recipe] of candidates.entries()) {
      if (j > 0 && randomKept) break;
      // The guesses of probes are at a value the proxy will not see: chance guesses.
      const { def, id } = definition(recipe, kind, undefined, guess!.a, 'unused');
      const { data: _data, ...token } = def;
      const p = { kind, token, id };
      if (!accepted(p)) refused++;
      else {
        templates.push(p);
        if (j > 0) randomKept = true;
      }
    }
  });
  return { kept: templates, refused };
}

/**
 * Runs a property under fast-check with the suite's seed; a failure names the seed, the
 * counterexample and what differed. Whether it held (the tallies are only checked then).
 */
async function property<Ts extends [unknown, ...unknown[]]>(t: Test, name: string, prop: fc.IAsyncPropertyWithHooks<Ts>, todo?: string): Promise<boolean> {
  try {
    await fc.assert(prop, { seed: SEED, numRuns: RUNS, endOnFailure: true });
    return true;
  } catch (err) {
    const cause = (err as Error).cause;
    t.fail(`${name}: DISCLOSURE_SEED=${SEED}\n${(err as Error).message}${cause instanceof Error ? `\n${cause.message}` : ''}`, todo ? { todo } : {});
    return false;
  }
}

/** Two sides' observations: equal, and neither over budget. Throws with both when not. */
function compare(what: string, pair: Pair, a: Seen[], b: Seen[]): void {
  const [ja, jb] = [JSON.stringify(a.map((x) => x.seen)), JSON.stringify(b.map((x) => x.seen))];
  if (ja !== jb) throw new Error(`${short(what)}: observations differ between the two values\nA: ${short(ja).slice(0, 3000)}\nB: ${short(jb).slice(0, 3000)}`);
  for (const s of [...a, ...b]) {
    const leak = overBudgetIn(s.text, [pair.a, pair.b]);
    if (leak !== null) throw new Error(`${short(what)}: an answer holds more than the budget (${leak})\n${s.text.slice(0, 3000)}`);
  }
}

/** Counters of a property, checked at its end: runs compared, outcomes seen. */
class Tally {
  compared = 0;
  skipped = 0;
  readonly statuses = new Set<number>();
  report(t: Test, name: string, minOutcomes = 2, minCompared = Math.ceil(RUNS / 3)): void {
    t.ok(this.compared >= minCompared, `${name}: ${this.compared} of ${RUNS} runs compared (${this.skipped} not comparable)`);
    t.ok(this.statuses.size >= minOutcomes, `${name}: several outcomes compared (${[...this.statuses].sort().join(', ')})`);
  }
}

export interface DisclosureStore {
  /** Starts the service on this store with `config`. */
  start(t: Test, config: Record<string, unknown>): Promise<TestService>;
}

export async function runDisclosureSuite(t: Test, store: DisclosureStore): Promise<void> {
  const up = await startUpstream(t);
  // The tokenize proxies' destination echoes what it got (the caller sees the ids the proxy made);
  // the detokenize proxy's always answers the same (what the destination learns is not the point).
  up.respond((r, res) => {
    const body = r.url.startsWith('/tok') ? r.body.toString('utf8') : '{"sent":true}';
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(body);
  });
  const { kept, refused } = proxyTemplates();
  t.comment(`proxy templates: ${kept.length} kept, ${refused} refused by the config`);
  const s = await store.start(t, config(up.url, kept));
  const api = (key: string, method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Answer> =>
    call(s.url, method, path, { key, body, headers });
  /** Every value sent, for the log scan at the end. */
  const used: Value[] = [];
  const pairs = (arb: fc.Arbitrary<Pair>) => arb.map((p) => {
    used.push(p.a, p.b);
    return p;
  });
  let serial = 0;
  /** Plain ids of the same length for both sides, unique per request. */
  const plainIds = () => {
    serial++;
    return [`dp${String(serial).padStart(5, '0')}a`, `dp${String(serial).padStart(5, '0')}b`] as const;
  };
  const victim = async (kind: Kind, v: Value): Promise<string> => {
    const r = await api(K.creator, 'POST', '/tokens', { type: kind, data: v });
    if (r.status !== 201) throw new Error(`victim token not created: ${r.status} ${r.text}`);
    return r.body.id as string;
  };
  /** The ids of an answer's records, each replaced as `kind` says. */
  const idsOf = (r: Answer, kind: IdKind, extra: Array<[string, string]> = []) =>
    new Map<string, string>([...extra, ...recordIds(r.body).map((id) => [id, maskedId(id, kind)] as [string, string])]);

  t.test(`(a) a public key: POST /tokenize and POST /tokens (seed ${SEED}, ${RUNS} runs)`, async (t) => {
    const tally = new Tally();
    if (await property(t, '(a)', fc.asyncProperty(pairs(pairArb), defRecipeArb, fc.constantFrom('/tokenize', '/tokens'), async (pair, r, route) => {
      const plain = plainIds();
      const sides = [pair.a, pair.b].map((v, i) => definition(r, pair.kind, v, pair.a, plain[i]!));
      const seen: Seen[][] = [];
      for (const { def, id } of sides) {
        const body = route === '/tokenize' && r.nested ? { x: def } : def;
        const res = await api(K.public, 'POST', route, body);
        tally.statuses.add(res.status);
        seen.push([observe(res, idsOf(res, id))]);
      }
      compare(`${pair.kind} ${route} ${describe(sides[0]!.def)}`, pair, seen[0]!, seen[1]!);
      tally.compared++;
    }))) {
      // A public key's definitions with a template are all one 403 now, and most drawn ones carry
      // one: 20 runs may hold no other outcome (a clean-clone run on Node 24 drew none), so one
      // outcome is enough here; test/vault/disclosure-budget.test.ts holds the named options' 200.
      tally.report(t, '(a)', 1);
    }
  });

  t.test(`(b) a key without reveal reads, lists and detokenizes tokens made with expressions (seed ${SEED}, ${RUNS} runs)`, async (t) => {
    const tally = new Tally();
    // Masks and alias ids are what a reader sees: they are drawn more often here.
    // The creator may use any expression (it sent the value); the ones that fail on one value only
    // make the pair not comparable, so its fingerprint and search indexes are plain chains here.
    const readRecipe = fc.record({
      r: defRecipeArb,
      mask: fc.oneof(chainArb, probeArb),
      id: fc.option(aliasArb.map((a) => ({ ...a, select: 'main' as const })), { freq: 3 }),
      fingerprint: fc.option(chainArb),
      search: fc.array(chainArb, { maxLength: 2 }),
    }).map(({ r, mask, id, fingerprint, search }): DefRecipe => ({ ...r, mask, id: id ?? r.id, fingerprint, search }));
    if (await property(t, '(b)', fc.asyncProperty(pairs(pairArb), readRecipe, fc.constantFrom(K.masked, K.redact), async (pair, r, reader) => {
      const plain = plainIds();
      // A card's mask is the service's own (a definition with one is refused whatever the value).
      const recipe = pair.kind === 'card' ? { ...r, mask: null } : r;
      const sides = [pair.a, pair.b].map((v, i) => definition(recipe, pair.kind, v, pair.a, plain[i]!));
      const made = await Promise.all(sides.map(({ def }) => api(K.creator, 'POST', '/tokens', def)));
      // The creator sent the values: its answers may differ. Only tokens made from both are read.
      if (made[0]!.status !== 201 || made[1]!.status !== 201) {
        tally.skipped++;
        return;
      }
      const seen: Seen[][] = [];
      for (const [i, { id }] of sides.entries()) {
        const tokenId = made[i]!.body.id as string;
        const ids = new Map([[tokenId, maskedId(tokenId, id)]]);
        const answers = [
          await api(reader, 'GET', `/tokens/${encodeURIComponent(tokenId)}`),
          await api(reader, 'GET', `/tokens?id=${encodeURIComponent(tokenId)}`),
          await api(reader, 'POST', '/detokenize', { v: `{{ ${tokenId} }}`, n: 1 }),
        ];
        for (const x of answers) tally.statuses.add(x.status);
        seen.push(answers.map((x) => observe(x, ids)));
      }
      compare(`${pair.kind} read by ${reader === K.masked ? 'mask' : 'redact'} ${describe(sides[0]!.def)}`, pair, seen[0]!, seen[1]!);
      tally.compared++;
    }))) {
      // The creator's own refusals (an alias window past the budget, a probe that fails on one
      // value) leave about half the pairs uncompared.
      tally.report(t, '(b)', 2, Math.ceil(RUNS / 5));
    }
  });

  t.test(`(c) a use-only key through a reactor's tokenize with detokenized args (seed ${SEED}, ${RUNS} runs)`, async (t) => {
    const tally = new Tally();
    if (await property(t, '(c)', fc.asyncProperty(pairs(pairArb), defRecipeArb, async (pair, r) => {
      const plain = plainIds();
      const victims = [await victim(pair.kind, pair.a), await victim(pair.kind, pair.b)];
      const sides = victims.map((v, i) => definition(r, pair.kind, `{{ ${v} }}`, pair.a, plain[i]!, true));
      const seen: Seen[][] = [];
      for (const [i, { def, id }] of sides.entries()) {
        const res = await api(K.useOnly, 'POST', '/reactors/tok/react', { args: def });
        tally.statuses.add(res.status);
        seen.push([observe(res, idsOf(res, id, [[victims[i]!, '<victim>']]))]);
      }
      compare(`${pair.kind} reactor tokenize ${describe(sides[0]!.def)}`, pair, seen[0]!, seen[1]!);
      tally.compared++;
    }))) {
      // Nothing is tokenized from values the key may only use: every answer is the one 403.
      tally.report(t, '(c)', 1);
      t.same([...tally.statuses], [403], '(c): expression_not_allowed, whatever the definition');
    }
  });

  // On the code of b744fda this failed within a few runs (a card's middle digits came back as the
  // last 4 of a card token's mask, or through a Luhn or ABA check as 400 against 200, or to a mask
  // key as the last 4 of an SSN or account number token): values computed from tokens the key may
  // only use are no longer tokenized at all (auth/access.ts templatePolicy 'none').
  t.test(`(c) the same, the value cut with length-only filters and tokenized as another type, then read masked (seed ${SEED}, ${RUNS} runs)`, async (t) => {
    // The definition carries only what the rule lets it (type and data), but the value is
    // validated as the type says (a Luhn or ABA check over digits the caller may not see) and
    // later shown within that type's budget (a routing number's is everything).
    const tally = new Tally();
    // Lengths each type takes, so that the type's own check of the digits (Luhn, ABA) decides.
    const lengths: Record<string, number[]> = {
      card: [13, 15, 16], card_number: [13, 14, 15, 16], social_security_number: [9], employer_id_number: [9],
      us_bank_routing_number: [9], us_bank_account_number: [5, 9], token: [6],
    };
    const shaped = fc.constantFrom(...Object.keys(lengths)).chain((type) => fc.record({
      type: fc.constant(type),
      length: fc.constantFrom(...lengths[type]!),
      start: fc.integer({ min: 0, max: 8 }),
      // Known digits put around the cut shift its sums (Luhn, ABA) by known amounts.
      around: fc.array(fc.tuple(fc.constantFrom('prepend', 'append'), fc.constantFrom(...'0123456789')), { maxLength: 2 }),
      other: fc.option(fc.integer({ min: 0, max: 12 }).map((n) => `reveal_last: ${n}`), { freq: 4 }),
    }));
    if (await property(t, '(c) retyped', fc.asyncProperty(pairs(pairArb), shaped, async (pair, { type, length, start, around, other }) => {
      const filters = [`slice: ${start}, ${Math.max(1, length - around.length)}`, ...around.map(([f, d]) => `${f}: '${d}'`), ...(other ? [other] : [])];
      const victims = [await victim(pair.kind, pair.a), await victim(pair.kind, pair.b)];
      const seen: Seen[][] = [];
      for (const v of victims) {
        const select = pair.kind === 'card' ? [`json: '$.number'`] : [];
        const value = `{{ ${[v, ...select, ...filters].join(' | ')} }}`;
        const def = { type, data: type === 'card' ? { number: value } : value };
        const res = await api(K.useOnly, 'POST', '/reactors/tok/react', { args: def });
        tally.statuses.add(res.status);
        const ids = idsOf(res, null, [[v, '<victim>']]);
        const answers = [res];
        for (const id of recordIds(res.body)) answers.push(await api(K.masked, 'GET', `/tokens/${encodeURIComponent(id)}`));
        seen.push(answers.map((x) => observe(x, ids)));
      }
      compare(`${pair.kind} as ${type} | ${filters.join(' | ')}`, pair, seen[0]!, seen[1]!);
      tally.compared++;
    }))) {
      tally.report(t, '(c) retyped', 1);
      t.same([...tally.statuses], [403], '(c) retyped: expression_not_allowed, whatever the type and the cut');
    }
  });

  t.test(`(d) a pre-configured proxy's tokenize transform, then a mask reader (seed ${SEED}, ${RUNS} runs)`, async (t) => {
    if (kept.length === 0) {
      t.pass('every drawn template was refused at start-up: nothing to send');
      return;
    }
    const tally = new Tally();
    const choice = fc.integer({ min: 0, max: kept.length - 1 }).chain((i) => fc.tuple(fc.constant(i), pairs(PAIRS[kept[i]!.kind])));
    if (await property(t, '(d) tokenize', fc.asyncProperty(choice, async ([i, pair]) => {
      const p = kept[i]!;
      const seen: Seen[][] = [];
      // The proxy's caller sent the value in the clear and the template is the operator's: the
      // caller's own answers may differ by value (a search index that fails on one value only, as
      // a clean-clone run on PostgreSQL drew: seed 1208850). What must not differ is what a mask
      // reader sees of the tokens made from both.
      const made = await Promise.all([pair.a, pair.b].map((v) => call(s.url, 'POST', '/proxy/charge', { key: null, body: { v, n: 1 }, headers: { 'svc-proxy-key': tokKey(i) } })));
      for (const res of made) tally.statuses.add(res.status);
      if (made.some((res) => res.status !== 200 || typeof res.body?.v !== 'string')) {
        tally.skipped++;
        return;
      }
      for (const res of made) {
        const tokenId = res.body.v as string;
        const ids = new Map([[tokenId, maskedId(tokenId, p.id)]]);
        const answers = [res, await api(K.masked, 'GET', `/tokens/${encodeURIComponent(tokenId)}`)];
        seen.push(answers.map((x) => observe(x, ids)));
      }
      compare(`${p.kind} proxy tok${i} ${JSON.stringify(p.token)}`, pair, seen[0]!, seen[1]!);
      tally.compared++;
    }))) {
      tally.report(t, '(d) tokenize', 1, Math.ceil(RUNS / 5));
    }
  });

  t.test(`(d) the detokenize transform for a key that may use and read masked (seed ${SEED}, ${RUNS} runs)`, async (t) => {
    const tally = new Tally();
    const chain: fc.Arbitrary<Recipe> = fc.oneof(
      fc.record({ form: fc.constant('chain' as const), select: fc.constant('main' as const), filters: fc.array(filterArb, { minLength: 1, maxLength: 3 }) }),
      probeArb,
    );
    const placeArb = fc.constantFrom('header' as const, 'body' as const, 'query' as const);
    if (await property(t, '(d) detokenize', fc.asyncProperty(pairs(pairArb), chain, placeArb, async (pair, r, place) => {
      const victims = [await victim(pair.kind, pair.a), await victim(pair.kind, pair.b)];
      // The token expression of the recipe, turned into a detokenization expression over the id.
      const filters = expression(r, pair.kind, pair.a).replace(/^\{\{\s*data(\.number)?\s*\|?/, '').replace(/\}\}$/, '').trim();
      const select = pair.kind === 'card' ? "json: '$.number'" : '';
      const seen: Seen[][] = [];
      for (const v of victims) {
        const expr = `{{ ${v}${[select, filters].filter(Boolean).map((f) => ` | ${f}`).join('')} }}`;
        const res = await call(s.url, 'POST', place === 'query' ? `/proxy/charge?v=${encodeURIComponent(expr)}` : '/proxy/charge', {
          key: K.masked,
          body: place === 'body' ? { v: expr, n: 1 } : { n: 1 },
          headers: { 'svc-proxy-key': PAY_KEY, ...(place === 'header' ? { 'x-v': expr } : {}) },
        });
        tally.statuses.add(res.status);
        const o = observed(res, true);
        const text = JSON.stringify(o).split(v).join('<victim>');
        seen.push([{ seen: JSON.parse(text) as unknown, text }]);
      }
      compare(`${pair.kind} detokenize ${place} ${filters}`, pair, seen[0]!, seen[1]!);
      tally.compared++;
    }))) {
      tally.report(t, '(d) detokenize');
    }
  });

  t.test('the service logged none of the values', async (t) => {
    t.equal(overBudgetIn(s.logs(), used), null, `${used.length} values, none in the log`);
  });
}
