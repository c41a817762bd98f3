// Holds N idle keep-alive connections to a server, for the proxy benchmark's memory section:
//
//   node bench/lib/idle-connections.mjs <port> <count> [path]
//
// Each connection sends one `GET <path>` (HTTP/1.1, keep-alive), reads the whole answer, then
// stays open and silent: what a crowd of idle clients costs the server. Opens them 200 at a time.
// Prints one JSON line {"open": n, "failed": m, "statuses": {...}} once every connection is open
// (or failed), then holds them until SIGTERM or stdin closes. Plain JavaScript: no loader, and
// a process of its own (its sockets are not the server's).
import { connect } from 'node:net';

const [port, count, path = '/healthz'] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4]];
const sockets = [];
const statuses = {};
let failed = 0;

function openOne() {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    let buf = '';
    let done = false;
    const finish = (ok) => {
      if (done) return;
      done = true;
      if (ok) sockets.push(s);
      else {
        failed++;
        s.destroy();
      }
      resolve();
    };
    s.setEncoding('latin1');
    s.once('connect', () => s.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: keep-alive\r\n\r\n`));
    s.on('data', (d) => {
      if (done) return;
      buf += d;
      const end = buf.indexOf('\r\n\r\n');
      if (end === -1) return;
      const status = /^HTTP\/1\.1 (\d{3})/.exec(buf)?.[1] ?? '?';
      const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
      if (buf.length - end - 4 < length) return;
      statuses[status] = (statuses[status] ?? 0) + 1;
      finish(true);
    });
    s.on('error', () => finish(false));
    s.on('close', () => finish(false));
  });
}

let next = 0;
const worker = async () => {
  while (next < count) {
    next++;
    await openOne();
  }
};
await Promise.all(Array.from({ length: Math.min(200, count) }, worker));
// Connections the server closed while the others were opening are counted as failed.
const open = sockets.filter((s) => !s.destroyed).length;
console.log(JSON.stringify({ open, failed: failed + (sockets.length - open), statuses }));
const stop = () => {
  for (const s of sockets) s.destroy();
  process.exit(0);
};
process.once('SIGTERM', stop);
process.stdin.on('end', stop).resume();
