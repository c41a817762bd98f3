// A sample upstream app for the README walkthrough: listens on 127.0.0.1:9090 (or PORT), prints
// every request it receives (method, path, the X-Forwarded-* headers and the body) and answers
// 200 with {"received": <the body it got>} (under /processor/: {"status": "succeeded", …}).
// Plain Node, no dependencies: `node scripts/echo-upstream.mjs`.
import { createServer } from 'node:http';

const port = Number(process.env.PORT ?? 9090);
const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const text = Buffer.concat(chunks).toString('utf8');
    const forwarded = Object.fromEntries(Object.entries(req.headers).filter(([k]) => k.startsWith('x-forwarded-')));
    console.log(`${req.method} ${req.url}`, forwarded);
    console.log(text || '(no body)');
    let received = text;
    try {
      received = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: echoed as a string
    }
    // Under /processor/ it plays a payment processor (README "Outbound proxy"): it answers like
    // one, without echoing the card back to the caller.
    const body = req.url.startsWith('/processor/')
      ? JSON.stringify({ status: 'succeeded', amount: received?.amount ?? null })
      : JSON.stringify({ received });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
});
// PORT=0 takes a free port; the line names the real one (the docs test reads it, issue 29).
server.listen(port, '127.0.0.1', () => console.log(`echo upstream on http://127.0.0.1:${server.address().port}`));
