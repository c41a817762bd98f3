/**
 * POST /detokenize (docs/detokenization.md "Detokenization"): any JSON body with expressions in, the same body
 * with values out, for keys with token:read; and GET /logs, the audit trail, for management keys
 * with log:read (docs/detokenization.md "Audit trail"; the route is in logs.ts).
 */
import { ExpressionScan } from '../detokenize/expressions.js';
import { stringifyInTurns } from '../detokenize/serialize.js';
import type { Detokenizer } from '../detokenize/service.js';
import type { Route } from '../http/context.js';
import { sendJson } from '../http/respond.js';
import type { AuditTrail } from '../audit/trail.js';
import { logsRoutes } from './logs.js';

/** Answers with more values than this (bytes) are serialized in turns (detokenize/serialize.ts). */
const LARGE_ANSWER = 256 * 1024;

export function detokenizeRoutes(detokenizer: Detokenizer, audit: AuditTrail): Route[] {
  return [
    {
      // A read of the tokens it names: the same rate-limit group as GET /tokens/{id}.
      method: 'POST', path: '/detokenize', group: 'tokens.read', auth: 'api', body: 'json', permission: 'token:read',
      handle: async (ctx) => {
        const body = ctx.body;
        // One scan, one budget; the render stops at the output bound and yields.
        const scan = new ExpressionScan().json(body);
        const resolved = await detokenizer.resolveForRead(ctx.principal, scan, { requestId: ctx.requestId, log: ctx.log });
        const rendering = await scan.render(resolved);
        const answer = rendering.json(body);
        if (rendering.renderedBytes < LARGE_ANSWER) {
          sendJson(ctx.res, 200, answer, ctx.headers);
          return;
        }
        // Up to 5 MB of values: serialized in turns and sent as it comes (chunked), not held whole.
        const res = ctx.res;
        if (res.destroyed) return;
        res.writeHead(200, { ...ctx.headers, 'content-type': 'application/json; charset=utf-8' });
        // Waits for each piece to drain: pieces written ahead pile up and go out in one long writev.
        await stringifyInTurns(answer, (piece) => {
          if (res.destroyed || res.write(piece)) return;
          return new Promise<void>((resolve) => {
            const done = () => {
              res.off('drain', done);
              res.off('close', done);
              resolve();
            };
            res.on('drain', done);
            res.on('close', done);
          });
        });
        res.end();
      },
    },
    ...logsRoutes(audit),
  ];
}
