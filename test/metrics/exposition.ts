/**
 * A strict parser of the Prometheus text exposition format (version 0.0.4), for the metrics tests
 * (not a test file). It throws on anything a scraper would reject or that hides a bug: a sample
 * before its family's TYPE, a family declared twice, a bad metric or label name, a bad escape in
 * a label value, an unparsable value, a repeated series, a histogram without its +Inf bucket or
 * whose buckets decrease, or whose +Inf bucket differs from its _count.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  type: MetricType;
  help: string;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseValue(text: string, line: string): number {
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  // Prometheus reads values with Go's strconv.ParseFloat, which takes NaN in any case; prom-client
  // writes `Nan` (e.g. nodejs_eventloop_lag_mean_seconds when no delay was sampled since the last
  // scrape), so that spelling is accepted too, and nothing else.
  if (text === 'NaN' || text === 'Nan') return NaN;
  if (!/^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$/.test(text)) throw new Error(`bad value ${JSON.stringify(text)} in: ${line}`);
  return Number(text);
}

/** `{a="x",b="y\"z"}` at `s[i]`: the labels and the index after `}`. */
function parseLabels(s: string, i: number, line: string): { labels: Record<string, string>; end: number } {
  const labels: Record<string, string> = {};
  i++; // {
  for (;;) {
    if (s[i] === '}') return { labels, end: i + 1 };
    const eq = s.indexOf('=', i);
    if (eq < 0) throw new Error(`bad labels in: ${line}`);
    const name = s.slice(i, eq);
    if (!LABEL_NAME.test(name)) throw new Error(`bad label name ${JSON.stringify(name)} in: ${line}`);
    if (name in labels) throw new Error(`label ${name} repeated in: ${line}`);
    if (s[eq + 1] !== '"') throw new Error(`label value not quoted in: ${line}`);
    let j = eq + 2;
    let value = '';
    for (;;) {
      const c = s[j];
      if (c === undefined) throw new Error(`unterminated label value in: ${line}`);
      if (c === '"') break;
      if (c === '\\') {
        const n = s[j + 1];
        if (n === '\\') value += '\\';
        else if (n === '"') value += '"';
        else if (n === 'n') value += '\n';
        else throw new Error(`bad escape in: ${line}`);
        j += 2;
        continue;
      }
      value += c;
      j++;
    }
    labels[name] = value;
    i = j + 1;
    if (s[i] === ',') i++;
    else if (s[i] !== '}') throw new Error(`expected , or } in: ${line}`);
  }
}

/** The family a sample name belongs to (histogram and summary samples carry suffixes). */
function familyOf(families: Map<string, Family>, name: string): Family | undefined {
  const direct = families.get(name);
  if (direct) return direct;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!name.endsWith(suffix)) continue;
    const f = families.get(name.slice(0, -suffix.length));
    if (f && (f.type === 'histogram' || (f.type === 'summary' && suffix !== '_bucket'))) return f;
  }
  return undefined;
}

export function parseExposition(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const seen = new Set<string>();
  if (text !== '' && !text.endsWith('\n')) throw new Error('the exposition must end with a newline');
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (!m) continue; // a plain comment
      const [, kind, name, rest] = m as unknown as [string, string, string, string];
      if (!METRIC_NAME.test(name)) throw new Error(`bad metric name in: ${line}`);
      let f = families.get(name);
      if (kind === 'TYPE') {
        if (!TYPES.has(rest)) throw new Error(`bad type in: ${line}`);
        if (f && f.samples.length > 0) throw new Error(`TYPE after samples in: ${line}`);
        if (f && f.type !== 'untyped') throw new Error(`TYPE repeated in: ${line}`);
        if (!f) families.set(name, (f = { name, type: rest as MetricType, help: '', samples: [] }));
        else f.type = rest as MetricType;
      } else {
        if (f && f.help !== '') throw new Error(`HELP repeated in: ${line}`);
        if (!f) families.set(name, (f = { name, type: 'untyped', help: rest, samples: [] }));
        else f.help = rest;
      }
      continue;
    }
    const nameEnd = line.search(/[{ ]/);
    if (nameEnd <= 0) throw new Error(`bad sample line: ${line}`);
    const name = line.slice(0, nameEnd);
    if (!METRIC_NAME.test(name)) throw new Error(`bad metric name in: ${line}`);
    let labels: Record<string, string> = {};
    let i = nameEnd;
    if (line[i] === '{') ({ labels, end: i } = parseLabels(line, i, line));
    if (line[i] !== ' ') throw new Error(`expected a space before the value in: ${line}`);
    const parts = line.slice(i + 1).split(' ');
    if (parts.length > 2) throw new Error(`extra fields in: ${line}`);
    const value = parseValue(parts[0]!, line);
    if (parts[1] !== undefined && !/^-?\d+$/.test(parts[1])) throw new Error(`bad timestamp in: ${line}`);
    const f = familyOf(families, name);
    if (!f) throw new Error(`sample of an undeclared family: ${line}`);
    const series = name + JSON.stringify(Object.entries(labels).sort(([a], [b]) => a.localeCompare(b)));
    if (seen.has(series)) throw new Error(`series repeated: ${line}`);
    seen.add(series);
    f.samples.push({ name, labels, value });
  }
  for (const f of families.values()) if (f.type === 'histogram') checkHistogram(f);
  return families;
}

function checkHistogram(f: Family): void {
  const groups = new Map<string, { buckets: Array<[number, number]>; count?: number }>();
  const keyOf = (labels: Record<string, string>) => JSON.stringify(Object.entries(labels).filter(([k]) => k !== 'le').sort(([a], [b]) => a.localeCompare(b)));
  for (const s of f.samples) {
    const g = groups.get(keyOf(s.labels)) ?? { buckets: [] };
    groups.set(keyOf(s.labels), g);
    if (s.name.endsWith('_bucket')) {
      if (s.labels.le === undefined) throw new Error(`${f.name}: bucket without le`);
      g.buckets.push([parseValue(s.labels.le, s.name), s.value]);
    } else if (s.name.endsWith('_count')) g.count = s.value;
  }
  for (const [key, g] of groups) {
    const sorted = [...g.buckets].sort((a, b) => a[0] - b[0]);
    if (sorted.at(-1)?.[0] !== Infinity) throw new Error(`${f.name}${key}: no +Inf bucket`);
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i]![1] < sorted[i - 1]![1]) throw new Error(`${f.name}${key}: buckets decrease`);
    }
    if (g.count !== sorted.at(-1)![1]) throw new Error(`${f.name}${key}: _count differs from the +Inf bucket`);
  }
}

/** Sum of the samples named `name` whose labels include `labels` (0 when none). */
export function sampleValue(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number {
  const f = familyOf(families, name);
  if (!f) return 0;
  let sum = 0;
  for (const s of f.samples) {
    if (s.name !== name) continue;
    if (Object.entries(labels).every(([k, v]) => s.labels[k] === v)) sum += s.value;
  }
  return sum;
}
