/**
 * The tokenize walk made linear (issue 10, finding 6): for generated bodies (strings, valid and
 * invalid definitions, scalars, nesting around the depth limit, more leaves than the token limit),
 * - the new walk answers exactly as the previous one did (a copy of it is the reference here):
 *   the same error code and field errors, or the same definitions in the same order, and the same
 *   assembled answer;
 * - a body walked in the JSON worker (LargeJsonBody, what bodies over 64 KB become) answers the
 *   same as the body walked on the event loop, and its answer renders to the same bytes.
 * Seeded (fast-check); the seed is printed on failure.
 */
import fc from 'fast-check';
import t from 'tap';
import { ServiceError, type FieldErrors } from '../../src/errors.js';
import { jsonDepthExceeds } from '../../src/http/body.js';
import { DeferredJson, LargeJsonBody } from '../../src/http/large-json.js';
import { isDefinitionShape, parseDefinition, plainStringDefinition, type Definition } from '../../src/vault/definition.js';
import { assemble, planTokenize, type Plan, type PlanOptions } from '../../src/vault/walk.js';

/** The walk as it was before this change (quadratic-free but path-per-node and copy-everything). */
function referencePlan(body: unknown, opts: PlanOptions): Plan {
  const definitions: Definition[] = [];
  // The one change made on purpose: field errors keyed "constructor" or "__proto__" were a
  // TypeError (a 500, issue 10 finding 9) with a plain object here.
  const errors: FieldErrors = Object.create(null) as FieldErrors;
  let count = 0;
  const countOne = () => {
    if (++count > opts.maxTokens) throw new ServiceError('too_many_tokens');
  };
  const member = (path: string, key: string) => (path ? `${path}.${key}` : key);
  const visit = (node: unknown, path: string, depth: number): void => {
    if (depth > opts.maxDepth) throw new ServiceError('nesting_too_deep');
    if (typeof node === 'string') {
      countOne();
      definitions.push(plainStringDefinition(path, node));
    } else if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) visit(node[i], `${path}[${i}]`, depth + 1);
    } else if (isDefinitionShape(node)) {
      countOne();
      const def = parseDefinition(node, path, errors, opts.now);
      if (def) definitions.push(def);
    } else if (typeof node === 'object' && node !== null) {
      for (const [k, v] of Object.entries(node)) visit(v, member(path, k), depth + 1);
    }
  };
  visit(body, '', 1);
  if (Object.keys(errors).length > 0) throw new ServiceError('validation_failed', { errors });
  return { definitions, single: isDefinitionShape(body) };
}

function referenceAssemble(body: unknown, results: readonly unknown[]): unknown {
  let k = 0;
  const visit = (node: unknown): unknown => {
    if (typeof node === 'string' || isDefinitionShape(node)) return results[k++];
    if (Array.isArray(node)) return node.map(visit);
    if (typeof node === 'object' && node !== null) return Object.fromEntries(Object.entries(node).map(([key, v]) => [key, visit(v)]));
    return node;
  };
  return visit(body);
}

type Outcome = { error: string; errors?: FieldErrors } | { paths: string[]; single: boolean };

function outcome(fn: () => Plan): Outcome {
  try {
    const plan = fn();
    return { paths: plan.definitions.map((d) => `${d.path}:${d.type}:${typeof d.data === 'string' ? d.data : JSON.stringify(d.data)}`), single: plan.single };
  } catch (err) {
    if (!(err instanceof ServiceError)) throw err;
    return err.code === 'validation_failed' ? { error: err.code, errors: err.errors } : { error: err.code };
  }
}

const key = fc.constantFrom('a', 'b', 'type', 'data', 'metadata', 'x y', '__proto__', 'constructor', '0', '10');
const definition = fc.oneof(
  fc.record({ type: fc.constant('token'), data: fc.string({ maxLength: 8 }) }),
  fc.record({ type: fc.constant('card'), data: fc.record({ number: fc.constantFrom('4242424242424242', '4242'), expiration_month: fc.constant(12), expiration_year: fc.constant(2040) }) }),
  fc.record({ type: fc.constantFrom('token', 'nope'), data: fc.oneof(fc.string({ maxLength: 4 }), fc.integer()), extra: fc.constant(1) }),
);
const { value } = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.string({ maxLength: 6 }),
    fc.integer(),
    fc.constant(null),
    fc.boolean(),
    definition,
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(key, tie('value'), { maxKeys: 4 }).map((d) => JSON.parse(JSON.stringify(d)) as unknown),
  ),
}));
const bodies = fc.tuple(value, fc.integer({ min: 1, max: 5 }), fc.integer({ min: 1, max: 6 }));

