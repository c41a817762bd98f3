/**
 * The embedded audit chain shared by two processes on one file (server.workers): two stores (two
 * connections and writer threads, as two workers) append to one tenant at once. Appends are a
 * compare-and-set on the head (chained and anchored on the main thread, issue 23), so one chain
 * with one anchored head results.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedStore } from '../../src/store/embedded/index.js';
import { AUDIT_TENANT, auditInput, checkChain, SIGN } from './audit-contract.js';

const dir = mkdtempSync(join(tmpdir(), 'tp-embedded-audit-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

t.test('two stores on one file appending concurrently form one anchored chain', async (t) => {
  const file = join(dir, 'tokens.db');
  const a = new EmbeddedStore(file);
  const b = new EmbeddedStore(file);
  t.teardown(() => Promise.all([a.close(), b.close()]));
  const n = 40;
  const written = await Promise.all(Array.from({ length: n }, (_, i) => (i % 2 === 0 ? a : b).audit.appendAudit(AUDIT_TENANT, [auditInput({ request_id: `r${i}` }), auditInput({ request_id: `r${i}b` })], SIGN)));
  t.same(written.flat().map((e) => e.seq).sort((x, y) => x - y), Array.from({ length: 2 * n }, (_, i) => i + 1), 'every number once, no gap');
  for (const pair of written) t.equal(pair[1]!.seq, pair[0]!.seq + 1, "one call's events stay together");
  t.same(await checkChain(a, AUDIT_TENANT), { ok: true, events: 2 * n, unanchored: false }, 'the chain and the anchor verify');
  t.same(await b.audit.auditHead(AUDIT_TENANT), await a.audit.auditHead(AUDIT_TENANT));
});
