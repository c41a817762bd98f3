/**
 * A shop page with hosted fields, for the browser tests of test/elements/: tokenproxy on one origin
 * (localhost), the shop on another (127.0.0.1), one headless Chromium. The page mounts the fields
 * it is given and exposes `tk(body)`: `elements.tokenize` of a JSON body in which
 * `{"$field": "<name>"}` stands for that field, answered as `{ok, status, body}` (the answer, or
 * the rejection's problem), whatever happened.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser, BrowserContext, FrameLocator, Page } from 'playwright-core';
import { APP_PUBLIC, KEYS, baseConfig, startTestService, type TestService } from '../helpers/service.js';
import { launchBrowser } from '../helpers/browser.js';

type Tap = { teardown(fn: () => unknown): void };

/** A field of the page: `card`, or `text` with its token type. */
export interface FieldSpec {
  kind: 'card' | 'text';
  type?: string;
}

/** What the page observed of one tokenize: the answer, or the rejection's status and problem. */
export interface Outcome {
  ok: boolean;
  status: number;
  body: unknown;
}

export interface ElementsPage {
  svc: TestService;
  browser: Browser;
  context: BrowserContext;
  page: Page;
  /** The frame of a field, by name. */
  field(name: string): FrameLocator;
  /** elements.tokenize of `body`, `{"$field": name}` standing for a field. */
  tk(body: unknown): Promise<Outcome>;
  /** POST /tokenize requests any frame sent so far. */
  tokenizeRequests(): number;
  /** Every message the page's window received, as JSON. */
  messages(): Promise<string>;
  /** The last change event of a field. */
  lastChange(name: string): Promise<{ complete: boolean; empty: boolean; errors: Array<{ field: string; code: string }> } | undefined>;
}

async function pageServer(t: Tap, html: () => string): Promise<string> {
  const server: Server = createServer((req, res) => {
    if (req.url !== '/checkout') {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(html());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function checkout(tp: string, fields: Record<string, FieldSpec>): string {
  const divs = Object.keys(fields).map((n) => `<div id="${n}"></div>`).join('');
  return `<!doctype html><html><head><meta charset="utf-8"><title>Checkout</title></head><body>${divs}
<script src="${tp}/elements/v1/elements.js"></script>
<script>
  window.__messages = [];
  window.addEventListener('message', (e) => window.__messages.push(JSON.stringify(e.data)));
  const el = TokenproxyElements.init({ baseUrl: '${tp}', apiKey: '${KEYS.public}' });
  const specs = ${JSON.stringify(fields)};
  window.fields = {};
  window.__changes = {};
  window.__ready = 0;
  for (const name of Object.keys(specs)) {
    const s = specs[name];
    const f = s.kind === 'card' ? el.create('card') : el.create('text', { type: s.type });
    f.on('change', (e) => { window.__changes[name] = e; });
    f.on('ready', () => { window.__ready++; });
    f.mount('#' + name);
    window.fields[name] = f;
  }
  function swap(v) {
    if (Array.isArray(v)) return v.map(swap);
    if (v && typeof v === 'object') {
      const keys = Object.keys(v);
      if (keys.length === 1 && keys[0] === '$field') return window.fields[v.$field];
      const out = {};
      for (const k of keys) Object.defineProperty(out, k, { value: swap(v[k]), enumerable: true, writable: true, configurable: true });
      return out;
    }
    return v;
  }
  window.tk = (json) => el.tokenize(swap(JSON.parse(json))).then(
    (body) => ({ ok: true, status: 200, body }),
    (e) => ({ ok: false, status: e.status === undefined ? -1 : e.status, body: e.problem === undefined ? { message: e.message } : e.problem }));
</script></body></html>`;
}

/** Starts tokenproxy (the public key lists the shop's origin), the shop, and the page with `fields` mounted and ready. */
export async function openElementsPage(t: Tap, fields: Record<string, FieldSpec>, opts: { permissions?: string[] } = {}): Promise<ElementsPage> {
  let tp = '';
  const shop = await pageServer(t, () => checkout(tp, fields));
  const cfg = baseConfig() as { tenants: Array<{ applications: Array<Record<string, unknown>> }> };
  cfg.tenants[0]!.applications.find((a) => a.id === APP_PUBLIC)!.allowed_origins = [shop];
  const svc = await startTestService(t, { config: cfg });
  tp = svc.url.replace('127.0.0.1', 'localhost');
  const browser = await launchBrowser(t);
  const context = await browser.newContext({ permissions: opts.permissions ?? [] });
  const page = await context.newPage();
  let requests = 0;
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname === '/tokenize') requests++;
  });
  await page.goto(`${shop}/checkout`);
  const n = Object.keys(fields).length;
  await page.waitForFunction((count) => (window as unknown as { __ready: number }).__ready === count, n);
  return {
    svc, browser, context, page,
    field: (name) => page.frameLocator(`#${name} iframe`),
    tk: (body) => page.evaluate((json) => (window as unknown as { tk(j: string): Promise<Outcome> }).tk(json), JSON.stringify(body)),
    tokenizeRequests: () => requests,
    messages: () => page.evaluate(() => (window as unknown as { __messages: string[] }).__messages.join('\n')),
    lastChange: (name) => page.evaluate((nm) => (window as unknown as { __changes: Record<string, never> }).__changes[nm], name),
  };
}

/** A reference to the page's field `name` in a body given to `tk`. */
export const F = (name: string) => ({ $field: name });
