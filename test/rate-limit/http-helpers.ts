/**
 * Shared pieces of the HTTP-level rate-limit tests (not a test file: tap runs only *.test.ts).
 *
 * - `tenant({...})` builds one tenant's config (applications of each kind, tier, custom limits)
 *   with fresh random keys, so every test counts on counters of its own.
 * - `limitedConfig(tenants, extra)` is a full service config with rate limits enabled.
 * - `HttpClient` sends real HTTP from a chosen local address (127.0.0.1, 127.0.0.2, …: the whole
 *   127.0.0.0/8 is loopback on Linux), which is how one machine plays two client IPs.
 * - `expect429` / `expectAllowed` assert on the bytes that leave the service.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Client } from 'undici';
import type { Test } from 'tap';

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const TOKEN_PERMISSIONS = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search'];

export type AppKind = 'private' | 'public' | 'management';

export interface AppSpec {
  kind: AppKind;
  legacy?: boolean;
  /** How many keys the application gets (default 1). */
  keys?: number;
  /** Permissions beyond the kind's token permissions (e.g. proxy:invoke). */
  also?: string[];
}

export interface Override {
  points?: number;
  duration_seconds?: number;
  mitigation?: 'throttle' | 'block';
  block_seconds?: number;
}

export interface TenantSpec {
  test?: boolean;
  tier?: 'default' | 'higher';
  custom?: Record<string, Override>;
  apps: AppSpec[];
}

export interface BuiltTenant {
  id: string;
  config: Record<string, unknown>;
  /** keys[i][j]: the j-th key of the i-th application. */
  keys: string[][];
}

export function newKey(): string {
  return `k_${randomBytes(12).toString('hex')}`;
}

function permissionsOf(kind: AppKind): Record<string, unknown> {
  switch (kind) {
    case 'private':
      return { permissions: TOKEN_PERMISSIONS, rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: TOKEN_PERMISSIONS }] };
    case 'public':
      // A public application may hold only token:create and token:update (README).
      return { permissions: ['token:create'] };
    case 'management':
      return { permissions: [] };
  }
}

export function tenant(spec: TenantSpec): BuiltTenant {
  const id = randomUUID();
  const keys: string[][] = [];
  const applications = spec.apps.map((a, i) => {
    const k = Array.from({ length: a.keys ?? 1 }, newKey);
    keys.push(k);
    const perms = permissionsOf(a.kind);
    if (a.also) perms.permissions = [...(perms.permissions as string[]), ...a.also];
    return { id: randomUUID(), name: `${a.kind}-${i}`, type: a.kind, keys: k, legacy: a.legacy ?? false, ...perms };
  });
  return {
    id,
    keys,
    config: {
      id,
      name: `t-${id.slice(0, 8)}`,
      test: spec.test ?? false,
      rate_limit_tier: spec.tier ?? 'default',
      custom_rate_limits: spec.custom ?? {},
      applications,
    },
  };
}

export function limitedConfig(
  tenants: BuiltTenant[],
  extra: { server?: Record<string, unknown>; rate_limits?: Record<string, unknown> } = {},
): Record<string, unknown> {
  return {
    server: { host: '127.0.0.1', port: 0, ...(extra.server ?? {}) },
    log: { level: 'info' },
    rate_limits: { enabled: true, store: 'memory', ...(extra.rate_limits ?? {}) },
    tenants: tenants.map((t) => t.config),
  };
}

export interface Reply {
  status: number;
  headers: Record<string, string>;
  body: any;
  text: string;
}

export interface SendOptions {
  key?: string;
  body?: unknown;
  /** A raw body (sent as is, with the content type `application/json` unless headers say otherwise). */
  raw?: string | Buffer;
  headers?: Record<string, string>;
}

/** Real HTTP to one origin from one local address (keep-alive, one connection). */
export class HttpClient {
  private readonly client: Client;

  constructor(origin: string, localAddress = '127.0.0.1') {
    this.client = new Client(origin, { localAddress, headersTimeout: 10_000, bodyTimeout: 10_000 });
  }

  async send(method: string, path: string, o: SendOptions = {}): Promise<Reply> {
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    if (o.key !== undefined) headers['svc-api-key'] = o.key;
    let body: string | Buffer | undefined;
    if (o.raw !== undefined) body = o.raw;
    else if (o.body !== undefined) body = JSON.stringify(o.body);
    if (body !== undefined) headers['content-type'] ??= 'application/json';
    const res = await this.client.request({ method: method as 'GET', path, headers, body });
    const text = await res.body.text();
    const flat: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) flat[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: res.statusCode, headers: flat, body: parsed, text };
  }

  close(): Promise<void> {
    return this.client.destroy();
  }
}

