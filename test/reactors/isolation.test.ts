/**
 * Issue 23 finding 4: a warm reactor isolate keeps compiled code, never data. Two keys call the
 * same warm reactor one after the other through HTTP (one isolate: warm_concurrency 1,
 * max_concurrency 1); whatever the first call left behind in a global, a module-level variable, a
 * closure or Object.prototype, the second call must not see it.
 */
import t from 'tap';
import { randomCard, randomCvc } from '../helpers/secrets.js';
import { baseConfig, startTestService } from '../helpers/service.js';

const CALLER_B = 'iso_caller_b_key_fffffffffffffffff';

/** Each reactor answers what the previous call left, then leaves its own args behind. */
const REACTORS: Record<string, string> = {
  global: `module.exports = async function (req) {
  const prev = globalThis.last === undefined ? null : globalThis.last;
  globalThis.last = req.args;
  return { raw: { prev } };
};`,
  module: `let last = null;
var seen = [];
module.exports = async function (req) {
  const prev = { last, seen: seen.slice() };
  last = req.args;
  seen.push(req.args);
  return { raw: { prev } };
};`,
  closure: `const cache = (function () {
  const entries = new Map();
  return { put(k, v) { entries.set(k, v); }, all() { return [...entries.values()]; } };
})();
module.exports = async function (req) {
  const prev = cache.all();
  cache.put(JSON.stringify(req.args), req.args);
  return { raw: { prev } };
};`,
  prototype: `module.exports = async function (req) {
  const prev = { object: ({}).leaked === undefined ? null : ({}).leaked, array: [].leakedToo === undefined ? null : [].leakedToo };
  Object.prototype.leaked = req.args;
  Array.prototype.leakedToo = req.args;
  return { raw: { prev } };
};`,
};

function config(): Record<string, unknown> {
  const cfg = baseConfig() as { tenants: Array<{ applications: unknown[]; reactors?: unknown[] }> };
  const tenant = cfg.tenants[0]!;
  tenant.reactors = Object.entries(REACTORS).map(([id, code]) => ({ id, name: id, code, warm_concurrency: 1, max_concurrency: 1 }));
  // A second caller: may invoke reactors, holds no token right at all.
  tenant.applications.push({ id: 'aaaaaaaa-0000-4000-8000-0000000000b1', name: 'caller-b', type: 'private', keys: [CALLER_B], permissions: ['reactor:invoke'] });
  return cfg;
}

t.test('two keys calling the same warm reactor never see each other\'s args', async (t) => {
  const s = await startTestService(t, { config: config() });
  for (const id of Object.keys(REACTORS)) {
    const card = randomCard();
    const cvc = randomCvc();
    const a = await s.call('POST', `/reactors/${id}/react`, { body: { args: { card: { number: card, cvc } } } });
    t.equal(a.status, 200, `${id}: caller A ${a.text}`);
    const b = await s.call('POST', `/reactors/${id}/react`, { key: CALLER_B, body: { args: { hello: 'b' } } });
    t.equal(b.status, 200, `${id}: caller B ${b.text}`);
    t.notOk(b.text.includes(card), `${id}: caller B does not get caller A's card`);
    t.notOk(b.text.includes(cvc), `${id}: caller B does not get caller A's cvc`);
    // And the other way round, and a call after its own: every call starts from the code alone.
    const again = await s.call('POST', `/reactors/${id}/react`, { body: { args: { n: 1 } } });
    t.notOk(again.text.includes('"b"'), `${id}: caller A does not get caller B's args`);
    t.same(again.body.raw, b.body.raw, `${id}: every call sees the same fresh state`);
  }
});
