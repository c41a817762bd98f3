/**
 * The inbound proxy end to end: a JSON body with a card and an SSN at configured pointers reaches
 * a real upstream as token ids; the tokens read back with a reveal rule; the response transforms
 * apply on the way back.
 */
import t from 'tap';
import { baseConfig, KEYS, startTestService, TENANT_A } from '../helpers/service.js';
import { checkResponses } from '../helpers/openapi.js';
import { startUpstream } from '../helpers/upstream.js';

const PROXY_KEY = 'proxy_key_smoke_0123456789abcdef';
const CARD = '4242424242424242';
const SSN = '123-45-6789';

t.test('tokenize in flight, forward, transform the response', async (t) => {
  const up = await startUpstream(t);
  const cfg = baseConfig() as any;
  cfg.tenants[0].proxies = [
    {
      id: 'payments', name: 'payments', key: PROXY_KEY, destination_url: `${up.url}/api/`,
      request_transforms: [
        { type: 'tokenize', identifier: 'pay', fields: [
          { pointer: '/card', token: { type: 'card' } },
          { pointer: '/customer/ssn', token: { type: 'token' } },
        ] },
      ],
      response_transforms: [
        { type: 'append_json', location: '/card_token', value: '{{ tokens.pay.card.id }}' },
        { type: 'append_header', name: 'x-ssn-token', value: '{{ tokens.pay.customer.ssn.id }}' },
      ],
    },
  ];
  const s = await startTestService(t, { config: cfg });
  await checkResponses(s);
  const body = { card: { number: CARD, expiration_month: 12, expiration_year: 2030, cvc: '123' }, customer: { ssn: SSN, name: 'Ada' }, amount: 100 };
  const r = await s.call('POST', '/proxy/charges?x=1', { body, headers: { 'svc-proxy-key': PROXY_KEY } });
  t.equal(r.status, 200, r.text);
  t.equal(r.headers.get('svc-proxy-destination-status'), '200');
  t.equal(up.received.length, 1);
  const got = up.received[0]!;
  t.equal(got.url, '/api/charges?x=1');
  const text = got.body.toString();
  t.notOk(text.includes(CARD), 'no card number upstream');
  t.notOk(text.includes(SSN), 'no ssn upstream');
  t.notOk(text.includes('"123"'), 'no cvc upstream');
  const sent = JSON.parse(text);
  t.match(sent, { card: String, customer: { ssn: String, name: 'Ada' }, amount: 100 });
  t.equal(got.headers['svc-proxy-key'], undefined);
  t.equal(got.headers['svc-api-key'], undefined);
  t.equal(r.body.card_token, sent.card);
  t.equal(r.headers.get('x-ssn-token'), sent.customer.ssn);
  const card = await s.call('GET', `/tokens/${sent.card}`, { key: KEYS.private });
  t.equal(card.status, 200);
  t.equal(card.body.data.number, CARD);
  t.equal(card.body.tenant_id, TENANT_A, "created in the proxy's tenant");
  t.equal(card.body.created_by, 'proxy:payments', 'created by the proxy');
  const ssn = await s.call('GET', `/tokens/${sent.customer.ssn}`, { key: KEYS.private });
  t.equal(ssn.body.data, SSN);
  t.equal(ssn.body.tenant_id, TENANT_A, "created in the proxy's tenant");
  t.equal(ssn.body.created_by, 'proxy:payments');
  const other = await s.call('GET', `/tokens/${sent.customer.ssn}`, { key: KEYS.tenantB });
  t.equal(other.status, 404, "another tenant's key does not find it");
  t.notOk(s.logs().includes(CARD));
});
