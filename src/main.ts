/**
 * CLI entry: `node --no-node-snapshot dist/main.js [--config PATH]`.
 * Loads the config (exit 1 with every bad path named), starts, and stops cleanly on SIGTERM/SIGINT.
 */
import { parseArgs } from 'node:util';
import { ConfigError, loadConfigFile } from './config/load.js';
import { createLogger } from './log.js';
import { startService } from './server.js';

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { config: { type: 'string', short: 'c' } }, strict: true });
  let config;
  try {
    config = loadConfigFile({ path: values.config });
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`tokenproxy: ${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
  const log = createLogger(config.log.level);
  let service;
  try {
    service = await startService(config, { log });
  } catch (err) {
    log.fatal({ error: { type: (err as Error).name, message: (err as Error).message } }, 'start-up failed');
    process.exit(1);
  }
  log.info({ url: service.url, store: config.store.kind, config: config.source }, 'tokenproxy listening');
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping');
    service.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

void main();
