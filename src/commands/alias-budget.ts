/**
 * `tokenproxy check-aliases` and the report `tokenproxy migrate --dry-run` prints: the tokens of
 * the configured tenants whose ids show more of their value than the type's disclosure budget
 * allows (src/vault/token-types.ts). Aliases drawn before the budget bound their reveal windows
 * (a card alias could keep its first or last 10 digits) are such ids; so is a custom id a client
 * built from the value. Nothing is rewritten: an id is how clients name a token, so changing it is
 * the operator's decision (create a new token, move the clients, delete the old one).
 *
 * How an id is measured: the characters it shares with the value at the start and at the end,
 * beyond the budget's first and last. A drawn character equals the value's by chance (one time in
 * ten for a digit), so an id one character beyond is counted but not listed; two or more beyond is
 * a reveal window, listed. The report prints each listed id with every character beyond the budget
 * as `*`, so the report itself stays within the budget.
 */
import type { LoadedConfig } from '../config/load.js';
import type { KeyEncryptionKey } from '../crypto/kek.js';
import type { KeyRing } from '../crypto/keyring.js';
import type { Store, StoredToken } from '../store/types.js';
import { storedType } from '../vault/token-types.js';

const ALNUM = /^[A-Za-z0-9]$/;

/** Characters beyond the budget from which an id is listed (one is a chance match one time in ten). */
export const LISTED_FROM = 2;
const PAGE = 100;

/** The string of a token's data the budget is about: a card's number, a bank token's account number. */
function budgetedString(type: string, data: unknown): string | null {
  if (typeof data === 'string') return data;
  if (typeof data !== 'object' || data === null) return null;
  const o = data as Record<string, unknown>;
  if (type === 'card' && typeof o.number === 'string') return o.number;
  if (type === 'bank' && typeof o.account_number === 'string') return o.account_number;
  return null;
}

export interface IdExcess {
  /** Characters the id shares with the value at its start, beyond the budget's first. */
  first: number;
  /** At its end, beyond the budget's last. */
  last: number;
}

/** How far an id goes beyond its token's budget; null for a type whose budget does not bound ids. */
export function idExcess(type: string, id: string, data: unknown): IdExcess | null {
  const budget = storedType(type).budget;
  if (budget.kind !== 'digits') return null;
  const value = budgetedString(type, data);
  if (value === null) return null;
  // Shared characters counted as letters and digits: a separator kept in place (an SSN's `-`)
  // shows nothing of the value.
  let i = 0;
  let first = 0;
  while (i < id.length && i < value.length && id[i] === value[i]) if (ALNUM.test(id[i++]!)) first++;
  let j = 0;
  let last = 0;
  while (j < id.length - i && j < value.length - i && id[id.length - 1 - j] === value[value.length - 1 - j]) if (ALNUM.test(id[id.length - 1 - j++]!)) last++;
  return { first: Math.max(0, first - budget.first), last: Math.max(0, last - budget.last) };
}

/**
 * The id with the characters beyond the budget shown as `*`: after the budget's first letters or
 * digits at the start, the next `excess.first`; likewise from the end.
 */
export function maskedId(id: string, type: string, excess: IdExcess): string {
  const budget = storedType(type).budget;
  if (budget.kind !== 'digits') return id;
  const chars = [...id];
  const hide = (order: number[], keep: number, count: number) => {
    let seen = 0;
    for (const k of order) {
      if (!ALNUM.test(chars[k]!)) continue;
      if (seen >= keep + count) break;
      if (seen >= keep) chars[k] = '*';
      seen++;
    }
  };
  const forward = chars.map((_, k) => k);
  hide(forward, budget.first, excess.first);
  hide(forward.slice().reverse(), budget.last, excess.last);
  return chars.join('');
}

export interface AliasReport {
  scanned: number;
  listed: Array<{ tenantId: string; id: string; type: string; container: string; created_at: string; beyond: number }>;
  /** Ids one character beyond: counted, not listed (a chance match as often as not). */
  chance: number;
}

