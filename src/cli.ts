/**
 * The command line: `tokenproxy [command] [options]`. Commands other than `start` never start the
 * service; they are the operator's tools (a key's digest, a new key, a master key, checking a
 * file, telling a running service to reload, rotating the data key). Every usage problem is one
 * line on stderr and exit 2, never a stack trace.
 *
 * Exit codes: 0 done; 1 the command failed (a bad config, a start-up failure); 2 usage error.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { sha256 } from './auth/keys.js';
import type { LoadedConfig } from './config/load.js';
import type { LoadedModel } from './model/compile.js';
import type { ProcessOutcome } from './pid-file.js';
import { MIGRATE_OPTIONS, MIGRATE_SUMMARY, MIGRATE_USAGE } from './commands/migrate-usage.js';
import type { ProductionCheck, StartupNotice } from './production.js';
import { STORE_COPY_USAGE } from './commands/store-copy-usage.js';
import { HSM_OPTIONS, HSM_USAGE, ROTATE_MASTER_KEY_OPTIONS, ROTATE_MASTER_KEY_USAGE } from './commands/master-key-usage.js';

export const EXIT_OK = 0;
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

/** What a command may write; the process's streams in production, captured in tests. */
export interface Io {
  out(text: string): void;
  err(text: string): void;
  /** Standard input, read whole (hash-key). */
  stdin(): string;
}

export const processIo: Io = {
  out: (text) => void process.stdout.write(text),
  err: (text) => void process.stderr.write(text),
  stdin: () => readFileSync(0, 'utf8'),
};

type Options = NonNullable<ParseArgsConfig['options']>;
type Values = Record<string, string | boolean | undefined>;

interface Command {
  summary: string;
  usage: string;
  options: Options;
  /** The one positional argument the command takes, put into `values` under this name (backup FILE). */
  positional?: string;
  /** Returns an exit code, or null when it keeps the process running (start). */
  run(values: Values, io: Io): Promise<number | null> | number | null;
}

const configOption: Options = { config: { type: 'string', short: 'c' } };
const CONFIG_HELP = '  -c, --config PATH   the config file (default: $TOKENPROXY_CONFIG, else config/tokenproxy.yaml)';

/** The minimum length the config schema accepts for an API or proxy key. */
const MIN_KEY_LENGTH = 16;
const KEY_TYPES = ['private', 'public', 'management', 'proxy'] as const;

/**
 * The file read and compiled, or null after
 * writing every problem. The config and model modules (zod, yaml, the templates) are loaded here,
 * not at the top: `--version`, `--help`, `hash-key`, `gen-key` and `gen-master-key` read no file
 * and start in a fraction of the time without them.
 */
async function loadCompiled(values: Values, io: Io): Promise<LoadedModel | null> {
  const [{ loadModel }, { ConfigError }] = await Promise.all([import('./model/compile.js'), import('./config/load.js')]);
  try {
    return loadModel({ path: values.config as string | undefined });
  } catch (err) {
    if (err instanceof ConfigError) {
      io.err(`tokenproxy: ${err.message}\n`);
      return null;
    }
    throw err;
  }
}

async function loadConfig(values: Values, io: Io): Promise<LoadedConfig | null> {
  return (await loadCompiled(values, io))?.config ?? null;
}

/**
 * in production mode, what it refuses is written, one line per reason, and null is
 * returned (before anything is created); otherwise the check, for the start-up notices.
 */
async function productionRefused(config: LoadedConfig, io: Io): Promise<ProductionCheck | null> {
  const { productionCheck } = await import('./production.js');
  const check = productionCheck(config);
  if (config.server.mode !== 'production' || check.refusals.length === 0) return check;
  for (const reason of check.refusals) io.err(`tokenproxy: production mode refuses to start: ${reason}\n`);
  return null;
}

function digestLine(key: string): string {
  return `{ sha256: "${sha256(key).toString('hex')}" }`;
}

