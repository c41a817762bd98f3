/**
 * Logging: pino, configured once. Redaction is a second line of defence: the first is that no
 * module ever passes a request body, a header map, a key or a token value to a logger.
 */
import { pino, type Logger, type DestinationStream } from 'pino';

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

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'tokenproxy' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  );
}
