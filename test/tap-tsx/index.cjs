// A tap plugin (what it does: index.mjs). Written here once; index.mjs re-exports it.
const { join } = require('node:path');

exports.importLoader = 'tokenproxy-tap-tsx/loader';
exports.testFileExtensions = ['ts'];
exports.plugin = () => ({});
exports.config = {
  'processinfo-load-hook': {
    type: 'boolean',
    default: false,
    description: `Keep @tapjs/processinfo's module load hook in test processes while coverage is
                  off. Left out by default (without-processinfo-hook.cjs).`,
    nodeArgs: (keep) => (keep ? [] : [`--require=${join(__dirname, 'without-processinfo-hook.cjs')}`]),
  },
};
