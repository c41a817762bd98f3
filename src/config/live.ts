/**
 * What a reload may change in a running service, and what needs a restart.
 *
 * Live: the tenants (applications and their keys, access rules, reactors, proxies, rate-limit
 * tier and custom limits), `server.trust_proxy`, `server.lingering_*` and
 * `server.shutdown_grace_ms`. Everything else is fixed when the process starts (the listener, the
 * limits the long-lived services were built with, the store, the secrets, the rate-limit store,
 * the log level), and so is any section added later until it is made live here: a reload names
 * each such setting that changed and keeps its running value.
 */
import type { LoadedConfig } from './load.js';

/** The settings a reload applies (a section name stands for all of it). */
export const LIVE_SETTINGS = [
  'tenants',
  'server.trust_proxy',
  'server.lingering_time_ms',
  'server.lingering_max_bytes',
  'server.shutdown_grace_ms',
] as const;

/** Not settings of the file: where it was read, the environment's master key and HSM PIN. */
const NOT_SETTINGS = new Set(['source', 'masterKeyFromEnv', 'masterKeyPinFromEnv']);

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

type Section = Record<string, unknown>;

/**
 * The config to run after a reload: the running one with every live setting taken from `next`,
 * and the paths of the other settings that differ in the file (to be logged as needing a restart).
 */
export function applyLive(running: LoadedConfig, next: LoadedConfig): { config: LoadedConfig; restartNeeded: string[] } {
  const live = new Set<string>(LIVE_SETTINGS);
  const out: Section = { ...running };
  const restartNeeded: string[] = [];
  const run = running as unknown as Section;
  const nxt = next as unknown as Section;
  for (const key of new Set([...Object.keys(run), ...Object.keys(nxt)])) {
    if (NOT_SETTINGS.has(key)) continue;
    if (live.has(key)) {
      out[key] = nxt[key];
      continue;
    }
    const [a, b] = [run[key], nxt[key]];
    const fields = [...LIVE_SETTINGS].filter((p) => p.startsWith(`${key}.`)).map((p) => p.slice(key.length + 1));
    if (fields.length === 0 || typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) {
      if (!same(a, b)) restartNeeded.push(key);
      continue;
    }
    // A section with some live fields: those from the file, the others compared one by one.
    const section: Section = { ...(a as Section) };
    for (const f of new Set([...Object.keys(a), ...Object.keys(b)])) {
      if (fields.includes(f)) section[f] = (b as Section)[f];
      else if (!same((a as Section)[f], (b as Section)[f])) restartNeeded.push(`${key}.${f}`);
    }
    out[key] = Object.freeze(section);
  }
  return { config: Object.freeze(out) as unknown as LoadedConfig, restartNeeded };
}
