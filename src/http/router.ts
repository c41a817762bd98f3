/**
 * A small router: routes are compiled once at start-up into per-method segment patterns.
 * `:name` captures one segment (URL-decoded); a trailing `*` captures the rest, raw.
 */
import { ServiceError } from '../errors.js';

export interface RouteMatch<R> {
  route: R;
  params: Record<string, string>;
  /** What a trailing `*` matched, raw (not decoded), with its leading `/`. */
  rest: string;
}

interface Compiled<R> {
  method: string;
  segments: string[];
  wildcard: boolean;
  route: R;
}

export class Router<R extends { method: string; path: string; refused?: boolean }> {
  private readonly compiled: Compiled<R>[];

  /** `notFound`: the detail of a route_not_found, e.g. where the routes are listed. */
  constructor(routes: R[], private readonly notFound?: string) {
    this.compiled = routes.map((route) => {
      const segments = route.path.split('/').filter(Boolean);
      const wildcard = segments[segments.length - 1] === '*';
      if (wildcard) segments.pop();
      return { method: route.method, segments, wildcard, route };
    });
  }

  /** Throws route_not_found (404) or method_not_allowed (405, with Allow). */
  match(method: string, pathname: string): RouteMatch<R> {
    const parts = pathname.split('/');
    parts.shift(); // leading ''
    if (parts.length > 0 && parts[parts.length - 1] === '' && !pathname.startsWith('/proxy/')) parts.pop();
    const allowed: string[] = [];
    let matched = false;
    for (const c of this.compiled) {
      const m = this.tryMatch(c, parts);
      if (!m) continue;
      if (c.method === method || (method === 'HEAD' && c.method === 'GET') || c.method === '*') {
        return { route: c.route, params: m.params, rest: m.rest };
      }
      matched = true;
      // A route that only refuses its method is not allowed.
      if (c.route.refused !== true) allowed.push(c.method);
    }
    if (matched) {
      throw new ServiceError('method_not_allowed', { headers: { allow: [...new Set(allowed)].join(', ') } });
    }
    // The path is not echoed: it may hold a token id or a value sent in the wrong place.
    throw new ServiceError('route_not_found', this.notFound === undefined ? {} : { detail: this.notFound });
  }

  /** The methods of the routes at `pathname` (for a preflight), each with its route. */
  routesAt(pathname: string): R[] {
    const parts = pathname.split('/');
    parts.shift();
    if (parts.length > 0 && parts[parts.length - 1] === '' && !pathname.startsWith('/proxy/')) parts.pop();
    return this.compiled.filter((c) => this.tryMatch(c, parts) !== null).map((c) => c.route);
  }

  private tryMatch(c: Compiled<R>, parts: string[]): { params: Record<string, string>; rest: string } | null {
    if (c.wildcard ? parts.length < c.segments.length : parts.length !== c.segments.length) return null;
    const params: Record<string, string> = {};
    for (let i = 0; i < c.segments.length; i++) {
      const seg = c.segments[i]!;
      const part = parts[i]!;
      if (seg.startsWith(':')) {
        if (!part) return null;
        try {
          params[seg.slice(1)] = decodeURIComponent(part);
        } catch {
          return null;
        }
      } else if (seg !== part) return null;
    }
    const rest = c.wildcard ? '/' + parts.slice(c.segments.length).join('/') : '';
    return { params, rest };
  }
}
