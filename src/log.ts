/**
 * Logging: pino, configured once. Redaction is a second line of defence: the first is that no
 * module ever passes a request body, a header map, a key or a token value to a logger.
 */
import { pino, type Logger, type DestinationStream } from 'pino';
import { luhnValid } from './luhn.js';

export type { Logger };

/**
 * Fields censored wherever they appear in a log object (at any of the first levels the hook walks):
 * a value under one of these names is replaced by REDACTED. Done in the same walk as the card
 * scrub below, not with pino's `redact` (whose wildcard paths cost about 10 µs a line, as much
 * as the rest of the access line).
 */
export const REDACTED_FIELDS: ReadonlySet<string> = new Set(['data', 'body', 'args', 'key', 'apiKey', 'proxyKey']);
/** Header names censored inside any `headers` object. */
export const REDACTED_HEADERS: ReadonlySet<string> = new Set(['svc-api-key', 'svc-proxy-key', 'authorization', 'cookie']);
export const REDACTED = '[redacted]';

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

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * The object's string fields scrubbed of card numbers and its censored fields and headers
 * replaced (nested plain objects and arrays too, a few levels); the same object when nothing
 * changed.
 */
function scrubFields(value: unknown, depth: number): unknown {
  if (typeof value === 'string') return scrubCards(value);
  if (depth > 3) return value;
  if (Array.isArray(value)) {
    let arr: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const s = scrubFields(value[i], depth + 1);
      if (s !== value[i]) (arr ??= [...value])[i] = s;
    }
    return arr ?? value;
  }
  if (!isPlainObject(value)) return value;
  let copy: Record<string, unknown> | undefined;
  for (const k in value) {
    const v = value[k];
    let s: unknown;
    if (v === undefined || typeof v === 'number' || typeof v === 'boolean') continue;
    if (REDACTED_FIELDS.has(k)) s = REDACTED;
    else if (k === 'headers' && isPlainObject(v)) s = censorHeaders(v);
    else s = scrubFields(v, depth + 1);
    if (s !== v) (copy ??= { ...value })[k] = s;
  }
  return copy ?? value;
}

function censorHeaders(headers: Record<string, unknown>): Record<string, unknown> {
  let copy: Record<string, unknown> | undefined;
  for (const k in headers) {
    const v = headers[k];
    const s = REDACTED_HEADERS.has(k.toLowerCase()) ? REDACTED : scrubFields(v, 4);
    if (s !== v) (copy ??= { ...headers })[k] = s;
  }
  return copy ?? headers;
}

/**
 * The service's own destination: standard output, written asynchronously (sonic-boom with
 * `sync: false`): a log call appends to a buffer and returns; the buffer goes out in one write
 * while the next requests run, so the per-request access line costs no system call on the
 * request's path. pino flushes it synchronously on `exit` (a normal stop, `process.exit`, an
 * uncaught exception) and on `beforeExit`; only a SIGKILL or a power cut can lose the lines still
 * buffered.
 *
 * Under load the buffer goes out once it holds FLUSH_BYTES (one write for a few dozen access
 * lines, instead of one per event-loop turn); a quiet service's lines go out at most FLUSH_MS after
 * they were logged, or after the write then in flight ends.
 */
export function stdoutDestination(): DestinationStream {
  return asyncDestination(1);
}

const FLUSH_BYTES = 8192;
const FLUSH_MS = 50;

