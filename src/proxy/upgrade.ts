/**
 * Protocol upgrades (WebSocket) through a proxy, with http-proxy: what it does best (docs/proxy.md;
 * plain HTTP goes through undici, see service.ts). The caller is authenticated and rate-limited by
 * the pipeline's upgrade handler exactly as for plain requests; here the destination path is
 * checked (the same escape rules), SVC-* headers are removed, X-Forwarded-* set, and the socket
 * handed to http-proxy, which relays the destination's 101 and then the bytes both ways.
 *
 * Frames are not transformed or scanned: a proxy with request or response transforms, or with
 * `leak_guard: block`, refuses upgrades (400 upgrade_not_allowed) rather than pass what it
 * promised to tokenize or block.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import httpProxy from 'http-proxy';
import { ServiceError } from '../errors.js';
import type { Logger } from '../log.js';
import type { CompiledProxy } from './compile.js';
import { sendSocketProblem } from '../http/respond.js';
import { destinationPath, splitProxyTarget } from './destination.js';
import { forwardedHeaders, type ForwardedFor } from './headers.js';
import { upstreamError } from './upstream.js';

export class UpgradeForwarder {
  private readonly proxy = httpProxy.createProxyServer({ ws: true, xfwd: false });
  /** Sockets the destination has answered on (101 or otherwise): no 502 may be written after. */
  private readonly answered = new WeakSet<Duplex>();

  constructor(private readonly log: Logger) {
    // Errors are handled per call (the callback of ws()); this keeps an unhandled 'error' event
    // from ever taking the process down.
    this.proxy.on('error', () => undefined);
    this.proxy.on('proxyReqWs', (proxyReq, _req, socket) => {
      const mark = () => this.answered.add(socket);
      proxyReq.once('upgrade', mark);
      proxyReq.once('response', mark);
    });
  }

  /** Throws ServiceError before anything is written; afterwards failures close the socket. */
  forward(proxy: CompiledProxy, req: IncomingMessage, socket: Duplex, head: Buffer, fwd: Omit<ForwardedFor, 'host'>): void {
    const { settings: config } = proxy;
    if (!proxy.upgradable) {
      throw new ServiceError('upgrade_not_allowed', {
        detail: 'This proxy transforms or blocks bodies; upgraded connections would bypass that',
      });
    }
    const path = destinationPath(proxy.destination, splitProxyTarget(req.url ?? '/'));
    const h = req.headers;
    for (const name of Object.keys(h)) {
      if (name.startsWith('svc-') || name === 'forwarded' || name === 'proxy-authorization') delete h[name];
    }
    const forwarded = forwardedHeaders(h, { ...fwd, host: h.host });
    delete h['x-forwarded-host'];
    Object.assign(h, forwarded);
    if (proxy.destination.authorization) h.authorization = proxy.destination.authorization;
    req.url = path;
    this.proxy.ws(req, socket, head, { target: proxy.destination.origin, changeOrigin: true, proxyTimeout: config.timeout_ms }, (err) => {
      this.log.warn({ proxy: config.id, code: (err as NodeJS.ErrnoException).code }, 'upgrade to the destination failed');
      if (!this.answered.has(socket) && socket.writable && !socket.destroyed) sendSocketProblem(socket, upstreamError(err), {}, 'proxy_error');
      else socket.destroy();
    });
  }

  close(): void {
    this.proxy.close();
  }
}
