// A tap plugin: load TypeScript test files (and every process they spawn with process.execArgv)
// through tsx, which transpiles with esbuild, instead of tap's default ts-node loader; the compiled
// tests of .test-build/ (scripts/build-tests.mjs, `npm test`) run without a loader (loader.mjs).
export const importLoader = 'tokenproxy-tap-tsx/loader';
export const testFileExtensions = ['ts'];
export const plugin = () => ({});
