/**
 * Reactors and the service log (issue 10): a reactor's console lines pass through the card
 * scrubber, so `console.log(req.args)` writes no card number into the log that leaves the process
 * (finding 10); and two tenants may each have a reactor with the same id, each key reaching only
 * its own tenant's.
 */
import t from 'tap';
import { baseConfig, KEYS, startTestService } from '../helpers/service.js';

const CARD = '4242424242424242';
const AMEX = '378282246310005';
const GROUPED = '4000 0566 5566 5556';
const DASHED = '5555-5555-5555-4444';

const LOGGER = `module.exports = async function (req) {
  console.log(req.args);
  console.info('card', req.args.card, 'cvc', req.args.cvc);
  console.warn(JSON.stringify(req.args));
  console.error('grouped ' + req.args.grouped + ' dashed ' + req.args.dashed + ' amex ' + req.args.amex);
  console.log(req.args.card + ' ' + req.args.cvc);
  console.log('order 1234567890123 stays');
  throw new Error('declined card ' + req.args.card);
};`;

t.test('a reactor that logs card numbers leaves none in the service log', async (t) => {
  const cfg = baseConfig() as { tenants: Array<Record<string, unknown>> };
  cfg.tenants[0]!.reactors = [{ id: 'logger', name: 'logger', code: LOGGER }];
  const s = await startTestService(t, { config: cfg });
  const r = await s.call('POST', '/reactors/logger/react', { body: { args: { card: CARD, cvc: '987', grouped: GROUPED, dashed: DASHED, amex: AMEX } } });
  t.equal(r.status, 500, 'the reactor threw');
  t.equal(r.body.code, 'reactor_runtime_error');
  const logs = s.logs();
  const lines = logs.split('\n').filter((l) => l.includes('"console"'));
  t.equal(lines.length, 6, 'the six console lines reached the log');
  t.match(logs, /order 1234567890123 stays/, 'a number that is not a card is left alone');
  t.match(logs, /\[card redacted\]/, 'the card numbers were replaced');
  for (const c of [CARD, AMEX, GROUPED, DASHED, GROUPED.replace(/ /g, ''), DASHED.replace(/-/g, '')]) {
    t.notOk(logs.includes(c), `no ${c.slice(0, 4)}… in the log`);
  }
});

t.test('reactor ids that collide across tenants: each key reaches its own tenant\'s reactor', async (t) => {
  const cfg = baseConfig() as { tenants: Array<Record<string, unknown>> };
  cfg.tenants[0]!.reactors = [{ id: 'same', name: 'a', code: 'module.exports = async () => ({ raw: "tenant-a" });' }];
  cfg.tenants[1]!.reactors = [{ id: 'same', name: 'b', code: 'module.exports = async () => ({ raw: "tenant-b" });' }];
  const s = await startTestService(t, { config: cfg });
  const a = await s.call('POST', '/reactors/same/react', { key: KEYS.private, body: { args: {} } });
  const b = await s.call('POST', '/reactors/same/react', { key: KEYS.tenantB, body: { args: {} } });
  t.equal(a.status, 200);
  t.equal(a.body.raw, 'tenant-a');
  t.equal(b.status, 200);
  t.equal(b.body.raw, 'tenant-b');
});
