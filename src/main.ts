/**
 * The process entry: `node dist/main.js [command] [options]` (also `tokenproxy` through package.json
 * `bin`, and `npm start`). The commands live in cli.ts; this file only sets the exit code.
 */
import { runCli } from './cli.js';
import { tuneHeap } from './heap.js';

tuneHeap();

const code = await runCli(process.argv.slice(2));
if (code !== null) process.exitCode = code;
