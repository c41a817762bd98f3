/**
 * `tokenproxy migrate`: converts the configured store to the format this version
 * reads, through the store's own FormatMigrator (`Store.migrator()`: the embedded store's in
 * store/embedded/migrate.ts; any backend that has one plugs in without a change here). Every step
 * commits its own progress in the store, so a run killed at any point (kill -9 included) is
 * resumed by running the command again. Afterwards the store is opened as the service opens it:
 * the token count must be what it was, and a sample of tokens must decrypt under the master key
 * (which is why the command needs it, as verify-audit does). Nothing is decrypted to convert.
 * Then the audit chain heads written before anchoring are anchored (audit/anchor-heads.ts).
 *
 * Exit codes as every command (src/cli.ts): 0 done or nothing to do; 1 failed; 2 usage error.
 */
import { ConfigError, type LoadedConfig } from '../config/load.js';
import type { KeyEncryptionKey } from '../crypto/kek.js';
import type { KeyRing } from '../crypto/keyring.js';
import { loadModel } from '../model/compile.js';
import type { FormatMigrator, Store } from '../store/types.js';
import { DEFAULT_BATCH, formatCount as n, MAX_BATCH } from './migrate-usage.js';

const EXIT_OK = 0;
const EXIT_FAILED = 1;
const EXIT_USAGE = 2;
/** Tokens decrypted per tenant of the config after the conversion (the newest first). */
const SAMPLE_PER_TENANT = 20;

/** What the command writes to; `tty` (default: whether stdout is a terminal) draws a progress bar. */
export interface MigrateIo {
  out(text: string): void;
  err(text: string): void;
  tty?: boolean;
}

type Values = Record<string, string | boolean | undefined>;

/** The data of a token: the AAD the vault seals it under (vault/service.ts dataAad, cvcAad). */
const dataAad = (tenantId: string, id: string): string => `${tenantId}:${id}`;
const cvcAad = (tenantId: string, id: string): string => `${tenantId}:${id}:cvc`;

/** A bar redrawn in place on a terminal; otherwise a plain line at every tenth of the way. */
function progress(io: MigrateIo, pending: number): { update(done: number): void; end(): void } {
  const tty = io.tty ?? process.stdout.isTTY === true;
  let lastTenth = -1;
  const width = 30;
  return {
    update(done) {
      const ratio = pending === 0 ? 1 : Math.min(1, done / pending);
      if (tty) {
        const filled = Math.round(ratio * width);
        io.out(`\r[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${String(Math.floor(ratio * 100)).padStart(3)}%  ${n(done)}/${n(pending)} tokens`);
        return;
      }
      const tenth = Math.floor(ratio * 10);
      if (tenth > lastTenth) {
        lastTenth = tenth;
        io.out(`converted ${n(done)} of ${n(pending)} token(s) (${tenth * 10}%)\n`);
      }
    },
    end() {
      if (tty) io.out('\n');
    },
  };
}

/** Decrypts up to SAMPLE_PER_TENANT tokens of each configured tenant; the count decrypted, or the first failure. */
export async function decryptSample(store: Store, ring: KeyRing, config: LoadedConfig): Promise<{ ok: true; count: number } | { ok: false; reason: string }> {
  let count = 0;
  for (const tenant of config.tenants) {
    const page = await store.tokens.list(tenant.id, {}, { size: SAMPLE_PER_TENANT, after: null });
    for (const t of page.items) {
      try {
        ring.unseal(t.sealed, dataAad(t.tenant_id, t.id));
        if (t.cvc_sealed !== null) ring.unseal(t.cvc_sealed, cvcAad(t.tenant_id, t.id));
      } catch (err) {
        return { ok: false, reason: `token ${t.id} of tenant ${tenant.id} does not decrypt (${(err as Error).name})` };
      }
      count++;
    }
  }
  return { ok: true, count };
}

