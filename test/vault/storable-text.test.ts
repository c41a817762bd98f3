/** unstorableText: the one rule for text stored in clear (U+0000, lone surrogates), never quoting it. */
import t from 'tap';
import { unstorableText } from '../../src/vault/storable-text.js';

t.test('text every store holds: null', async (t) => {
  for (const s of ['', 'plain', 'a\tb\u0001\u001f', '\u00e9\u4e2d', '\ud83d\ude00', '\ud800\udc00', '\udbff\udfff', '\ufeff\uffff', '\\u0000', 'x'.repeat(5000)]) {
    t.equal(unstorableText(s), null, JSON.stringify(s));
  }
});

t.test('U+0000 anywhere', async (t) => {
  for (const s of ['\u0000', 'a\u0000', '\u0000b', 'secret\u0000value']) {
    const m = unstorableText(s);
    t.match(m, /U\+0000/, JSON.stringify(s));
    t.notOk(m?.includes('secret'), 'the value is not quoted');
  }
});

t.test('a lone surrogate, high or low, anywhere; a reversed pair is two lone ones', async (t) => {
  for (const s of ['\ud800', 'a\ud800', '\ud800b', '\udbff', '\udc00', 'a\udfffb', '\udc00\ud800', '\ud800\ud800\udc00', '\ud83d\ude00\ude00']) {
    t.match(unstorableText(s), /lone UTF-16 surrogate/, JSON.stringify(s));
  }
});
