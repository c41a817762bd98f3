/** The pipeline stage maps the request context onto the limiter's subject. */
import t from 'tap';
import { RateLimitService } from '../../src/rate-limit/limiter.js';
import { createRateLimitStage, type GateContext } from '../../src/rate-limit/stage.js';
import { captureLog, expect429, memoryConfig, tenantWith } from './fixtures.js';

const limits = await RateLimitService.create(memoryConfig(), { log: captureLog().log });
t.teardown(() => limits.close());
const stage = createRateLimitStage(limits);

t.test('API-key request: key id, app type and legacy flag reach the rules', async (t) => {
  const tenant = tenantWith({ public_key: { points: 1, duration_seconds: 30 }, legacy_tokens_create: { points: 5, duration_seconds: 30 } });
  const ctx: GateContext = { clientIp: '192.0.2.1', principal: { tenant, app: { type: 'public', legacy: true }, keyId: 'k' } };
  t.same(await stage.check(ctx, { group: 'tokenize' }), { 'RateLimit-Limit': '1', 'RateLimit-Remaining': '0', 'RateLimit-Reset': '30' });
  await expect429(t, stage.check(ctx, { group: 'tokenize' }), 1);
  // The legacy rule counted both requests (by IP), even with another key.
  const other: GateContext = { ...ctx, principal: { tenant, app: { type: 'private', legacy: true }, keyId: 'k2' } };
  t.same(await stage.check(other, { group: 'tokenize' }), { 'RateLimit-Limit': '5', 'RateLimit-Remaining': '2', 'RateLimit-Reset': '30' });
});

t.test('proxy request: counted by proxy key', async (t) => {
  const tenant = tenantWith({ proxy_endpoint: { points: 1, duration_seconds: 30 } });
  const ctx: GateContext = { clientIp: '192.0.2.1', proxyPrincipal: { tenant, keyId: 'p' } };
  await stage.check(ctx, { group: 'proxy' });
  await expect429(t, stage.check(ctx, { group: 'proxy' }), 1);
});

t.test('no principal: no limits', async (t) => {
  t.same(await stage.check({ clientIp: '192.0.2.1' }, { group: 'health' }), {});
});
