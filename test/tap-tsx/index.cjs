// A tap plugin: see index.mjs.
exports.importLoader = 'tokenproxy-tap-tsx/loader';
exports.testFileExtensions = ['ts'];
exports.plugin = () => ({});
