// A tap plugin: load TypeScript test files (and every process they spawn with process.execArgv)
// through tsx, which transpiles with esbuild, instead of tap's default ts-node loader.
export const importLoader = 'tsx';
export const testFileExtensions = ['ts'];
export const plugin = () => ({});
