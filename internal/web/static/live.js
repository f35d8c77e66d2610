// docket dashboard: live page parts. An element with data-live-stream (an
// SSE URL) and data-live-fragment (the URL of its HTML) is refreshed, its
// content swapped by htmx, whenever the stream says "refresh":
//   - at most once a second per element;
//   - while the stream is down (EventSource unsupported or failed), by
//     polling every 5 s instead;
//   - nothing at all while the tab is hidden: the stream is closed and
//     polling stops; on return the part is refreshed at once and the
//     stream reopened.
// data-live-mode on the element says what it is doing ("sse", "poll",
// "paused"), and data-live-refreshes counts its refreshes (tests read both).
// No eval, no inline script: this file is all there is (the CSP allows
// script from this origin only).
(function () {
  "use strict";
  var MIN_GAP = 1000;
  var POLL = 5000;

  function Live(el) {
    this.el = el;
    this.stream = el.getAttribute("data-live-stream");
    this.fragment = el.getAttribute("data-live-fragment");
    this.source = null;
    this.poller = null;
    this.last = 0;
    this.timer = null;
    this.refreshes = 0;
  }

  Live.prototype.mode = function (m) { this.el.setAttribute("data-live-mode", m); };

  // refresh fetches the fragment, at most once per MIN_GAP: a request
  // within the gap is deferred to its end (and merged with any other).
  Live.prototype.refresh = function () {
    var self = this;
    if (document.hidden || this.timer) { return; }
    var wait = this.last + MIN_GAP - Date.now();
    if (wait > 0) {
      this.timer = setTimeout(function () { self.timer = null; self.refresh(); }, wait);
      return;
    }
    this.last = Date.now();
    this.refreshes++;
    this.el.setAttribute("data-live-refreshes", String(this.refreshes));
    htmx.ajax("GET", this.fragment, { target: this.el, swap: "innerHTML" });
  };

  Live.prototype.poll = function () {
    var self = this;
    this.stop();
    this.mode("poll");
    this.poller = setInterval(function () { self.refresh(); }, POLL);
  };

  Live.prototype.start = function () {
    var self = this;
    this.stop();
    if (!window.EventSource) { this.poll(); return; }
    var es = new EventSource(this.stream);
    this.source = es;
    this.mode("connecting");
    es.addEventListener("open", function () {
      self.mode("sse");
      // Anything that changed between the page's rendering (or the last
      // connection) and now is shown.
      self.refresh();
    });
    es.addEventListener("refresh", function () { self.refresh(); });
    es.addEventListener("error", function () {
      // CLOSED: the browser gave up (an error status); otherwise it
      // reconnects by itself after the stream's retry delay.
      if (es.readyState === EventSource.CLOSED) { self.poll(); }
    });
  };

  Live.prototype.stop = function () {
    if (this.source) { this.source.close(); this.source = null; }
    if (this.poller) { clearInterval(this.poller); this.poller = null; }
    if (this.timer) { clearTimeout(this.timer); this.timer = null; }
  };

  function init() {
    var lives = [];
    var els = document.querySelectorAll("[data-live-stream][data-live-fragment]");
    for (var i = 0; i < els.length; i++) { lives.push(new Live(els[i])); }
    if (lives.length === 0) { return; }
    function apply() {
      for (var j = 0; j < lives.length; j++) {
        if (document.hidden) {
          lives[j].stop();
          lives[j].mode("paused");
        } else {
          lives[j].start();
        }
      }
    }
    document.addEventListener("visibilitychange", apply);
    window.addEventListener("pagehide", function () {
      for (var j = 0; j < lives.length; j++) { lives[j].stop(); }
    });
    apply();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
}());
