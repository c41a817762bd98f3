/**
 * The inbound proxy: `ANY /proxy/<suffix>` authenticated by SVC-PROXY-KEY (the
 * pipeline did that, and the rate limit), then either
 *  - pass-through: request and response stream through without being buffered (the leak guard,
 *    in `log` mode, scans the bytes as they pass), or
 *  - transformed: the body is read (bounded), the request transforms run, the leak guard checks
 *    the outgoing bytes, every token prepared by the transforms is written in one batch, and the
 *    result is forwarded; a 2xx response is collected (bounded) for the response transforms.
 * Both forward with undici over a keep-alive pool per proxy (the answer goes back through forward.ts) (see docs/proxy.md for why
 * undici rather than http-proxy carries plain HTTP).
 */
import { Transform, Writable, type Duplex, type Readable } from 'node:stream';
import { ServiceError } from '../errors.js';
import { mediaType, readBody } from '../http/body.js';
import { normalizeIp } from '../net/client-ip.js';
import type { Context, InboundContext, InboundScope } from '../http/context.js';
import type { Logger } from '../log.js';
import type { ProxyMetrics } from './metrics.js';
import type { ReactorRuntime } from '../reactors/runtime.js';
import type { TokenService } from '../vault/service.js';
import { ProxyBody } from './body.js';
import type { CompiledProxy } from './compile.js';
import { destinationPath, PROXY_KEY_PARAM, splitProxyTarget, stripProxyKeyParam } from './destination.js';
import { outgoingHeaders, responseHeaders } from './headers.js';
import { LeakScanner, scanType } from './leak-guard.js';
import { MAX_PARTS, scanBodyYielding } from './leak-guard-body.js';
import { headerFindings, urlFindings } from './leak-guard-request.js';
import { refuseMethod } from './methods.js';
import { ProxyTransforms, type TransformContext } from './transforms.js';
import type { UseResolver } from './detokenize-request.js';
import { UpgradeForwarder } from './upgrade.js';
import { answerHeaders, checkTransferEncoding, cutOrThrow, forwardOrCut, isIdentity } from './forward.js';
import { Upstream, upstreamError, type ForwardRequest, type UpstreamHead } from './upstream.js';

/** Where in a request the leak guard found a card number. */
type LeakPlace = 'body' | 'url' | 'headers';

const LEAK_MESSAGE: Record<LeakPlace, string> = {
  body: 'leak guard: a card number in plaintext in the body to the destination',
  url: 'leak guard: a card number in plaintext in the path or query to the destination',
  headers: 'leak guard: a card number in plaintext in a header to the destination',
};

const LEAK_DETAIL: Record<LeakPlace, string> = {
  body: 'The outgoing body contains a card number in plaintext; nothing was forwarded',
  url: 'The path or query to the destination contains a card number in plaintext; nothing was forwarded',
  headers: 'A header to the destination contains a card number in plaintext; nothing was forwarded',
};

interface Entry {
  proxy: CompiledProxy;
  upstream: Upstream;
  /** Card numbers the leak guard has seen leave through this proxy since start. */
  leakFindings: number;
  metrics: ProxyMetrics | undefined;
}

export interface InboundProxyOptions {
  tokens: TokenService;
  runtime: ReactorRuntime | null;
  /** server.body_limit_bytes: bounds a body read for transforms, in both directions. */
  bodyLimit: number;
  maxDepth: number;
  log: Logger;
  /** Whether a socket peer is listed in server.trust_proxy (its X-Forwarded-* chain is kept). */
  trustedPeer: (address: string) => boolean;
  /** Destination latency and errors, leak-guard findings, per proxy (docs/operations.md "Metrics"). */
  metrics?: { proxy(tenant: string, proxy: string): ProxyMetrics } | undefined;
  /** Resolves tokens for a `detokenize` request transform (token:use, audit). */
  detokenizer?: UseResolver;
}

export class InboundProxy {
  private readonly entries = new Map<string, Entry>();
  private readonly transforms: ProxyTransforms;
  private readonly upgrades: UpgradeForwarder;