/** Starts the service and stops it cleanly on SIGTERM/SIGINT (the process stays up while it runs). */
async function start({ config, model }: LoadedModel, notices: StartupNotice[], io: Io): Promise<number | null> {
  // Loaded here, not at the top: the tool commands need none of the service's modules.
  const cluster = await import('./cluster.js');
  if (cluster.isClusterPrimary(config)) return cluster.runPrimary(config, notices);
  const [{ createLogger }, { startService }, { exitProcess, tryLog, SHUTDOWN_MARGIN_MS }, { onSighup }, pidFiles] = await Promise.all([
    import('./log.js'), import('./server.js'), import('./exit.js'), import('./reload-signal.js'), import('./pid-file.js'),
  ]);
  const log = cluster.workerLogger(createLogger(config.log.level));
  const worker = cluster.isWorkerProcess();
  // Once per service: a cluster's primary logs them, not each worker.
  if (!worker) for (const n of notices) log.warn(n.fields, n.msg);
  let service: Awaited<ReturnType<typeof startService>> | undefined;
  let stopping = false;
  // Live reload (docs/operations.md "Reload"): a reload request is never lost. SIGHUP has been
  // counted since main.ts's first instruction; one that arrived while the service was starting
  // (it may have read the file before it changed) makes a reload right after start. A single
  // process counts the signals as its generation and writes the outcome to the status file
  // beside the pid file; a worker gets its reloads from the primary (with the primary's
  // generation) and reports each outcome to it (src/cluster.ts).
  let generation = 0;
  let served: { generation: number; outcome: ProcessOutcome } = { generation: 0, outcome: 'started' };
  let pendingGeneration: number | null = null;
  const report = (): void => {
    if (worker || !config.server.pid_file || !service) return;
    pidFiles.writeReloadStatus(config.server.pid_file, {
      pid: process.pid, generation, processes: [{ worker: null, pid: process.pid, ...served }],
    });
  };
  const reloadNow = (g: number | null): void => {
    if (stopping || !service) return;
    tryLog(() => log.info({ signal: 'SIGHUP', ...(g !== null ? { generation: g } : {}) }, 'reloading the configuration'));
    service.reload().then(
      (o) => done(g, o.applied ? 'applied' : 'refused'),
      (err: unknown) => {
        tryLog(() => log.error({ error: { type: (err as Error).name } }, 'reload failed; the running configuration is kept'));
        done(g, 'failed');
      },
    );
  };
  const done = (g: number | null, outcome: ProcessOutcome): void => {
    if (g === null) return;
    if (g >= served.generation) served = { generation: g, outcome };
    if (worker) cluster.reportReloaded(g, outcome, service!.model.config.server.shutdown_grace_ms);
    else report();
  };
  const request = (g: number | null): void => {
    if (stopping) return;
    if (!service) {
      pendingGeneration = Math.max(pendingGeneration ?? 0, g ?? 0);
      return;
    }
    reloadNow(g);
  };
  if (worker) {
    // A SIGHUP sent to the worker itself reloads it too (no generation: the primary did not count it).
    if (onSighup(() => request(null)) > 0) pendingGeneration = 0;
    cluster.onReloadMessage((g) => request(g));
  } else {
    generation = onSighup(() => request(++generation));
    if (generation > 0) pendingGeneration = generation;
  }
  try {
    service = await startService(config, { log, model });
  } catch (err) {
    // Production mode's refusal of the store it found (store/redis/durability.ts, StoreDurabilityError,
    // matched by name: the store's modules are not loaded here): its line on stderr, as the refusals
    // made before start, besides the log line.
    if ((err as Error).name === 'StoreDurabilityError') io.err(`tokenproxy: production mode refuses to start: ${(err as Error).message}\n`);
    tryLog(() => log.fatal({ error: { type: (err as Error).name, message: (err as Error).message } }, 'start-up failed'));
    // At once: a half-started service may still hold handles (a store connection, a reactor host).
    exitProcess(log, EXIT_FAILED);
    return null;
  }
  const running = service;
  log.info({ url: running.url, ...(running.metricsUrl ? { metrics: running.metricsUrl } : {}), store: config.store.kind, config: config.source }, cluster.listeningMessage());
  const stop = (signal: string): void => {
    if (stopping) {
      // A second signal: the operator does not want to wait for the drain.
      tryLog(() => log.warn({ signal }, 'second signal while draining: exiting at once'));
      exitProcess(log, EXIT_FAILED);
      return;
    }
    stopping = true;
    // The grace of the model in service: a reload may have changed it.
    const graceMs = running.model.config.server.shutdown_grace_ms;
    tryLog(() => log.info({ signal, grace_ms: graceMs }, 'stopping: draining requests in flight'));
    // The hard deadline: whatever close() still waits for (a reactor host, a writer
    // thread, a pool), the process ends. Not unref'd: it must fire.
    setTimeout(() => {
      tryLog(() => log.error({ grace_ms: graceMs, margin_ms: SHUTDOWN_MARGIN_MS }, 'shutdown deadline passed: exiting with work still in flight'));
      exitProcess(log, EXIT_FAILED);
    }, graceMs + SHUTDOWN_MARGIN_MS);
    // A worker drains once every worker has stopped accepting (cluster.stoppedAccepting).
    running.stopAccepting();
    cluster.stoppedAccepting(graceMs).then(() => running.close()).then(
      () => exitProcess(log, EXIT_OK),
      () => exitProcess(log, EXIT_FAILED),
    );
  };
  cluster.onStopRequest(stop);
  // A single process owns its listener: its pid file is written now that it listens.
  if (!worker && config.server.pid_file) {
    served = { generation: pendingGeneration === null ? generation : 0, outcome: 'started' };
    pidFiles.writePidFile(config.server.pid_file);
    report();
  }
  if (worker) cluster.reportReady(running.model.config.server.shutdown_grace_ms);
  if (pendingGeneration !== null) reloadNow(worker && pendingGeneration === 0 ? null : pendingGeneration);
  return null;
}

