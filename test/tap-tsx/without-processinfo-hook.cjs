// Preloaded (node --require) into every test process while the tap plugin's option
// `processinfo-load-hook` is false, its default (see index.mjs): keeps tap's @tapjs/processinfo
// from hooking module loading while coverage is off, and changes nothing while it is on.
//
// tap starts each test process (and each worker thread in it, which inherits the flags) with
// processinfo's import, both in NODE_OPTIONS and in the flags. That import hooks every module load
// to record the module for coverage and `tap --changed`, neither of which this project uses
// (`disable-coverage`): with `module.register` where node has no dependable synchronous hooks (node
// 20, 22, and 24 before 24.13.1), which runs a second thread every module load passes through, and
// with `module.registerHooks` on newer node. A --require runs before any --import, NODE_OPTIONS'
// too, so this is in place when processinfo registers. The rest of processinfo (the process tree,
// .tap/processinfo) runs as before where it starts (node 20); on newer node it starts on its first
// recording, so not at all. Its import also leaves this process's NODE_OPTIONS, which every child
// with this environment would otherwise start with: a child given an environment without
// processinfo's other variables (the reactor host keeps NODE_OPTIONS only) would collect coverage.
// Measured on a 2-core machine, CPU of one test process: node 20, a test of pure functions
// 1.34 → 0.68 s, a test that opens an embedded store (its writer is a worker thread) 6.2 → 4.1 s;
// node 24, the pure-function test 1.02 → 0.68 s.
'use strict';
const Module = require('node:module');
const { PROCESSINFO, withoutProcessinfo } = require('./node-options.cjs');

const PROCESSINFO_LOADER = /[\\/]@tapjs[\\/]processinfo[\\/].*[\\/]loader\.mjs$/;

// Coverage is off when tap says so ('0'), and in a child whose environment lost tap's variables:
// this file reaches a child only through the test process's flags (a child started with
// process.execArgv), and had coverage been on there, processinfo's spawn hook would have put the
// variables back. The reactor host is such a child (it keeps a few variables by name); taken as
// on, it collected coverage on node 24 and tap failed the run for it.
if (process.env._TAPJS_PROCESSINFO_COVERAGE_ === undefined) process.env._TAPJS_PROCESSINFO_COVERAGE_ = '0';
if (process.env._TAPJS_PROCESSINFO_COVERAGE_ === '0') {
  const options = withoutProcessinfo(process.env.NODE_OPTIONS);
  if (options === undefined) delete process.env.NODE_OPTIONS;
  else process.env.NODE_OPTIONS = options;
  if (typeof Module.register === 'function') {
    const register = Module.register;
    Module.register = function registerUnlessProcessinfo(specifier, ...rest) {
      if (PROCESSINFO_LOADER.test(String(specifier))) return;
      return register.call(this, specifier, ...rest);
    };
  }
  if (typeof Module.registerHooks === 'function') {
    const registerHooks = Module.registerHooks;
    Module.registerHooks = function registerHooksUnlessProcessinfo(hooks) {
      // processinfo's import calls this at its top level: its file is the caller's frame.
      const caller = new Error().stack?.split('\n')[2] ?? '';
      if (PROCESSINFO.test(caller)) return { deregister() {} };
      return registerHooks.call(this, hooks);
    };
  }
}
