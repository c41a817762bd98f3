/**
 * The Redis audit chain shared by several instances: two stores (two connections, as two tokenproxy
 * processes) append to one tenant at once; the compare-and-set on the head keeps one chain.
 */
import t from 'tap';
import { RedisStore } from '../../src/store/redis/index.js';
import { redisForFile } from '../helpers/redis.js';
import { AUDIT_TENANT, auditInput, checkChain, SIGN } from './audit-contract.js';

const redis = await redisForFile(t);
if (redis) {
  t.test('two instances appending concurrently form one chain', async (t) => {
    const prefix = `${redis.prefix}shared:`;
    const a = await RedisStore.connect({ url: redis.url, keyPrefix: prefix });
    const b = await RedisStore.connect({ url: redis.url, keyPrefix: prefix });
    t.teardown(() => Promise.all([a.close(), b.close()]));
    const n = 80;
    const written = await Promise.all(Array.from({ length: n }, (_, i) => (i % 2 === 0 ? a : b).audit.appendAudit(AUDIT_TENANT, [auditInput({ request_id: `r${i}` }), auditInput({ request_id: `r${i}b` })], SIGN)));
    const seqs = written.flat().map((e) => e.seq).sort((x, y) => x - y);
    t.same(seqs, Array.from({ length: 2 * n }, (_, i) => i + 1), 'every number once, no gap');
    for (const pair of written) t.equal(pair[1]!.seq, pair[0]!.seq + 1, 'one call\'s events stay together');
    t.same(await checkChain(a, AUDIT_TENANT), { ok: true, events: 2 * n, unanchored: false });
    t.same(await b.audit.auditHead(AUDIT_TENANT), await a.audit.auditHead(AUDIT_TENANT));
  });
}
