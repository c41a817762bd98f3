// Preloaded (node --require) into every test process when package.json's tap config sets
// `processinfo-load-hook: false` (see index.mjs): keeps tap's @tapjs/processinfo from putting a
// module load hook on a loader thread while coverage is off, and changes nothing while it is on.
//
// tap starts each test process (and each worker thread in it, which inherits the flags) with
// processinfo's import, both in NODE_OPTIONS and in the flags. Where node has no synchronous
// module hooks (node 20, 22, and 24 before 24.13.1), that import calls `module.register` with its
// loader: node then runs a second thread that every module load passes through, and processinfo
// reads each module again to record it for coverage and `tap --changed`. Neither is used here
// (`disable-coverage`). A --require runs before any --import, NODE_OPTIONS' too, so this is in
// place when processinfo registers. The rest of processinfo (the process tree, .tap/processinfo)
// runs as before. Measured with node 20 on a 2-core machine: a test of pure functions 1.34 → 0.68 s
// of CPU, a test that opens an embedded store (its writer is a worker thread) 6.2 → 4.1 s.
'use strict';
const Module = require('node:module');

const PROCESSINFO_LOADER = /[\\/]@tapjs[\\/]processinfo[\\/].*[\\/]loader\.mjs$/;
if (process.env._TAPJS_PROCESSINFO_COVERAGE_ === '0' && typeof Module.register === 'function') {
  const register = Module.register;
  Module.register = function registerUnlessProcessinfo(specifier, ...rest) {
    if (PROCESSINFO_LOADER.test(String(specifier))) return;
    return register.call(this, specifier, ...rest);
  };
}
