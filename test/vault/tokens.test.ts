/** The tokens suite on the embedded store. */
import t from 'tap';
import { tokensSuite } from './tokens-suite.js';

tokensSuite(t, async () => ({}));
