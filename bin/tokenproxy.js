#!/usr/bin/env node
// `tokenproxy` (package.json bin; `npx tokenproxy …` in a checkout): the compiled CLI in dist/.
// `npm install` builds it (the prepare script); say so plainly when it is missing.
import { existsSync } from 'node:fs';

const entry = new URL('../dist/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('tokenproxy: dist/ is not built yet: run `npm run build` (npm install and npm start build it too)\n');
  process.exit(1);
}
await import(entry.href);
