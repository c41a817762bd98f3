/**
 * An upstream responder (test/helpers/upstream.ts) that announces a 64 MB body and writes it as
 * fast as it is read: for tests where the caller hangs up mid-response. `onClose` is told when
 * the connection to the upstream closes.
 */
import type { Responder } from './upstream.js';

export function endlessResponder(onClose: () => void = () => {}): Responder {
  return (_r, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(64 * 1024 * 1024) });
    // Writes until the proxy stops reading and then drops the connection.
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    const pump = () => {
      while (!res.destroyed && res.write(chunk));
    };
    res.on('drain', pump);
    res.on('close', onClose);
    pump();
  };
}
