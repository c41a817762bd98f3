/**
 * Large JSON bodies of the tokenize routes are parsed, walked and answered in a worker thread.
 *
 * JSON.parse, the walk and JSON.stringify are each linear, but on a 5 MB body of 600,000 members
 * or 1.7 M empty arrays each takes hundreds of milliseconds, during which every other request
 * waits. Above LARGE_JSON_BYTES the body goes to a worker instead: it parses
 * and walks it and sends back only the walk's summary (at most 101 strings/definitions and 100
 * error fields); the vault creates the tokens as for any body; the worker then parses the bytes
 * again, puts the results in place and serializes the answer, which is written as bytes. The
 * event loop only copies bytes. One worker, started on first use: large bodies queue behind each
 * other rather than take every core.
 */
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { ServiceError } from '../errors.js';
import { PreplannedBody, type WalkSummary } from '../vault/walk.js';
import type { WorkerAnswer, WorkerTask } from './json-worker-messages.js';

/** Bodies above this size are parsed off the event loop (a worst-case 64 KB body takes a few ms). */
export const LARGE_JSON_BYTES = 64 * 1024;

type Pending = { resolve: (a: WorkerAnswer) => void; reject: (e: Error) => void };
type TaskInput = WorkerTask extends infer T ? (T extends { id: number } ? Omit<T, 'id'> : never) : never;

class JsonWorker {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;

  run(task: TaskInput): Promise<WorkerAnswer> {
    const worker = this.worker ?? this.start();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (this.pending.size === 1) worker.ref();
      worker.postMessage({ ...task, id });
    });
  }

  private start(): Worker {
    const here = fileURLToPath(import.meta.url);
    const entry = new URL(here.endsWith('.ts') ? './json-worker.ts' : './json-worker.js', import.meta.url).href;
    // From source (tests, tsx) the worker registers the TypeScript loader itself: module hooks of
    // the main thread do not reach worker threads on Node 20. From dist/ it imports plain JS.
    const code = here.endsWith('.ts')
      ? `import('tsx/esm/api').then((m) => { m.register(); return import(${JSON.stringify(entry)}); });`
      : `import(${JSON.stringify(entry)});`;
    const worker = new Worker(code, { eval: true });
    worker.unref();
    worker.on('message', (answer: WorkerAnswer) => {
      const p = this.pending.get(answer.id);
      if (!p) return;
      this.pending.delete(answer.id);
      if (this.pending.size === 0) worker.unref();
      p.resolve(answer);
    });
    const fail = (err: Error) => {
      if (this.worker === worker) this.worker = null;
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', () => fail(new Error('the JSON worker exited')));
    this.worker = worker;
    return worker;
  }
}

const shared = new JsonWorker();

function rethrow(answer: Extract<WorkerAnswer, { ok: false }>): never {
  if (!answer.error) throw new Error('the JSON worker failed');
  throw new ServiceError(answer.error.code, { detail: answer.error.detail, errors: answer.error.errors });
}

/**
 * Routes other than tokenize take small bodies (a search, a PATCH): a large one is parsed in the
 * worker too, and handed over only when it is small in values (copying a parsed value back costs
 * the event loop about what parsing it would). More values than this is 400 validation_failed.
 */
export const MAX_SMALL_BODY_VALUES = 10_000;

export async function parseElsewhere(bytes: Buffer, maxDepth: number): Promise<unknown> {
  const answer = await shared.run({ op: 'value', bytes, maxDepth, maxValues: MAX_SMALL_BODY_VALUES });
  if (!answer.ok) rethrow(answer);
  if (!('value' in answer)) throw new Error('the JSON worker answered out of turn');
  return answer.value;
}

/** The `args` of a large reactor body, as compact JSON text made in the worker (runtime.invoke takes it as is). */
export class ReactorArgsJson {
  constructor(readonly argsJson: string) {}

  static async parse(bytes: Buffer, maxDepth: number): Promise<ReactorArgsJson> {
    const answer = await shared.run({ op: 'args', bytes, maxDepth });
    if (!answer.ok) rethrow(answer);
    if (!('argsJson' in answer)) throw new Error('the JSON worker answered out of turn');
    return new ReactorArgsJson(answer.argsJson);
  }
}

/** A body parsed and walked in the worker; planTokenize and assemble (vault/walk.ts) accept it. */
export class LargeJsonBody extends PreplannedBody {
  private constructor(
    private readonly bytes: Uint8Array,
    readonly summary: WalkSummary,
    members: ReadonlyArray<'type' | 'data'>,
  ) {
    super();
    // POST /tokens checks for `type` and `data` members before planning: the body shows the ones
    // it has (the values stay in the worker's walk), so the answer names only the missing one.
    for (const m of members) Object.assign(this, { [m]: undefined });
  }

  static async parse(bytes: Buffer, maxDepth: number, now: number): Promise<LargeJsonBody> {
    const answer = await shared.run({ op: 'plan', bytes, maxDepth, now });
    if (!answer.ok) rethrow(answer);
    if (!('summary' in answer)) throw new Error('the JSON worker answered out of turn');
    return new LargeJsonBody(bytes, answer.summary, answer.members);
  }

  assembled(results: readonly unknown[]): DeferredJson {
    return new DeferredJson(this.bytes, [...results]);
  }
}

/** An answer that the worker serializes; sendJson (respond.ts) writes its bytes when ready. */
export class DeferredJson {
  constructor(
    private readonly bytes: Uint8Array,
    private readonly results: unknown[],
  ) {}

  async render(): Promise<Buffer> {
    const answer = await shared.run({ op: 'render', bytes: this.bytes, results: this.results });
    if (!answer.ok) rethrow(answer);
    if (!('json' in answer)) throw new Error('the JSON worker answered out of turn');
    return Buffer.from(answer.json.buffer, answer.json.byteOffset, answer.json.byteLength);
  }
}
