/** Body limits are enforced while streaming: a chunked body (no Content-Length) over 5 MB gets 413. */
import t from 'tap';
import { request } from 'node:http';
import { KEYS, startTestService } from '../helpers/service.js';
import { checkResponses } from '../helpers/openapi.js';

t.test('a chunked body over the limit is refused with 413 while streaming', async (t) => {
  const s = await startTestService(t);
  await checkResponses(s);
  const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(`${s.url}/tokenize`, { method: 'POST', headers: { 'svc-api-key': KEYS.private, 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    const chunk = Buffer.alloc(256 * 1024, 0x61);
    req.write('"');
    let sent = 0;
    const pump = () => {
      while (sent < 8 * 1024 * 1024) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      req.end('"');
    };
    req.on('response', () => (sent = Infinity));
    pump();
  });
  t.equal(status, 413);
  t.equal(JSON.parse(body).code, 'body_too_large');
  t.equal((await s.call('GET', '/tokens')).body.data.length, 0, 'nothing created');
});
