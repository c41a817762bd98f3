/**
 * The original hosted service's own Node SDK (@basis-theory/node-sdk, a dev dependency), pointed
 * at a tokenproxy under test. A team moving over keeps its client code and changes two things:
 * the base URL, and the header prefix (`BT-` becomes `SVC-`). The SDK takes a `fetcher`; ours
 * renames the headers and hands the call to the SDK's own fetcher, so what goes over the wire is
 * exactly what the SDK builds (its query serialisation, bodies, retries), with only the prefix
 * changed. The SDK does not export its fetcher, so it is loaded from the package's own files.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { BasisTheoryClient } from '@basis-theory/node-sdk';

type FetchFunction = NonNullable<BasisTheoryClient.Options['fetcher']>;
type Args = Parameters<FetchFunction>[0];

const require = createRequire(import.meta.url);
const sdkDir = dirname(require.resolve('@basis-theory/node-sdk'));
const { fetcher: sdkFetcher } = require(join(sdkDir, 'core', 'index.js')) as { fetcher: FetchFunction };

/** Every request the SDK made through this client: method and URL (for assertions on paging). */
export interface SdkClient {
  client: BasisTheoryClient;
  requests: Array<{ method: string; url: string }>;
}

function renamed(headers: Args['headers']): Args['headers'] {
  if (!headers) return headers;
  const out: NonNullable<Args['headers']> = {};
  for (const [name, value] of Object.entries(headers)) out[/^bt-/i.test(name) ? `SVC-${name.slice(3)}` : name] = value;
  return out;
}

export function sdkClient(baseUrl: string, apiKey: string): SdkClient {
  const requests: SdkClient['requests'] = [];
  const fetcher: FetchFunction = (args) => {
    requests.push({ method: args.method, url: args.url });
    return sdkFetcher({ ...args, headers: renamed(args.headers), maxRetries: 0 });
  };
  // maxRetries 0: a test must see the first answer, not a retried one.
  const client = new BasisTheoryClient({ baseUrl, apiKey, fetcher, maxRetries: 0, timeoutInSeconds: 30 });
  return { client, requests };
}
