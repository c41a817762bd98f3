/**
 * `npm run bench` runs every benchmark listed here, each in its own process (a fresh heap and
 * event loop, no state carried from one to the next); `npm run bench -- NAME [args…]` runs one and
 * passes the remaining arguments to it. This process's Node flags (--no-node-snapshot, --import
 * tsx, and e.g. --cpu-prof) are passed on.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const BENCHES: Record<string, { file: string; about: string }> = {
  tokenize: { file: 'tokenize.ts', about: 'POST /tokenize vs the crypto limit and a bare node:http server (embedded, Redis, PostgreSQL); bytes per token of each store' },
  'reactors-runtime': { file: 'reactors-runtime.ts', about: 'reactor host vs in-process isolated-vm (warm p50/p99, cold start, IPC encodings)' },
  'rate-limit': { file: 'rate-limit.ts', about: '/tokenize with limits off, in memory, on Redis' },
  reactors: { file: 'reactors.ts', about: 'POST /reactors/{id}/react through HTTP vs the same route without a reactor; cold start; 32 concurrent' },
  proxy: { file: 'proxy.ts', about: '/proxy/* pass-through and tokenizing vs direct, nginx and a bare node:http + undici forwarder' },
  outbound: { file: 'outbound.ts', about: '/proxy with SVC-PROXY-URL, 2 expressions detokenized, vs the pass-through proxy and a bare forwarder' },
  restarts: { file: 'restarts.ts', about: 'SIGTERM restarts under keep-alive load: requests dropped (reset, closed before the answer) vs answered' },
};

function runOne(name: string, args: string[]): Promise<number> {
  const file = fileURLToPath(new URL(BENCHES[name].file, import.meta.url));
  console.log(`=== bench: ${name} (node ${process.version}, ${process.platform}-${process.arch}) ===`);
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...process.execArgv, file, ...args], { stdio: 'inherit' });
    child.once('error', (err) => {
      console.error(`cannot start ${name}: ${err.message}`);
      resolve(1);
    });
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}

const [first, ...rest] = process.argv.slice(2);
if (first === '--help' || first === '-h' || first === 'list') {
  console.log('npm run bench [-- NAME [args…]]\n');
  for (const [name, b] of Object.entries(BENCHES)) console.log(`  ${name.padEnd(12)} ${b.about}`);
} else if (first !== undefined && !first.startsWith('-')) {
  if (!(first in BENCHES)) {
    console.error(`unknown bench "${first}"; known: ${Object.keys(BENCHES).join(', ')}`);
    process.exitCode = 2;
  } else {
    process.exitCode = await runOne(first, rest);
  }
} else {
  let worst = 0;
  for (const name of Object.keys(BENCHES)) worst = Math.max(worst, await runOne(name, process.argv.slice(2)));
  process.exitCode = worst;
}
