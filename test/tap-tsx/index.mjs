// A tap plugin: load TypeScript test files (and every process they spawn with process.execArgv)
// through tsx, which transpiles with esbuild, instead of tap's default ts-node loader; the compiled
// tests of .test-build/ (scripts/build-tests.mjs, `npm test`) run without a loader (loader.mjs).
// Its option `processinfo-load-hook` (default false) preloads without-processinfo-hook.cjs into each test
// process (tap calls nodeArgs in the runner, so the path can be absolute).
import { fileURLToPath } from 'node:url';

export const importLoader = 'tokenproxy-tap-tsx/loader';
export const testFileExtensions = ['ts'];
export const plugin = () => ({});
export const config = {
  'processinfo-load-hook': {
    type: 'boolean',
    default: false,
    description: `Keep @tapjs/processinfo's module load hook in test processes while coverage is
                  off. Left out by default (without-processinfo-hook.cjs).`,
    nodeArgs: (keep) => (keep ? [] : [`--require=${fileURLToPath(new URL('./without-processinfo-hook.cjs', import.meta.url))}`]),
  },
};