export function client(t: Test, origin: string, localAddress = '127.0.0.1'): HttpClient {
  const c = new HttpClient(origin, localAddress);
  t.teardown(() => c.close());
  return c;
}

/** Asserts a 429 problem with Retry-After and the RateLimit-* headers. */
export function expect429(t: Test, r: Reply, limit: number, msg = ''): void {
  t.equal(r.status, 429, `${msg} status 429`);
  t.match(r.headers['content-type'], /^application\/problem\+json/, `${msg} problem body`);
  t.match(r.body, { code: 'rate_limited', status: 429, type: 'urn:tokenproxy:problem:rate_limited' }, `${msg} code rate_limited`);
  t.match(r.headers['retry-after'], /^[1-9]\d*$/, `${msg} Retry-After in whole seconds`);
  t.equal(r.headers['ratelimit-limit'], String(limit), `${msg} RateLimit-Limit`);
  t.equal(r.headers['ratelimit-remaining'], '0', `${msg} RateLimit-Remaining`);
  t.equal(r.headers['ratelimit-reset'], r.headers['retry-after'], `${msg} RateLimit-Reset = Retry-After`);
}

/** Asserts a non-429 answer carrying the RateLimit-* headers of a rule with `limit` points. */
export function expectAllowed(t: Test, r: Reply, status: number, limit: number, remaining?: number, msg = ''): void {
  t.equal(r.status, status, `${msg} status ${status}${r.status !== status ? `: ${r.text}` : ''}`);
  t.equal(r.headers['ratelimit-limit'], String(limit), `${msg} RateLimit-Limit`);
  if (remaining !== undefined) t.equal(r.headers['ratelimit-remaining'], String(remaining), `${msg} RateLimit-Remaining`);
  t.match(r.headers['ratelimit-reset'], /^\d+$/, `${msg} RateLimit-Reset`);
  t.notOk(r.headers['retry-after'], `${msg} no Retry-After`);
}

export interface RowDrive {
  /** Sends one request counted by the rule. */
  send: () => Promise<Reply>;
  /** The status an admitted request answers with. */
  okStatus: number;
  points: number;
  durationSeconds: number;
  mitigation: { kind: 'throttle' } | { kind: 'block'; blockSeconds: number };
}

/**
 * Drives one rule to its 429 and through its mitigation:
 * - the first `points` requests are admitted (RateLimit-Remaining counting down), the next is 429;
 * - Throttle: admitted again once Retry-After has passed;
 * - Block: still 429 after the window has passed (Retry-After shrinking), admitted once the block
 *   duration is over. Needs blockSeconds ≥ durationSeconds + 1.
 *
 * Loaded machines (issue 30): rows run concurrently with 1 s windows, and a stall can let a window
 * (or a block) run out before the row reaches its limit (or its still-blocked check). Such an
 * answer is accepted only when the clock shows it could be right: a count may start over only if
 * at least the window's duration lay between sending the window's first request and receiving the
 * answer that starts over; a block may lapse only if at least the block duration lay between
 * sending the 429 and receiving the admission. The row then starts over in the new window (a
 * comment says so; at most MAX_WINDOWS windows in all). Anything sooner fails the row, and a
 * limiter that forgets too early cannot pass MAX_WINDOWS attempts unless every one stalls.
 */
export async function driveRow(t: Test, d: RowDrive): Promise<void> {
  let opened: Opened | undefined;
  const windows = { started: 1 };
  for (;;) {
    const over = await countToLimit(t, d, opened, windows);
    const retryAfter = Number(over.reply.headers['retry-after']);
    if (d.mitigation.kind === 'throttle') {
      t.ok(retryAfter <= Math.ceil(d.durationSeconds), `throttle: Retry-After ${retryAfter} s is within the window`);
      await sleep(retryAfter * 1000 + 150);
      expectAllowed(t, await d.send(), d.okStatus, d.points, d.points - 1, 'throttle: after Retry-After, the next window admits:');
      return;
    }
    const { blockSeconds } = d.mitigation;
    t.equal(retryAfter, blockSeconds, 'block: Retry-After is the block duration');
    // The counting window has passed, the block has not.
    await sleep(d.durationSeconds * 1000 + 300);
    const sentAt = performance.now();
    const still = await d.send();
    const blockedFor = Math.round(performance.now() - over.sentAt);
    if (still.status !== 429 && opensWindow(still, d) && blockedFor >= blockSeconds * 1000 && windows.started < MAX_WINDOWS) {
      windows.started++;
      t.comment(`block: the ${blockSeconds} s block ran out (${blockedFor} ms) before the still-blocked check could run (a loaded machine); again in the new window`);
      opened = { sentAt };
      continue;
    }
    expect429(t, still, d.points, `block: after the window (at most ${blockedFor} ms after the 429):`);
    const left = Number(still.headers['retry-after']);
    t.ok(left <= blockSeconds, `block: Retry-After counts down (${left} s left)`);
    await sleep(left * 1000 + 150);
    expectAllowed(t, await d.send(), d.okStatus, d.points, d.points - 1, 'block: after the block duration, admitted again:');
    return;
  }
}