/** The same kind of destination on another file descriptor or a file path (the benchmarks log to a file). */
export function asyncDestination(dest: number | string): DestinationStream {
  const stream = pino.destination({ dest, sync: false, minLength: FLUSH_BYTES });
  // sonic-boom's flush() does nothing while a write is in flight, and when that write ends it writes
  // on only if at least minLength bytes wait: lines that came in meanwhile stayed buffered until the
  // next log call (a quiet process's last lines: a worker's 'worker listening', relayed just after
  // the primary's own line, was seen held for over a minute). So after each write ends ('drain'),
  // a flush is owed again while any byte waits. What waits is sonic-boom's own count (`_len`, not
  // part of its typed API; read only here, once a write ends, so a log call costs nothing more:
  // counting bytes per call cost 0.3 µs a line). test/server/log-flush.test.ts fails should a
  // sonic-boom upgrade rename it.
  let timer: NodeJS.Timeout | null = null;
  const flushLater = (): void => {
    timer = null;
    try {
      stream.flush();
    } catch {
      // Destroyed (the process is ending): its lines were flushed by pino's exit handler.
    }
  };
  const arm = (): void => {
    if (timer === null) (timer = setTimeout(flushLater, FLUSH_MS)).unref();
  };
  stream.on('drain', () => {
    if (((stream as unknown as { _len?: number })._len ?? 0) > 0) arm();
  });
  const write = stream.write.bind(stream);
  // Each write makes sure a flush follows within FLUSH_MS (one timer at a time, never keeping the
  // process alive), so nothing waits for the buffer to fill.
  stream.write = (data: string): boolean => {
    const ok = write(data);
    arm();
    return ok;
  };
  return stream;
}

export function createLogger(level: string, destination: DestinationStream = stdoutDestination()): Logger {
  return pino(
    {
      level,
      base: { service: 'tokenproxy' },
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

/**
 * Set (true) by an error class whose messages, `code` and `class` never carry a value
 * (StoreUnavailableError, store/unavailable.ts): errorFields writes them.
 */
export const DESCRIBES_ITSELF: unique symbol = Symbol('tokenproxy.describesItself');

/**
 * An error as a log line carries it, never a value: its type, and
 *   - an error that describes itself (a store failure): its `code` (SQLSTATE, Redis reply prefix,
 *     socket or SQLite code, `timeout`), its `class` (input | outage | timeout | auth) and its
 *     message;
 *   - any other error: its errno-style `code` when it has one; never its message, which can quote
 *     a value (a driver's, a parser's).
 * Not the cause: a store error's cause is the driver's error, whose message and details can.
 */
export function errorFields(err: unknown): Record<string, unknown> | undefined {
  if (!(err instanceof Error)) return undefined;
  const e = err as Error & { code?: unknown; class?: unknown; [DESCRIBES_ITSELF]?: unknown };
  if (e[DESCRIBES_ITSELF] === true) {
    return { type: e.name, ...(typeof e.code === 'string' ? { code: e.code } : {}), ...(typeof e.class === 'string' ? { class: e.class } : {}), message: e.message };
  }
  return { type: e.name, ...(e.code ? { code: e.code } : {}) };
}

/** The fields of the access line: the route pattern, never the raw URL (a query may carry a key). */
export interface AccessFields {
  method: string | undefined;
  route: string;
  status: number;
  ms?: number;
  tenant?: string;
  app?: string;
}

const INFO_LEVEL = 30;

/**
 * The per-request access line, formatted here and written straight to the logger's destination:
 * the same JSON line pino writes for `log.child({ req_id }).info(fields, 'request')` (level,
 * time, the logger's bindings, req_id, the fields, msg), through the same asynchronous stream,
 * flushed with it. pino's generic path (the scrub hook walking every field, its serializer loop)
 * cost about 10 µs a line, several per cent of a pass-through request. Every field here is one the
 * service sets (method, route pattern, status, duration, configured ids), not user data; the ids
 * are scrubbed of card numbers all the same, as every string in the log is.
 */
export function writeAccessLine(logger: Logger, requestId: string, f: AccessFields): void {
  const l = logger as unknown as Record<symbol, unknown>;
  const stream = l[pino.symbols.streamSym] as { write(line: string): unknown };
  const bindings = l[pino.symbols.chindingsSym] as string;
  let line = `{"level":${INFO_LEVEL},"time":"${new Date().toISOString()}"${bindings},"req_id":${JSON.stringify(requestId)},"method":${JSON.stringify(f.method ?? '')},"route":${JSON.stringify(f.route)},"status":${f.status}`;
  if (f.ms !== undefined) line += `,"ms":${f.ms}`;
  if (f.tenant !== undefined) line += `,"tenant":${JSON.stringify(scrubCards(f.tenant))}`;
  if (f.app !== undefined) line += `,"app":${JSON.stringify(scrubCards(f.app))}`;
  stream.write(`${line},"msg":"request"}\n`);
}
