/**
 * A headless Chromium for the browser tests (issue 27): Debian's `chromium` driven by
 * playwright-core, which downloads no browser of its own. Missing chromium skips the test, and
 * fails it under TOKENPROXY_REQUIRE_BROWSER=1 (CI sets it: browser tests run, never skip).
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

const CANDIDATES = [process.env.TOKENPROXY_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser'].filter((p): p is string => !!p);

export function chromiumPath(): string | undefined {
  return CANDIDATES.find((p) => existsSync(p));
}

/** The reason to skip, or undefined when a browser is there; throws when one is required. */
export function browserSkip(): string | undefined {
  if (chromiumPath()) return undefined;
  if (process.env.TOKENPROXY_REQUIRE_BROWSER === '1') throw new Error('chromium is required (TOKENPROXY_REQUIRE_BROWSER=1) but was not found');
  return 'chromium not installed (apt-get install chromium)';
}

export async function launchBrowser(t: { teardown(fn: () => unknown): void }): Promise<Browser> {
  const browser = await chromium.launch({
    executablePath: chromiumPath()!,
    // Root in CI and containers: Chromium's sandbox needs user namespaces it may not have.
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  t.teardown(() => browser.close());
  return browser;
}
