/** The SDK iteration suite (sdk-iterate-suite.ts, issue 28) on the embedded store. */
import t from 'tap';
import { sdkIterateSuite } from './sdk-iterate-suite.js';

sdkIterateSuite(t, async () => ({}));
