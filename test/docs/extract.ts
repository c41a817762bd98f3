/**
 * The examples of a Markdown document (issue 29): its shell blocks in order, each with the output
 * the document shows for it, and the matcher that compares a real output with that. The
 * conventions are written for authors in docs/development.md ("Examples in the docs"):
 *
 * - A ```sh or ```bash block is an example: it runs with bash, in document order.
 * - The output it must print (stdout) is the ```text or ```json block right after it (nothing but
 *   blank lines between). Without one, only its exit status (0) is checked.
 * - In a shown output, `…` stands for any text (ids, times, durations, lines left out). A ```json
 *   output is compared without the white space outside its strings, so it may be laid out for
 *   reading while the command prints one line.
 * - `<!-- docs-test: skip REASON -->` on the line before a block: not run (counted and printed).
 * - `<!-- docs-test: upstream -->` on the line before a ```text block: not the command's output
 *   but what the sample upstream (scripts/echo-upstream.mjs) printed while the last example ran.
 * - `<!-- docs-test: needs redis -->` or `needs postgres` on the line before a block: it runs
 *   against a Redis or a PostgreSQL database the test starts; `redis://127.0.0.1:6379` and
 *   `postgres://postgres@127.0.0.1:5432/tokenproxy` in it name them.
 */

export interface Example {
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  code: string;
  /** Set when the block is not run, with the reason given. */
  skip?: string;
  /** What the command prints (stdout), when the document shows it. */
  expected?: { text: string; json: boolean };
  /** What the sample upstream prints while the command runs, when the document shows it. */
  upstream?: string;
  /** A server the block needs besides the service (`needs redis`, `needs postgres`). */
  needs?: 'redis' | 'postgres';
}

interface Fence {
  line: number;
  info: string;
  body: string;
  /** The `docs-test:` marker on the line before, if any. */
  marker?: string;
  /** Index of the fence's last line (its closing fence). */
  end: number;
}

function fences(md: string): Fence[] {
  const lines = md.split('\n');
  const out: Fence[] = [];
  for (let i = 0; i < lines.length; i++) {
    // A fence may be indented (a block inside a list item); its lines lose that indentation.
    const open = /^( *)```(\S*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const indent = open[1]!;
    let j = i + 1;
    while (j < lines.length && lines[j] !== `${indent}\`\`\``) j++;
    const before = i > 0 ? /^\s*<!-- docs-test: (.+?) -->$/.exec(lines[i - 1]!) : null;
    const body = lines.slice(i + 1, j).map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l)).join('\n');
    out.push({ line: i + 1, info: open[2]!, body, marker: before?.[1], end: j });
    i = j;
  }
  return out;
}

/** Lines between two fences are blank, or hold only a docs-test marker. */
function adjacent(md: string, a: Fence, b: Fence): boolean {
  const lines = md.split('\n').slice(a.end + 1, b.line - 1);
  return lines.every((l) => l.trim() === '' || /^\s*<!-- docs-test: .+ -->$/.test(l));
}

export function examples(file: string, md: string): Example[] {
  const fs = fences(md);
  const out: Example[] = [];
  for (let k = 0; k < fs.length; k++) {
    const f = fs[k]!;
    if (f.info !== 'sh' && f.info !== 'bash') continue;
    const ex: Example = { file, line: f.line, code: f.body };
    if (f.marker?.startsWith('skip')) ex.skip = f.marker.slice(4).trim() || 'no reason given';
    if (f.marker === 'needs redis' || f.marker === 'needs postgres') ex.needs = f.marker.slice(6) as 'redis' | 'postgres';
    // The output blocks that follow: the command's, then the upstream's (either may be absent).
    for (let n = k + 1; n < fs.length && n <= k + 2; n++) {
      const o = fs[n]!;
      if (!adjacent(md, fs[n - 1]!, o) || (o.info !== 'text' && o.info !== 'json')) break;
      if (o.marker === 'upstream') ex.upstream = o.body;
      else if (ex.expected === undefined && ex.upstream === undefined) ex.expected = { text: o.body, json: o.info === 'json' };
      else break;
    }
    out.push(ex);
  }
  return out;
}

/** JSON text without the white space outside its strings (`…` stays where it is). */
export function compactJson(text: string): string {
  let out = '';
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (inString) {
      out += c;
      if (c === '\\') out += text[++i] ?? '';
      else if (c === '"') inString = false;
    } else if (c === '"') {
      inString = true;
      out += c;
    } else if (!/\s/.test(c)) out += c;
  }
  return out;
}

function normalise(text: string): string {
  return text.replace(/\r\n/g, '\n').split('\n').map((l) => l.trimEnd()).join('\n').replace(/\n+$/, '');
}

/** Whether `actual` is what `shown` shows, `…` matching any text. */
export function matches(shown: string, actual: string, json = false): boolean {
  const [s, a] = json ? [compactJson(shown), compactJson(actual)] : [normalise(shown), normalise(actual)];
  const pattern = s.split('…').map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('[\\s\\S]*?');
  return new RegExp(`^${pattern}$`).test(a);
}