  /** `proxies`: the model's compiled proxies (src/model/compile.ts), by `tenantId/proxyId`. */
  constructor(proxies: ReadonlyMap<string, CompiledProxy>, private readonly opts: InboundProxyOptions) {
    this.transforms = new ProxyTransforms(opts.tokens, opts.runtime);
    this.upgrades = new UpgradeForwarder(opts.log);
    for (const [key, proxy] of proxies) {
      const metrics = opts.metrics?.proxy(proxy.tenant.id, proxy.settings.id);
      this.entries.set(key, { proxy, upstream: new Upstream(proxy.destination.origin, proxy.settings.timeout_ms), leakFindings: 0, metrics });
    }
  }

  /**
   * Not async: a pass-through returns the forwarding's own promise (no async frames around it);
   * a refusal before forwarding throws, which the pipeline's try around `route.handle` catches.
   */
  handle(ctx: InboundContext): Promise<void> {
    const method = ctx.req.method ?? 'GET';
    refuseMethod(method);
    checkTransferEncoding(ctx.req.headers['transfer-encoding']);
    const pp = ctx.proxyPrincipal;
    const entry = this.entries.get(`${pp.tenant.id}/${pp.proxy.id}`)!;
    const target = splitProxyTarget(ctx.req.url ?? '/');
    const path = destinationPath(entry.proxy.destination, target);
    const peer = normalizeIp(ctx.req.socket.remoteAddress ?? '');
    const headers = outgoingHeaders(ctx.req.headers, { peer, peerTrusted: this.opts.trustedPeer(peer), host: ctx.req.headers.host });
    const { proxy } = entry;
    // What transforms see of the request; a proxy without transforms never builds it.
    const tctx = proxy.buffered || proxy.transformsAnswer ? transformContext(ctx, method, target) : null;
    if (proxy.detokenizes) tctx!.detokenize = this.detokenizeContext(ctx, proxy, path);
    if (proxy.buffered) return this.transformed(ctx, entry, target, path, headers, tctx!);
    // Not buffered: `off` or `log` (a `block` proxy reads the body). The request line and headers
    // are known now; a streamed body is scanned as it passes.
    if (proxy.settings.leak_guard === 'log') this.scanRequest(ctx, entry, target, headers, undefined, false);
    return this.passThrough(ctx, entry, method, path, headers, tctx);
  }

  /** The calling key's token:use for a proxy's `detokenize` step (require_auth: the pipeline set the principal). */
  private detokenizeContext(ctx: Context, proxy: CompiledProxy, path: string): TransformContext['detokenize'] {
    const detokenizer = this.opts.detokenizer;
    const principal = ctx.principal;
    if (!detokenizer || !principal) throw new ServiceError('internal_error', { detail: 'The detokenize transform is not available' });
    const q = path.indexOf('?');
    return {
      rawQuery: q === -1 ? '' : path.slice(q + 1),
      use: (ids) => detokenizer.resolveForUse(principal, ids, { action: 'proxy.detokenize', destination: proxy.destination.origin, requestId: ctx.requestId }),
    };
  }

  /** An authenticated, rate-limited upgrade request (see upgrade.ts). */
  upgrade(ctx: InboundScope, socket: Duplex, head: Buffer): void {
    refuseMethod(ctx.req.method ?? 'GET');
    checkTransferEncoding(ctx.req.headers['transfer-encoding']);
    const pp = ctx.proxyPrincipal;
    const entry = this.entries.get(`${pp.tenant.id}/${pp.proxy.id}`)!;
    const peer = normalizeIp(ctx.req.socket.remoteAddress ?? '');
    this.upgrades.forward(entry.proxy, ctx.req, socket, head, { peer, peerTrusted: this.opts.trustedPeer(peer) });
  }

