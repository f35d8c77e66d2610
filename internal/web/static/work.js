// docket work page: keyboard shortcuts, the lease's countdown with
// heartbeats, and the bounding-box widget. Plain JavaScript, loaded as a
// file (the Content-Security-Policy allows no inline script); the page
// works without it but for drawing boxes.
(function () {
  "use strict";

  var form = document.getElementById("work-form");
  if (!form) {
    return;
  }
  var csrf = form.querySelector('input[name="csrf"]').value;

  // ---- Draft ----
  // When the form is sent, the answer is kept in the tab's
  // sessionStorage. If the post did not arrive — the session had ended
  // (the refusal's sign-in link leads back here), the network failed —
  // this assignment's form opens blank again and is filled back from it.
  // A page showing the server's problems has the answer already; any
  // other assignment's page drops the draft.
  var DRAFT = "docket.work.draft";
  var here = form.getAttribute("action");

  function keepDraft() {
    var values = [];
    Array.prototype.forEach.call(form.elements, function (el) {
      if (!el.name || el.name === "csrf" || el.disabled) {
        return;
      }
      if ((el.type === "radio" || el.type === "checkbox") && !el.checked) {
        return;
      }
      values.push([el.name, el.value]);
    });
    try {
      sessionStorage.setItem(DRAFT, JSON.stringify({ action: here, values: values }));
    } catch (e) {
      // No storage (private mode, full): nothing kept.
    }
  }

  (function restoreDraft() {
    var draft = null;
    try {
      draft = JSON.parse(sessionStorage.getItem(DRAFT) || "null");
      sessionStorage.removeItem(DRAFT);
    } catch (e) {
      return;
    }
    if (!draft || draft.action !== here || !Array.isArray(draft.values) || document.getElementById("problems")) {
      return;
    }
    var byName = {};
    draft.values.forEach(function (p) {
      (byName[p[0]] = byName[p[0]] || []).push(p[1]);
    });
    Array.prototype.forEach.call(form.elements, function (el) {
      var vs = byName[el.name];
      if (!vs || el.name === "csrf") {
        return;
      }
      if (el.type === "radio" || el.type === "checkbox") {
        el.checked = vs.indexOf(el.value) >= 0;
      } else {
        el.value = vs[0];
      }
    });
    var note = document.createElement("p");
    note.className = "message";
    note.id = "draft-restored";
    note.setAttribute("role", "status");
    note.textContent = "Your answer was not saved: it is filled back in as you left it. Check it and submit.";
    form.parentNode.insertBefore(note, form);
  })();

  // ---- Boxes ----
  // Each .bbox keeps its boxes, as fractions of the image, in a hidden
  // input: [{label, x, y, w, h}], x+w <= 1 and y+h <= 1.
  var widgets = [];
  var SVG = "http://www.w3.org/2000/svg";

  function clamp(v) {
    return Math.min(1, Math.max(0, v));
  }
  function round(v) {
    return Math.round(v * 10000) / 10000;
  }

  function setRect(r, b) {
    r.setAttribute("x", b.x);
    r.setAttribute("y", b.y);
    r.setAttribute("width", b.w);
    r.setAttribute("height", b.h);
  }

  function boxWidget(root) {
    var input = document.getElementById(root.dataset.input);
    var svg = root.querySelector("svg.bbox-overlay");
    var list = root.querySelector(".bbox-list");
    var max = parseInt(root.dataset.max, 10) || 100;
    var boxes = [];
    try {
      boxes = JSON.parse(input.value || "[]");
    } catch (e) {
      boxes = [];
    }
    if (!Array.isArray(boxes)) {
      boxes = [];
    }

    function label() {
      var r = root.querySelector(".bbox-labels input:checked");
      return r ? r.value : "";
    }

    function redraw() {
      input.value = JSON.stringify(boxes);
      if (svg) {
        while (svg.firstChild) {
          svg.removeChild(svg.firstChild);
        }
      }
      while (list.firstChild) {
        list.removeChild(list.firstChild);
      }
      boxes.forEach(function (b, i) {
        if (svg) {
          var r = document.createElementNS(SVG, "rect");
          r.setAttribute("class", "box");
          setRect(r, b);
          var t = document.createElementNS(SVG, "title");
          t.textContent = b.label;
          r.appendChild(t);
          svg.appendChild(r);
        }
        var li = document.createElement("li");
        li.textContent = b.label + " at " + Math.round(b.x * 100) + "%, " + Math.round(b.y * 100) + "% size " +
          Math.round(b.w * 100) + "% × " + Math.round(b.h * 100) + "% ";
        var rm = document.createElement("button");
        rm.type = "button";
        rm.className = "secondary";
        rm.textContent = "Remove";
        rm.addEventListener("click", function () {
          boxes.splice(i, 1);
          redraw();
        });
        li.appendChild(rm);
        list.appendChild(li);
      });
    }

    if (svg) {
      var start = null;
      var drawing = null;
      var at = function (e) {
        var r = svg.getBoundingClientRect();
        return { x: clamp((e.clientX - r.left) / r.width), y: clamp((e.clientY - r.top) / r.height) };
      };
      var span = function (a, b) {
        return { x: Math.min(a.x, b.x), y: Math.min(a.y, b.y), w: Math.abs(a.x - b.x), h: Math.abs(a.y - b.y) };
      };
      svg.addEventListener("pointerdown", function (e) {
        if (e.button !== 0) {
          return;
        }
        e.preventDefault();
        start = at(e);
        drawing = document.createElementNS(SVG, "rect");
        drawing.setAttribute("class", "box drawing");
        setRect(drawing, { x: start.x, y: start.y, w: 0, h: 0 });
        svg.appendChild(drawing);
      });
      window.addEventListener("pointermove", function (e) {
        if (start) {
          setRect(drawing, span(start, at(e)));
        }
      });
      window.addEventListener("pointerup", function (e) {
        if (!start) {
          return;
        }
        var s = span(start, at(e));
        start = null;
        var x = round(s.x);
        var y = round(s.y);
        var b = { label: label(), x: x, y: y, w: Math.min(round(s.w), round(1 - x)), h: Math.min(round(s.h), round(1 - y)) };
        // A click is no box.
        if (b.w >= 0.005 && b.h >= 0.005 && boxes.length < max && b.label) {
          boxes.push(b);
        }
        redraw();
      });
    }
    redraw();
    return { sync: redraw };
  }

  Array.prototype.forEach.call(document.querySelectorAll(".bbox"), function (root) {
    widgets.push(boxWidget(root));
  });

  // ---- Keyboard ----
  // The keys shown next to options pick them (a checkbox toggles);
  // Ctrl+Enter (or Cmd+Enter) submits, even from a text box.
  var sent = false;
  form.addEventListener("submit", function (e) {
    if (sent) {
      e.preventDefault();
      return;
    }
    widgets.forEach(function (w) {
      w.sync();
    });
    keepDraft();
    sent = true;
  });

  function typing(el) {
    if (!el || !el.tagName) {
      return false;
    }
    var tag = el.tagName;
    if (tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable) {
      return true;
    }
    return tag === "INPUT" && ["radio", "checkbox", "submit", "button", "hidden"].indexOf(el.type) < 0;
  }

  document.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "Enter") {
      e.preventDefault();
      if (form.requestSubmit) {
        form.requestSubmit();
      } else {
        form.submit();
      }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey || e.isComposing || typing(e.target) || e.key.length !== 1) {
      return;
    }
    var key = e.key.toLowerCase();
    var inputs = form.querySelectorAll("input[data-key]");
    for (var i = 0; i < inputs.length; i++) {
      if (inputs[i].dataset.key === key) {
        e.preventDefault();
        inputs[i].click();
        inputs[i].focus();
        return;
      }
    }
  });

  // ---- Lease ----
  // The countdown runs on the server's clock (data-now corrects for the
  // browser's); a heartbeat every data-every seconds tells the server the
  // page is open and reads the lease back.
  var cd = document.getElementById("countdown");
  if (!cd) {
    return;
  }
  var status = document.getElementById("lease-status");
  var expires = Date.parse(cd.dataset.expires);
  var skew = Date.parse(cd.dataset.now) - Date.now();
  var beats = 0;
  var lost = false;

  function tick() {
    var left = Math.max(0, Math.floor((expires - (Date.now() + skew)) / 1000));
    cd.textContent = Math.floor(left / 60) + ":" + ("0" + (left % 60)).slice(-2);
    if (left === 0) {
      cd.classList.add("expired");
      if (!lost) {
        status.textContent = "Time is up: this unit may go to someone else.";
      }
    }
  }

  function beat() {
    if (lost) {
      return;
    }
    fetch(cd.dataset.heartbeat, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: "csrf=" + encodeURIComponent(csrf),
    }).then(function (res) {
      return res.json().catch(function () {
        return {};
      }).then(function (v) {
        if (res.status === 401) {
          lost = true;
          status.textContent = "You are signed out: sign in again to go on.";
          return;
        }
        if (res.status === 403 || res.status === 404 || res.status === 409) {
          // Refused: the unit is no longer held (409), not this
          // contributor's (404), or they are banned (403).
          lost = true;
          status.textContent = "This unit is no longer yours: " + (v.error || res.status) + " Take another from your pools.";
          cd.classList.add("expired");
          return;
        }
        if (!res.ok) {
          // The server could not record the beat (a 5xx): the unit is
          // still held; the next beat tries again.
          status.textContent = "Cannot reach the server; still trying.";
          return;
        }
        expires = Date.parse(v.expiresAt);
        skew = Date.parse(v.now) - Date.now();
        beats++;
        status.dataset.beats = String(beats);
        status.textContent = "";
      });
    }).catch(function () {
      status.textContent = "Cannot reach the server; still trying.";
    });
  }

  tick();
  setInterval(tick, 1000);
  setInterval(beat, Math.max(1, parseInt(cd.dataset.every, 10) || 30) * 1000);
})();
