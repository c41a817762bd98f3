/**
 * The PostgreSQL store's dictionary of repeated strings: tenant
 * ids, application ids (created_by, modified_by) and expressions (fingerprint_expression, mask)
 * repeat in every token of a tenant; a token row holds a 4-byte number for each instead of the
 * text (a tenant's UUID alone was 37 bytes in the row and in each of its indexes).
 *
 * A name is numbered once (`INSERT … ON CONFLICT DO NOTHING`, then read: concurrent instances
 * agree on the number) and never renumbered or removed, so every process caches both directions.
 * A name is added in its own statement, before the transaction that uses it: a rolled-back write
 * never leaves the cache holding a number the database does not.
 */
import type pg from 'pg';
import { query } from './pool.js';

/** Bounds the caches against misuse (names are few: tenants, applications, expressions). */
const MAX_CACHED = 50_000;

export class Names {
  readonly #numbers = new Map<string, number>();
  readonly #names = new Map<number, string>();

  constructor(private readonly pool: pg.Pool) {}

  #remember(name: string, no: number): void {
    if (this.#numbers.size >= MAX_CACHED) {
      this.#numbers.clear();
      this.#names.clear();
    }
    this.#numbers.set(name, no);
    this.#names.set(no, name);
  }

  /** The numbers of these names, numbering the new ones. */
  async numbers(names: ReadonlyArray<string | null>): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    const missing = new Set<string>();
    for (const n of names) {
      if (n === null) continue;
      const no = this.#numbers.get(n);
      if (no === undefined) missing.add(n);
      else out.set(n, no);
    }
    if (missing.size > 0) {
      const list = [...missing];
      await query(this.pool, 'INSERT INTO tokenproxy.names (name) SELECT unnest($1::text[]) ON CONFLICT (name) DO NOTHING', [list]);
      const r = await query<{ no: number; name: string }>(this.pool, 'SELECT no, name FROM tokenproxy.names WHERE name = ANY($1::text[])', [list]);
      for (const row of r.rows) {
        this.#remember(row.name, row.no);
        out.set(row.name, row.no);
      }
    }
    return out;
  }

  /** The number of a name already numbered, or null (a lookup of a name no token uses: nothing matches). */
  async find(name: string): Promise<number | null> {
    const cached = this.#numbers.get(name);
    if (cached !== undefined) return cached;
    const r = await query<{ no: number }>(this.pool, 'SELECT no FROM tokenproxy.names WHERE name = $1', [name]);
    const no = r.rows[0]?.no;
    if (no === undefined) return null;
    this.#remember(name, no);
    return no;
  }

  /** The names of these numbers (rows just read hold only numbered names). */
  async names(numbers: ReadonlyArray<number | null>): Promise<Map<number, string>> {
    const out = new Map<number, string>();
    const missing = new Set<number>();
    for (const no of numbers) {
      if (no === null) continue;
      const n = this.#names.get(no);
      if (n === undefined) missing.add(no);
      else out.set(no, n);
    }
    if (missing.size > 0) {
      const r = await query<{ no: number; name: string }>(this.pool, 'SELECT no, name FROM tokenproxy.names WHERE no = ANY($1::int[])', [[...missing]]);
      for (const row of r.rows) {
        this.#remember(row.name, row.no);
        out.set(row.no, row.name);
      }
    }
    return out;
  }
}
