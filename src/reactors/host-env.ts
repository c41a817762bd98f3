/**
 * The reactor host's environment: the host runs tenant code, so an isolate escape there
 * must find no master key, no store password and no other secret of the service's own
 * environment. It is built from an allow-list, never by removing the secrets we know of: a
 * variable an operator adds later (a cloud credential, an APM key) stays out by default.
 *
 * What the host needs: node's own search path and locale and time zone (Date and Intl in the
 * isolates), a temporary directory, NODE_OPTIONS (node flags: a TypeScript loader given that way
 * when the service runs from source), and the variables of the TypeScript loaders the host can run
 * under from source (tsx, ts-node). Its node flags come from the service's own command line
 * (runtime.ts hostExecArgv); its configuration comes over IPC, never from the environment.
 * Pure: the caller passes the environment in.
 */

/** Variables passed on by exact name. */
export const HOST_ENV_NAMES: readonly string[] = ['PATH', 'TZ', 'LANG', 'LANGUAGE', 'TMPDIR', 'TMP', 'TEMP', 'NODE_OPTIONS'];

/** Variables passed on by prefix: the locale categories, and the TypeScript loaders' settings. */
export const HOST_ENV_PREFIXES: readonly string[] = ['LC_', 'TSX_', 'TS_NODE_'];

export function hostEnvironment(env: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    if (HOST_ENV_NAMES.includes(name) || HOST_ENV_PREFIXES.some((p) => name.startsWith(p))) out[name] = value;
  }
  return out;
}
