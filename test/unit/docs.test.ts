/** The README's error table matches the catalogue; the committed JSON Schema matches the zod schema. */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { catalogue } from '../../src/errors.js';
import { configJsonSchemaText } from '../../src/config/json-schema.js';

t.test('README lists every error code with its status and title, and no other', async (t) => {
  const readme = readFileSync('README.md', 'utf8');
  const rows = [...readme.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \| (.+?) \|$/gm)].map((m) => [m[1], Number(m[2]), m[3]]);
  const expected = Object.entries(catalogue).map(([code, v]) => [code, v.status, v.title]);
  t.same(rows, expected);
});

t.test('config/tokenproxy.schema.json is up to date (npm run schema)', async (t) => {
  t.equal(readFileSync('config/tokenproxy.schema.json', 'utf8'), configJsonSchemaText());
});
