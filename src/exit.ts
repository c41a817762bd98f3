/**
 * Ending the process in bounded time. `process.exit` runs pino's exit
 * handler, which writes the log lines still buffered with sonic-boom's flushSync: that retries a
 * failed write for ever (100 ms apart), so a standard output whose reader is gone (EPIPE) or
 * never reads (a full pipe) holds the process in the exit handler, where no timer and no second
 * signal can reach it. Here the buffer is flushed asynchronously for at most EXIT_FLUSH_MS, the
 * synchronous flush is turned off, and only then the process exits.
 */
import { pino, type Logger } from 'pino';

/** How long the last log lines may take to reach standard output before the process exits anyway. */
export const EXIT_FLUSH_MS = 1_000;

interface Flushable {
  flush?(cb?: (err?: Error | null) => void): void;
  flushSync?(): void;
}

/** Exits with `code` once the log's buffer is written, or after EXIT_FLUSH_MS, whichever comes first. */
export function exitProcess(log: Logger, code: number): void {
  const stream = (log as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] as Flushable | undefined;
  let done = false;
  const exit = (): void => {
    if (done) return;
    done = true;
    // Whatever the asynchronous flush did not write is dropped rather than waited for.
    if (stream) stream.flushSync = () => undefined;
    process.exit(code);
  };
  // Not unref'd: this timer is what ends the process when the flush never completes.
  setTimeout(exit, EXIT_FLUSH_MS);
  try {
    if (typeof stream?.flush === 'function') stream.flush(() => exit());
    else exit();
  } catch {
    exit();
  }
}

/** Logs (if the log still works) without letting a broken destination stop what follows. */
export function tryLog(fn: () => void): void {
  try {
    fn();
  } catch {
    // The log is gone; ending the process matters more than the line.
  }
}

/**
 * What a stopping process gets beyond `server.shutdown_grace_ms` to close the reactor host, the
 * store and its writer thread; past grace plus this margin it exits (code 1) whatever is left.
 */
export const SHUTDOWN_MARGIN_MS = 5_000;
