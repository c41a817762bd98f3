/**
 * For tests of `server.workers > 1` (a real CLI process, via startChild): requests on
 * a fresh connection each (the primary hands new connections to the workers in turn, so a run of
 * them reaches every worker), and what the process's stdout says about its workers.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Client } from 'undici';
import { startChild, writeConfig, type ChildService } from './process.js';
import { waitFor } from './wait.js';

interface Tap {
  teardown(fn: () => unknown): void;
}

/**
 * The CLI with `server.workers: 2` and the given config (an embedded store in a temporary
 * directory unless it names a store). Each of the three processes loads the service on its own
 * (the TypeScript sources, under the test's loader, when dist/ is stale: cli-entry.ts), which
 * takes a while on a loaded machine: hence the long start time allowed.
 */
export async function startCluster(t: Tap, config: Record<string, unknown>): Promise<ChildService> {
  const dir = mkdtempSync(join(tmpdir(), 'tp-workers-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const server = { ...(config.server as Record<string, unknown>), workers: 2 };
  const store = (config.store as Record<string, unknown> | undefined) ?? { kind: 'embedded', path: join(dir, 'tokens.db') };
  const path = writeConfig(dir, { ...config, server, store });
  const child = await startChild(path, { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') }, 240_000);
  t.teardown(() => (child.child.exitCode === null && child.child.signalCode === null ? child.kill9() : undefined));
  // The primary announces the port once both listen; their own lines come through it a moment later.
  await waitFor(() => workerPids(child.output()).length === 2, { what: 'both workers\' "worker listening" lines' });
  return child;
}

export interface Answer {
  status: number;
  body: any;
  /** The request id the answer carries (svc-trace-id), which its access line names as req_id. */
  reqId: string;
}

/** One request on a connection of its own, closed after the answer. */
export async function onNewConnection(url: string, method: string, path: string, o: { key?: string; body?: unknown } = {}): Promise<Answer> {
  // 60 s, not undici's 300: a connection the primary handed to a worker just as it was killed
  // can stay open unanswered (seen in the SIGKILL test); it should fail, not hold the test.
  const client = new Client(url, { pipelining: 0, headersTimeout: 60_000, bodyTimeout: 60_000 });
  try {
    const headers: Record<string, string> = {};
    if (o.key !== undefined) headers['svc-api-key'] = o.key;
    if (o.body !== undefined) headers['content-type'] = 'application/json';
    const res = await client.request({ method: method as 'GET', path, headers, body: o.body === undefined ? undefined : JSON.stringify(o.body) });
    const text = await res.body.text();
    return { status: res.statusCode, body: text ? JSON.parse(text) : undefined, reqId: String(res.headers['svc-trace-id']) };
  } finally {
    await client.close();
  }
}

/**
 * Every log line parsed; throws naming the first one that is not one whole JSON object (a line cut
 * or two joined); a last line without its newline yet is left out. The output holds stderr too: Node's warnings there are not log lines.
 */
export function logLines(output: string): Record<string, any>[] {
  const lines: Record<string, any>[] = [];
  const parts = output.split('\n');
  parts.pop(); // '' after the last newline, or a line still arriving
  for (const l of parts) {
    if (!l.startsWith('{') && !l.includes('"level":')) continue;
    try {
      lines.push(JSON.parse(l) as Record<string, any>);
    } catch {
      throw new Error(`not one whole log line: ${l.slice(0, 200)}`);
    }
  }
  return lines;
}

/** The pids of the workers that said 'worker listening', in order. */
export function workerPids(output: string): number[] {
  return logLines(output).filter((l) => l.msg === 'worker listening').map((l) => l.pid as number);
}

/** The pid of the worker whose access line names `reqId` (waits for the line to reach stdout). */
export function servedBy(output: () => string, reqId: string): Promise<number> {
  return waitFor(
    () => logLines(output()).find((l) => l.msg === 'request' && l.req_id === reqId)?.pid as number | undefined,
    { what: `the access line of ${reqId}` },
  );
}

/** Whether a process is still running. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
