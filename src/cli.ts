/**
 * The command line: `tokenproxy [command] [options]`. Commands other than `start` never start the
 * service; they are the operator's tools for the config (a key's digest, a new key, a master
 * key, checking a file). Every usage problem is one line on stderr and exit 2, never a stack trace.
 *
 * Exit codes: 0 done; 1 the command failed (a bad config, a start-up failure); 2 usage error.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { sha256 } from './auth/keys.js';
import { ConfigError, loadConfigFile, type LoadedConfig } from './config/load.js';

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
  /** Returns an exit code, or null when it keeps the process running (start). */
  run(values: Values, io: Io): Promise<number | null> | number | null;
}

const configOption: Options = { config: { type: 'string', short: 'c' } };
const CONFIG_HELP = '  -c, --config PATH   the config file (default: $TOKENPROXY_CONFIG, else config/tokenproxy.yaml)';

/** The minimum length the config schema accepts for an API or proxy key. */
const MIN_KEY_LENGTH = 16;
const KEY_TYPES = ['private', 'public', 'management', 'proxy'] as const;

function loadConfig(values: Values, io: Io): LoadedConfig | null {
  try {
    return loadConfigFile({ path: values.config as string | undefined });
  } catch (err) {
    if (err instanceof ConfigError) {
      io.err(`tokenproxy: ${err.message}\n`);
      return null;
    }
    throw err;
  }
}

function digestLine(key: string): string {
  return `{ sha256: "${sha256(key).toString('hex')}" }`;
}

/** Starts the service and stops it cleanly on SIGTERM/SIGINT (the process stays up while it runs). */
async function start(config: LoadedConfig): Promise<number | null> {
  // Loaded here, not at the top: the tool commands need none of the service's modules.
  const [{ createLogger }, { startService }] = await Promise.all([import('./log.js'), import('./server.js')]);
  const log = createLogger(config.log.level);
  let service: Awaited<ReturnType<typeof startService>>;
  try {
    service = await startService(config, { log });
  } catch (err) {
    log.fatal({ error: { type: (err as Error).name, message: (err as Error).message } }, 'start-up failed');
    // At once: a half-started service may still hold handles (a store connection, a reactor host).
    process.exit(EXIT_FAILED);
  }
  log.info({ url: service.url, store: config.store.kind, config: config.source }, 'tokenproxy listening');
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) {
      // A second signal: the operator does not want to wait for the drain.
      log.warn({ signal }, 'second signal while draining: exiting at once');
      process.exit(EXIT_FAILED);
    }
    stopping = true;
    log.info({ signal, grace_ms: config.server.shutdown_grace_ms }, 'stopping: draining requests in flight');
    service.close().then(
      () => process.exit(EXIT_OK),
      () => process.exit(EXIT_FAILED),
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  return null;
}

const commands: Record<string, Command> = {
  start: {
    summary: 'start the service (the default command)',
    usage: `tokenproxy [start] [--config PATH]\n\nStarts the service on the config's host and port (env HOST and PORT override).\n\n${CONFIG_HELP}`,
    options: configOption,
    async run(values, io) {
      const config = loadConfig(values, io);
      return config ? start(config) : EXIT_FAILED;
    },
  },
  'check-config': {
    summary: 'validate a config file and exit',
    usage: `tokenproxy check-config [--config PATH]\n\nValidates the file (schema and cross-references; reactor code is read but compiled only at start)\nand prints a summary, or every problem with its path. No key is printed.\n\n${CONFIG_HELP}`,
    options: configOption,
    run(values, io) {
      const config = loadConfig(values, io);
      if (!config) return EXIT_FAILED;
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
  try {
    ({ values } = parseArgs({ args: rest, options: { ...cmd.options, help: { type: 'boolean', short: 'h' } }, strict: true, allowPositionals: false }));
  } catch (err) {
    // parseArgs' messages name the option only (never a value worth hiding); drop its hint lines.
    io.err(`tokenproxy ${name}: ${(err as Error).message.split('\n')[0]}; see tokenproxy ${name} --help\n`);
    return EXIT_USAGE;
  }
  if (values.help) {
    io.out(`${cmd.usage}\n`);
    return EXIT_OK;
  }
  return cmd.run(values, io);
}
