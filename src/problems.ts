/**
 * What a compile step returns: its compiled value, or the problems
 * that kept it from being built, each a line prefixed with its config path
 * (`tenants[0].proxies[1].request_transforms[0].fields[0].pointer: …`). The config loader's
 * messages and these are the lines of one ConfigError.
 */
export type Problem = string;

export type Compiled<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly problems: readonly Problem[] };

export function compiledValue<T>(value: T): Compiled<T> {
  return { ok: true, value };
}

/** The value when `problems` is empty (built only then), else the problems. */
export function compiledOr<T>(problems: readonly Problem[], build: () => T): Compiled<T> {
  return problems.length > 0 ? { ok: false, problems } : { ok: true, value: build() };
}

/** The value of `c`, or undefined after adding its problems to `into`. */
export function take<T>(c: Compiled<T>, into: Problem[]): T | undefined {
  if (c.ok) return c.value;
  into.push(...c.problems);
  return undefined;
}
