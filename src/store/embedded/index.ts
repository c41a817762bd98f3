/**
 * The embedded store: one SQLite file (better-sqlite3), for a single instance. Its four ports
 * share one connection
 * (connection.ts: the file, this thread's reads, the writer thread's group commit) and one schema
 * (schema.ts).
 */
import type { Worker } from 'node:worker_threads';
import type { FormatMigrator, Store } from '../types.js';
import { EmbeddedAudit } from './audit.js';
import { EmbeddedConnection } from './connection.js';
import { EmbeddedDataKeys } from './data-keys.js';
import { EmbeddedIdempotency } from './idempotency.js';
import { EmbeddedMarker } from './marker.js';
import { EmbeddedMigrator } from './migrate.js';
import { EmbeddedReactorResults } from './reactor-results.js';
import { EmbeddedTokens } from './tokens.js';

export class EmbeddedStore implements Store {
  readonly kind = 'embedded' as const;
  readonly tokens: EmbeddedTokens;
  readonly audit: EmbeddedAudit;
  readonly dataKeys: EmbeddedDataKeys;
  readonly idempotency: EmbeddedIdempotency;
  readonly reactorResults: EmbeddedReactorResults;
  readonly marker: EmbeddedMarker;
  readonly #c: EmbeddedConnection;
  readonly #ping: { get(): unknown };

  /**
   * Opens (creating if needed) the database at `path`, or ':memory:'. A file of an older format is
   * StoreFormatError (naming `tokenproxy migrate`) unless `forMigration`.
   */
  constructor(readonly path: string, opts: { forMigration?: boolean } = {}) {
    this.#c = new EmbeddedConnection(path, opts);
    this.tokens = new EmbeddedTokens(this.#c);
    this.dataKeys = new EmbeddedDataKeys(this.#c);
    this.#ping = this.#c.db.prepare('SELECT 1');
    this.audit = new EmbeddedAudit(this.#c);
    this.idempotency = new EmbeddedIdempotency(this.#c);
    this.reactorResults = new EmbeddedReactorResults(this.#c);
    this.marker = new EmbeddedMarker(this.#c);
  }

  /** The 5 -> 6 conversion (migrate.ts); run with the service stopped. */
  migrator(): FormatMigrator {
    return new EmbeddedMigrator(this.#c.db);
  }

  async ping(): Promise<void> {
    this.#c.run(() => this.#ping.get());
  }

  /** Writes already accepted are committed (or rejected), the writer exits, then the database closes. */
  close(): Promise<void> {
    this.marker.close();
    return this.#c.close();
  }

  /** The writer thread, for tests that kill it; null in ':memory:' mode or when none is running. */
  writerThread(): Worker | null {
    return this.#c.writerThread();
  }
}
