/** The tokenize suite on the embedded store. */
import t from 'tap';
import { tokenizeSuite } from './tokenize-suite.js';

tokenizeSuite(t, async () => ({}));
