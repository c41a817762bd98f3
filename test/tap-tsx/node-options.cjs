// Node flags and NODE_OPTIONS without tap's @tapjs/processinfo import. Used by the preload
// without-processinfo-hook.cjs (before any loader, so plain CommonJS) and by the tests'
// test/helpers/cli-entry.ts, which starts children without it.
'use strict';

const PROCESSINFO = /@tapjs[\\/]processinfo/;

/** `args` (node flags) without tap's processinfo import, given as `--import=X` or as `--import X`. */
function withoutProcessinfoImport(args) {
  const out = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (['--import', '--require', '-r', '--loader', '--experimental-loader'].includes(a) && PROCESSINFO.test(args[i + 1] ?? '')) {
      i++;
      continue;
    }
    if (PROCESSINFO.test(a)) continue;
    out.push(a);
  }
  return out;
}

/** NODE_OPTIONS as node reads it: words split at white space, double quotes group, a backslash in quotes escapes. */
function splitNodeOptions(text) {
  const out = [];
  let word = '';
  let inWord = false;
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '\\' && i + 1 < text.length) word += text[++i];
      else if (c === '"') quoted = false;
      else word += c;
    } else if (c === '"') {
      quoted = true;
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) out.push(word);
      word = '';
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (inWord) out.push(word);
  return out;
}

const quoteNodeOption = (w) => (w === '' || /[\s"\\]/.test(w) ? `"${w.replace(/["\\]/g, '\\$&')}"` : w);

/** NODE_OPTIONS without tap's processinfo import (tap writes it quoted: `"--import=file:///…"`); undefined when nothing else is left. */
function withoutProcessinfo(nodeOptions) {
  if (nodeOptions === undefined) return undefined;
  const rest = withoutProcessinfoImport(splitNodeOptions(nodeOptions));
  return rest.length === 0 ? undefined : rest.map(quoteNodeOption).join(' ');
}

exports.PROCESSINFO = PROCESSINFO;
exports.withoutProcessinfoImport = withoutProcessinfoImport;
exports.splitNodeOptions = splitNodeOptions;
exports.withoutProcessinfo = withoutProcessinfo;
