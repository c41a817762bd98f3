/**
 * The reactor host: a child process (started by ReactorRuntime with `child_process.fork`) that
 * owns every isolate. It is the only module that loads isolated-vm.
 *
 * Why a process of its own: on isolated-vm 5.0.4 some memory bombs (unbounded object-property,
 * Map or Set growth; `new Array(1e8).fill()`) end in the "catastrophic out-of-memory" path despite
 * `memoryLimit`. Measured: isolated-vm calls onCatastrophicError, then the isolate's thread never
 * finishes ("Script failed to terminate") and the call hangs for ever. The isolated-vm README says
 * to end the process then, so the host kills itself at once; the main process fails the calls in
 * flight with a 503 and starts a fresh host (src/reactors/runtime.ts).
 */
import { ReactorCodeError } from './isolate.js';
import { loadIsolatedVm } from './ivm.js';
import { ReactorPool, type PoolEvents } from './pool.js';
import { EXIT_NO_ISOLATED_VM, parseToHost, type FromHost, type HostOptions, type HostReactorDef } from './protocol.js';

const live = new Map<string, ReactorPool>();
const staged = new Map<string, ReactorPool>();
let options: HostOptions = { idleMs: 10_000 };
let dying = false;

function send(msg: FromHost, then?: () => void): void {
  if (!process.connected || !process.send) return then?.();
  try {
    process.send(msg, undefined, {}, () => then?.());
  } catch {
    then?.();
  }
}

const events: PoolEvents = {
  onCatastrophicError(key, message) {
    if (dying) return;
    dying = true;
    // Tell the main process which reactor did it, then go: waiting for the stuck isolate thread
    // (or for process.exit's teardown, which joins it) would hang this process for ever.
    const die = (): void => void process.kill(process.pid, 'SIGKILL');
    setTimeout(die, 200);
    send({ t: 'fatal', reactor: key, message: message.slice(0, 200) }, die);
  },
  log(level, msg, reactor) {
    send({ t: 'log', level, msg, reactor });
  },
};

async function register(id: number, def: HostReactorDef): Promise<void> {
  staged.get(def.key)?.close();
  staged.delete(def.key);
  const pool = new ReactorPool(def, options.idleMs, events);
  try {
    await pool.init();
    staged.set(def.key, pool);
    send({ t: 'ack', id });
  } catch (err) {
    pool.close();
    const why = err instanceof ReactorCodeError ? err.message : `could not be started: ${err instanceof Error ? err.message : String(err)}`;
    send({ t: 'ack', id, error: why });
  }
}

function commit(keys: string[]): void {
  for (const key of keys) {
    const pool = staged.get(key);
    if (!pool) continue;
    staged.delete(key);
    live.get(key)?.close();
    live.set(key, pool);
  }
}

function discard(keys: string[]): void {
  for (const key of keys) {
    staged.get(key)?.close();
    staged.delete(key);
  }
}

function remove(keys: string[]): void {
  for (const key of keys) {
    live.get(key)?.close();
    live.delete(key);
  }
}

async function invoke(id: number, key: string, args: string): Promise<void> {
  const pool = live.get(key);
  if (!pool) return send({ t: 'done', id, result: { ok: false, failure: { kind: 'unknown_reactor' }, logs: [] } });
  const { result, served } = await pool.invokeServed(args);
  // A host ending itself (onCatastrophicError) answers nothing more: its calls get 503.
  if (dying) return;
  send(served ? { t: 'done', id, result, served } : { t: 'done', id, result });
}

function onMessage(raw: unknown): void {
  const msg = parseToHost(raw);
  if (!msg) {
    send({ t: 'log', level: 'warn', msg: 'reactor host dropped a malformed message' });
    return;
  }
  switch (msg.t) {
    case 'init':
      options = msg.options;
      return;
    case 'register':
      void register(msg.id, msg.def);
      return;
    case 'commit':
      commit(msg.keys);
      send({ t: 'ack', id: msg.id });
      return;
    case 'discard':
      discard(msg.keys);
      send({ t: 'ack', id: msg.id });
      return;
    case 'remove':
      remove(msg.keys);
      send({ t: 'ack', id: msg.id });
      return;
    case 'invoke':
      void invoke(msg.id, msg.key, msg.args);
      return;
    case 'ping':
      send({ t: 'ack', id: msg.id });
      return;
  }
}

/** Loads isolated-vm before saying ready: a host that cannot run a reactor says why and exits. */
function isolatedVmLoads(): boolean {
  try {
    loadIsolatedVm();
    return true;
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`, () => process.exit(EXIT_NO_ISOLATED_VM));
    return false;
  }
}

if (process.send && isolatedVmLoads()) {
  // a terminal's Ctrl-C, `timeout` or a service manager signals the whole process group,
  // this host with it. The main process stops it (it disconnects, below) once its requests in
  // flight are done; dying on the signal itself cut those calls and read as a crash to restart.
  // A main process that dies outright (even kill -9) disconnects too: the kernel closes its end
  // of the IPC channel, so the host never outlives it.
  process.on('SIGINT', () => undefined);
  process.on('SIGTERM', () => undefined);
  process.on('message', onMessage);
  // The main process is gone (or closed us): nothing left to serve, and nothing to keep (the
  // isolates hold only memory; every call's caller is gone). Ended with SIGKILL rather than
  // process.exit: exit's teardown disposes the isolates and waits for their threads, measured
  // 65-210 ms after the disconnect with reactor calls running on a loaded 2-core machine,
  // against 4-36 ms this way. Nobody waits for this exit code: the main process is gone, or it
  // is stopping and ignores how its host ends.
  process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));
  send({ t: 'ready' });
}
