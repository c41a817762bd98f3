/**
 * The embedded store's marker (store/identity.ts): one row of `store_marker`, a table created at
 * a service start without a format change (schema.ts), so an older release ignores it. Written on
 * this thread's connection (a marker is written once per store: no group commit needed).
 *
 * The file itself is part of the store's identity: a file replaced (renamed over) or removed
 * under the running service leaves it writing to a file no path names any more, which the next
 * start would not open. replaced() compares the path's device and inode with the file's at open.
 */
import { statSync, watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';
import type Database from 'better-sqlite3';
import type { MarkerPort, StoreMarker } from '../types.js';
import type { EmbeddedConnection } from './connection.js';
import { STORE_MARKER_TABLE } from './schema.js';
import { retryBusy } from './writer.js';

interface Row {
  id: string;
  created_at: string;
  lost_at: string | null;
}

function fileId(path: string): string | null {
  try {
    const st = statSync(path, { bigint: true });
    return `${st.dev}:${st.ino}`;
  } catch {
    return null;
  }
}

export class EmbeddedMarker implements MarkerPort {
  readonly #c: EmbeddedConnection;
  readonly #opened: string | null;
  #watcher: FSWatcher | null = null;

  constructor(connection: EmbeddedConnection) {
    this.#c = connection;
    this.#opened = connection.path === ':memory:' ? null : fileId(connection.path);
  }

  #has(db: Database.Database): boolean {
    return db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'store_marker'").get() !== undefined;
  }

  async readMarker(): Promise<StoreMarker | null> {
    return this.#c.run(() => {
      const db = this.#c.db;
      if (!this.#has(db)) return null;
      const row = db.prepare<[], Row>('SELECT id, created_at, lost_at FROM store_marker').get();
      return row ? { id: row.id, created_at: row.created_at, ...(row.lost_at ? { lost_at: row.lost_at } : {}) } : null;
    });
  }

  async createMarker(marker: StoreMarker): Promise<StoreMarker> {
    this.#c.run(() => retryBusy(() => {
      const db = this.#c.db;
      db.exec(STORE_MARKER_TABLE);
      db.prepare('INSERT OR IGNORE INTO store_marker (one, id, created_at) VALUES (1, ?, ?)').run(marker.id, marker.created_at);
    }));
    const found = await this.readMarker();
    if (!found) throw new Error('the embedded store marker could not be written');
    return found;
  }

  async markLost(marker: StoreMarker): Promise<void> {
    this.#c.run(() => retryBusy(() => {
      const db = this.#c.db;
      db.exec(STORE_MARKER_TABLE);
      db.prepare('INSERT INTO store_marker (one, id, created_at, lost_at) VALUES (1, ?, ?, ?) ON CONFLICT (one) DO UPDATE SET lost_at = excluded.lost_at WHERE store_marker.id = excluded.id')
        .run(marker.id, marker.created_at, marker.lost_at ?? new Date().toISOString());
    }));
  }

  async clearMarker(): Promise<void> {
    this.#c.run(() => retryBusy(() => {
      if (this.#has(this.#c.db)) this.#c.db.prepare('DELETE FROM store_marker').run();
    }));
  }

  async holdsRecords(): Promise<boolean> {
    // The tokens' table is `vault_tokens` in format 6, `tokens` before (a file opened for migrate).
    return this.#c.run(() => {
      const db = this.#c.db;
      const tables = new Set(db.prepare<[], { name: string }>("SELECT name FROM sqlite_master WHERE type = 'table'").all().map((r) => r.name));
      return ['vault_tokens', 'tokens', 'audit_events'].some((name) => tables.has(name) && db.prepare(`SELECT 1 FROM ${name} LIMIT 1`).get() !== undefined);
    });
  }

  /**
   * The file renamed over or removed (a 'rename' event for its name in its directory; SQLite
   * never renames the database file itself): the next call checks at once, not at the next timer.
   */
  onDisconnect(fn: () => void): void {
    if (this.#opened === null || this.#watcher) return;
    const name = basename(this.#c.path);
    try {
      this.#watcher = watch(dirname(this.#c.path), { persistent: false }, (event, file) => {
        if (event === 'rename' && file === name) fn();
      });
      this.#watcher.on('error', () => {});
    } catch {
      // no watch on this file system: the guard's timer still checks
    }
  }

  close(): void {
    this.#watcher?.close();
    this.#watcher = null;
  }

  replaced(): string | null {
    if (this.#opened === null) return null;
    const now = fileId(this.#c.path);
    if (now === this.#opened) return null;
    return now === null
      ? `the file ${this.#c.path} was removed under the running service`
      : `the file ${this.#c.path} was replaced under the running service (it is not the file the service opened)`;
  }
}
