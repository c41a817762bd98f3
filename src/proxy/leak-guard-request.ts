/**
 * The leak guard's scan of what a proxied request carries besides its body: the path and query
 * the destination receives (which its access log keeps) and every header forwarded to it. The
 * same card-number scan as a body's (leak-guard.ts: UUIDs out, the request's own alias ids
 * allowed); the path and query are percent-decoded once first (`%34%32…`, `+` and `%20` as
 * spaces), as the destination decodes them; header names and values are scanned as they are.
 * Headers the service strips (SVC-*, hop-by-hop) never reach this: it is given what is forwarded.
 *
 * Every proxied request passes here, so a text with fewer than 13 ASCII digits (no card fits in
 * it, and a percent-escape only ever stands for fewer digits than it is written with) is passed
 * over without a scanner being made.
 */
import { LeakScanner, NO_ALIASES, type ScanType } from './leak-guard.js';

const URL_TYPE: ScanType = { encoding: 'form', charset: undefined, conflictingCharsets: false, sniff: false };
const HEADER_TYPE: ScanType = { encoding: 'raw', charset: undefined, conflictingCharsets: false, sniff: false };
const MIN_DIGITS = 13;

/**
 * Trace-context headers, each with the format of its value: ids that are random hex or decimal
 * numbers by definition (W3C Trace Context, B3, Datadog, Google Cloud, AWS X-Ray, Sentry, Jaeger).
 * A value in its header's format is not scanned: an instrumented client sends these on every
 * request, and a random Datadog id (63 or 64 bits, in decimal) passes for a card once in 17 to 34
 * (a 32-hex-digit id once in 1,100), so a blocking guard would refuse that share of all requests. Anything else in these headers is scanned as any header is.
 */
const TRACE_HEADERS: ReadonlyMap<string, RegExp> = new Map([
  ['traceparent', /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/],
  ['x-b3-traceid', /^[0-9a-f]{16}(?:[0-9a-f]{16})?$/],
  ['x-b3-spanid', /^[0-9a-f]{16}$/],
  ['x-b3-parentspanid', /^[0-9a-f]{16}$/],
  ['b3', /^(?:[0-9a-f]{16}(?:[0-9a-f]{16})?-[0-9a-f]{16}(?:-[01d](?:-[0-9a-f]{16})?)?|[01d])$/],
  ['x-datadog-trace-id', /^[0-9]{1,20}$/],
  ['x-datadog-parent-id', /^[0-9]{1,20}$/],
  ['x-cloud-trace-context', /^[0-9a-f]{32}(?:\/[0-9]{1,20})?(?:;o=[01])?$/],
  ['x-amzn-trace-id', /^[A-Za-z]+=[0-9a-f?:-]*(?:;[A-Za-z]+=[0-9a-f?:-]*)*$/],
  ['sentry-trace', /^[0-9a-f]{32}-[0-9a-f]{16}(?:-[01])?$/],
  ['uber-trace-id', /^[0-9a-f]{1,32}:[0-9a-f]{1,16}:[0-9a-f]{1,16}:[0-9a-f]{1,2}$/],
]);

/** Whether `text` holds at least MIN_DIGITS ASCII digits. */
function enoughDigits(text: string): boolean {
  if (text.length < MIN_DIGITS) return false;
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0x30 && c <= 0x39 && ++n >= MIN_DIGITS) return true;
  }
  return false;
}

function count(text: string, type: ScanType, allowed: ReadonlySet<string>): number {
  if (!enoughDigits(text)) return 0;
  const s = new LeakScanner(type, allowed);
  // UTF-8: a character outside ASCII becomes bytes that are neither digits nor separators.
  s.push(Buffer.from(text, 'utf8'));
  return s.end();
}

/**
 * Card numbers in the path below the proxy and the query the caller sent (its `svc-proxy-key`
 * parameter, which is not forwarded, taken out). Scanned apart, so no number spans the two.
 */
export function urlFindings(suffix: string, query: string, allowed: ReadonlySet<string> = NO_ALIASES): number {
  return count(suffix, URL_TYPE, allowed) + count(query, URL_TYPE, allowed);
}

/** Card numbers in the names and values of the headers to be forwarded. */
export function headerFindings(headers: Readonly<Record<string, string | string[]>>, allowed: ReadonlySet<string> = NO_ALIASES): number {
  let n = 0;
  for (const name in headers) {
    const value = headers[name]!;
    n += count(name, HEADER_TYPE, allowed);
    if (typeof value === 'string') n += valueFindings(name, value, allowed);
    else for (const v of value) n += valueFindings(name, v, allowed);
  }
  return n;
}

function valueFindings(name: string, value: string, allowed: ReadonlySet<string>): number {
  if (!enoughDigits(value)) return 0;
  const format = TRACE_HEADERS.get(name.toLowerCase());
  return format !== undefined && format.test(value) ? 0 : count(value, HEADER_TYPE, allowed);
}
