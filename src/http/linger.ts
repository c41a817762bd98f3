/**
 * Early answers on a request whose body has not been read (413, 429, 401/403/415 before the body).
 *
 * Closing the socket right after such an answer, with request bytes still arriving, makes the
 * kernel reset the connection, and a client still writing loses the answer it was about to read
 * (ECONNRESET/EPIPE instead of its 413). nginx's lingering close is the cure and is done here the
 * same way: answer with `Connection: close`, half-close our side (FIN after the answer), keep
 * reading and discarding the body for a bounded time and byte count, then close. A client that
 * sends past either bound is cut off. Discarded bytes are dropped as they arrive, never kept.
 *
 * A small unread body (at most DRAIN_LIMIT, declared by Content-Length) is drained first instead
 * and answered on a connection that stays open, as before.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** Unread request bodies up to this size are drained so the connection can stay open. */
export const DRAIN_LIMIT = 64 * 1024;

export interface LingerOptions {
  /** How long the rest of the body is read and discarded at most. */
  timeMs: number;
  /** How many bytes are discarded at most. */
  maxBytes: number;
}

/**
 * Answers through `send` (which writes the whole response) with the lingering rules above.
 * `send` receives the extra headers to add.
 */
export function answerEarly(req: IncomingMessage, res: ServerResponse, opts: LingerOptions, send: (extra: Record<string, string>) => void): void {
  if (req.complete || req.readableEnded) {
    send({});
    return;
  }
  const te = req.headers['transfer-encoding'];
  const declared = req.headers['content-length'] === undefined ? (te === undefined ? 0 : Infinity) : Number(req.headers['content-length']);
  if (declared <= DRAIN_LIMIT) {
    req.on('end', () => send({}));
    req.on('error', () => res.destroy());
    req.resume();
    return;
  }
  linger(req, res, opts);
  send({ connection: 'close' });
}

function linger(req: IncomingMessage, res: ServerResponse, opts: LingerOptions): void {
  const socket = req.socket as Socket;
  // Node ends a `Connection: close` response with socket.destroySoon(): FIN, then destroy as soon
  // as the answer is flushed, with the body still arriving (the reset). Keep only the FIN: the
  // server's sockets are half-open capable, so the body can still be read after it.
  socket.destroySoon = function destroySoon(this: Socket) {
    if (this.writable) this.end();
  };
  let discarded = 0;
  let cut = false;
  const cutOff = () => {
    if (cut) return;
    cut = true;
    clearTimeout(timer);
    req.off('data', onData);
    socket.destroy();
  };
  const timer = setTimeout(cutOff, opts.timeMs);
  timer.unref();
  const onData = (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded > opts.maxBytes) cutOff();
  };
  // The whole body arrived: close once our answer is flushed (then nothing unread remains, so the
  // close is a clean FIN, not a reset).
  const onEnd = () => {
    clearTimeout(timer);
    req.off('data', onData);
    const close = () => socket.destroy();
    if (socket.writableFinished || socket.destroyed) close();
    else if (res.writableFinished) socket.once('finish', close);
    else res.once('finish', () => (socket.writableFinished ? close() : socket.once('finish', close)));
  };
  req.on('data', onData);
  req.once('end', onEnd);
  req.once('error', cutOff);
  socket.once('close', () => clearTimeout(timer));
  req.resume();
}
