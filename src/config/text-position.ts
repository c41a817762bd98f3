/**
 * Line and column of an offset in a text, as an editor shows them: lines are split at
 * LF, CRLF and CR (JSON's and YAML's line breaks), both numbers start at 1, and the column counts
 * characters (code points), not bytes or UTF-16 units. Here rather than in src/http/ because
 * src/config/ may import nothing from the rest of src/, while the body reader may import this.
 */
export interface TextPosition {
  line: number;
  column: number;
  /** Where the offset's line starts and ends (without its line break), as UTF-16 offsets. */
  lineStart: number;
  lineEnd: number;
}

/** `offset` is a UTF-16 index into `text` (what JSON.parse and the yaml package report), 0..text.length. */
export function positionOf(text: string, offset: number): TextPosition {
  const at = Math.max(0, Math.min(offset, text.length));
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < at; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x0a || (c === 0x0d && text.charCodeAt(i + 1) !== 0x0a)) {
      line++;
      lineStart = i + 1;
    }
  }
  let lineEnd = at;
  while (lineEnd < text.length && text.charCodeAt(lineEnd) !== 0x0a && text.charCodeAt(lineEnd) !== 0x0d) lineEnd++;
  const column = [...text.slice(lineStart, at)].length + 1;
  return { line, column, lineStart, lineEnd };
}
