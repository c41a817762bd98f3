// The test processes' TypeScript loader (the tap plugin's importLoader): tsx, except in a process
// whose entry is a compiled test in .test-build/ (scripts/build-tests.mjs), which needs none.
// Processes a test starts with its flags (a `-e` script, a fixture under test/, src/main.ts) load
// TypeScript, so they get tsx.
const entry = process.argv[1] ?? '';
if (!/[\\/]\.test-build[\\/]/.test(entry)) await import('tsx');
