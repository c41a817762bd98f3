/**
 * Live reload (SIGHUP, `tokenproxy reload`): the config file is read and checked again; a valid
 * file is compiled into a new model, its changed reactors and code transforms are compiled in the
 * reactor host, and the model is swapped; an invalid file changes nothing and every problem is
 * logged. Settings that only apply at start (src/config/live.ts) are logged as needing a restart
 * and keep their running value. The data keys are reloaded too (a key another instance or
 * `tokenproxy rotate-data-key` added), and also every `store.data_key_refresh_seconds`.
 */
import { ConfigError, readConfigFile } from '../config/load.js';
import { applyLive } from '../config/live.js';
import type { KeyRing } from '../crypto/keyring.js';
import { errorFields, type Logger } from '../log.js';
import type { ReactorMetrics } from '../reactors/metrics.js';
import { publishedKeyRefusal } from '../production.js';
import { ReactorRuntime, type ReactorDefinition, type ReactorRuntimeOptions } from '../reactors/runtime.js';
import { compile, type Model, type ModelRef } from './compile.js';

export interface ReloadOutcome {
  /** The new model is in use. */
  applied: boolean;
  /** Why the file was refused (empty when applied). */
  problems: string[];
  /** Settings changed in the file that apply only after a restart. */
  restartNeeded: string[];
}

/** How the reactor host process is started: its entry, node flags and program (the defaults run this node on host.js/host.ts). */
export type ReactorHostOptions = Pick<ReactorRuntimeOptions, 'hostPath' | 'execArgv' | 'execPath'>;

/**
 * The reactor host's side of the model: starts the host when the first reactor or code transform
 * appears, and compiles the definitions that are new or changed.
 */
export class ReactorHostSync {
  runtime: ReactorRuntime | null = null;
  readonly #registered = new Map<string, string>();

  constructor(
    private readonly log: Logger,
    private readonly payloadLimitBytes: number,
    private readonly metrics?: ReactorMetrics,
    private readonly host: ReactorHostOptions = {},
  ) {}

  /** All or nothing: rejects with the reactors that failed to compile, and nothing changes. */
  async sync(defs: readonly ReactorDefinition[]): Promise<void> {
    const changed = defs.filter((d) => this.#registered.get(d.key) !== JSON.stringify(d));
    if (changed.length === 0) return;
    this.runtime ??= await ReactorRuntime.start({ log: this.log, payloadLimitBytes: this.payloadLimitBytes, metrics: this.metrics, ...this.host });
    await this.runtime.register(changed);
    for (const d of changed) this.#registered.set(d.key, JSON.stringify(d));
  }

  /**
   * Disposes the reactors that are no longer in `defs` (the model in use); called once no request
   * of an older model is in flight, so none of them is still running a removed reactor.
   */
  async prune(defs: readonly ReactorDefinition[]): Promise<void> {
    const keep = new Set(defs.map((d) => d.key));
    const gone = [...this.#registered.keys()].filter((k) => !keep.has(k));
    if (gone.length === 0 || !this.runtime) return;
    for (const k of gone) this.#registered.delete(k);
    await this.runtime.unregister(gone);
    this.log.info({ reactors: gone }, 'reactors removed from the configuration were disposed');
  }

  close(): Promise<void> | undefined {
    return this.runtime?.close();
  }
}

/** Reloads the ring every `seconds` (0: never); returns the stop function. */
export function startKeyRefresh(ring: KeyRing, seconds: number, log: Logger): () => void {
  if (seconds <= 0) return () => undefined;
  const timer = setInterval(() => {
    ring.refresh().catch((err: unknown) => log.warn({ error: errorFields(err) }, 'data key refresh failed; will retry'));
  }, seconds * 1000);
  timer.unref();
  return () => clearInterval(timer);
}

/** Problem lines of a failure to register reactors ("reactors failed to register:\n  a\n  b"). */
function reactorProblems(err: unknown): string[] {
  const lines = (err instanceof Error ? err.message : String(err)).split('\n').map((l) => l.trim()).filter(Boolean);
  return lines.length > 1 ? lines.slice(1) : lines;
}

export class Reloader {
  #chain: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly log: Logger,
    private readonly ring: KeyRing,
    private readonly reactors: ReactorHostSync,
    private readonly live: ModelRef,
    /** Puts the model in service (builds what serves it); called after `live.current` is set. */
    private readonly swap: (model: Model) => void,
  ) {}

  /** One reload at a time: a second SIGHUP waits for the first. */
  reload(): Promise<ReloadOutcome> {
    const run = this.#chain.then(() => this.#reload());
    this.#chain = run.catch(() => undefined);
    return run;
  }

  async #reload(): Promise<ReloadOutcome> {
    const running = this.live.current.config;
    const refused = (problems: string[]): ReloadOutcome => {
      this.log.error({ config: running.source, problems }, 'reload refused: the config file has problems; the running configuration is kept');
      return { applied: false, problems, restartNeeded: [] };
    };
    if (!running.source) return refused(['the service was started without a config file']);
    let model: Model;
    let restartNeeded: string[];
    try {
      // One compile: the file's live settings over the running ones, compiled once; the
      // loader's problems with the file and the compiler's are refused together.
      const read = readConfigFile({ path: running.source });
      const applied = applyLive(running, read.config);
      const compiled = compile(applied.config);
      const problems = [...read.problems, ...(Array.isArray(compiled) ? compiled : [])];
      if (problems.length > 0 || Array.isArray(compiled)) throw new ConfigError(problems);
      // production mode refuses the published development keys at a reload as at start.
      const published = applied.config.server.mode === 'production' ? publishedKeyRefusal(applied.config) : null;
      if (published) throw new ConfigError([`production mode: ${published}`]);
      restartNeeded = applied.restartNeeded;
      model = compiled;
    } catch (err) {
      if (err instanceof ConfigError) return refused(err.problems);
      throw err;
    }
    try {
      await this.reactors.sync(model.reactors);
    } catch (err) {
      return refused(reactorProblems(err));
    }
    this.live.current = model;
    this.swap(model);
    for (const setting of restartNeeded) {
      this.log.warn({ setting }, 'reload: this setting changed in the config file but applies only after a restart; the running value is kept');
    }
    await this.ring.refresh().catch((err: unknown) => this.log.warn({ error: errorFields(err) }, 'data key refresh failed on reload'));
    const t = model.config.tenants;
    this.log.info(
      { config: running.source, tenants: t.length, proxies: model.proxies.size, reactors: model.reactors.length, restart_needed: restartNeeded },
      'configuration reloaded',
    );
    return { applied: true, problems: [], restartNeeded };
  }
}