  private passThrough(
    ctx: Context,
    entry: Entry,
    method: string,
    path: string,
    headers: Record<string, string | string[]>,
    tctx: TransformContext | null,
  ): Promise<void> {
    const req = ctx.req;
    const length = req.headers['content-length'];
    const hasBody = length !== undefined ? Number(length) > 0 : req.headers['transfer-encoding'] !== undefined;
    let body: Readable | undefined;
    if (hasBody) {
      if (length !== undefined) headers['content-length'] = length;
      body = req;
      // A compressed body passes unscanned (docs/proxy.md): its bytes are not the text the
      // destination reads, and scanning them as text finds cards that are not there (deflate's
      // fixed codes turn the digits of a short JSON body into runs of other digits: about 1 gzip
      // body in 120 with a random card held a Luhn-valid run).
      if (entry.proxy.settings.leak_guard === 'log' && isIdentity(req.headers['content-encoding'])) {
        const scanner = new LeakScanner(scanType(headerText(req.headers['content-type'])));
        body = req.pipe(
          new Transform({
            transform(chunk: Buffer, _enc, cb) {
              scanner.push(chunk);
              cb(null, chunk);
            },
            flush: (cb) => {
              this.leakFound(ctx, entry, scanner.end(), false, 'body');
              if (scanner.undecodable) this.undecodable(ctx, entry, false);
              cb();
            },
          }),
        );
        req.once('error', (err) => body!.destroy(err));
      }
    }
    const request = { method, path, headers, body };
    // Without response transforms, straight to streamThrough: one async frame fewer.
    return entry.proxy.transformsAnswer ? this.forward(ctx, entry, request, {}, tctx) : this.streamThrough(ctx, entry, request);
  }

  /**
   * Forwarding for a proxy without response transforms, with one promise and no async frames:
   * the answer streams to the caller as it arrives.
   */
  private streamThrough(ctx: Context, entry: Entry, request: ForwardRequest): Promise<void> {
    const { proxy } = entry;
    if (proxy.destination.authorization) request.headers.authorization = proxy.destination.authorization;
    const started = performance.now();
    return entry.upstream
      .stream(request, (head) => {
        entry.metrics?.answered(started);
        ctx.res.writeHead(head.statusCode, answerHeaders(ctx, head, responseHeaders(head.headers, true)));
        return ctx.res;
      })
      .then(undefined, (err: unknown) => {
        entry.metrics?.failed(ctx.res.destroyed ? 'client_closed' : upstreamError(err).code);
        cutOrThrow(ctx, err);
      });
  }

  private async transformed(
    ctx: Context,
    entry: Entry,
    target: { suffix: string; query: string },
    path: string,
    headers: Record<string, string | string[]>,
    tctx: TransformContext,
  ): Promise<void> {
    const { proxy } = entry;
    // Compressed bytes can be neither tokenized nor checked for card numbers.
    if (!isIdentity(ctx.req.headers['content-encoding'])) {
      throw new ServiceError('unsupported_media_type', { detail: 'This proxy reads request bodies: send them without Content-Encoding' });
    }
    const raw = await readBody(ctx.req, this.opts.bodyLimit);
    const body = new ProxyBody(raw, mediaType(ctx.req), this.opts.maxDepth, { caller: ctx.req.headers['content-type'] });
    const outcome = await this.transforms.runRequest(proxy, body, headers, tctx);
    const bytes = body.serialize();
    if (outcome.query !== undefined) {
      // A detokenize step rewrote the query.
      const q = path.indexOf('?');
      const bare = q === -1 ? path : path.slice(0, q);
      path = outcome.query === '' ? bare : `${bare}?${outcome.query}`;
    }
    if (proxy.settings.leak_guard !== 'off') {
      const block = proxy.settings.leak_guard === 'block';
      // The alias ids this request's tokenize steps drew are tokens, not cards, though
      // an alias_card one passes Luhn: they are let through; a real card in the same request is not.
      const aliases = outcome.prepared.some((x) => x.def.alias !== null)
        ? new Set(outcome.prepared.filter((x) => x.def.alias !== null).map((x) => x.record.id))
        : undefined;
      // Card numbers a detokenize step put in on purpose are not findings: the guard checks the
      // request as it was before that step (the caller's query, the headers and body before it).
      this.scanRequest(ctx, entry, target, outcome.headersBeforeDetokenize ?? outcome.headers, aliases, block);
      // Scanned as the destination will decode it: by the Content-Type it is sent with.
      const scanned = outcome.beforeDetokenize ?? bytes;
      const scan = await scanBodyYielding(scanned, scanType(headerText(outcome.headers['content-type'])), aliases);
      this.leakFound(ctx, entry, scan.findings, block, 'body');
      if (scan.undecodable) this.undecodable(ctx, entry, block);
      if (scan.tooManyParts) this.tooManyParts(ctx, entry, block);
    }
    // Every token of every tokenize step in one all-or-nothing write, before anything leaves.
    if (outcome.prepared.length > 0) await this.opts.tokens.commit(outcome.prepared);
    await this.forward(ctx, entry, { method: tctx.method, path, headers: outcome.headers, body: bytes.length > 0 ? bytes : undefined }, outcome.tokens, tctx);
  }

