/** Text no store can hold is refused (400 naming the field), on the embedded store. */
import t from 'tap';
import { unstorableTextSuite } from './unstorable-text-suite.js';

unstorableTextSuite(t, async () => ({}));
