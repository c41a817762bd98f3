/**
 * Issue 29: invalid_json's position (src/http/json-error.ts). The scanner that finds it when V8
 * names none must point where V8 points when V8 does name one: on thousands of JSON texts broken
 * at random, wherever V8's message says "at position N" (or ends early), the scanner says N; on
 * every text V8 accepts it finds no error; on every text V8 refuses it finds one. The detail is
 * one of three fixed sentences with numbers, whatever the text.
 */
import t from 'tap';
import fc from 'fast-check';
import { positionOf } from '../../src/config/text-position.js';
import { firstJsonError, invalidJsonDetail } from '../../src/http/json-error.js';

const ALPHABET = [...'{}[],:"\\ \n\t\r0123456789-+.eEtrufalsn\u0001é'];

/** A JSON text with a few characters inserted, deleted or replaced. */
const broken = fc
  .tuple(
    fc.json({ maxDepth: 4 }),
    fc.array(fc.tuple(fc.nat(), fc.constantFrom('insert', 'delete', 'replace'), fc.constantFrom(...ALPHABET)), { minLength: 1, maxLength: 3 }),
  )
  .map(([text, edits]) => {
    let s = text;
    for (const [at, op, c] of edits) {
      const i = s.length === 0 ? 0 : at % (s.length + 1);
      s = op === 'insert' ? s.slice(0, i) + c + s.slice(i) : op === 'delete' ? s.slice(0, i) + s.slice(i + 1) : s.slice(0, i) + c + s.slice(i + 1);
    }
    return s;
  });

function v8(text: string): { ok: true } | { ok: false; message: string } {
  try {
    JSON.parse(text);
    return { ok: true };
  } catch (err) {
    return { ok: false, message: (err as Error).message };
  }
}

t.test('the scanner agrees with V8 wherever V8 names a position', async (t) => {
  let named = 0;
  let unnamed = 0;
  fc.assert(
    fc.property(broken, (text) => {
      const r = v8(text);
      const found = firstJsonError(text);
      if (r.ok) return found === null;
      const m = / at position (\d+)/.exec(r.message);
      if (m) {
        named++;
        return found === Number(m[1]);
      }
      if (r.message.startsWith('Unexpected end of JSON input')) {
        named++;
        return found === text.length;
      }
      unnamed++;
      return found !== null && found < text.length;
    }),
    { numRuns: 5000 },
  );
  t.ok(named > 500, `V8 named a position ${named} times`);
  t.ok(unnamed > 100, `and named none ${unnamed} times (the scanner's cases)`);
});

t.test('a million levels of nesting do not overflow the stack', async (t) => {
  t.equal(firstJsonError('['.repeat(1_000_000)), 1_000_000);
  t.equal(firstJsonError(`${'['.repeat(1_000_000)}1${']'.repeat(999_999)}}`), 1_999_999 + 1);
});

t.test('the detail is a fixed sentence with numbers, never text of the body', async (t) => {
  const shape = /^The request body (is empty: it must be a JSON document|is not valid JSON(: unexpected character at line \d+, column \d+|: it ends at line \d+, column \d+, before the JSON document is complete)?)$/;
  fc.assert(
    fc.property(broken, (text) => {
      const r = v8(text);
      return r.ok || shape.test(invalidJsonDetail(text, r.message, 'The request body'));
    }),
    { numRuns: 2000 },
  );
  // A parser message that names no position and a text the scanner finds valid: no position at all.
  t.equal(invalidJsonDetail('{}', 'something new', 'The request body'), 'The request body is not valid JSON');
  // A position past the text (a message of another format) is not trusted; the scanner decides.
  t.equal(invalidJsonDetail('{"a":}', 'x at position 99', 'The request body'), 'The request body is not valid JSON: unexpected character at line 1, column 6');
});

t.test('line and column as an editor shows them', async (t) => {
  const text = 'ab\ncd\r\nef\rgh😀i';
  t.match(positionOf(text, 0), { line: 1, column: 1 });
  t.match(positionOf(text, 4), { line: 2, column: 2 }, 'after LF');
  t.match(positionOf(text, 7), { line: 3, column: 1 }, 'after CRLF: one line break');
  t.match(positionOf(text, 10), { line: 4, column: 1 }, 'after a lone CR');
  t.match(positionOf(text, 14), { line: 4, column: 4 }, 'an emoji (two UTF-16 units) is one column');
  t.match(positionOf(text, text.length), { line: 4, column: 5 }, 'the end');
  t.match(positionOf(text, 4), { lineStart: 3, lineEnd: 5 });
});