  /**
   * Forwards and answers. A 2xx for a proxy with response transforms is collected (bounded) and
   * transformed; every other response streams to the caller as it arrives.
   */
  private async forward(
    ctx: Context,
    entry: Entry,
    request: { method: string; path: string; headers: Record<string, string | string[]>; body: Buffer | Readable | undefined },
    tokens: Record<string, unknown>,
    /** Null only for a proxy without response transforms. */
    tctx: TransformContext | null,
  ): Promise<void> {
    const { proxy } = entry;
    if (!proxy.transformsAnswer) return this.streamThrough(ctx, entry, request);
    // Credentials of destination_url, set after the transforms so user code never sees them.
    if (proxy.destination.authorization) request.headers.authorization = proxy.destination.authorization;
    // Response transforms read the body: ask for it uncompressed.
    request.headers['accept-encoding'] = 'identity';
    let collected: { head: UpstreamHead; chunks: Buffer[] } | undefined;
    const started = performance.now();
    const whole = await forwardOrCut(ctx, () =>
      entry.upstream.stream(request, (head) => {
        entry.metrics?.answered(started);
        if (head.statusCode >= 200 && head.statusCode < 300) {
          collected = { head, chunks: [] };
          return collector(collected.chunks, this.opts.bodyLimit);
        }
        ctx.res.writeHead(head.statusCode, answerHeaders(ctx, head, responseHeaders(head.headers, true)));
        return ctx.res;
      }),
      // A caller that hung up mid-response is not a failing destination.
      (err) => entry.metrics?.failed(ctx.res.destroyed ? 'client_closed' : upstreamError(err).code),
    );
    if (!whole || !collected || !tctx) return;
    const { head, chunks } = collected;
    if (!isIdentity(head.headers['content-encoding'])) {
      throw new ServiceError('destination_response_untransformable', { detail: 'The destination answered with a Content-Encoding the response transforms cannot read' });
    }
    const type = head.headers['content-type'];
    const media = (Array.isArray(type) ? type[0] : type)?.split(';')[0]?.trim().toLowerCase() ?? '';
    const body = new ProxyBody(Buffer.concat(chunks), media, this.opts.maxDepth, 'destination');
    const upstreamHeaders = responseHeaders(head.headers, false) as Record<string, string | string[]>;
    const finalHeaders = await this.transforms.runResponse(proxy, body, upstreamHeaders, tokens, tctx);
    // A HEAD answer and a 204 have no body (RFC 9110 §9.3.2, §15.3.5). A 204 must not announce a
    // length; for a HEAD the length a transformed GET would have is unknown, so none is announced
    // (rather than 0, or the destination's untransformed length).
    if (tctx.method === 'HEAD' || head.statusCode === 204) {
      const out = answerHeaders(ctx, head, { ...finalHeaders });
      delete out['content-length'];
      ctx.res.writeHead(head.statusCode, out);
      ctx.res.end();
      return;
    }
    const bytes = body.serialize();
    const out = answerHeaders(ctx, head, { ...finalHeaders });
    out['content-length'] = bytes.length;
    ctx.res.writeHead(head.statusCode, out);
    ctx.res.end(bytes);
  }

  /**
   * The leak guard on the path and query the caller sent (what the destination's access log keeps)
   * and on the headers to be forwarded; `block` refuses at the first place with a finding.
   */
  private scanRequest(
    ctx: Context,
    entry: Entry,
    target: { suffix: string; query: string },
    headers: Readonly<Record<string, string | string[]>>,
    aliases: ReadonlySet<string> | undefined,
    block: boolean,
  ): void {
    this.leakFound(ctx, entry, urlFindings(target.suffix, stripProxyKeyParam(target.query), aliases), block, 'url');
    this.leakFound(ctx, entry, headerFindings(headers, aliases), block, 'headers');
  }

