// A tap plugin: load TypeScript test files (and every process they spawn with process.execArgv)
// through tsx, which transpiles with esbuild, instead of tap's default ts-node loader; the compiled
// tests of .test-build/ (scripts/build-tests.mjs, `npm test`) run without a loader (loader.mjs).
// Its option `processinfo-load-hook` (default false) preloads without-processinfo-hook.cjs into
// each test process (tap calls nodeArgs in the runner, so the path can be absolute).
// The plugin is written once, in index.cjs; this is its ES module form.
import cjs from './index.cjs';

export const { importLoader, testFileExtensions, plugin, config } = cjs;
