/** POST /reactors/{id}/react end to end: args in, raw out, tokens really stored; permissions and tenancy. */
import t from 'tap';
import { baseConfig, KEYS, startTestService } from '../helpers/service.js';
import { checkResponses } from '../helpers/openapi.js';

const VISA = '4242424242424242';

function config(): Record<string, unknown> {
  const cfg = baseConfig() as { tenants: Array<Record<string, unknown>> };
  cfg.tenants[0]!.reactors = [
    { id: 'brand', name: 'brand', code_file: 'reactors/card-brand.js', configuration: { greeting: 'hi' } },
    { id: 'echo', name: 'echo', code: 'module.exports = async function (req) { console.log("echo called"); return { raw: { args: req.args, configuration: req.configuration } }; };', configuration: { region: 'eu' } },
    { id: 'thrower', name: 'thrower', code: 'module.exports = async function () { const e = new Error("no such customer"); e.status = 402; throw e; };' },
    { id: 'crash', name: 'crash', code: 'module.exports = async function () { null.x; };' },
  ];
  return cfg;
}

t.test('reactors over HTTP', async (t) => {
  const s = await startTestService(t, { config: config() });
  await checkResponses(s);

  const r = await s.call('POST', '/reactors/brand/react', { body: { args: { card: { number: VISA, expiration_month: 12, expiration_year: 2030 } } } });
  t.equal(r.status, 200);
  t.same(r.body.raw, { brand: 'visa', last4: '4242' });
  t.equal(r.body.tokens.card.type, 'card');
  // issue 30: `tokenize` is a composite body ({card: …}), and README "POST /tokenize" says card
  // records there carry the masked fields under `data`, not `mask`
  t.same(r.body.tokens.card.data, { number: 'XXXXXXXXXXXX4242', expiration_month: 12, expiration_year: 2030 });
  t.notOk('mask' in r.body.tokens.card, 'no mask member in a composite answer');
  const stored = await s.call('GET', `/tokens/${r.body.tokens.card.id}`);
  t.equal(stored.status, 200, 'the token was really stored');
  t.equal(stored.body.data.number, VISA);

  const echo = await s.call('POST', '/reactors/echo/react', { body: { args: { a: [1, 2] } } });
  t.same(echo.body, { raw: { args: { a: [1, 2] }, configuration: { region: 'eu' } }, tokens: null });
  t.ok(s.logs().includes('echo called'), 'console output is captured into the service log');

  const thrown = await s.call('POST', '/reactors/thrower/react', { body: { args: {} } });
  t.equal(thrown.status, 402, 'a thrown status passes through');
  t.equal(thrown.body.code, 'reactor_error');

  const crash = await s.call('POST', '/reactors/crash/react', { body: { args: {} } });
  t.equal(crash.status, 500);
  t.equal(crash.body.code, 'reactor_runtime_error');
  t.equal(crash.body.detail, 'Reactor Runtime Error');
  t.ok(Array.isArray(crash.body.errors?.error), 'errors.error carries the message');

  // issue 30: each with the status and the code of README's error table
  const bad = await s.call('POST', '/reactors/brand/react', { body: { args: { card: { number: '123' } } } });
  t.same([bad.status, bad.body.code], [400, 'reactor_error'], 'the reactor threw a status 400');

  const nope = await s.call('POST', '/reactors/nope/react', { body: { args: {} } });
  t.same([nope.status, nope.body.code], [404, 'not_found'], 'no such reactor');
  const other = await s.call('POST', '/reactors/echo/react', { key: KEYS.tenantB, body: { args: {} } });
  t.same([other.status, other.body.code], [404, 'not_found'], 'another tenant\'s reactor is not found');
  const denied = await s.call('POST', '/reactors/echo/react', { key: KEYS.masked, body: { args: {} } });
  t.same([denied.status, denied.body.code], [403, 'forbidden'], 'needs reactor:invoke');
  t.equal((await s.call('POST', '/tokenize', { body: 'still-serving' })).status, 200);
});