/** The process `tokenproxy reload` signals: --pid, else --pid-file, else the config's server.pid_file. */
async function reloadTarget(values: Values, io: Io): Promise<{ pid: number; pidFile: string | null } | null> {
  let text = values.pid as string | undefined;
  let from = '--pid';
  let pidFile: string | null = null;
  if (text === undefined) {
    let file = values['pid-file'] as string | undefined;
    if (file === undefined) {
      const config = await loadConfig(values, io);
      if (!config) return null;
      file = config.server.pid_file;
      if (!file) {
        io.err('tokenproxy reload: give --pid or --pid-file, or set server.pid_file in the config\n');
        return null;
      }
    }
    from = file;
    pidFile = file;
    try {
      text = readFileSync(file, 'utf8').trim();
    } catch (err) {
      io.err(`tokenproxy reload: cannot read the pid file ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'}); is the service running?\n`);
      return null;
    }
  }
  if (!/^[1-9][0-9]{0,9}$/.test(text)) {
    io.err(`tokenproxy reload: ${from} does not hold a process id\n`);
    return null;
  }
  return { pid: Number(text), pidFile };
}

const RELOAD_POLL_MS = 50;
const DEFAULT_RELOAD_TIMEOUT_S = 30;

/**
 * Sends SIGHUP and waits until every process of the service says (in the status file beside the
 * pid file) it serves the file as of this signal: applied, or refused with the running
 * configuration kept. Exit 0 only when every process applied it.
 */
async function reloadAndWait(values: Values, io: Io): Promise<number> {
  const target = await reloadTarget(values, io);
  if (target === null) return EXIT_FAILED;
  const timeoutText = (values.timeout as string | undefined) ?? String(DEFAULT_RELOAD_TIMEOUT_S);
  if (!/^[0-9]{1,4}$/.test(timeoutText) || Number(timeoutText) === 0) {
    io.err('tokenproxy reload: --timeout must be a whole number of seconds, 1 or more\n');
    return EXIT_USAGE;
  }
  const { pid, pidFile } = target;
  const { readReloadStatus, confirmed } = await import('./pid-file.js');
  const before = pidFile ? readReloadStatus(pidFile) : null;
  const goal = (before?.pid === pid ? before.generation : 0) + 1;
  try {
    process.kill(pid, 'SIGHUP');
  } catch (err) {
    io.err(`tokenproxy reload: cannot signal process ${pid} (${(err as NodeJS.ErrnoException).code ?? 'error'})\n`);
    return EXIT_FAILED;
  }
  io.out(`sent SIGHUP to process ${pid}\n`);
  if (!pidFile) {
    io.out('no pid file given: not waiting for the outcome (it is in the service log)\n');
    return EXIT_OK;
  }
  const deadline = Date.now() + Number(timeoutText) * 1000;
  let status = readReloadStatus(pidFile);
  while (!(status && status.pid === pid && confirmed(status, goal)) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, RELOAD_POLL_MS));
    status = readReloadStatus(pidFile);
  }
  const processes = status && status.pid === pid ? status.processes : [];
  let ok = processes.length > 0;
  for (const p of processes) {
    const name = p.worker === null ? `process ${p.pid}` : `worker ${p.worker}${p.pid !== null ? ` (pid ${p.pid})` : ''}`;
    const answered = p.outcome !== 'starting' && p.generation >= goal;
    const what = !answered
      ? `did not confirm within ${timeoutText} s (${p.outcome === 'starting' ? 'starting' : 'still on an earlier file'})`
      : p.outcome === 'refused'
        ? 'refused the file (its problems are in the service log); the running configuration is kept'
        : p.outcome === 'failed'
          ? 'failed to reload (see the service log); the running configuration is kept'
          : 'serves the new file';
    const good = answered && p.outcome !== 'refused' && p.outcome !== 'failed';
    if (!good) ok = false;
    if (good) io.out(`${name}: ${what}\n`);
    else io.err(`${name}: ${what}\n`);
  }
  if (processes.length === 0) io.err(`tokenproxy reload: no reload status from process ${pid} within ${timeoutText} s (${pidFile}.reload)\n`);
  return ok ? EXIT_OK : EXIT_FAILED;
}