  /** Logs (never the number) and counts findings; in block mode refuses the request. */
  private leakFound(ctx: Context, entry: Entry, findings: number, block: boolean, where: LeakPlace): void {
    if (findings === 0) return;
    entry.leakFindings += findings;
    entry.metrics?.leaks(findings, block);
    ctx.log.warn({ proxy: entry.proxy.settings.id, findings, total: entry.leakFindings, action: block ? 'blocked' : 'forwarded', where }, LEAK_MESSAGE[where]);
    if (block) throw new ServiceError('leak_detected', { detail: LEAK_DETAIL[where] });
  }

  /**
   * A multipart body with more parts than the guard reads one by one (MAX_PARTS, every level of
   * nesting together): the parts past the bound were scanned only as bytes of the whole body.
   * `block` refuses it; `log` forwards it and says so.
   */
  private tooManyParts(ctx: Context, entry: Entry, block: boolean): void {
    ctx.log.warn(
      { proxy: entry.proxy.settings.id, too_many_parts: true, max_parts: MAX_PARTS, action: block ? 'blocked' : 'forwarded' },
      'leak guard: the multipart body has more parts than the guard reads one by one',
    );
    if (block) {
      throw new ServiceError('body_too_large', {
        detail: `The multipart body has more than ${MAX_PARTS.toLocaleString('en-US')} parts (the leak guard reads at most that many, nested parts included); nothing was forwarded`,
      });
    }
  }

  /**
   * The body is in a charset the leak guard cannot decode: its scan may miss what the
   * destination reads. `block` refuses it; `log` forwards it and says so. The label is not logged
   * (it is the sender's text).
   */
  private undecodable(ctx: Context, entry: Entry, block: boolean): void {
    ctx.log.warn(
      { proxy: entry.proxy.settings.id, undecodable: true, action: block ? 'blocked' : 'forwarded' },
      'leak guard: the body is in a charset the guard cannot decode',
    );
    if (block) {
      throw new ServiceError('unsupported_media_type', {
        detail: 'The leak guard cannot decode the body\'s charset (it decodes UTF-8, UTF-16 and the WHATWG encodings; not UTF-7, UTF-32 or malformed text); nothing was forwarded',
      });
    }
  }

  /**
   * After a reload, once no request of the old model is in flight: the connection pools close
   * when their last request finished. Upgraded connections (WebSocket) keep running.
   */
  async retire(): Promise<void> {
    await Promise.all([...this.entries.values()].map((e) => e.upstream.close()));
  }

  async close(): Promise<void> {
    this.upgrades.close();
    await Promise.all([...this.entries.values()].map((e) => e.upstream.destroy()));
  }
}

/**
 * What transforms see of the request: no URL parsed for an empty query, the child logger made only
 * if a code transform logs. A class rather than an object literal with a getter (one
 * allocation of a shape V8 keeps, no closure).
 */
class RequestView implements TransformContext {
  readonly path: string;
  readonly query: Record<string, string | string[]>;
  detokenize?: TransformContext['detokenize'] = undefined;

  constructor(
    private readonly ctx: Context,
    readonly method: string,
    target: { suffix: string; query: string },
  ) {
    this.path = target.suffix || '/';
    this.query = target.query === '' ? {} : queryObject(ctx.url.searchParams);
  }

  get log(): Logger {
    return this.ctx.log;
  }
}

function transformContext(ctx: Context, method: string, target: { suffix: string; query: string }): TransformContext {
  return new RequestView(ctx, method, target);
}

function headerText(v: string | string[] | undefined): string {
  return (Array.isArray(v) ? v[0] : v) ?? '';
}

function queryObject(params: URLSearchParams): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of params) {
    if (k.toLowerCase() === PROXY_KEY_PARAM) continue;
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return out;
}

/** A Writable that keeps a 2xx body for the response transforms, up to `limit` bytes. */
function collector(chunks: Buffer[], limit: number): Writable {
  let size = 0;
  return new Writable({
    write(chunk: Buffer, _enc, cb) {
      size += chunk.length;
      if (size > limit) {
        cb(new ServiceError('destination_response_untransformable', { detail: `The destination response exceeds the transform limit of ${limit} bytes` }));
        return;
      }
      chunks.push(chunk);
      cb();
    },
  });
}
