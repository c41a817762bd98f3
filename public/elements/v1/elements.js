/*
 * tokenproxy hosted fields (elements.js), served at /elements/v1/elements.js.
 *
 * The card number, expiry and cvc are typed into iframes served by tokenproxy, on tokenproxy's
 * origin. This script, on the shop's page, never sees them: it mounts the frames, relays
 * commands (focus, clear, tokenize) by postMessage to exactly tokenproxy's origin, and hands the
 * page what the frames report: change states without values, and the token record that
 * POST /tokenize answered (the card masked). Plain JavaScript, no dependencies, no build step.
 */
(function () {
  'use strict';
  var SOURCE = 'tokenproxy-elements';

  function randomId() {
    var bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) { return ('0' + b.toString(16)).slice(-2); }).join('');
  }

  function init(options) {
    if (!options || typeof options.baseUrl !== 'string' || typeof options.apiKey !== 'string') {
      throw new TypeError('TokenproxyElements.init({ baseUrl, apiKey }): both are required');
    }
    var base = new URL(options.baseUrl);
    var origin = base.origin;
    var apiKey = options.apiKey;
    var session = randomId();
    var elements = {};
    var pending = {};

    window.addEventListener('message', function (event) {
      // Only tokenproxy's frames speak to us, and only about this session's elements.
      if (event.origin !== origin) return;
      var msg = event.data;
      if (!msg || msg.source !== SOURCE || msg.session !== session) return;
      var el = elements[msg.id];
      if (!el || event.source !== el.frameWindow()) return;
      if (msg.event === 'ready') el.ready();
      else if (msg.event === 'change') el.emit('change', msg.state);
      else if (msg.event === 'focus' || msg.event === 'blur') el.emit(msg.event, {});
      else if (msg.event === 'tokenized' && pending[msg.request]) {
        var p = pending[msg.request];
        delete pending[msg.request];
        if (msg.ok) p.resolve(msg.body);
        else p.reject(Object.assign(new Error(msg.body && msg.body.detail ? msg.body.detail : 'tokenize failed'), { status: msg.status, problem: msg.body }));
      }
    });

    function Element(kind, opts) {
      this.id = randomId();
      this.kind = kind;
      this.opts = opts || {};
      this.iframe = null;
      this.listeners = {};
      this.queue = [];
      this.isReady = false;
      elements[this.id] = this;
    }
    Element.prototype.frameWindow = function () { return this.iframe && this.iframe.contentWindow; };
    Element.prototype.ready = function () {
      this.isReady = true;
      var q = this.queue;
      this.queue = [];
      for (var i = 0; i < q.length; i++) this.post(q[i]);
      this.emit('ready', {});
    };
    Element.prototype.post = function (msg) {
      if (!this.iframe) throw new Error('mount the element first');
      msg.source = SOURCE;
      msg.session = session;
      msg.id = this.id;
      if (!this.isReady) this.queue.push(msg);
      else this.iframe.contentWindow.postMessage(msg, origin);
    };
    Element.prototype.emit = function (name, payload) {
      var fns = this.listeners[name] || [];
      for (var i = 0; i < fns.length; i++) fns[i](payload);
    };
    Element.prototype.on = function (name, fn) {
      (this.listeners[name] = this.listeners[name] || []).push(fn);
      return this;
    };
    Element.prototype.mount = function (target) {
      var host = typeof target === 'string' ? document.querySelector(target) : target;
      if (!host) throw new Error('mount: no element matches ' + target);
      if (this.iframe) throw new Error('this element is mounted already');
      var q = new URLSearchParams({
        key: apiKey, parent: window.location.origin, id: this.id, session: session,
        type: this.opts.type || (this.kind === 'card' ? 'card' : 'token'),
      });
      if (this.opts.placeholder) q.set('placeholder', typeof this.opts.placeholder === 'string' ? this.opts.placeholder : JSON.stringify(this.opts.placeholder));
      if (this.opts.style) q.set('style', JSON.stringify(this.opts.style));
      var iframe = document.createElement('iframe');
      iframe.src = origin + '/elements/v1/frame/' + (this.kind === 'card' ? 'card' : 'text') + '?' + q.toString();
      iframe.title = this.kind === 'card' ? 'Card details' : 'Secure field';
      iframe.setAttribute('allow', 'clipboard-write');
      iframe.style.border = '0';
      iframe.style.width = '100%';
      iframe.style.height = this.kind === 'card' ? '3em' : '2.5em';
      this.iframe = iframe;
      host.appendChild(iframe);
      return this;
    };
    Element.prototype.focus = function () { this.post({ cmd: 'focus' }); };
    Element.prototype.clear = function () { this.post({ cmd: 'clear' }); };
    Element.prototype.unmount = function () {
      if (this.iframe && this.iframe.parentNode) this.iframe.parentNode.removeChild(this.iframe);
      this.iframe = null;
      this.isReady = false;
      delete elements[this.id];
    };

    /** The body with every element replaced by a reference the frames resolve; the ids used. */
    function references(value, used) {
      if (value instanceof Element) {
        used.push(value.id);
        return { $tokenproxy_element: value.id };
      }
      if (Array.isArray(value)) return value.map(function (v) { return references(v, used); });
      if (value && typeof value === 'object') {
        var out = {};
        for (var k in value) if (Object.prototype.hasOwnProperty.call(value, k)) out[k] = references(value[k], used);
        return out;
      }
      return value;
    }

    return {
      create: function (kind, opts) {
        if (kind !== 'card' && kind !== 'text') throw new Error("create('card') or create('text', { type })");
        return new Element(kind, opts);
      },
      /**
       * POST /tokenize, made by the first element's frame (on tokenproxy's origin) with the
       * public key: resolves with the answer (token ids, token records with the card masked).
       */
      tokenize: function (body) {
        var used = [];
        var payload = references(body, used);
        if (used.length === 0) return Promise.reject(new Error('tokenize: the body holds no element'));
        var first = elements[used[0]];
        if (!first || !first.iframe) return Promise.reject(new Error('tokenize: mount the elements first'));
        var request = randomId();
        return new Promise(function (resolve, reject) {
          pending[request] = { resolve: resolve, reject: reject };
          first.post({ cmd: 'tokenize', request: request, body: payload, elements: used });
        });
      },
    };
  }

  window.TokenproxyElements = { init: init };
})();
