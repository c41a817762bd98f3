/** Printing helpers shared by the benchmarks: number formats, a plain-text table, the machine. */
import { cpus } from 'node:os';

/** 12345.6 → "12,346"; small values keep two significant decimals. */
export function num(n: number): string {
  if (!Number.isFinite(n)) return '-';
  if (Math.abs(n) >= 100) return Math.round(n).toLocaleString('en-US');
  return n.toFixed(2);
}

export function ratio(n: number): string {
  return Number.isFinite(n) ? `${n.toFixed(2)}x` : '-';
}

/** Left-aligns the first column, right-aligns the others. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ').trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export function machine(): { node: string; cpu: string; cores: number; platform: string } {
  const c = cpus();
  return { node: process.version, cpu: c[0]?.model ?? 'unknown', cores: c.length, platform: `${process.platform}-${process.arch}` };
}