const NOW = Date.parse('2030-01-01T00:00:00Z');

t.test('the linear walk answers as the previous walk did', async (t) => {
  fc.assert(
    fc.property(bodies, ([raw, maxDepth, maxTokens]) => {
      const body = JSON.parse(JSON.stringify(raw)) as unknown;
      const opts = { maxDepth, maxTokens, now: NOW };
      const got = outcome(() => planTokenize(body, opts));
      const want = outcome(() => referencePlan(body, opts));
      if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`plan differs: ${JSON.stringify(got)} vs ${JSON.stringify(want)}`);
      if ('paths' in got) {
        const results = got.paths.map((_, i) => `result-${i}`);
        const a = JSON.stringify(assemble(body, results));
        const b = JSON.stringify(referenceAssemble(body, results));
        if (a !== b) throw new Error(`answer differs: ${a} vs ${b}`);
      }
    }),
    { numRuns: 3000 },
  );
  t.pass('3,000 generated bodies: same plans, same errors, same answers');
});

t.test('a body walked in the JSON worker answers as the same body walked here', async (t) => {
  const seen = new Set<string>();
  await fc.assert(
    fc.asyncProperty(bodies, async ([raw, maxDepth, maxTokens]) => {
      const text = JSON.stringify(raw);
      const body = JSON.parse(text) as unknown;
      const opts = { maxDepth, maxTokens, now: NOW };
      // issue 30: the event-loop path is readJson's byte scan, then the walk; the worker path must
      // answer exactly that (a nesting_too_deep from the worker is no longer taken on trust)
      const want: Outcome = jsonDepthExceeds(Buffer.from(text), maxDepth) ? { error: 'nesting_too_deep' } : outcome(() => planTokenize(body, opts));
      let large: LargeJsonBody | undefined;
      let got: Outcome;
      try {
        large = await LargeJsonBody.parse(Buffer.from(text), maxDepth, NOW);
        got = outcome(() => planTokenize(large!, opts));
      } catch (err) {
        // The worker's byte scan refuses a too-deep body before parsing it, as readJson does.
        if (!(err instanceof ServiceError)) throw err;
        got = { error: err.code };
      }
      if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`plan differs: ${JSON.stringify(got)} vs ${JSON.stringify(want)}`);
      if ('error' in got) seen.add(got.error);
      else seen.add('plan');
      if (large && 'paths' in got && 'paths' in want) {
        const results = got.paths.map((_, i) => ({ id: `result-${i}` }));
        const deferred = assemble(large, results);
        if (!(deferred instanceof DeferredJson)) throw new Error('a worker body answers through the worker');
        const bytes = (await deferred.render()).toString('utf8');
        const local = JSON.stringify(assemble(body, results));
        if (bytes !== local) throw new Error(`answer differs: ${bytes} vs ${local}`);
      }
    }),
    { numRuns: 300 },
  );
  // the generated bodies reach both the refusal and a plan (so the equality above compared both)
  t.ok(seen.has('nesting_too_deep') && seen.has('plan'), `outcomes seen: ${[...seen].join(', ')}`);
  t.pass('300 generated bodies through the worker: same plans, same errors, same answer bytes');
});

t.test('an error body lists at most 100 fields', async (t) => {
  const members = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`f${i}`, 1]));
  const body = { type: 'token', data: 'v', ...members };
  try {
    planTokenize(body, { maxDepth: 10, maxTokens: 1, now: NOW });
    t.fail('expected validation_failed');
  } catch (err) {
    t.equal((err as ServiceError).code, 'validation_failed');
    t.equal(Object.keys((err as ServiceError).errors ?? {}).length, 100);
  }
});
