/** The CLI: a bad config stops start-up with exit code 1 and names each bad path; a Redis store needs a master key. */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli, writeConfig } from '../helpers/process.js';
import { randomMarker } from '../helpers/secrets.js';

const dir = mkdtempSync(join(tmpdir(), 'tp-cli-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

t.test('a bad permission: exit 1, the path named', async (t) => {
  // A key drawn per run: the scan of the output can only match if the key was printed.
  const key = randomMarker('cli_key');
  const path = writeConfig(dir, {
    tenants: [{ id: '7f1c6b3e-0d2a-4c59-9a4e-3b8d2f6a1c10', name: 'x', applications: [
      { id: '0b7d5c2a-9e41-4f3b-8c6d-1a2b3c4d5e6f', name: 'a', type: 'private', keys: [key], permissions: ['token:craete'] },
    ] }],
  }, 'bad.json');
  const r = await runCli(['--config', path]);
  t.equal(r.code, 1);
  t.match(r.output, 'tenants[0].applications[0].permissions[0]: unknown permission "token:craete"');
  t.notOk(r.output.includes(key), 'the key is not printed');
});

t.test('TOKENPROXY_CONFIG names the file', async (t) => {
  const path = writeConfig(dir, { server: { port: 'eighty' } }, 'env.json');
  const r = await runCli([], { TOKENPROXY_CONFIG: path });
  t.equal(r.code, 1);
  t.match(r.output, 'server.port:');
});

t.test('a Redis store without a master key refuses to start', async (t) => {
  const path = writeConfig(dir, { server: { port: 0 }, store: { kind: 'redis', url: 'redis://127.0.0.1:1' } }, 'redis.json');
  const r = await runCli(['--config', path]);
  t.equal(r.code, 1);
  t.match(r.output, /master key is required/i);
});
