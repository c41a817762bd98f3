/**
 * `tokenproxy store copy --from <config> --to <config> [--batch N]`: moves a
 * vault between stores (embedded, Redis, PostgreSQL, any direction) through the store ports
 * (store/copy.ts does the copying and the checks; this is the command around it: the two
 * configs, the master key, the output). docs/storage.md "Moving a vault to another store".
 *
 * Exit codes as the other commands: 0 copied and verified; 1 the copy failed or was refused (a
 * store unreachable, the target another vault's, a check that did not pass; re-running goes on
 * where it stood); 2 usage error.
 */
import { loadModel } from '../model/compile.js';
import { ConfigError, type LoadedConfig } from '../config/load.js';
import { anchorSigner, formatHead } from '../crypto/audit-anchor.js';
import type { KeyEncryptionKey } from '../crypto/kek.js';
import { groupEntries, KeyRing, vaultRoot } from '../crypto/keyring.js';
import { masterKeyHint, openMasterKey, storeSetting } from '../crypto/open.js';
import { createLogger } from '../log.js';
import { copyStore, CopyRefusedError, type CopyProgress } from '../store/copy.js';
import { createStore, resolveStorePath } from '../store/factory.js';
import type { Store } from '../store/types.js';

const OK = 0;
const FAILED = 1;
const USAGE = 2;

import { DEFAULT_BATCH, MAX_BATCH } from './store-copy-usage.js';

type Values = Record<string, string | boolean | undefined>;

export interface CopyIo {
  out(text: string): void;
  err(text: string): void;
  /** A terminal: a progress line on stderr, rewritten in place. */
  tty?: boolean;
}

function load(path: string, io: CopyIo): LoadedConfig | null {
  try {
    return loadModel({ path }).config;
  } catch (err) {
    if (err instanceof ConfigError) {
      io.err(`tokenproxy store copy: ${err.message}\n`);
      return null;
    }
    throw err;
  }
}

/** The same store, for a config pair that would copy a store onto itself. */
function storeIdentity(c: LoadedConfig): string {
  const s = c.store;
  if (s.kind === 'embedded') return `embedded:${resolveStorePath(s)}`;
  return `${s.kind}:${s.url ?? ''}:${s.kind === 'redis' ? s.key_prefix : ''}`;
}

function masterKeyOf(c: LoadedConfig, which: string, io: CopyIo): KeyEncryptionKey | null {
  try {
    return openMasterKey(c, (msg) => io.err(`tokenproxy store copy: ${which}: ${msg}\n`), { createDevKey: false });
  } catch (err) {
    io.err(`tokenproxy store copy: ${which}: ${(err as Error).message}\n`);
    return null;
  }
}

function progressWriter(io: CopyIo): (p: CopyProgress) => void {
  if (!io.tty) {
    // Not a terminal (a log, a pipe): one line per tenant and phase.
    let last = '';
    return (p) => {
      const key = `${p.tenant} ${p.phase}`;
      if (key === last) return;
      last = key;
      io.err(`tenant ${p.tenant}: ${p.phase}${p.total !== null ? ` ${p.total} token(s)` : ''}\n`);
    };
  }
  let shown = 0;
  let lastTenant = '';
  return (p) => {
    const now = Date.now();
    if (p.tenant === lastTenant && now - shown < 200 && p.phase === 'tokens' && p.done !== p.total) return;
    if (lastTenant !== '' && p.tenant !== lastTenant) io.err('\n');
    shown = now;
    lastTenant = p.tenant;
    const count = p.total !== null && p.total > 0 ? `${p.done}/${p.total} (${Math.floor((p.done / p.total) * 100)}%)` : String(p.done);
    io.err(`\r\u001b[Ktenant ${p.tenant}: ${p.phase} ${count}`);
  };
}

