/**
 * A histogram for the series observed on every request (request duration, destination latency).
 *
 * prom-client's Histogram, even through a child from `labels()`, validates the labels, hashes them
 * into a string key and looks that key up on every observation. Here a label set is resolved once
 * to a child that holds its own counts, and an observation is a bucket search over a small array
 * and three additions. It is registered in the service's prom-client Registry as a metric of its
 * own (name, help, type, get): the Registry writes the exposition exactly as for its own
 * histograms (cumulative `le` buckets, `+Inf`, `_sum`, `_count`).
 */
import type { Histogram, Registry } from 'prom-client';

export interface HistogramChild {
  observe(value: number): void;
}

class Child implements HistogramChild {
  /** Per-bucket counts (not cumulative); the last slot counts values above every bound. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    readonly labels: Record<string, string>,
    private readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

interface Sample {
  value: number;
  metricName: string;
  labels: Record<string, string | number>;
  sharedLabels: Record<string, string>;
}

export class FastHistogram<L extends string> {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly bounds: readonly number[];
  private readonly children = new Map<string, Child>();

  constructor(
    readonly config: { name: string; help: string; labelNames: readonly L[]; buckets: readonly number[]; registers: Registry[] },
  ) {
    this.bounds = [...config.buckets].sort((a, b) => a - b);
    // The Registry only needs name, help, type and get/getForPromString/reset of a metric.
    for (const r of config.registers) r.registerMetric(this as unknown as Histogram<L>);
  }

  get name(): string {
    return this.config.name;
  }

  get help(): string {
    return this.config.help;
  }

  /** The child of these label values (in labelNames order), made on first use. */
  labels(...values: string[]): HistogramChild {
    const key = values.join('\u0000');
    let child = this.children.get(key);
    if (!child) {
      const labels: Record<string, string> = {};
      this.config.labelNames.forEach((n, i) => (labels[n] = values[i] ?? ''));
      child = new Child(labels, this.bounds);
      this.children.set(key, child);
    }
    return child;
  }

  /** Samples with the child's labels apart (as prom-client's histogram gives them to the Registry). */
  async getForPromString(): Promise<{ name: string; help: string; type: string; aggregator: string; values: Sample[] }> {
    const bucket = `${this.name}_bucket`;
    const values: Sample[] = [];
    for (const child of this.children.values()) {
      let acc = 0;
      for (let i = 0; i < this.bounds.length; i++) {
        acc += child.counts[i]!;
        values.push({ value: acc, metricName: bucket, labels: { le: this.bounds[i]! }, sharedLabels: child.labels });
      }
      values.push(
        { value: child.count, metricName: bucket, labels: { le: '+Inf' }, sharedLabels: child.labels },
        { value: child.sum, metricName: `${this.name}_sum`, labels: {}, sharedLabels: child.labels },
        { value: child.count, metricName: `${this.name}_count`, labels: {}, sharedLabels: child.labels },
      );
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** The same samples with every label on each (prom-client's `get`, used by getMetricsAsJSON). */
  async get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: Array<{ value: number; metricName: string; labels: Record<string, string | number> }> }> {
    const data = await this.getForPromString();
    return { ...data, values: data.values.map(({ sharedLabels, labels, ...rest }) => ({ ...rest, labels: { ...labels, ...sharedLabels } })) };
  }

  /** Zeroes every child in place: the children callers hold stay the ones exported. */
  reset(): void {
    for (const child of this.children.values()) {
      child.counts.fill(0);
      child.sum = 0;
      child.count = 0;
    }
  }
}
