/**
 * Loads isolated-vm for the reactor host (host process only; the main process never imports this).
 *
 * No single isolated-vm release builds on every Node line we support: 5.0.4 builds on Node 20 and
 * 22 but not against Node 24's V8; 6.2 builds on 22 and 24 but not on 20. package.json therefore
 * lists both as optional dependencies, 6.2 under its own name and 5.0.4 under the npm alias
 * `isolated-vm-v5`: npm drops an optional package whose native build fails instead of failing the
 * install, so one lockfile installs on 20, 22 and 24, and here we take whichever one built
 * (6.x first). When neither loads, the host exits with EXIT_NO_ISOLATED_VM (protocol.ts) and says
 * why on stderr.
 *
 * Because either package may be absent, the types below are our own: the small part of
 * isolated-vm's API the host uses (the same in 5.0.4 and 6.2).
 */
import { createRequire } from 'node:module';

/** The packages tried, in order. */
export const ISOLATED_VM_PACKAGES = ['isolated-vm', 'isolated-vm-v5'] as const;

export interface ExternalCopy {
  release(): void;
}

export interface CachedDataResult {
  cachedData?: ExternalCopy;
}

interface TransferResult {
  timeout?: number;
  reference?: boolean;
  release?: boolean;
  result?: { reference?: boolean; copy?: boolean; promise?: boolean };
}

export interface Reference {
  get(property: string, options: { reference: true }): Promise<Reference>;
  apply(receiver: undefined, args: unknown[], options?: TransferResult): Promise<unknown>;
  release(): void;
}

export interface Context {
  evalClosure(code: string, args: unknown[], options: TransferResult): Promise<Reference>;
  eval(code: string, options: TransferResult): Promise<unknown>;
  release(): void;
}

export interface Script extends CachedDataResult {
  run(context: Context, options: TransferResult): Promise<unknown>;
}

export interface Isolate {
  readonly isDisposed: boolean;
  createContext(): Promise<Context>;
  compileScript(code: string, options: { filename?: string; cachedData?: ExternalCopy; produceCachedData?: boolean }): Promise<Script>;
  dispose(): void;
}

export interface IsolatedVm {
  Isolate: new (options: { memoryLimit: number; onCatastrophicError?: (message: string) => void }) => Isolate;
}

export class IsolatedVmUnavailableError extends Error {
  override name = 'IsolatedVmUnavailableError';
}

/** The first of `packages` that loads, with its name and version. */
export function loadIsolatedVm(packages: readonly string[] = ISOLATED_VM_PACKAGES): { ivm: IsolatedVm; name: string; version: string } {
  const require = createRequire(import.meta.url);
  const failures: string[] = [];
  for (const name of packages) {
    try {
      const ivm = require(name) as IsolatedVm;
      const { version } = require(`${name}/package.json`) as { version: string };
      return { ivm, name, version };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      failures.push(`${name}: ${code === 'MODULE_NOT_FOUND' ? 'not installed (its native build failed or was skipped)' : (err as Error).message.split('\n')[0]}`);
    }
  }
  throw new IsolatedVmUnavailableError(
    `no isolated-vm build loads on Node ${process.version}, so reactors and code transforms cannot run. ` +
      `isolated-vm 6.2 supports Node 22 and 24, isolated-vm 5.0.4 (installed as isolated-vm-v5) Node 20 and 22. ` +
      `Use one of those Node versions, make sure python3, make and g++ are installed, and run npm install again ` +
      `(npm install --foreground-scripts shows the native build's error). Tried: ${failures.join('; ')}`,
  );
}