const commands: Record<string, Command> = {
  start: {
    summary: 'start the service (the default command)',
    usage: `tokenproxy [start] [--config PATH]\n\nStarts the service on the config's host and port (env HOST and PORT override).\n\n${CONFIG_HELP}`,
    options: configOption,
    async run(values, io) {
      const loaded = await loadCompiled(values, io);
      if (!loaded) return EXIT_FAILED;
      const { config } = loaded;
      const check = await productionRefused(config, io);
      if (!check) return EXIT_FAILED;
      const { startupNotices } = await import('./production.js');
      return start(loaded, startupNotices(config.server.mode, check), io);
    },
  },
  'check-config': {
    summary: 'validate a config file and exit',
    usage: `tokenproxy check-config [--config PATH]\n\nValidates the file (schema and cross-references; reactor code is read but compiled only at start)\nand prints a summary, or every problem with its path; in production mode (NODE_ENV=production or\nserver.mode: production) also what production mode refuses. No key is printed.\n\n${CONFIG_HELP}`,
    options: configOption,
    async run(values, io) {
      const config = await loadConfig(values, io);
      if (!config || !(await productionRefused(config, io))) return EXIT_FAILED;
      const t = config.tenants;
      const count = (f: (x: (typeof t)[number]) => unknown[]) => t.reduce((n, x) => n + f(x).length, 0);
      io.out(
        `${config.source ?? 'config'}: OK (${t.length} tenant(s), ${count((x) => x.applications)} application(s), ` +
          `${count((x) => x.proxies)} proxy(ies), ${count((x) => x.reactors)} reactor(s); store ${config.store.kind}, ` +
          `rate limits ${config.rate_limits.enabled ? config.rate_limits.store : 'off'})\n`,
      );
      return EXIT_OK;
    },
  },
  'hash-key': {
    summary: 'read a key on stdin, print its sha256 entry for the config',
    usage: 'tokenproxy hash-key < key.txt\n\nReads one API or proxy key from standard input (a trailing newline is ignored) and prints the\nentry to put in the config instead of the key: `keys: [{ sha256: "…" }]` for an application,\n`key_sha256: "…"` for a proxy. The key itself is not printed.',
    options: {},
    run(_values, io) {
      const key = io.stdin().replace(/\r?\n$/, '');
      if (key.length < MIN_KEY_LENGTH || /[\r\n]/.test(key)) {
        io.err(`tokenproxy hash-key: give exactly one key of at least ${MIN_KEY_LENGTH} characters on stdin\n`);
        return EXIT_USAGE;
      }
      io.out(`${digestLine(key)}\n`);
      return EXIT_OK;
    },
  },
  'gen-key': {
    summary: 'generate a new random API or proxy key and its sha256 entry',
    usage: `tokenproxy gen-key --type ${KEY_TYPES.join('|')}\n\nPrints a new key (256 random bits) on the first line and its config entry on the second.\nGive the key to the client; put only the entry in the config.\n\n  -t, --type TYPE     ${KEY_TYPES.join(', ')} (a prefix of the key, for humans reading it)`,
    options: { type: { type: 'string', short: 't' } },
    run(values, io) {
      const type = values.type as string | undefined;
      if (!type || !(KEY_TYPES as readonly string[]).includes(type)) {
        io.err(`tokenproxy gen-key: --type must be one of ${KEY_TYPES.join(', ')}\n`);
        return EXIT_USAGE;
      }
      const key = `tp_${type}_${randomBytes(32).toString('base64url')}`;
      io.out(`${key}\n${type === 'proxy' ? `key_sha256: "${sha256(key).toString('hex')}"` : digestLine(key)}\n`);
      return EXIT_OK;
    },
  },
  reload: {
    summary: 'make a running service re-read its config file, and wait for every process to confirm',
    usage: `tokenproxy reload [--pid PID | --pid-file FILE | --config PATH] [--timeout SECONDS]\n\nSends SIGHUP to the service. The process is found by --pid, else by the pid file named by\n--pid-file, else by server.pid_file of the config (which \`tokenproxy start\` writes). With a pid file\nthe command waits until every process of the service (each worker) says it serves the new file\nor refused it, and prints each outcome. Exit 0: every process serves the new file; 1: one\nrefused it (an invalid file: its problems are in the service log, the running configuration is\nkept), failed, or did not confirm in time, or no process could be signalled. With --pid alone\nthe command only sends the signal.\n\n  -p, --pid PID       the service's process id\n      --pid-file FILE a file holding it\n      --timeout S     how long to wait for every process (default ${DEFAULT_RELOAD_TIMEOUT_S})\n${CONFIG_HELP}`,
    options: { ...configOption, pid: { type: 'string', short: 'p' }, 'pid-file': { type: 'string' }, timeout: { type: 'string' } },
    run: (values, io) => reloadAndWait(values, io),
  },
  'rotate-data-key': {
    summary: 'add a new data key to the store and make it current (old tokens stay readable)',
    usage: `tokenproxy rotate-data-key [--config PATH]\n\nOpens the store of the config (with the service running or not) and adds a new data key, wrapped\nby the master key; new values are sealed with it, values sealed before stay readable with theirs.\nA missing store, or one no service has used (no data key), is an error and is never created.\nRunning instances use it after their next key refresh (store.data_key_refresh_seconds, a reload,\nor the first value they read that names it). Data keys belong to the store, not to a tenant:\nevery tenant's new values use the new key, so --tenant is refused.\n\n${CONFIG_HELP}`,
    options: { ...configOption, tenant: { type: 'string' } },
    async run(values, io) {
      if (values.tenant !== undefined) {
        io.err('tokenproxy rotate-data-key: data keys belong to the store and are shared by every tenant; --tenant is not supported (rotate without it)\n');
        return EXIT_USAGE;
      }
      const config = await loadConfig(values, io);
      if (!config) return EXIT_FAILED;
      const { rotateDataKey } = await import('./crypto/rotate.js');
      try {
        const { from, to } = await rotateDataKey(config, (msg) => io.err(`tokenproxy rotate-data-key: ${msg}\n`));
        io.out(`data key rotated: ${from} -> ${to} (${config.store.kind} store); running instances pick it up within store.data_key_refresh_seconds (${config.store.data_key_refresh_seconds} s) or on reload\n`);
        return EXIT_OK;
      } catch (err) {
        io.err(`tokenproxy rotate-data-key: ${(err as Error).message}\n`);
        return EXIT_FAILED;
      }
    },
  },
  init: {
    summary: 'make the configured store a tokenproxy store, or begin a new vault on a lost one',
    usage: `tokenproxy init [--config PATH]\n\nMakes the configured store a tokenproxy store (its marker and first data key), as a first start\nof the service would. On a store the service reported lost (emptied under it: a Redis restarted\nwithout persistence, a database recreated), begins a new, empty vault there instead: the tokens\nthe store held stay lost, and the service starts on it again. A store that serves already is left\nas it is. A lost store that still holds tokens, audit events or data keys is refused: restore it\nfrom a backup instead.\n\nExit 0: the store is ready; 1: refused, or the store cannot be opened; 2: usage error.\n\n${CONFIG_HELP}`,
    options: { ...configOption },
    async run(values, io) {
      const config = await loadConfig(values, io);
      if (!config) return EXIT_FAILED;
      const { initStore } = await import('./commands/init-store.js');
      return initStore(config, io);
    },
  },
  'verify-audit': {
    summary: "verify a tenant's audit trail chain in the configured store",
    usage: `tokenproxy verify-audit --tenant ID [--expect-head SEQ:HASH] [--allow-unanchored] [--config PATH]\n\nChecks that no audit event of the tenant was removed, changed or reordered (each event carries\nthe SHA-256 of the one before it) and that the chain head is the one the service anchored (an\nHMAC under a key derived from the master key, which the store never holds): the master key is\nneeded, as for the service. Reads the store, never creates anything. Prints the head on success.\n\nExit 0: the chain is intact; 1: it is broken (the first bad event's position is printed), the\nstore is missing or cannot be read, or the master key is not the store's; 2: usage error, a tenant\nnot in the config, or a tenant without a chain head in the store.\n\n  -t, --tenant ID            the tenant's id\n      --expect-head SEQ:HASH a head the service logged earlier ("audit chain head"): fails unless the\n                             trail still passes through it (catches a rollback to an older store)\n      --allow-unanchored     accept a head without an anchor, with a warning (a store written before\n                             anchoring that no event was appended to since)\n${CONFIG_HELP}`,
    options: { ...configOption, tenant: { type: 'string', short: 't' }, 'expect-head': { type: 'string' }, 'allow-unanchored': { type: 'boolean' } },
    async run(values, io) {
      const tenant = values.tenant as string | undefined;
      if (!tenant) {
        io.err('tokenproxy verify-audit: --tenant is required; see tokenproxy verify-audit --help\n');
        return EXIT_USAGE;
      }
      const { parseHead } = await import('./crypto/audit-anchor.js');
      const expectText = values['expect-head'] as string | undefined;
      const expect = expectText === undefined ? undefined : parseHead(expectText);
      if (expect === null) {
        io.err('tokenproxy verify-audit: --expect-head must be a head as the service logs it, SEQ:HASH (e.g. 42:<43 base64url characters>)\n');
        return EXIT_USAGE;
      }
      const config = await loadConfig(values, io);
      if (!config) return EXIT_FAILED;
      const { verifyTenantAudit } = await import('./audit/verify.js');
      return verifyTenantAudit(config, { tenantId: tenant, expect, allowUnanchored: values['allow-unanchored'] === true }, io);
    },
  },
  'check-aliases': {
    summary: "list the token ids that show more of their value than their type's disclosure budget",
    usage: `tokenproxy check-aliases [--config PATH]\n\nReads every token of the config's tenants and lists those whose id shares more characters with its\nvalue, at its start or end, than the type's disclosure budget allows (a card's first 6 and last 4\ndigits, an SSN's last 4): aliases drawn with a wider window by an older version, or custom ids\nbuilt from the value. Each listed id is printed with the characters beyond the budget as *. An id\none character beyond is counted, not listed (a random draw matches one time in ten). Nothing is\nchanged: ids are how clients name tokens. Decrypts each value in memory, which needs the master\nkey (as for the service).\n\nExit 0: every id is within its budget; 1: some are not (listed), or the store is missing or cannot\nbe read; 2: usage error.\n\n${CONFIG_HELP}`,
    options: { ...configOption },
    async run(values, io) {
      const config = await loadConfig(values, io);
      if (!config) return EXIT_FAILED;
      const { checkAliases } = await import('./commands/alias-budget.js');
      return checkAliases(config, io);
    },
  },
  backup: {
    summary: 'copy the embedded store to a file, while the service runs',
    usage: `tokenproxy backup FILE [--force] [--config PATH]\n\nCopies the embedded store of the config (store.path) to FILE with SQLite's online backup, while the\nservice runs and writes: the copy holds every token written before the command started. FILE is\ncreated with mode 0600 (whatever the umask) in a directory that must exist; an existing FILE is\nreplaced only with --force. The copy is one self-contained SQLite file. It is readable only with\nthe master key, which is not in it: back the key up too, apart from the copy. Redis and PostgreSQL\nstores are backed up with their own tools (see the operations guide).\n\nExit 0: copied; 1: the copy failed (the store is missing or unreadable); 2: usage error, a missing\ndirectory, FILE exists without --force, or a store that is not embedded.\n\n  -f, --force         replace FILE if it exists\n${CONFIG_HELP}`,
    options: { ...configOption, force: { type: 'boolean', short: 'f' } },
    positional: 'file',
    async run(values, io) {
      const file = values.file as string | undefined;
      if (!file) {
        io.err('tokenproxy backup: give the FILE to write, e.g. tokenproxy backup /var/backups/tokenproxy/tokens-$(date +%F).db; see tokenproxy backup --help\n');
        return EXIT_USAGE;
      }
      const config = await loadConfig(values, io);
      if (!config) return EXIT_FAILED;
      const { backupStore, BackupRefusedError } = await import('./store/embedded/backup.js');
      const { resolveStorePath } = await import('./store/factory.js');
      if (config.store.kind !== 'embedded') {
        io.err(`tokenproxy backup: the store is ${config.store.kind}, not embedded: back it up with ${config.store.kind === 'redis' ? "Redis's" : "PostgreSQL's"} own tools (the operations guide shows how)\n`);
        return EXIT_USAGE;
      }
      const store = resolveStorePath(config.store);
      const target = resolve(file);
      try {
        const r = await backupStore(store, target, { force: values.force === true });
        io.out(`backed up ${store} to ${target} (${r.bytes} bytes, mode 0600); keep the master key apart from it: the copy cannot be read without it\n`);
        return EXIT_OK;
      } catch (err) {
        io.err(`tokenproxy backup: ${(err as Error).message}\n`);
        return err instanceof BackupRefusedError ? EXIT_USAGE : EXIT_FAILED;
      }
    },
  },
  restore: {
    summary: "put a backup in place of a stopped service's embedded store",
    usage: `tokenproxy restore FILE [--force] [--config PATH]\n\nReplaces the embedded store of the config (store.path) with the backup FILE (made by tokenproxy\nbackup, or SQLite's .backup). The service must be stopped: the command refuses while the pid file\n(server.pid_file) names a running process or while any process has the store open. An existing\nstore is replaced only with --force. FILE must open as SQLite, pass its quick_check and hold a\ntokenproxy store before anything is replaced; the store is written with mode 0600 and its directory\ncreated (0700) if missing. Start the service with the master key the backup was made under (its\nid is printed).\n\nExit 0: restored; 1: FILE is not a usable tokenproxy store (nothing was replaced) or the copy failed;\n2: usage error, FILE missing, the service runs, a store exists without --force, or a store that is\nnot embedded.\n\n  -f, --force         replace the existing store\n${CONFIG_HELP}`,
    options: { ...configOption, force: { type: 'boolean', short: 'f' } },
    positional: 'file',
    async run(values, io) {
      const file = values.file as string | undefined;
      if (!file) {
        io.err('tokenproxy restore: give the backup FILE to restore; see tokenproxy restore --help\n');
        return EXIT_USAGE;
      }
      const config = await loadConfig(values, io);
      if (!config) return EXIT_FAILED;
      const { restoreStore, BackupRefusedError } = await import('./store/embedded/backup.js');
      const { resolveStorePath } = await import('./store/factory.js');
      if (config.store.kind !== 'embedded') {
        io.err(`tokenproxy restore: the store is ${config.store.kind}, not embedded: restore it with ${config.store.kind === 'redis' ? "Redis's" : "PostgreSQL's"} own tools (the operations guide shows how)\n`);
        return EXIT_USAGE;
      }
      if (config.store.path === ':memory:') {
        io.err('tokenproxy restore: store.path is :memory:, there is no file to restore into\n');
        return EXIT_USAGE;
      }
      const store = resolveStorePath(config.store);
      try {
        const r = restoreStore(resolve(file), store, { force: values.force === true, pidFile: config.server.pid_file });
        io.out(
          `restored ${resolve(file)} to ${store} (${r.tokens} token(s), schema version ${r.schemaVersion}); ` +
            (r.masterKeyIds.length > 0
              ? `start the service with the master key it was made under (id ${r.masterKeyIds.join(', ')}: a start with another key fails naming both ids)\n`
              : 'it holds no data key: no service had used it\n'),
        );
        return EXIT_OK;
      } catch (err) {
        io.err(`tokenproxy restore: ${(err as Error).message}\n`);
        return err instanceof BackupRefusedError ? EXIT_USAGE : EXIT_FAILED;
      }
    },
  },
  migrate: {
    summary: MIGRATE_SUMMARY,
    usage: MIGRATE_USAGE,
    options: MIGRATE_OPTIONS,
    async run(values, io) {
      const { runMigrate } = await import('./commands/migrate.js');
      return runMigrate(values, io);
    },
  },
  store: {
    summary: 'copy a vault to another store (tokenproxy store copy --from CONFIG --to CONFIG)',
    usage: STORE_COPY_USAGE,
    options: { from: { type: 'string' }, to: { type: 'string' }, batch: { type: 'string' } },
    positional: 'subcommand',
    async run(values, io) {
      // src/commands/store-copy.ts; `store` alone, or another word, is a usage error.
      if (values.subcommand !== 'copy') {
        io.err(`tokenproxy store: ${values.subcommand === undefined ? 'give a subcommand' : `unknown subcommand "${String(values.subcommand)}"`}: tokenproxy store copy --from CONFIG --to CONFIG; see tokenproxy store --help\n`);
        return EXIT_USAGE;
      }
      const { storeCopyCommand } = await import('./commands/store-copy.js');
      return storeCopyCommand(values, { ...io, tty: io === processIo && process.stderr.isTTY === true });
    },
  },
  'rotate-master-key': {
    summary: 'wrap the data keys and the root secret by a new master key (an HSM key or a key file)',
    usage: ROTATE_MASTER_KEY_USAGE,
    options: { ...ROTATE_MASTER_KEY_OPTIONS },
    async run(values, io) {
      const { rotateMasterKeyCommand } = await import('./commands/master-key.js');
      return rotateMasterKeyCommand(values, io);
    },
  },
  hsm: {
    summary: 'create the master key on a PKCS#11 token (tokenproxy hsm init; SoftHSM2 and development)',
    usage: HSM_USAGE,
    options: { ...HSM_OPTIONS },
    positional: 'subcommand',
    async run(values, io) {
      const { hsmCommand } = await import('./commands/master-key.js');
      return hsmCommand(values, io);
    },
  },
  'gen-master-key': {
    summary: 'generate a new master key (base64 of 32 random bytes)',
    usage: 'tokenproxy gen-master-key\n\nPrints a new master key for TOKENPROXY_MASTER_KEY or secrets.master_key_file. Keep it out of the\nrepository and back it up apart from the store: without it no token can be read.',
    options: {},
    run(_values, io) {
      io.out(`${randomBytes(32).toString('base64')}\n`);
      return EXIT_OK;
    },
  },
};

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

