/**
 * Methods the proxy refuses (issue 10, finding 8): TRACE would have the destination echo the
 * request, including the `Authorization: Basic` that tokenproxy adds from `destination_url`
 * credentials; CONNECT would ask the destination to open a tunnel. Each is
 * `405 method_not_allowed`, a wrapped problem without an `Allow` header (the proxy forwards every
 * other method, so there is no list to give), and the destination receives nothing. Every other
 * method still reaches it.
 */
import { connect } from 'node:net';
import t from 'tap';
import { startTestService } from '../helpers/service.js';
import { rawRequest, startUpstream } from '../helpers/upstream.js';
import { assertProxyError, configWithProxies, PROXY_KEY, PROXY_KEY_2 } from '../helpers/proxy.js';

/** Sends `text` on a fresh connection and returns everything the server wrote before closing. */
function rawExchange(url: string, text: string): Promise<string> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(u.port), u.hostname, () => socket.write(text));
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (got += c));
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
    socket.setTimeout(5_000, () => socket.destroy());
  });
}

function parseRaw(text: string): { status: number; headers: Record<string, string>; json: any } {
  const [head = '', body = ''] = text.split('\r\n\r\n');
  const [statusLine = '', ...lines] = head.split('\r\n');
  const headers: Record<string, string> = {};
  for (const l of lines) {
    const i = l.indexOf(':');
    headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
  }
  let json: any;
  try {
    json = JSON.parse(body);
  } catch {
    json = undefined;
  }
  return { status: Number(statusLine.split(' ')[1]), headers, json };
}

const up = await startUpstream(t);
const s = await startTestService(t, {
  config: configWithProxies([
    // Credentials in destination_url: what a TRACE echo would have given away.
    { id: 'pass', name: 'pass', key: PROXY_KEY, require_auth: false, destination_url: `http://svc:s3cret@127.0.0.1:${up.port}/base/` },
    { id: 'tok', name: 'tok', key: PROXY_KEY_2, require_auth: false, destination_url: `${up.url}/base/`, leak_guard: 'block',
      request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/ssn', token: { type: 'token' } }] }] },
  ]),
});

t.test('regression: TRACE was forwarded (the echo carried destination_url credentials)', async (t) => {
  for (const key of [PROXY_KEY, PROXY_KEY_2]) {
    for (const method of ['TRACE']) {
      const r = await rawRequest(s.url, { method, path: '/proxy/x', headers: { 'svc-proxy-key': key } });
      assertProxyError(t, r, 405, 'method_not_allowed', `${method} (${key === PROXY_KEY ? 'pass-through' : 'tokenizing'}):`);
      t.equal(r.headers.allow, undefined, `${method}: no Allow header`);
      t.equal(r.headers['svc-proxy-destination-status'], undefined, `${method}: no destination status`);
      t.notOk(r.text.includes('czNjcmV0') || r.text.includes('s3cret'), `${method}: no credentials in the answer`);
    }
  }
  // IIS's TRACK is not a method Node's parser knows: it answers 400 itself, before any handler.
  const track = await rawRequest(s.url, { method: 'TRACK', path: '/proxy/x', headers: { 'svc-proxy-key': PROXY_KEY } });
  t.equal(track.status, 400, 'TRACK: refused by the HTTP parser');
  t.equal(up.received.length, 0, 'the destination received nothing');
});

t.test('regression: CONNECT to /proxy/* closed the connection without an answer', async (t) => {
  const before = up.received.length;
  for (const target of ['/proxy/x', `127.0.0.1:${up.port}`, '/tokens']) {
    const text = await rawExchange(s.url, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\nSVC-PROXY-KEY: ${PROXY_KEY}\r\n\r\n`);
    const r = parseRaw(text);
    t.equal(r.status, 405, `CONNECT ${target}: 405: ${JSON.stringify(text.slice(0, 200))}`);
    const problem = target.startsWith('/proxy') ? r.json?.proxy_error : r.json;
    t.match(problem, { status: 405, code: 'method_not_allowed', type: 'urn:tokenproxy:problem:method_not_allowed' }, `CONNECT ${target}: the problem body${target.startsWith('/proxy') ? ', wrapped' : ''}`);
    t.equal(r.headers.allow, undefined, `CONNECT ${target}: no Allow header`);
  }
  t.equal(up.received.length, before, 'the destination received nothing');
});

t.test('every other method still reaches the destination', async (t) => {
  for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'PROPFIND']) {
    const before = up.received.length;
    const r = await rawRequest(s.url, { method, path: '/proxy/m', headers: { 'svc-proxy-key': PROXY_KEY } });
    t.equal(r.status, 200, `${method}: ${r.text}`);
    t.equal(up.received[before]?.method, method, `${method} forwarded`);
  }
});
