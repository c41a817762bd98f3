/**
 * Logging: pino, configured once. Redaction is a second line of defence: the first is that no
 * module ever passes a request body, a header map, a key or a token value to a logger.
 */
import { pino, type Logger, type DestinationStream } from 'pino';
import { luhnValid } from './vault/card.js';

export type { Logger };

/** Paths censored wherever they appear in a log object. */
export const REDACT_PATHS = [
  'headers["svc-api-key"]',
  'headers["svc-proxy-key"]',
  'headers.authorization',
  'headers.cookie',
  '*.headers["svc-api-key"]',
  '*.headers["svc-proxy-key"]',
  '*.headers.authorization',
  'data',
  '*.data',
  'body',
  '*.body',
  'args',
  '*.args',
  'key',
  'apiKey',
  'proxyKey',
];

/** What a card number in log text is replaced with. */
export const CARD_CENSOR = '[card redacted]';

/** Runs of 13 or more digits, each digit after the first optionally preceded by one space or dash. */
const DIGIT_RUN = /\d(?:[ -]?\d){12,}/g;
const GROUP_SEPARATOR = /[ -]/;


/**
 * Whether a digit run holds a card number: 13-19 digits that pass the Luhn check, as the whole
 * run or as any consecutive groups of it (so `4242 4242 4242 4242 123`, a card and its cvc, is
 * caught). A contiguous run of more than 19 digits is a longer number, not a card.
 */
function holdsCard(run: string): boolean {
  const groups = run.split(GROUP_SEPARATOR);
  for (let first = 0; first < groups.length; first++) {
    let digits = '';
    for (let last = first; last < groups.length; last++) {
      digits += groups[last];
      if (digits.length > 19) break;
      if (digits.length >= 13 && luhnValid(digits)) return true;
    }
  }
  return false;
}

/**
 * Replaces card numbers in free text (Luhn-valid runs of 13-19 digits, contiguous or grouped by
 * single spaces or dashes) with CARD_CENSOR. Every message and string field that reaches the log
 * passes through it, so text from user code (reactor console lines, reactor errors) cannot write
 * a card number into the service log.
 */
export function scrubCards(text: string): string {
  if (text.length < 13) return text;
  return text.replace(DIGIT_RUN, (run) => (holdsCard(run) ? CARD_CENSOR : run));
}

/** The object's string fields scrubbed (nested plain objects too, a few levels); the same object when nothing changed. */
function scrubFields(value: unknown, depth: number): unknown {
  if (typeof value === 'string') return scrubCards(value);
  if (depth > 3 || typeof value !== 'object' || value === null || Array.isArray(value)) return value;
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return value;
  let copy: Record<string, unknown> | undefined;
  for (const [k, v] of Object.entries(value)) {
    const s = scrubFields(v, depth + 1);
    if (s !== v) (copy ??= { ...(value as Record<string, unknown>) })[k] = s;
  }
  return copy ?? value;
}

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'tokenproxy' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
      hooks: {
        // Every log call, of this logger and its children: messages, format arguments and string
        // fields are scrubbed of card numbers before they are serialized.
        logMethod(args, method) {
          for (let i = 0; i < args.length; i++) args[i] = scrubFields(args[i], 0) as never;
          return method.apply(this, args);
        },
      },
    },
    destination,
  );
}
