/**
 * A config file that does not parse: each problem names the file, line and column, the
 * parser's reason, and shows the line with a caret under the column, e.g.
 *
 *   /etc/tokenproxy.yaml:3:9: not valid YAML or JSON: Nested mappings are not allowed in compact mappings
 *       3 |   host: *: *
 *         |         ^
 *
 * The line goes where the rest of a ConfigError goes: stderr, and the service log when a reload
 * refuses the file. A config line may hold a secret (a key written in plaintext, a password in a
 * URL, a reactor's configuration), so only its shape is shown: indentation, `- ` and the member's
 * name before its colon as written (and a `---` or `...` line), and of the rest only YAML's punctuation, every other
 * character as `*` (one per character, so the caret still points at the right column). For the
 * same reason the parser's messages that would quote the file are cut to their fixed words.
 */
import type { YAMLError } from 'yaml';
import { positionOf } from './text-position.js';

/** At most this many parse errors are shown (the first is the cause, later ones often follow from it). */
const MAX_SHOWN = 3;
/** A longer line is shown as a window around the column. */
const MAX_LINE = 120;

const KEPT = new Set([...' \t:,[]{}"\'#']);

/** The line's shape: what is kept is described above; it has as many characters as the line. */
export function maskLine(line: string): string {
  // A document marker is structure only.
  if (/^(?:---|\.\.\.)[ \t]*$/.test(line)) return line;
  const lead = /^[ \t]*(?:-[ \t]+)*/.exec(line)![0];
  const rest = line.slice(lead.length);
  const key = /^(?:[A-Za-z0-9_.$/-]+|"[^"\\]*"|'[^']*')[ \t]*:(?=[ \t]|$)/.exec(rest)?.[0] ?? '';
  const masked = [...rest.slice(key.length)].map((c) => (KEPT.has(c) ? c : '*')).join('');
  return lead + key + masked;
}

/** The parser's message without text of the file (the messages of yaml 2.x that interpolate it). */
function reason(err: YAMLError): string {
  const m = err.message;
  if (err.code === 'MULTIPLE_DOCS') return 'the file holds more than one YAML document (a second ---); the config is one document';
  if (err.code === 'BAD_DQ_ESCAPE') return 'Invalid escape sequence in a double-quoted string';
  if (err.code === 'TAG_RESOLVE_FAILED') return 'Unresolved tag';
  if (m.startsWith('Block scalar header includes extra characters')) return 'Block scalar header includes extra characters';
  // "Unexpected ${token source} in ${flow map | flow sequence | collection}": a one-character token is punctuation.
  const unexpected = /^Unexpected (.+) in (flow map|flow sequence|collection)$/.exec(m);
  if (unexpected && [...unexpected[1]!].length > 1) return `Unexpected text in ${unexpected[2]}`;
  return m;
}

function excerpt(text: string, offset: number): string {
  const { line, column, lineStart, lineEnd } = positionOf(text, offset);
  let chars = [...maskLine(text.slice(lineStart, lineEnd))];
  let caret = column - 1;
  if (chars.length > MAX_LINE) {
    const start = Math.max(0, Math.min(caret - MAX_LINE / 2, chars.length - MAX_LINE));
    const window = chars.slice(start, start + MAX_LINE);
    chars = [...(start > 0 ? ['…'] : []), ...window, ...(start + MAX_LINE < chars.length ? ['…'] : [])];
    caret = caret - start + (start > 0 ? 1 : 0);
  }
  // Tabs stay tabs under the line, so the caret lines up in a terminal whatever its tab width.
  const pad = Array.from({ length: caret }, (_, i) => (chars[i] === '\t' ? '\t' : ' ')).join('');
  const n = String(line);
  return `    ${n} | ${chars.join('')}\n    ${' '.repeat(n.length)} | ${pad}^`;
}

/** One problem per parse error (at most MAX_SHOWN), each with its line. */
export function yamlProblems(path: string, text: string, errors: readonly YAMLError[]): string[] {
  return errors.slice(0, MAX_SHOWN).map((err) => {
    const offset = err.pos[0];
    const { line, column } = positionOf(text, offset);
    return `${path}:${line}:${column}: not valid YAML or JSON: ${reason(err)}\n${excerpt(text, offset)}`;
  });
}
