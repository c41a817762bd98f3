/*
 * The hosted field's own script (frame.js), running inside the iframe on tokenproxy's origin.
 * It holds what is typed and gives the parent page only: change states (complete, empty, brand,
 * error codes: never a digit), focus and blur, and the answer of POST /tokenize, which it calls
 * itself with the public key. It accepts messages only from its parent window, and only from the
 * origin the server checked against the key's allowed_origins; it answers to that origin only.
 */
(function () {
  'use strict';
  var SOURCE = 'tokenproxy-elements';
  var q = new URLSearchParams(window.location.search);
  var parentOrigin = q.get('parent');
  var id = q.get('id');
  var session = q.get('session');
  var apiKey = q.get('key');
  var kind = document.body.getAttribute('data-kind');
  var valueType = q.get('type') || (kind === 'card' ? 'card' : 'token');
  var channel = new BroadcastChannel('tokenproxy-elements-' + session);

  function tell(msg) {
    msg.source = SOURCE;
    msg.session = session;
    msg.id = id;
    window.parent.postMessage(msg, parentOrigin);
  }

  // --- card rules -------------------------------------------------------------------------
  var BRANDS = [
    { brand: 'american-express', re: /^3[47]/, lengths: [15], gaps: [4, 10], cvc: 4 },
    { brand: 'diners-club', re: /^3(?:0[0-5]|[689])/, lengths: [14, 16, 19], gaps: [4, 10], cvc: 3 },
    { brand: 'jcb', re: /^35(?:2[89]|[3-8])/, lengths: [16, 17, 18, 19], gaps: [4, 8, 12], cvc: 3 },
    { brand: 'discover', re: /^(?:6011|64[4-9]|65)/, lengths: [16, 19], gaps: [4, 8, 12], cvc: 3 },
    { brand: 'unionpay', re: /^62/, lengths: [14, 15, 16, 17, 18, 19], gaps: [4, 8, 12], cvc: 3 },
    { brand: 'mastercard', re: /^(?:5[1-5]|222[1-9]|22[3-9]|2[3-6]|27[01]|2720)/, lengths: [16], gaps: [4, 8, 12], cvc: 3 },
    { brand: 'visa', re: /^4/, lengths: [13, 16, 19], gaps: [4, 8, 12], cvc: 3 },
  ];
  var UNKNOWN = { brand: 'unknown', lengths: [13, 14, 15, 16, 17, 18, 19], gaps: [4, 8, 12], cvc: 3 };

  function brandOf(digits) {
    for (var i = 0; i < BRANDS.length; i++) if (BRANDS[i].re.test(digits)) return BRANDS[i];
    return UNKNOWN;
  }
  function luhn(digits) {
    var sum = 0;
    var dbl = false;
    for (var i = digits.length - 1; i >= 0; i--) {
      var d = digits.charCodeAt(i) - 48;
      if (dbl) { d *= 2; if (d > 9) d -= 9; }
      sum += d;
      dbl = !dbl;
    }
    return sum % 10 === 0;
  }
  function grouped(digits, gaps) {
    var out = '';
    for (var i = 0; i < digits.length; i++) {
      if (gaps.indexOf(i) !== -1) out += ' ';
      out += digits[i];
    }
    return out;
  }
  /** `MM / YY`, `MM/YY`, `MM/YYYY`, `MMYY`: {month, year} or null. */
  function expiry(text) {
    var m = /^\s*(\d{1,2})\s*\/?\s*(\d{2}|\d{4})\s*$/.exec(text);
    if (!m) return null;
    var month = Number(m[1]);
    var year = m[2].length === 2 ? 2000 + Number(m[2]) : Number(m[2]);
    return { month: month, year: year };
  }

  /**
   * The expiry input as shown, `MM / YY`, from whatever was typed, pasted or autofilled: `1230`,
   * `12/30`, `12 / 30`, `12-30`, `12/2030` (a year 20YY is shown as YY) all read `12 / 30`. The
   * separator is the frame's own: one the shopper types after the month is not added twice. A
   * single digit followed by a separator, or a month digit from 2 to 9, gets its leading zero.
   * `deleting`: the shopper pressed Backspace or Delete, so a separator left alone goes with it
   * instead of being put back.
   */
  function expiryText(raw, deleting) {
    var digits = raw.replace(/\D/g, '');
    var month;
    var rest;
    if (/^\s*\d\s*[^\d\s]/.test(raw)) { month = '0' + digits.charAt(0); rest = digits.slice(1); }
    else if (!deleting && digits.length === 1 && digits >= '2') { month = '0' + digits; rest = ''; }
    else { month = digits.slice(0, 2); rest = digits.slice(2); }
    var year = rest.slice(0, 4);
    if (year.length === 4 && year.slice(0, 2) === '20') year = year.slice(2);
    if (deleting && year === '') return raw === month + ' / ' ? raw : month;
    if (month.length < 2) return month;
    return month + ' / ' + year;
  }

  var number = document.getElementById('number');
  var exp = document.getElementById('exp');
  var cvc = document.getElementById('cvc');
  var text = document.getElementById('value');
  var inputs = kind === 'card' ? [number, exp, cvc] : [text];
  var touched = {};

  var placeholder = q.get('placeholder');
  if (placeholder) {
    try {
      var p = JSON.parse(placeholder);
      if (kind === 'card' && p && typeof p === 'object') {
        if (typeof p.number === 'string') number.placeholder = p.number;
        if (typeof p.expiry === 'string') exp.placeholder = p.expiry;
        if (typeof p.cvc === 'string') cvc.placeholder = p.cvc;
      } else if (typeof p === 'string') inputs[0].placeholder = p;
    } catch (e) {
      inputs[0].placeholder = placeholder;
    }
  }
  var ALLOWED_STYLE = ['color', 'fontSize', 'fontFamily', 'fontWeight', 'letterSpacing', 'lineHeight', 'padding', 'backgroundColor', 'textAlign'];
  var style = q.get('style');
  if (style) {
    try {
      var s = JSON.parse(style);
      for (var k in s) {
        // Set through the CSSOM (allowed by the frame's style-src 'self'); no url() (no requests out).
        if (ALLOWED_STYLE.indexOf(k) !== -1 && typeof s[k] === 'string' && !/url\s*\(/i.test(s[k])) {
          for (var j = 0; j < inputs.length; j++) inputs[j].style[k] = s[k];
        }
      }
    } catch (e) { /* a malformed style is ignored */ }
  }

  function cardState() {
    var digits = number.value.replace(/\D/g, '');
    var b = brandOf(digits);
    var e = expiry(exp.value);
    var c = cvc.value.replace(/\D/g, '');
    var errors = [];
    var numberOk = b.lengths.indexOf(digits.length) !== -1 && luhn(digits);
    if (digits.length > 0 && !numberOk && (touched.number || digits.length >= Math.max.apply(null, b.lengths))) errors.push({ field: 'number', code: 'invalid' });
    var now = new Date();
    var expOk = !!e && e.month >= 1 && e.month <= 12 && (e.year > now.getFullYear() || (e.year === now.getFullYear() && e.month >= now.getMonth() + 1));
    if (exp.value.trim() !== '' && !expOk && touched.exp) errors.push({ field: 'expiry', code: e && (e.month < 1 || e.month > 12) ? 'invalid' : e ? 'expired' : 'incomplete' });
    var cvcOk = c.length === b.cvc || (b === UNKNOWN && (c.length === 3 || c.length === 4));
    if (c.length > 0 && !cvcOk && touched.cvc) errors.push({ field: 'cvc', code: 'invalid' });
    return {
      complete: numberOk && expOk && cvcOk,
      empty: digits.length === 0 && exp.value.trim() === '' && c.length === 0,
      brand: digits.length > 0 ? b.brand : 'unknown',
      errors: errors,
    };
  }
  function textState() {
    var v = text.value;
    return { complete: v.length > 0, empty: v.length === 0, errors: [] };
  }
  function state() { return kind === 'card' ? cardState() : textState(); }
  function changed() { tell({ event: 'change', state: state() }); }

  if (kind === 'card') {
    number.addEventListener('input', function () {
      var digits = number.value.replace(/\D/g, '').slice(0, 19);
      var b = brandOf(digits);
      digits = digits.slice(0, Math.max.apply(null, b.lengths));
      number.value = grouped(digits, b.gaps);
      var st = cardState();
      if (b.lengths.indexOf(digits.length) !== -1 && luhn(digits) && digits.length === Math.max.apply(null, b.lengths)) exp.focus();
      tell({ event: 'change', state: st });
    });
    exp.addEventListener('input', function (event) {
      var next = expiryText(exp.value, typeof event.inputType === 'string' && event.inputType.indexOf('delete') === 0);
      // Set only when it changes: setting the value moves the caret to its end.
      if (next !== exp.value) exp.value = next;
      changed();
    });
    cvc.addEventListener('input', function () {
      cvc.value = cvc.value.replace(/\D/g, '').slice(0, 4);
      changed();
    });
  } else {
    text.addEventListener('input', changed);
  }
  inputs.forEach(function (input) {
    input.addEventListener('focus', function () { tell({ event: 'focus' }); });
    input.addEventListener('blur', function () {
      touched[input.id] = true;
      tell({ event: 'blur' });
      changed();
    });
  });

  /** This field's value for /tokenize, or null when it is not complete. */
  function ownValue() {
    if (kind === 'card') {
      var st = cardState();
      if (!st.complete) return null;
      var e = expiry(exp.value);
      return { number: number.value.replace(/\D/g, ''), expiration_month: e.month, expiration_year: e.year, cvc: cvc.value };
    }
    return text.value.length > 0 ? text.value : null;
  }

  // The fields of one page (one init) find each other on a channel only tokenproxy's origin joins.
  channel.onmessage = function (event) {
    var m = event.data;
    if (m && m.type === 'collect' && m.ids.indexOf(id) !== -1) {
      channel.postMessage({ type: 'value', request: m.request, id: id, kind: kind, valueType: valueType, value: ownValue() });
    }
  };

  function collect(ids, request) {
    return new Promise(function (resolve, reject) {
      var values = {};
      var left = ids.filter(function (x, i) { return ids.indexOf(x) === i; });
      function take(m) {
        if (!m || m.type !== 'value' || m.request !== request || left.indexOf(m.id) === -1) return;
        values[m.id] = m;
        left.splice(left.indexOf(m.id), 1);
        if (left.length === 0) done();
      }
      var timer = setTimeout(function () {
        channel.removeEventListener('message', listener);
        reject(new Error('A field did not answer'));
      }, 5000);
      function listener(event) { take(event.data); }
      function done() {
        clearTimeout(timer);
        channel.removeEventListener('message', listener);
        resolve(values);
      }
      channel.addEventListener('message', listener);
      // This frame answers itself directly: a channel does not deliver to its own sender.
      if (left.indexOf(id) !== -1) take({ type: 'value', request: request, id: id, kind: kind, valueType: valueType, value: ownValue() });
      if (left.length > 0) channel.postMessage({ type: 'collect', request: request, ids: left.slice() });
    });
  }

  function isRef(v) { return v && typeof v === 'object' && !Array.isArray(v) && typeof v.$tokenproxy_element === 'string' && Object.keys(v).length === 1; }

  /** The body with each reference replaced by its field's value. */
  function resolve(v, values) {
    if (isRef(v)) {
      var f = values[v.$tokenproxy_element];
      // A bare field: a card becomes a card token; a text field a string, or its type's token.
      if (f.kind === 'card') return { type: 'card', data: f.value };
      return f.valueType === 'token' ? f.value : { type: f.valueType, data: f.value };
    }
    if (Array.isArray(v)) return v.map(function (x) { return resolve(x, values); });
    if (v && typeof v === 'object') {
      var out = {};
      for (var k in v) {
        if (!Object.prototype.hasOwnProperty.call(v, k)) continue;
        // `{ type, data: field }`: the field's value itself is the data.
        out[k] = k === 'data' && isRef(v[k]) ? values[v[k].$tokenproxy_element].value : resolve(v[k], values);
      }
      return out;
    }
    return v;
  }

  function tokenize(m) {
    collect(m.elements, m.request).then(function (values) {
      for (var k in values) {
        if (values[k].value === null) {
          tell({ event: 'tokenized', request: m.request, ok: false, status: 0, body: { code: 'incomplete', detail: 'A field is empty or not complete' } });
          return null;
        }
      }
      return fetch('/tokenize', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'svc-api-key': apiKey },
        body: JSON.stringify(resolve(m.body, values)),
        credentials: 'omit',
        cache: 'no-store',
      }).then(function (res) {
        return res.text().then(function (t) {
          var body;
          try { body = JSON.parse(t); } catch (e) { body = { detail: 'tokenproxy answered ' + res.status }; }
          tell({ event: 'tokenized', request: m.request, ok: res.ok, status: res.status, body: body });
        });
      });
    }).catch(function (err) {
      tell({ event: 'tokenized', request: m.request, ok: false, status: 0, body: { code: 'frame_error', detail: err && err.message ? err.message : 'failed' } });
    });
  }

  window.addEventListener('message', function (event) {
    // Only our parent, at the origin the server checked, may command this field.
    if (event.source !== window.parent || event.origin !== parentOrigin) return;
    var m = event.data;
    if (!m || m.source !== SOURCE || m.session !== session || m.id !== id) return;
    if (m.cmd === 'focus') inputs[0].focus();
    else if (m.cmd === 'clear') {
      inputs.forEach(function (i) { i.value = ''; });
      touched = {};
      changed();
    } else if (m.cmd === 'tokenize') tokenize(m);
  });

  tell({ event: 'ready' });
})();
