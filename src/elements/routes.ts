/**
 * Hosted card fields: the static files of `/elements/v1/` (public/elements/v1/ in the
 * package) and the frame documents. A frame is served on tokenproxy's origin for a public key
 * whose application lists the parent page's origin, with a Content-Security-Policy whose
 * `frame-ancestors` are exactly that application's origins: a page on any other origin cannot
 * frame it, and the frame loads nothing but its own script and style.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { KeyIndex } from '../auth/keys.js';
import { ServiceError } from '../errors.js';
import type { Context, Route } from '../http/context.js';
import type { CorsPolicy } from '../http/cors.js';
import { problem } from '../api/schemas.js';
import { TOKEN_TYPE_SPECS } from '../vault/token-types.js';

const ASSETS = new URL('../../public/elements/v1/', import.meta.url);

interface Asset {
  body: Buffer;
  etag: string;
  type: string;
}

function asset(name: string, type: string): Asset {
  const body = readFileSync(new URL(name, ASSETS));
  return { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"` };
}

let cache: Record<string, Asset> | undefined;
/** Read once, on the first request for one (the files ship with the package). */
function assets(): Record<string, Asset> {
  return (cache ??= {
    'elements.js': asset('elements.js', 'text/javascript; charset=utf-8'),
    'frame.js': asset('frame.js', 'text/javascript; charset=utf-8'),
    'frame.css': asset('frame.css', 'text/css; charset=utf-8'),
  });
}

function sendAsset(ctx: Context, name: string): void {
  const a = assets()[name]!;
  const headers = {
    ...ctx.headers,
    'content-type': a.type,
    etag: a.etag,
    'cache-control': 'public, max-age=300',
    'x-content-type-options': 'nosniff',
    // Loaded by shop pages (elements.js) and by the frames: any origin may load them.
    'cross-origin-resource-policy': 'cross-origin',
  };
  if (ctx.req.headers['if-none-match'] === a.etag) {
    ctx.res.writeHead(304, headers);
    ctx.res.end();
    return;
  }
  ctx.res.writeHead(200, { ...headers, 'content-length': a.body.length });
  ctx.res.end(ctx.req.method === 'HEAD' ? undefined : a.body);
}

const CARD_FORM = `<form id="f" autocomplete="on" novalidate>
<input id="number" name="cardnumber" autocomplete="cc-number" inputmode="numeric" placeholder="Card number" aria-label="Card number" spellcheck="false">
<input id="exp" name="exp-date" autocomplete="cc-exp" inputmode="numeric" placeholder="MM / YY" aria-label="Expiration date" spellcheck="false">
<input id="cvc" name="cvc" autocomplete="cc-csc" inputmode="numeric" placeholder="CVC" aria-label="Security code" spellcheck="false">
</form>`;
const TEXT_FORM = `<form id="f" autocomplete="off" novalidate>
<input id="value" name="value" autocomplete="off" aria-label="Secure field" spellcheck="false">
</form>`;

const escapeAttribute = (s: string) => s.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');

/**
 * Each token type's default fingerprint expression, for the frame: the one fingerprint_expression
 * a page may send with a hosted field's value (any other computes on the value). From the type
 * registry, so the frame never holds a stale copy.
 */
const FINGERPRINTS = escapeAttribute(JSON.stringify(Object.fromEntries(TOKEN_TYPE_SPECS.map((s) => [s.name, s.fingerprint]))));

function frameDocument(kind: 'card' | 'text'): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${kind === 'card' ? 'Card details' : 'Secure field'}</title><link rel="stylesheet" href="/elements/v1/frame.css"></head>
<body data-kind="${kind}" data-fingerprints="${FINGERPRINTS}">
${kind === 'card' ? CARD_FORM : TEXT_FORM}
<script src="/elements/v1/frame.js"></script>
</body></html>
`;
}

const frameQuery = z.object({
  key: z.string().min(1).describe('The public API key the field tokenizes with'),
  parent: z.string().min(1).describe("The parent page's origin; must be in the key's application allowed_origins"),
  id: z.string().regex(/^[0-9a-f]{32}$/).describe('The element id (elements.js)'),
  session: z.string().regex(/^[0-9a-f]{32}$/).describe('The page session (elements.js)'),
  type: z.string().max(64).optional().describe('The token type of a text field (default token)'),
  placeholder: z.string().max(500).optional(),
  style: z.string().max(2000).optional(),
});

const staticResponses = {
  200: { description: 'The file', contentType: 'text/javascript', body: z.string() },
  304: { description: 'Not modified (If-None-Match)' },
};

export function elementsRoutes(keys: KeyIndex, cors: CorsPolicy): Route[] {
  const file = (name: string, summary: string): Route => ({
    method: 'GET', path: `/elements/v1/${name}`, group: 'health', auth: 'none', body: 'none',
    schemas: { summary, tags: ['elements'], responses: name.endsWith('.css') ? { ...staticResponses, 200: { description: 'The file', contentType: 'text/css', body: z.string() } } : staticResponses },
    handle: async (ctx) => sendAsset(ctx, name),
  });
  const frame = (kind: 'card' | 'text'): Route => ({
    method: 'GET', path: `/elements/v1/frame/${kind}`, group: 'health', auth: 'none', body: 'none',
    schemas: {
      summary: kind === 'card' ? 'The hosted card field (an iframe document)' : 'A hosted text field (an iframe document)',
      tags: ['elements'],
      query: frameQuery,
      responses: {
        200: { description: 'The frame document, with frame-ancestors set to the key\'s allowed origins', contentType: 'text/html', body: z.string() },
        403: problem('The key is not a known public key whose application lists the parent origin (origin_not_allowed)'),
      },
    },
    handle: async (ctx) => {
      const q = ctx.query as z.infer<typeof frameQuery>;
      const principal = keys.findApiKey(q.key);
      const origins = principal && principal.app.type === 'public' ? cors.originsOf(principal.app) : undefined;
      // One answer for an unknown key, a key of another kind and an unlisted origin: this route is
      // not rate limited, so it must not tell which keys exist.
      if (!origins || !origins.has(q.parent)) {
        throw new ServiceError('origin_not_allowed', { detail: "The key's application does not list the parent page's origin in allowed_origins (public applications only)" });
      }
      const body = Buffer.from(frameDocument(kind));
      ctx.res.writeHead(200, {
        ...ctx.headers,
        'content-type': 'text/html; charset=utf-8',
        'content-length': body.length,
        'content-security-policy': `default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'none'; base-uri 'none'; object-src 'none'; frame-ancestors ${origins.sources().join(' ')}`,
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
        // The URL holds the key and the page session: not kept by caches.
        'cache-control': 'no-store',
      });
      ctx.res.end(ctx.req.method === 'HEAD' ? undefined : body);
    },
  });
  return [
    file('elements.js', 'The hosted fields script for shop pages (window.TokenproxyElements)'),
    file('frame.js', "The hosted field frame's own script"),
    file('frame.css', "The hosted field frame's style"),
    frame('card'),
    frame('text'),
  ];
}
