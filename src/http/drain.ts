/**
 * A graceful stop that drops no request on a keep-alive connection.
 *
 * Node's `server.close()` closes every idle keep-alive connection at once, and the draining loop
 * that called `closeIdleConnections()` every 50 ms closed each busy one the moment its answer was
 * written. A client on such a connection sends its next request right after reading the answer,
 * so the close and the request crossed: measured, 55 requests reset or closed unanswered across 3
 * SIGTERM restarts under load (bench/restarts.ts), each 17–340 ms after the signal. For a POST
 * /tokenize the client cannot tell whether the token was made. Here instead:
 *
 * - the listener stops accepting at once (a new connection is refused: nothing was sent);
 * - every answer written from the signal on says `Connection: close`, and Node closes its
 *   connection once it is written: the client knows not to send another request on it. Only the
 *   last request known on a connection gets it (a pipelined request behind it is still answered);
 *   a request that arrives behind an answer that already said `Connection: close` is not served
 *   (the client was told the connection ends, RFC 9112 section 9.6);
 * - a connection with nothing in flight is closed only once it has been idle for DRAIN_IDLE_MS
 *   (no request since its last answer, no byte received): a client sends its next request within
 *   milliseconds of an answer, so a connection idle that long is one the client is not using, and
 *   a connection whose next request is on its way gets that request answered (with
 *   `Connection: close`) instead of closed under it;
 * - after `graceMs` whatever is still open is cut (upgraded connections too).
 *
 * A connection that sat idle for DRAIN_IDLE_MS and whose client sends just as it is closed can
 * still lose that request: HTTP/1.1 has no way to close an idle connection without that race
 * (clients are told to recover from it, RFC 9112 section 9.3.1), and it is why the wait is not shorter.
 */
import { Server as NetServer, type Socket } from 'node:net';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';

/** How long a connection with nothing in flight must have been idle before a draining server closes it. */
export const DRAIN_IDLE_MS = 1_000;
/** How often a draining server looks for connections idle that long. */
const DRAIN_POLL_MS = 50;

interface ConnectionState {
  /** Requests admitted on this connection whose responses are not closed yet. */
  open: number;
  /** The response to the last request admitted on it. */
  last: ServerResponse | null;
  /** When it last became idle (or received bytes while idle), and its byte count then. */
  idleSince: number;
  bytesAtIdle: number;
  /** An answer on it said `Connection: close`: Node ends it once that answer is written. */
  closing: boolean;
  /** Upgraded (or CONNECT): no longer HTTP; only the grace cuts it. */
  detached: boolean;
}

export interface ConnectionDrain {
  /**
   * Call first for every request: false when it must not be served (it arrived behind an answer
   * that said `Connection: close`); true otherwise, and while draining its answer says
   * `Connection: close`.
   */
  admit(req: IncomingMessage, res: ServerResponse): boolean;
  /**
   * Stops accepting new connections; those open are served as before (keep-alive) until `drain`.
   * A cluster's workers all stop accepting before any of them drains (src/cluster.ts).
   */
  stopAccepting(): void;
  /** Stops accepting if not done yet, drains, and resolves once every connection is closed (cut after `graceMs`). */
  drain(graceMs: number): Promise<void>;
}

export function trackConnections(server: Server, idleMs = DRAIN_IDLE_MS): ConnectionDrain {
  const states = new Map<Socket, ConnectionState>();
  let draining = false;
  let allClosed: Promise<void> | null = null;
  const stateOf = (socket: Socket): ConnectionState | undefined => states.get(socket);
  server.on('connection', (socket: Socket) => {
    states.set(socket, { open: 0, last: null, idleSince: Date.now(), bytesAtIdle: socket.bytesRead, closing: false, detached: false });
    socket.once('close', () => states.delete(socket));
  });
  const detach = (req: IncomingMessage): void => {
    const st = stateOf(req.socket);
    if (st) st.detached = true;
  };
  server.on('upgrade', detach);
  server.on('connect', detach);

  const closeIdle = (): void => {
    const now = Date.now();
    for (const [socket, st] of states) {
      if (st.open > 0 || st.detached) continue;
      if (socket.bytesRead !== st.bytesAtIdle) {
        // A request is arriving (its headers are not complete yet): not idle.
        st.bytesAtIdle = socket.bytesRead;
        st.idleSince = now;
        continue;
      }
      if (now - st.idleSince >= idleMs) socket.destroy();
    }
  };

  return {
    admit(req, res) {
      // Kept: Node sets req.socket to null once the connection is gone (an answer cut short), before 'close'.
      const socket = req.socket;
      const st = stateOf(socket);
      if (!st) return true;
      const prev = st.last;
      if (draining) {
        // An answer before it already said the connection closes: the client will read no answer
        // to this one (Node ends the connection after that answer), so it is not served.
        if (st.closing || (prev !== null && prev.headersSent && !prev.shouldKeepAlive)) return false;
        // The request before it is no longer the last: its answer keeps the connection open for this one.
        if (prev !== null && !prev.headersSent) prev.shouldKeepAlive = true;
      }
      st.open++;
      st.last = res;
      if (draining) res.shouldKeepAlive = false;
      res.once('close', () => {
        st.open--;
        if (res.headersSent && !res.shouldKeepAlive) st.closing = true;
        if (st.last === res) st.last = null;
        st.idleSince = Date.now();
        st.bytesAtIdle = socket.bytesRead;
      });
      return true;
    },
    stopAccepting() {
      if (allClosed) return;
      // net.Server's close, not http.Server's: that one also closes every idle connection at
      // once (Node 19+), which is the race this module avoids. It stops accepting and calls back
      // once the last connection has closed (with an error when it was not listening).
      allClosed = new Promise((resolve) => NetServer.prototype.close.call(server, () => resolve()));
    },
    async drain(graceMs) {
      this.stopAccepting();
      draining = true;
      // The last request on each connection whose answer is not written yet: that answer says close.
      for (const st of states.values()) if (st.last && !st.last.headersSent) st.last.shouldKeepAlive = false;
      const poll = setInterval(closeIdle, DRAIN_POLL_MS);
      const cut = setTimeout(() => {
        server.closeAllConnections();
        for (const socket of states.keys()) socket.destroy();
      }, graceMs);
      closeIdle();
      await allClosed;
      clearInterval(poll);
      clearTimeout(cut);
    },
  };
}
