/**
 * A private CA and a server certificate for `localhost` / 127.0.0.1, made with openssl in a temp
 * directory at test time (node:crypto cannot issue X.509 certificates). Nothing is committed; the
 * directory goes at teardown. Callers skip without openssl (`opensslSkip`), or fail under
 * TOKENPROXY_REQUIRE_REDIS=1.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestCa {
  dir: string;
  /** PEM file of the CA certificate (for `tls.ca_file`). */
  caFile: string;
  /** The server's key and certificate (signed by the CA), PEM. */
  key: string;
  cert: string;
}

interface Tap {
  teardown(fn: () => unknown): void;
}

export function opensslAvailable(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * The reason to skip a test that needs openssl, or false to run it. Under TOKENPROXY_REQUIRE_REDIS=1
 * (set by CI, which must run every test) a missing openssl is a failure, as a missing redis-server
 * is (issue 30: the https tests were skipped silently).
 */
export function opensslSkip(): string | false {
  if (opensslAvailable()) return false;
  if (process.env.TOKENPROXY_REQUIRE_REDIS === '1') throw new Error('openssl is required (TOKENPROXY_REQUIRE_REDIS=1) but not installed');
  return 'openssl is not installed';
}

export function makeTestCa(t: Tap): TestCa {
  const dir = mkdtempSync(join(tmpdir(), 'tp-ca-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  run(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=tokenproxy test CA']);
  run(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost']);
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n');
  run(['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '1', '-extfile', 'ext.cnf']);
  return {
    dir,
    caFile: join(dir, 'ca.pem'),
    key: readFileSync(join(dir, 'server.key'), 'utf8'),
    cert: readFileSync(join(dir, 'server.pem'), 'utf8'),
  };
}