function mainHelp(): string {
  const width = Math.max(...Object.keys(commands).map((c) => c.length));
  return [
    'tokenproxy: a self-hosted tokenization vault and reverse proxy',
    '',
    'Usage: tokenproxy [command] [options]',
    '',
    'Commands:',
    ...Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`),
    '',
    'Options:',
    '  -h, --help     help for tokenproxy or for a command (tokenproxy COMMAND --help)',
    '  -v, --version  print the version',
    '',
    'Exit codes: 0 done, 1 the command failed (bad config, start-up failure), 2 usage error.',
    '',
  ].join('\n');
}

/** Runs the command line; resolves to an exit code, or null while the service runs. */
export async function runCli(argv: string[], io: Io = processIo): Promise<number | null> {
  const first = argv[0];
  if (first === '--help' || first === '-h' || first === 'help') {
    const topic = first === 'help' ? argv[1] : undefined;
    const cmd = topic !== undefined ? commands[topic] : undefined;
    if (topic !== undefined && !cmd) {
      io.err(`tokenproxy: unknown command "${topic}"; see tokenproxy --help\n`);
      return EXIT_USAGE;
    }
    io.out(cmd ? `${cmd.usage}\n` : mainHelp());
    return EXIT_OK;
  }
  if (first === '--version' || first === '-v') {
    io.out(`${version()}\n`);
    return EXIT_OK;
  }
  const named = first !== undefined && !first.startsWith('-');
  const name = named ? first : 'start';
  const cmd = commands[name];
  if (!cmd) {
    io.err(`tokenproxy: unknown command "${name}"; see tokenproxy --help\n`);
    return EXIT_USAGE;
  }
  const rest = named ? argv.slice(1) : argv;
  let values: Values;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: rest, options: { ...cmd.options, help: { type: 'boolean', short: 'h' } }, strict: true, allowPositionals: cmd.positional !== undefined,
    }));
  } catch (err) {
    // parseArgs' messages name the option only (never a value worth hiding); drop its hint lines.
    io.err(`tokenproxy ${name}: ${(err as Error).message.split('\n')[0]}; see tokenproxy ${name} --help\n`);
    return EXIT_USAGE;
  }
  if (cmd.positional !== undefined) {
    if (positionals.length > 1) {
      io.err(`tokenproxy ${name}: give one ${cmd.positional.toUpperCase()}, not ${positionals.length} arguments; see tokenproxy ${name} --help\n`);
      return EXIT_USAGE;
    }
    values = { ...values, [cmd.positional]: positionals[0] };
  }
  if (values.help) {
    io.out(`${cmd.usage}\n`);
    return EXIT_OK;
  }
  return cmd.run(values, io);
}
