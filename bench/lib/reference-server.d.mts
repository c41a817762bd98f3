// Types of reference-server.mjs (plain JavaScript, so the references run without a loader).
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Pool } from 'undici';

export function endToEnd(headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>): Record<string, string | string[]>;
export function forwardTo(pool: Pool): (req: IncomingMessage, res: ServerResponse) => void;
export function forwarderPool(target: string, opts?: { connections?: number; timeoutMs?: number }): Pool;
