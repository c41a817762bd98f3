/** `npm run schema`: writes config/tokenproxy.schema.json from the zod schema. */
import { writeFileSync } from 'node:fs';
import { configJsonSchemaText } from './json-schema.js';

writeFileSync('config/tokenproxy.schema.json', configJsonSchemaText());
process.stdout.write('wrote config/tokenproxy.schema.json\n');
