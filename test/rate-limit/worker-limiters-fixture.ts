/**
 * The worker side of worker-limiters.test.ts (not a test file: tap runs only *.test.ts). Runs in a
 * node:cluster worker forked by that test, whose process holds the RateLimiterClusterMaster, so the
 * memory store's limiters are RateLimiterClusters here. It plays reloads the way the server does
 * them (every reload gives each tenant new config objects; RateLimitService.retain after each) and
 * sends the primary what it saw: the worker's 'message' listeners and the built limiters.
 */
import { RateLimitService, type RateLimitSubject, type RateLimitTenant } from '../../src/rate-limit/limiter.js';
import { ServiceError } from '../../src/errors.js';
import { captureLog, memoryConfig, reloadedWith, tenantWith } from './fixtures.js';

const listeners = (): number => process.listenerCount('message');
const service = await RateLimitService.create(memoryConfig(), { log: captureLog().log });
const subject = (tenant: RateLimitTenant): RateLimitSubject => ({ tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' });
/** 'ok', or the error code a check threw. */
const check = (tenant: RateLimitTenant): Promise<string> =>
  service.check(subject(tenant)).then(() => 'ok', (e: unknown) => (e instanceof ServiceError ? e.code : String(e)));

const base = listeners();
const steady = tenantWith({ private_key: { points: 3, duration_seconds: 60 } });
let changing = tenantWith({ private_key: { points: 100, duration_seconds: 60 } });
const perReload: Array<{ listeners: number; limiters: number; check: string }> = [];
const steadyChecks: string[] = [await check(steady), await check(steady)];
for (let reload = 1; reload <= 20; reload++) {
  // A reload: new limits for one tenant, the same limits (in new objects) for the other.
  changing = reloadedWith(changing, { private_key: { points: 100 + reload, duration_seconds: 60 } });
  const steadyNow = reloadedWith(steady, { private_key: { points: 3, duration_seconds: 60 } });
  service.retain([changing.id, steady.id]);
  const c = await check(changing);
  if (reload === 20) steadyChecks.push(await check(steadyNow), await check(steadyNow));
  perReload.push({ listeners: listeners() - base, limiters: service.limiterCount(), check: c });
}
// A check in flight when its tenant is removed still gets the primary's answer (not a timeout).
const inFlight = check(changing);
service.retain([]);
const inFlightResult = await inFlight;
const afterRemoval = { listeners: listeners() - base, limiters: service.limiterCount() };
process.send!({ fixture: 'worker-limiters', perReload, steadyChecks, inFlightResult, afterRemoval });