/**
 * The first half of driveRow alone: `points` admitted (counting down), then a 429, in one window;
 * a window that surely ran out on a loaded machine starts the count over (see driveRow).
 */
export async function reachLimit(t: Test, d: Omit<RowDrive, 'mitigation'>): Promise<Reply> {
  return (await countToLimit(t, { ...d, mitigation: { kind: 'throttle' } }, undefined, { started: 1 })).reply;
}

/** How many windows a row may start over in (see driveRow) before a reset counts as a failure. */
const MAX_WINDOWS = 4;

/** A request that was admitted as the first of a new window, and when it was sent. */
interface Opened {
  sentAt: number;
}

/** An admitted answer that is the first of a window: RateLimit-Remaining is points - 1. */
function opensWindow(r: Reply, d: RowDrive): boolean {
  return r.status === d.okStatus && r.headers['ratelimit-remaining'] === String(d.points - 1) && r.headers['retry-after'] === undefined;
}

/**
 * Sends until the rule answers 429 and returns that answer. Each admitted answer must count one
 * point down; a count that starts over is accepted only when the window had surely passed (see
 * driveRow), and counting then continues in the new window.
 */
async function countToLimit(t: Test, d: RowDrive, opened: Opened | undefined, windows: { started: number }): Promise<{ reply: Reply; sentAt: number }> {
  let windowSentAt = opened?.sentAt ?? 0;
  let used = opened ? 1 : 0;
  for (;;) {
    const sentAt = performance.now();
    const r = await d.send();
    const receivedAt = performance.now();
    if (used === 0) windowSentAt = sentAt;
    const expected = used < d.points ? r.status === d.okStatus && r.headers['ratelimit-remaining'] === String(d.points - used - 1) : r.status === 429;
    if (!expected && used > 0 && opensWindow(r, d)) {
      // The window began after windowSentAt and this answer came before receivedAt: a window that
      // ran out lies between them.
      const elapsed = Math.round(receivedAt - windowSentAt);
      if (elapsed >= d.durationSeconds * 1000 && windows.started < MAX_WINDOWS) {
        t.comment(`the ${d.durationSeconds} s window ran out after ${used} request(s) (${elapsed} ms, a loaded machine); counting again in the new window`);
        windows.started++;
        windowSentAt = sentAt;
        used = 1;
        continue;
      }
      t.fail(`the count started over after ${used} request(s), ${elapsed} ms after the window opened: before its ${d.durationSeconds} s had passed`);
    }
    if (used < d.points) {
      expectAllowed(t, r, d.okStatus, d.points, d.points - used - 1, `request ${used + 1}/${d.points}:`);
      used++;
      continue;
    }
    expect429(t, r, d.points, `request ${d.points + 1}:`);
    return { reply: r, sentAt };
  }
}

/** A single-string tokenize body. */
export const oneToken = (v = `v-${randomBytes(4).toString('hex')}`): { type: 'token'; data: string } => ({ type: 'token', data: v });

/** Adds a proxy (pass-through to `destination`) to a built tenant; returns its proxy key. */
export function addProxy(built: BuiltTenant, destination: string, opts: { requireAuth?: boolean } = {}): string {
  const key = newKey();
  const proxies = ((built.config.proxies as unknown[] | undefined) ??= []);
  built.config.proxies = proxies;
  proxies.push({
    id: `p${proxies.length}`, name: `proxy ${proxies.length}`, key, destination_url: destination,
    require_auth: opts.requireAuth ?? false, leak_guard: 'off',
  });
  return key;
}

/**
 * Sends through a proxy and, for tokenproxy's own errors, checks the `{"proxy_error": problem}`
 * wrapping and unwraps it, so the assertions above apply to proxy answers too.
 */
export async function sendViaProxy(c: HttpClient, proxyKey: string, o: SendOptions & { method?: string; path?: string } = {}): Promise<Reply> {
  const r = await c.send(o.method ?? 'GET', o.path ?? '/proxy/anything', { ...o, headers: { 'svc-proxy-key': proxyKey, ...(o.headers ?? {}) } });
  if (r.body && typeof r.body === 'object' && 'proxy_error' in r.body) {
    return { ...r, body: r.body.proxy_error, headers: { ...r.headers, 'content-type': 'application/problem+json (wrapped as proxy_error)' } };
  }
  return r;
}