export async function storeCopyCommand(values: Values, io: CopyIo): Promise<number> {
  const usage = (msg: string): number => {
    io.err(`tokenproxy store copy: ${msg}; see tokenproxy store copy --help\n`);
    return USAGE;
  };
  const fromPath = values.from as string | undefined;
  const toPath = values.to as string | undefined;
  if (!fromPath || !toPath) return usage('--from and --to are both required (the config of the current store and of the new one)');
  const batchText = (values.batch as string | undefined) ?? String(DEFAULT_BATCH);
  if (!/^[0-9]{1,5}$/.test(batchText) || Number(batchText) < 1 || Number(batchText) > MAX_BATCH) return usage(`--batch must be a whole number from 1 to ${MAX_BATCH}`);
  const batch = Number(batchText);
  const from = load(fromPath, io);
  if (!from) return FAILED;
  const to = load(toPath, io);
  if (!to) return FAILED;
  if (storeIdentity(from) === storeIdentity(to)) return usage('--from and --to name the same store');
  const tenants = from.tenants.map((t) => t.id);
  const missing = tenants.filter((id) => !to.tenants.some((t) => t.id === id));
  if (missing.length > 0) return usage(`tenant(s) ${missing.join(', ')} of ${fromPath} are not in ${toPath}: the service on the target could not reach their tokens`);

  const fromKey = masterKeyOf(from, '--from', io);
  if (!fromKey) return FAILED;
  const toKey = masterKeyOf(to, '--to', io);
  if (!toKey) {
    fromKey.close();
    return FAILED;
  }
  const ids = [fromKey.id, toKey.id];
  toKey.close();
  if (ids[0] !== ids[1]) {
    fromKey.close();
    io.err(`tokenproxy store copy: the master keys of --from (id ${ids[0]}) and --to (id ${ids[1]}) differ: the target's service could not unwrap the copied data keys; give both the same key\n`);
    return FAILED;
  }
  let sign: ReturnType<typeof anchorSigner> | null = null;
  const log = createLogger('silent');
  let source: Store | null = null;
  let target: Store | null = null;
  try {
    try {
      source = await createStore(from.store, { mustExist: true, log });
      // The master key is the source's: its data keys unwrap (KeyRing.open adds none to a store that holds some).
      const entries = await source.dataKeys.listDataKeys();
      if (groupEntries(entries).keys.size > 0) await KeyRing.open(fromKey, source.dataKeys);
      // The anchors are under the source's root secret (the raw key, or the one its HSM key unwraps).
      const root = await vaultRoot(fromKey, source.dataKeys, { create: false, entries });
      sign = anchorSigner(root);
      root.fill(0);
    } catch (err) {
      const hint = (err as Error).name === 'MasterKeyMismatchError' ? ` ${masterKeyHint(from)}` : '';
      io.err(`tokenproxy store copy: the source store (${storeSetting(from)} of ${fromPath}): ${(err as Error).message}${hint}\n`);
      return FAILED;
    }
    try {
      target = await createStore(to.store, { log });
    } catch (err) {
      io.err(`tokenproxy store copy: the target store (${storeSetting(to)} of ${toPath}): ${(err as Error).message}\n`);
      return FAILED;
    }
    const progress = progressWriter(io);
    const report = await copyStore(source, target, { tenants, batch, sign: sign!, progress });
    if (io.tty) io.err('\n');
    io.out(`data keys: ${report.dataKeys.total} (${report.dataKeys.written} written now)\n`);
    for (const t of report.tenants) {
      io.out(
        `tenant ${t.tenant}: ${t.tokens} token(s) (${t.written} written now${t.gone > 0 ? `, ${t.gone} deleted or expired on the source meanwhile` : ''}), ` +
          `${t.auditEvents} audit event(s) (${t.auditWritten} written now)${t.head ? `, head ${formatHead(t.head)}` : ''}; ` +
          `counts match, ${t.sampled} sampled token(s) identical\n`,
      );
    }
    io.out(`copied ${from.store.kind} (${fromPath}) to ${to.store.kind} (${toPath}); idempotency entries are not copied. Start the service on ${toPath} with the same master key.\n`);
    return OK;
  } catch (err) {
    if (io.tty) io.err('\n');
    const refused = err instanceof CopyRefusedError;
    io.err(`tokenproxy store copy: ${refused ? '' : 'failed: '}${(err as Error).message}${refused ? '' : ' (run the command again: it goes on where it stopped)'}\n`);
    return FAILED;
  } finally {
    fromKey.close();
    await source?.close();
    await target?.close();
  }
}
