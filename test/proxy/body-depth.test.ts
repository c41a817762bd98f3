/**
 * server.max_depth on a tokenizing proxy's body (issue 25): the nesting scan runs before the JSON
 * is parsed, and a body of at most max_depth bytes skips it (it cannot nest deeper). A body one
 * level too deep is 400 nesting_too_deep, wrapped, and nothing reaches the destination; one at the
 * limit is tokenized and forwarded; a small body is still parsed (invalid JSON is 400 invalid_json).
 */
import t from 'tap';
import { startTestService } from '../helpers/service.js';
import { startUpstream } from '../helpers/upstream.js';
import { assertProxyError, configWithProxies, PROXY_KEY, SSN } from '../helpers/proxy.js';

const MAX_DEPTH = 4;

t.test('a tokenizing proxy keeps server.max_depth, and small bodies are still parsed', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies([
    {
      id: 'tok', name: 'tok', key: PROXY_KEY, require_auth: false, destination_url: up.url,
      request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/ssn', token: { type: 'token' } }] }],
    },
  ], [], { max_depth: MAX_DEPTH });
  const s = await startTestService(t, { config: cfg });
  const call = (raw: string) => s.call('POST', '/proxy/x', { key: null, raw, headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': 'application/json' } });

  // Five levels: the object and four arrays.
  const deep = await call(`{"ssn":"${SSN}","a":[[[[1]]]]}`);
  assertProxyError(t, deep, 400, 'nesting_too_deep', 'one level over max_depth:');
  t.equal(up.received.length, 0, 'nothing reached the destination');

  // Four levels, the limit: tokenized and forwarded.
  const atLimit = await call(`{"ssn":"${SSN}","a":[[[1]]]}`);
  t.equal(atLimit.status, 200, 'a body at max_depth is forwarded');
  t.equal(up.received.length, 1);
  const sent = JSON.parse(up.received[0]!.body.toString('utf8')) as { ssn: string; a: unknown };
  t.not(sent.ssn, SSN, 'the ssn was tokenized');
  t.same(sent.a, [[[1]]], 'the rest as sent');

  // At most max_depth bytes: no nesting scan, but parsed as ever.
  const small = await call('[[[[');
  assertProxyError(t, small, 400, 'invalid_json', 'a small invalid body:');
  const empty = await call('{}');
  t.equal(empty.status, 200, 'a small valid body is forwarded');
  t.equal(up.received.length, 2);
  t.equal(up.received[1]!.body.toString('utf8'), '{}', 'byte for byte');
});