/** Reads every token of `tenantIds` and measures its id; decrypts each value in memory only. */
export async function scanAliases(store: Store, ring: KeyRing, tenantIds: readonly string[]): Promise<AliasReport> {
  const report: AliasReport = { scanned: 0, listed: [], chance: 0 };
  for (const tenantId of tenantIds) {
    let after: string | null = null;
    do {
      const page: { items: StoredToken[]; next: string | null } = await store.tokens.list(tenantId, {}, { size: PAGE, after });
      for (const t of page.items) {
        report.scanned++;
        if (storedType(t.type).budget.kind !== 'digits') continue;
        const data = JSON.parse(ring.unseal(t.sealed, `${t.tenant_id}:${t.id}`)) as unknown;
        const excess = idExcess(t.type, t.id, data);
        if (excess === null) continue;
        const beyond = excess.first + excess.last;
        if (beyond >= LISTED_FROM) {
          report.listed.push({ tenantId, id: maskedId(t.id, t.type, excess), type: t.type, container: t.container, created_at: t.created_at, beyond });
        } else if (beyond > 0) report.chance++;
      }
      after = page.next;
    } while (after !== null);
  }
  return report;
}

/** The report as lines of text. */
export function formatAliasReport(r: AliasReport): string {
  const head = r.listed.length === 0
    ? `ids within the disclosure budget: none of ${r.scanned} token(s) shows ${LISTED_FROM} or more characters of its value beyond its type's budget\n`
    : `ids beyond the disclosure budget: ${r.listed.length} of ${r.scanned} token(s) show more of their value than their type's budget (characters beyond it shown as *):\n`;
  const lines = r.listed.map((x) => `  tenant ${x.tenantId} ${x.type} ${x.id} in ${x.container}, created ${x.created_at}: ${x.beyond} character(s) beyond\n`);
  const tail = r.chance > 0 ? `  (${r.chance} more id(s) share one character beyond the budget, which a random draw does one time in ten: not listed)\n` : '';
  const advice = r.listed.length > 0
    ? '  nothing was changed: create a new token for each (an alias without a window, or a window within the budget), move its clients to the new id, then delete the old one\n'
    : '';
  return head + lines.join('') + tail + advice;
}

type Io = { out(s: string): void; err(s: string): void };

/**
 * Opens the configured store and the key ring as the service does, and prints the report.
 * Exit 0: every id is within the budget; 1: some are not, or the store cannot be read.
 */
export async function checkAliases(config: LoadedConfig, io: Io, label = 'check-aliases'): Promise<number> {
  const fail = (msg: string) => {
    io.err(`tokenproxy ${label}: ${msg}\n`);
    return 1;
  };
  const [{ KeyRing }, { openMasterKey }, { assertStoreExists, createStore }] = await Promise.all([
    import('../crypto/keyring.js'), import('../crypto/open.js'), import('../store/factory.js'),
  ]);
  try {
    assertStoreExists(config.store);
  } catch (err) {
    return fail((err as Error).message);
  }
  let master: KeyEncryptionKey;
  try {
    master = openMasterKey(config, (msg) => io.err(`tokenproxy ${label}: ${msg}\n`), { createDevKey: false });
  } catch (err) {
    return fail(`${(err as Error).message}; ids are measured against their values, which needs the service's master key`);
  }
  let store: Store;
  try {
    store = await createStore(config.store, { mustExist: true });
  } catch (err) {
    master.close();
    return fail(`cannot open the store: ${(err as Error).message}`);
  }
  try {
    const ring = await KeyRing.open(master, store.dataKeys);
    const report = await scanAliases(store, ring, config.tenants.map((t) => t.id));
    io.out(formatAliasReport(report));
    return report.listed.length === 0 ? 0 : 1;
  } catch (err) {
    return fail(`reading the tokens failed: ${(err as Error).message}`);
  } finally {
    master.close();
    await store.close();
  }
}
