/**
 * Methods the inbound proxy never forwards: `TRACE` has the destination echo the
 * request back, including the `Authorization` tokenproxy adds from the credentials in
 * `destination_url` (which the management view hides); `CONNECT` asks for a tunnel to wherever
 * its target names. Both are `405 method_not_allowed` without an `Allow` header: every other
 * method is forwarded, so there is no list to give.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { ServiceError } from '../errors.js';
import { sendSocketProblem } from '../http/respond.js';
import type { Logger } from '../log.js';

const REFUSED: ReadonlySet<string> = new Set(['TRACE', 'CONNECT']);

function refusal(method: string): ServiceError {
  return new ServiceError('method_not_allowed', { detail: `The proxy does not forward ${method} requests` });
}

/** Throws 405 method_not_allowed for a method the proxy refuses. */
export function refuseMethod(method: string): void {
  const m = method.toUpperCase();
  if (REFUSED.has(m)) throw refusal(m);
}

/**
 * The server's 'connect' listener. Node hands CONNECT requests to that event, never to the
 * request handler, and without a listener closes the connection with no answer at all; this
 * answers 405 on any target (wrapped as `proxy_error` for `/proxy/…`) and closes the connection.
 */
export function connectRefuser(log: Logger): (req: IncomingMessage, socket: Duplex) => void {
  return (req, socket) => {
    socket.on('error', () => socket.destroy());
    const requestId = randomUUID();
    const wrap = (req.url ?? '').startsWith('/proxy') ? 'proxy_error' : undefined;
    const status = sendSocketProblem(socket, refusal('CONNECT'), { 'svc-trace-id': requestId }, wrap);
    log.info({ req_id: requestId, method: 'CONNECT', route: '(connect)', status }, 'request');
  };
}
