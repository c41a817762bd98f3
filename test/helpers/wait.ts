/**
 * Waiting for the event a test is about instead of sleeping a fixed time (issue 14): a fixed sleep
 * is either too short on a loaded machine (a flake) or longer than needed everywhere. These poll
 * until the condition holds, with a generous upper bound that only a real failure reaches.
 */

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Polls `probe` every `intervalMs` until it returns something other than undefined (or false), and
 * returns that; throws after `timeoutMs` naming `what`.
 */
export async function waitFor<T>(
  probe: () => T | undefined | false | Promise<T | undefined | false>,
  { timeoutMs = 10_000, intervalMs = 10, what = 'condition' }: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not met within ${timeoutMs} ms`);
    await sleep(intervalMs);
  }
}
