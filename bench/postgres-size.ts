/**
 * Bytes per token of the PostgreSQL store alone (issue 24 item 2), measured as the tokenize bench
 * measures it (bench/lib/store-size.ts: 20,000 tokens through /tokenize, bodies of 50 card
 * definitions with cvc + 50 strings, database growth after CHECKPOINT), without its throughput
 * rounds, and each relation's size a token (which table or index the bytes are in):
 *
 *   node --no-node-snapshot --import tsx bench/postgres-size.ts      (N=20000 by default)
 *
 * A private cluster (test/helpers/postgres.ts) and the service in this process.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { startPostgres } from '../test/helpers/postgres.js';
import { baseConfig, KEYS } from '../test/helpers/service.js';
import { buildConfig } from '../src/config/load.js';
import { createLogger } from '../src/log.js';
import { startService } from '../src/server.js';
import { randomCard, randomCvc } from '../test/helpers/secrets.js';

const TOKENS = Number(process.env.N ?? 20000);
const server = await startPostgres({ own: true });
const db = await server.database({ teardown: () => {} });
const admin = async <T>(fn: (c: pg.Client) => Promise<T>) => { const c = new pg.Client({ connectionString: db.url }); await c.connect(); try { return await fn(c); } finally { await c.end(); } };
const size = () => admin(async (c) => { await c.query('CHECKPOINT'); return Number((await c.query('SELECT pg_database_size(current_database()) AS s')).rows[0].s); });
const config = buildConfig({ ...baseConfig(), log: { level: 'warn' }, store: { kind: 'postgres', url: db.url } }, { env: { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') } });
const svc = await startService(config, { log: createLogger('silent') });
const before = await size();
function body(n: number): string {
  const defs: unknown[] = [];
  for (let i = 0; i < 50; i++) {
    defs.push({ type: 'card', data: { number: randomCard(), expiration_month: 1 + (i % 12), expiration_year: 2030 + (i % 5), cvc: randomCvc() } });
    defs.push(`customer-${n * 50 + i}-value`);
  }
  return JSON.stringify(defs);
}
let next = 0;
const worker = async () => { while (next < TOKENS / 100) { const n = next++; const r = await fetch(`${svc.url}/tokenize`, { method: 'POST', headers: { 'svc-api-key': KEYS.private, 'content-type': 'application/json' }, body: body(n) }); if (r.status !== 200) throw new Error(await r.text()); await r.text(); } };
await Promise.all(Array.from({ length: 8 }, worker));
const after = await size();
console.log(`PostgreSQL, ${TOKENS} tokens: bytes/token ${((after - before) / TOKENS).toFixed(0)} (before ${before}, after ${after})`);
const rels = await admin((c) => c.query(`SELECT c.relname, c.relkind, pg_relation_size(c.oid) AS bytes FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN ('tokenproxy','pg_toast') AND pg_relation_size(c.oid) > 16384 ORDER BY 3 DESC`));
// Relations over 16 kB, whole size over the token count (catalog ones are there before the tokens too).
for (const r of rels.rows) console.log(`  ${r.relname} (${r.relkind}) ${(Number(r.bytes) / TOKENS).toFixed(0)} bytes a token`);
await svc.close();
await server.stop();
