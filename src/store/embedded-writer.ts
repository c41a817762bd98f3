/**
 * The embedded store's writer thread (started by EmbeddedStore in embedded.ts): owns a second
 * connection to the SQLite file and runs every write, so commits and their fsyncs never block the
 * main thread's event loop. Every message received before the next setImmediate is committed in
 * one transaction (group commit); the answers go back only after COMMIT returned.
 */
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { describeError, openConnection, writeExecutor, type WriterReply, type WriterRequest } from './embedded.js';

if (!parentPort) throw new Error('embedded-writer.ts runs as a worker thread of EmbeddedStore');
const port: MessagePort = parentPort;
const { path } = workerData as { path: string };
const db = openConnection(path);
const execute = writeExecutor(db);

let queue: WriterRequest['ops'] = [];
let scheduled = false;
let closing = false;

port.on('message', (m: WriterRequest) => {
  queue.push(...m.ops);
  if (m.close) closing = true;
  if (!scheduled) {
    scheduled = true;
    setImmediate(drain);
  }
});

function drain(): void {
  scheduled = false;
  const ops = queue;
  queue = [];
  if (ops.length > 0) {
    const results = execute(ops.map((o) => o.op));
    const reply: WriterReply = {
      results: results.map((r, i) => (r.ok ? { id: ops[i].id, ok: true, value: r.value } : { id: ops[i].id, ok: false, error: describeError(r.error) })),
    };
    port.postMessage(reply);
  }
  if (closing) {
    db.close();
    // Nothing keeps this thread alive now: it exits once the answers above are delivered.
    port.close();
  }
}
