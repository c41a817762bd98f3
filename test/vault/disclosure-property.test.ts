/** The disclosure property (disclosure-suite.ts) on the embedded store. */
import t from 'tap';
import { startTestService } from '../helpers/service.js';
import { runDisclosureSuite } from './disclosure-suite.js';

await runDisclosureSuite(t, { start: (t, config) => startTestService(t, { config }) });
