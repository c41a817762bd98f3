/**
 * SIGHUP from the first instruction of the process (a reload signal is never lost or
 * fatal). main.ts calls holdSighup before it loads anything else, so a SIGHUP that arrives while
 * the service loads its modules, reads its config or opens its store is counted instead of ending
 * the process (SIGHUP's default action); whoever serves reloads takes the count with onSighup
 * and applies a reload once it has started. This module imports nothing: it must load at once.
 */
let count = 0;
let installed = false;
let listener: (() => void) | null = null;

/** Counts SIGHUP from now on (idempotent). */
export function holdSighup(): void {
  if (installed) return;
  installed = true;
  process.on('SIGHUP', () => {
    count++;
    listener?.();
  });
}

/** Every later SIGHUP calls `fn`; returns how many arrived before (each one already counted). */
export function onSighup(fn: () => void): number {
  holdSighup();
  listener = fn;
  return count;
}
