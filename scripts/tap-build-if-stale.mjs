#!/usr/bin/env node
// `npm test`'s pretest: rebuilds tap's Test class when the plugins it was built with are not the
// ones package.json asks for. A fresh `npm install` leaves tap built with its defaults (ts-node and
// @tapjs/mock); tap notices and rebuilds on its first run, but that run's test processes still
// start with the old loaders: the whole first `npm test` after an install ran under ts-node,
// twice as slow, and its slowest files hit the 120 s timeout. Building first makes every run use
// tsx (tokenproxy-tap-tsx). Costs about 0.3 s when nothing is stale, 7 s when it builds.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);
const { TapConfig } = await import('@tapjs/config');

/**
 * What tap's Test class was built with (its build's `signature` export), plus the import loaders
 * and the options of our plugin it baked in: a plugin can change its loader or options without
 * changing the signature (the list of names).
 */
function builtSignature() {
  const testPkg = dirname(require.resolve('@tapjs/test/package.json'));
  const built = readFileSync(join(testPkg, 'test-built/dist/esm/index.js'), 'utf8');
  const signature = /export const signature = `([^`]*)`/.exec(built)?.[1]?.trim() ?? null;
  const loaders = /^export const importLoaders = \[([^\]]*)\]/m.exec(built)?.[1]?.match(/"[^"]*"/g)?.map((l) => JSON.parse(l)) ?? [];
  const options = ourOptions.filter((o) => built.includes(`.config[${JSON.stringify(o)}]`));
  return `${signature}\nloaders: ${loaders.join(' ')}\noptions: ${options.join(' ')}`;
}

const { importLoader, config } = await import('tokenproxy-tap-tsx/plugin');
const ourOptions = Object.keys(config);
const wanted = `${(await TapConfig.load()).pluginSignature}\nloaders: ${importLoader}\noptions: ${ourOptions.join(' ')}`;
if (builtSignature() !== wanted) {
  process.stdout.write('tap: building the Test class with this project\'s plugins (once after an install)\n');
  const tap = join(dirname(require.resolve('tap/package.json')), 'dist/esm/run.mjs');
  const r = spawnSync(process.execPath, [tap, 'build'], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
  if (builtSignature() !== wanted) {
    process.stderr.write('tap build did not produce the configured plugins\n');
    process.exit(1);
  }
}