async function migrate(config: LoadedConfig, opts: { dryRun: boolean; batch: number }, io: MigrateIo): Promise<number> {
  const fail = (msg: string): number => {
    io.err(`tokenproxy migrate: ${msg}\n`);
    return EXIT_FAILED;
  };
  // Loaded here, as cli.ts loads the other tools' modules: `tokenproxy start` needs none of them.
  const [{ missingUnder }, { masterKeyHint, openMasterKey }, { assertStoreExists, createStore }] = await Promise.all([
    import('../crypto/keyring.js'), import('../crypto/open.js'), import('../store/factory.js'),
  ]);
  try {
    assertStoreExists(config.store);
  } catch (err) {
    return fail((err as Error).message);
  }
  let master: KeyEncryptionKey;
  try {
    master = openMasterKey(config, (msg) => io.err(`tokenproxy migrate: ${msg}\n`), { createDevKey: false });
  } catch (err) {
    return fail(`${(err as Error).message}; the converted tokens cannot be checked without the service's master key`);
  }
  try {
    let store: Store;
    try {
      store = await createStore(config.store, { mustExist: true, forMigration: true });
    } catch (err) {
      return fail(`cannot open the store: ${(err as Error).message}`);
    }
    let before: Awaited<ReturnType<FormatMigrator['status']>>;
    try {
      // A lost store is not an old one: converting it would hide the loss (store/identity.ts).
      const { findLoss } = await import('../store/identity.js');
      const { lost } = await findLoss(store);
      if (lost) return fail(`${lost}; nothing was changed`);
      const migrator = store.migrator?.();
      if (!migrator) {
        io.out(`the ${config.store.kind} store has no format to convert: nothing to do\n`);
        return EXIT_OK;
      }
      before = await migrator.status();
      if (before.from === before.to && before.pending === 0) {
        io.out(`the ${config.store.kind} store is already at format ${before.to} (${n(before.total)} token(s)): nothing to do\n`);
        return EXIT_OK;
      }
      // A wrong master key would pass the conversion (nothing is decrypted) and fail every read after it.
      const keys = await store.dataKeys.listDataKeys();
      if (missingUnder(keys, master.id, master.kind === 'raw')) {
        return fail(`the master key (id ${master.id}) is not the one this store's data keys were wrapped with; nothing was changed. ${masterKeyHint(config)}`);
      }
      const what = `${n(before.pending)} of ${n(before.total)} token(s) of the ${config.store.kind} store from format ${before.from} to format ${before.to}`;
      if (opts.dryRun) {
        io.out(`dry run: would convert ${what}, ${n(opts.batch)} a step; nothing was changed\n`);
        return EXIT_OK;
      }
      io.out(`converting ${what}, ${n(opts.batch)} a step (stop the service first; a run that is interrupted goes on where it stopped when run again)\n`);
      const bar = progress(io, before.pending);
      let done = 0;
      bar.update(0);
      for (;;) {
        const r = await migrator.step(opts.batch);
        done += r.converted;
        bar.update(Math.min(done, before.pending));
        if (r.done) break;
      }
      bar.end();
    } catch (err) {
      return fail(`the conversion stopped: ${(err as Error).message}; run tokenproxy migrate again to go on from where it stopped`);
    } finally {
      await store.close();
    }
    return await verify(config, master, before.total, io, fail);
  } finally {
    master.close();
  }
}

/** Opens the store as the service does: the format it reads, the count as before, a sample that decrypts. */
async function verify(config: LoadedConfig, master: KeyEncryptionKey, expected: number, io: MigrateIo, fail: (msg: string) => number): Promise<number> {
  const [{ KeyRing }, { createStore }] = await Promise.all([import('../crypto/keyring.js'), import('../store/factory.js')]);
  let store: Store;
  try {
    store = await createStore(config.store, { mustExist: true });
  } catch (err) {
    return fail(`the converted store does not open as the service opens it: ${(err as Error).message}`);
  }
  try {
    const status = await store.migrator?.().status();
    if (status && (status.from !== status.to || status.pending !== 0)) return fail(`the store still holds format ${status.from} after the conversion`);
    if (status && status.total !== expected) return fail(`the store holds ${n(status.total)} token(s) after the conversion, ${n(expected)} before`);
    if (expected === 0) {
      io.out('done: the store holds no tokens\n');
      return EXIT_OK;
    }
    const ring = await KeyRing.open(master, store.dataKeys);
    const sample = await decryptSample(store, ring, config);
    if (!sample.ok) return fail(sample.reason);
    io.out(`done: ${n(expected)} token(s), as before; ${n(sample.count)} of them (the newest of each configured tenant) decrypt under the master key\n`);
    return EXIT_OK;
  } catch (err) {
    return fail(`checking the converted store failed: ${(err as Error).message}`);
  } finally {
    await store.close();
  }
}

/** `tokenproxy migrate`, once src/cli.ts has parsed its options (MIGRATE_OPTIONS). */
export async function runMigrate(values: Values, io: MigrateIo): Promise<number> {
  const batchText = (values.batch as string | undefined) ?? String(DEFAULT_BATCH);
  const batch = /^[1-9][0-9]{0,5}$/.test(batchText) ? Number(batchText) : NaN;
  if (!(batch <= MAX_BATCH)) {
    io.err(`tokenproxy migrate: --batch must be a whole number from 1 to ${n(MAX_BATCH)}; see tokenproxy migrate --help\n`);
    return EXIT_USAGE;
  }
  let config: LoadedConfig;
  try {
    config = loadModel({ path: values.config as string | undefined }).config;
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    io.err(`tokenproxy: ${err.message}\n`);
    return EXIT_FAILED;
  }
  const dryRun = values['dry-run'] === true;
  const code = await migrate(config, { dryRun, batch }, io);
  // A dry run also lists the ids beyond their type's disclosure budget (aliases drawn before the
  // budget bound their windows): reported, never rewritten. Only a store in the current format
  // can be read as the service reads it; the exit status stays the conversion's.
  if (dryRun && code === EXIT_OK && (await currentFormat(config))) {
    const { checkAliases } = await import('./alias-budget.js');
    await checkAliases(config, io, 'migrate');
  }
  if (code !== EXIT_OK || dryRun) return code;
  // Audit chain heads written before anchoring: the service appends nothing onto them until anchored here.
  const { anchorStep } = await import('../audit/anchor-heads.js');
  return anchorStep(config, io);
}

/** Whether the configured store is in the format this version reads (nothing to convert). */
async function currentFormat(config: LoadedConfig): Promise<boolean> {
  const { createStore } = await import('../store/factory.js');
  const store = await createStore(config.store, { mustExist: true, forMigration: true });
  try {
    const status = await store.migrator?.().status();
    return status === undefined || (status.from === status.to && status.pending === 0);
  } finally {
    await store.close();
  }
}
