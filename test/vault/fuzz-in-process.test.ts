/**
 * Fuzz suite (fuzz-suite.ts) on the embedded store, the in-process volume: generated /tokenize and
 * /tokens bodies to a service on an in-memory SQLite database (the same write code, run
 * in-thread, without an fsync per commit). The bodies over HTTP: fuzz-http.test.ts.
 */
import t from 'tap';
import { baseConfig } from '../helpers/service.js';
import { fuzzStore } from './fuzz-suite.js';

await fuzzStore(t, {
  inProcess: {
    service: { config: { ...baseConfig(), store: { kind: 'embedded', path: ':memory:' } } },
    runs: Number(process.env.FUZZ_IN_PROCESS ?? 25_000),
  },
});
