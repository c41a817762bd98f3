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
      if (left.length === 0) { resolve(values); return; }
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
  // As the service's walk tells a definition (src/vault/walk.ts): an object with `type` and `data`.
  function isDefinition(v) { return v && typeof v === 'object' && !Array.isArray(v) && 'type' in v && 'data' in v; }
  function at(path, field) { return path ? path + '.' + field : field; }
  function setOwn(obj, key, value) { Object.defineProperty(obj, key, { value: value, enumerable: true, writable: true, configurable: true }); }
  function addError(errors, path, message) {
    if (Object.prototype.hasOwnProperty.call(errors, path)) errors[path].push(message);
    else setOwn(errors, path, [message]);
  }

  // --- what a page may choose -------------------------------------------------------------
  // The page chooses the body, but a template in it (a mask, a search index, a fingerprint or an
  // alias id computed from the value) would tell the page something of what was typed: through
  // the id it is answered, or through whether rendering it fails. So a definition holding a
  // field may carry only named options; the service refuses the same for every public key.
  var OPTIONS = ['type', 'data', 'containers', 'metadata', 'expires_at', 'deduplicate_token', 'id', 'fingerprint_expression', 'search_indexes', 'mask'];
  var NAMED_ALIAS = /^\{\{\s*data(?:\.number)?\s*\|\s*(?:alias_card|alias_preserve_format|alias_preserve_length)\s*\}\}$/;
  var FINGERPRINTS = {};
  try { FINGERPRINTS = JSON.parse(document.body.getAttribute('data-fingerprints') || '{}'); } catch (e) { /* none: only no fingerprint_expression passes */ }
  var NOT_ALLOWED = {
    type: 'urn:tokenproxy:problem:expression_not_allowed',
    title: 'This key may not send expressions over these values',
    status: 403,
    code: 'expression_not_allowed',
    detail: 'A hosted field forwards only the options a page may choose (type, containers, metadata, expires_at, deduplicate_token, a plain id or an alias without a window, the type\'s own fingerprint expression); nothing was sent',
  };

  /** Records the templates a definition carries (what the service's named policy refuses). */
  function templates(def, path, errors) {
    if (def.mask !== undefined) addError(errors, at(path, 'mask'), 'a mask expression runs over the value: a page may not send one');
    if (def.search_indexes !== undefined && !(Array.isArray(def.search_indexes) && def.search_indexes.length === 0)) {
      addError(errors, at(path, 'search_indexes'), 'search index expressions run over the value: a page may not send them');
    }
    if (def.fingerprint_expression !== undefined) {
      var own = typeof def.type === 'string' && Object.prototype.hasOwnProperty.call(FINGERPRINTS, def.type) ? FINGERPRINTS[def.type] : null;
      if (own === null || def.fingerprint_expression !== own) addError(errors, at(path, 'fingerprint_expression'), "only the type's own fingerprint expression may be sent");
    }
    if (typeof def.id === 'string' && (def.id.indexOf('{{') !== -1 || def.id.indexOf('}}') !== -1) && !NAMED_ALIAS.test(def.id)) {
      addError(errors, at(path, 'id'), 'only an alias without a window ({{ data | alias_card }}, {{ data.number | alias_card }}, {{ data | alias_preserve_format }}, {{ data | alias_preserve_length }}) may be asked');
    }
  }

  /** Every field reference under `v` is refused: there a template, an id or metadata would hold the value. */
  function refuseRefsIn(v, path, errors) {
    if (isRef(v)) addError(errors, path, 'a field may only be the data of a definition, or a value of the body by itself');
    else if (Array.isArray(v)) v.forEach(function (x, i) { refuseRefsIn(x, path + '[' + i + ']', errors); });
    else if (v && typeof v === 'object') Object.keys(v).forEach(function (k) { refuseRefsIn(v[k], at(path, k), errors); });
  }

  /**
   * Reads the body's shape (never a value): the fields it uses, the definitions that hold one
   * (with the type they ask for), and what is refused, by JSON path as the service names them.
   */
  function planBody(body) {
    var plan = { ids: [], fields: [], errors: Object.create(null) };
    function use(id) { if (plan.ids.indexOf(id) === -1) plan.ids.push(id); }
    function visit(v, path) {
      if (isRef(v)) use(v.$tokenproxy_element);
      else if (Array.isArray(v)) v.forEach(function (x, i) { visit(x, path + '[' + i + ']'); });
      else if (isDefinition(v)) {
        var holds = isRef(v.data);
        Object.keys(v).forEach(function (k) { if (!(k === 'data' && holds)) refuseRefsIn(v[k], at(path, k), plan.errors); });
        templates(v, path, plan.errors);
        if (holds) {
          Object.keys(v).forEach(function (k) {
            if (OPTIONS.indexOf(k) === -1) addError(plan.errors, at(path, k), 'not an option of a definition: a page may not send it with a hosted field');
          });
          use(v.data.$tokenproxy_element);
          plan.fields.push({ path: path, id: v.data.$tokenproxy_element, type: v.type });
        }
      } else if (v && typeof v === 'object') Object.keys(v).forEach(function (k) { visit(v[k], at(path, k)); });
    }
    visit(body, '');
    return plan;
  }

  /** A field's own token type: a card field's is card, a text field's the type it was made with. */
  function ownType(f) { return f.kind === 'card' ? 'card' : f.valueType; }

  /** The body with each reference replaced by its field's value (the body passed planBody). */
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
      var holds = isDefinition(v) && isRef(v.data);
      Object.keys(v).forEach(function (k) {
        // `{ type, data: field }`: the field's value itself is the data; nothing else of a definition holds a field.
        setOwn(out, k, holds && k === 'data' ? values[v.data.$tokenproxy_element].value : isDefinition(v) ? v[k] : resolve(v[k], values));
      });
      return out;
    }
    return v;
  }

  function refuse(request, errors) {
    var body = {};
    for (var k in NOT_ALLOWED) body[k] = NOT_ALLOWED[k];
    body.errors = errors;
    tell({ event: 'tokenized', request: request, ok: false, status: 403, body: body });
  }

  function tokenize(m) {
    var body;
    var plan;
    try {
      // Exactly what would be sent (JSON), so what is checked is what goes out.
      body = JSON.parse(JSON.stringify(m.body === undefined ? null : m.body));
      plan = planBody(body);
    } catch (err) {
      tell({ event: 'tokenized', request: m.request, ok: false, status: 0, body: { code: 'frame_error', detail: 'The body is not JSON' } });
      return;
    }
    // Refused on its shape alone, before any field is asked for its value.
    if (Object.keys(plan.errors).length > 0) return refuse(m.request, plan.errors);
    collect(plan.ids, m.request).then(function (values) {
      var errors = Object.create(null);
      plan.fields.forEach(function (d) {
        if (d.type !== ownType(values[d.id])) addError(errors, at(d.path, 'type'), "a field is tokenized as its own type (the one it was created with)");
      });
      if (Object.keys(errors).length > 0) return refuse(m.request, errors);
      for (var k in values) {
        if (values[k].value === null) {
          tell({ event: 'tokenized', request: m.request, ok: false, status: 0, body: { code: 'incomplete', detail: 'A field is empty or not complete' } });
          return null;
        }
      }
      return fetch('/tokenize', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'svc-api-key': apiKey },
        body: JSON.stringify(resolve(body, values)),
        credentials: 'omit',
        cache: 'no-store',
      }).then(function (res) {
        return res.text().then(function (t) {
          var answer;
          try { answer = JSON.parse(t); } catch (e) { answer = { detail: 'tokenproxy answered ' + res.status }; }
          tell({ event: 'tokenized', request: m.request, ok: res.ok, status: res.status, body: answer });
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
