/**
 * The process entry: `node dist/main.js [command] [options]` (also `tokenproxy` through package.json
 * `bin`, and `npm start`). The commands live in cli.ts; this file only sets the exit code.
 *
 * SIGHUP is held before anything else is loaded (src/reload-signal.ts): the modules are imported
 * after it, dynamically, so a reload signal that arrives while they load is not fatal.
 */
import { holdSighup } from './reload-signal.js';

holdSighup();

const { tuneHeap } = await import('./heap.js');
tuneHeap();

const { runCli } = await import('./cli.js');
const code = await runCli(process.argv.slice(2));
if (code !== null) process.exitCode = code;
