/**
 * The help of `tokenproxy migrate`, apart from the command itself so src/cli.ts
 * can show it, and parse its options, without loading the config, the model and the stores.
 */
import type { ParseArgsConfig } from 'node:util';

export const DEFAULT_BATCH = 1000;
export const MAX_BATCH = 100_000;

/** 1,000 rather than 1000 (the command's messages and its help). */
export const formatCount = (x: number): string => x.toLocaleString('en-US');
const n = formatCount;

export const MIGRATE_SUMMARY = "convert the store to this version's format (resumable; stop the service first)";

export const MIGRATE_USAGE = `tokenproxy migrate [--dry-run] [--batch N] [--config PATH]\n\nConverts the store of the config to the format this version of tokenproxy reads (the service\nrefuses to start on an older one and names this command). Stop the service first. The conversion\nruns in steps of N tokens, each committed with its progress, so a run that is interrupted (even\nkilled) goes on from where it stopped when run again. Nothing is decrypted to convert; afterwards\nthe command opens the store as the service does, checks that it holds as many tokens as before\nand decrypts a sample of them, which needs the master key (as for the service). A progress bar\nis drawn on a terminal, plain lines otherwise. A store already in the current format: nothing to\ndo. Back the store up first (tokenproxy backup, for the embedded store).\n\nExit 0: converted and checked, or nothing to do; 1: the conversion or the check failed, the store\nis missing, or the master key is not the store's; 2: usage error.\n\n  -n, --dry-run       say what would be converted, change nothing; on a store in the current\n                      format, also list the ids beyond their type's disclosure budget (as\n                      tokenproxy check-aliases does)\n  -b, --batch N       tokens a step (default ${DEFAULT_BATCH}, at most ${n(MAX_BATCH)})\n  -c, --config PATH   the config file (default: $TOKENPROXY_CONFIG, else config/tokenproxy.yaml)`;

export const MIGRATE_OPTIONS: NonNullable<ParseArgsConfig['options']> = {
  config: { type: 'string', short: 'c' },
  'dry-run': { type: 'boolean', short: 'n' },
  batch: { type: 'string', short: 'b' },
};
