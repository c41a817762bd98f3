/**
 * Issue 23 finding 5: a reactor error answered to a key that used a token without `reveal`
 * carries no message from user code. A reactor that throws `new Error('bad card ' +
 * JSON.stringify(req.args))` on args holding a detokenized card answers a generic problem with an
 * `error_id`; the message (card scrubbed) is in the log under the same id. Without expressions in
 * the args the message stays in the answer, as before.
 */
import t from 'tap';
import { cardPattern, randomCard, randomCvc } from '../helpers/secrets.js';
import { startTestService } from '../helpers/service.js';

const TENANT = '77777777-7777-4777-8777-777777777777';
const CREATOR = 'rerr_creator_key_aaaaaaaaaaaaaaaaa';
const USER = 'rerr_user_key_bbbbbbbbbbbbbbbbbbbbb';
const id = (n: number) => `eeeeeeee-0000-4000-8000-00000000000${n}`;
const crud = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search'];

const REACTORS: Record<string, string> = {
  // An uncaught error: 500 reactor_runtime_error.
  thrower: `module.exports = async function (req) { throw new Error('bad card ' + JSON.stringify(req.args)); };`,
  // A thrown status that passes through: 402 reactor_error.
  declined: `module.exports = async function (req) { const e = new Error('declined ' + JSON.stringify(req.args)); e.status = 402; throw e; };`,
  // A result that cannot be serialized, with the args in the serializer's error.
  unserializable: `module.exports = async function (req) { return { raw: { toJSON() { throw new Error('cannot ' + JSON.stringify(req.args)); } } }; };`,
};

function config(): Record<string, unknown> {
  return {
    server: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    rate_limits: { enabled: false },
    tenants: [
      {
        id: TENANT,
        name: 'rerr',
        applications: [
          { id: id(1), name: 'creator', type: 'private', keys: [CREATOR], permissions: [...crud, 'reactor:invoke'],
            rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: crud }] },
          // May use cards in reactor args, may not read them.
          { id: id(2), name: 'user', type: 'private', keys: [USER], permissions: ['reactor:invoke', 'token:use'] },
        ],
        reactors: Object.entries(REACTORS).map(([rid, code]) => ({ id: rid, name: rid, code })),
      },
    ],
  };
}

t.test('reactor errors to a key without reveal carry no message from user code', async (t) => {
  const s = await startTestService(t, { config: config() });
  const number = randomCard();
  const cvc = randomCvc();
  const made = await s.call('POST', '/tokenize', {
    key: CREATOR,
    body: { card: { type: 'card', containers: ['/pci/'], data: { number, expiration_month: 4, expiration_year: 2031, cvc } } },
  });
  t.equal(made.status, 200, made.text);
  const card = made.body.card.id as string;
  const args = { pan: `{{ ${card} | json: '$.number' }}`, cvc: `{{ ${card} | json: '$.cvc' }}`, order: 'o-1' };

  const expected: Record<string, { status: number; code: string }> = {
    thrower: { status: 500, code: 'reactor_runtime_error' },
    declined: { status: 402, code: 'reactor_error' },
    unserializable: { status: 500, code: 'reactor_invalid_output' },
  };
  for (const [rid, want] of Object.entries(expected)) {
    const r = await s.call('POST', `/reactors/${rid}/react`, { key: USER, body: { args } });
    t.equal(r.status, want.status, `${rid}: status`);
    t.equal(r.body?.code, want.code, `${rid}: code`);
    t.notMatch(r.text, cardPattern(number), `${rid}: the body holds no card number`);
    t.notOk(r.text.includes(cvc), `${rid}: the body holds no cvc`);
    t.notOk(r.text.includes('o-1'), `${rid}: the body holds nothing of the args`);
    t.notOk(/bad card|declined |cannot /.test(r.text), `${rid}: the body holds no message from user code`);
    const errorId = r.body?.error_id as unknown;
    t.type(errorId, 'string', `${rid}: the body has an error id`);
    if (typeof errorId !== 'string') continue;
    const line = s.logs().split('\n').find((l) => l.includes(errorId));
    t.ok(line, `${rid}: the log has the error id`);
    t.match(line ?? '', /bad card|declined |cannot /, `${rid}: the log line has the reactor's message`);
    t.notMatch(line ?? '', cardPattern(number), `${rid}: the log line has no card number`);
    t.notOk((line ?? '').includes(cvc), `${rid}: the log line has no cvc`);
  }
  t.notMatch(s.logs(), cardPattern(number), 'the log holds no card number at all');

  // No detokenized value in the args: the message is the caller's own data, answered as before.
  const plain = await s.call('POST', '/reactors/thrower/react', { key: USER, body: { args: { order: 'o-2' } } });
  t.equal(plain.status, 500);
  t.same(plain.body.errors, { error: ['bad card {"order":"o-2"}'] }, 'without expressions the message stays');
  t.equal(plain.body.error_id, undefined);
});
