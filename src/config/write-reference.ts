/** `npm run docs:config`: rewrites the configuration reference block of docs/configuration.md (reference.ts). */
import { readFileSync, writeFileSync } from 'node:fs';
import { withReference } from './reference.js';

const file = 'docs/configuration.md';
writeFileSync(file, withReference(readFileSync(file, 'utf8')));
process.stdout.write(`wrote the configuration reference in ${file}\n`);
