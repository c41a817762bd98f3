// Entry of a load runner (load.ts startLoadRunner): a worker thread or a child process that runs
// runLoad jobs sent by its parent, one message per job, and answers with the result.
// Plain JavaScript because neither a worker (on Node 20) nor a child started with no Node flags
// gets the parent's `--import tsx` loader: it registers tsx itself, then loads the TypeScript.
import { parentPort } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
const { runLoad } = await import('./load.ts');
const port = parentPort ?? {
  on: (event, fn) => process.on(event, fn),
  postMessage: (msg) => process.send(msg),
};
port.on('message', async (msg) => {
  try {
    port.postMessage({ id: msg.id, ok: true, result: await runLoad(msg.opts) });
  } catch (err) {
    port.postMessage({ id: msg.id, ok: false, error: err instanceof Error ? err.message : String(err) });
  }
});
// A child exits when its parent goes away; a worker ends when the parent terminates it.
if (!parentPort) process.on('disconnect', () => process.exit(0));
port.postMessage({ ready: true });
