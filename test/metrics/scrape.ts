/** Scraping GET /metrics over real HTTP for the metrics tests (not a test file). */
import { parseExposition, sampleValue, type Family } from './exposition.js';

export interface Scrape {
  text: string;
  families: Map<string, Family>;
  value(name: string, labels?: Record<string, string>): number;
}

/** GET {base}/metrics, asserting a 200 in the exposition content type; parses strictly. */
export async function scrape(base: string, token?: string): Promise<Scrape> {
  const res = await fetch(`${base}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`GET /metrics answered ${res.status}: ${text.slice(0, 300)}`);
  const type = res.headers.get('content-type') ?? '';
  if (!type.startsWith('text/plain') || !type.includes('version=0.0.4')) throw new Error(`unexpected content type ${type}`);
  const families = parseExposition(text);
  return { text, families, value: (name, labels) => sampleValue(families, name, labels) };
}
