// A tap plugin: see index.mjs.
exports.importLoader = 'tsx';
exports.testFileExtensions = ['ts'];
exports.plugin = () => ({});
