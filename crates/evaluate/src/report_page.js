"use strict";
(function () {
  // Sorting: click a heading (again to reverse); numbers by data-v, text otherwise.
  function sortBy(table, col, dir) {
    var body = table.tBodies[0];
    if (!body) return;
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col], y = b.cells[col];
      if (!x || !y) return 0;
      var xv = x.getAttribute("data-v"), yv = y.getAttribute("data-v");
      if (xv !== null && yv !== null) {
        if (xv === "" && yv === "") return 0;
        if (xv === "") return 1;
        if (yv === "") return -1;
        return dir * (parseFloat(xv) - parseFloat(yv));
      }
      return dir * x.textContent.localeCompare(y.textContent);
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c, i) {
      c.classList.remove("asc", "desc");
      if (i === col) c.classList.add(dir > 0 ? "asc" : "desc");
    });
  }
  function column(table, key) {
    var cells = table.tHead ? table.tHead.rows[0].cells : [];
    for (var i = 0; i < cells.length; i++) if (cells[i].getAttribute("data-k") === key) return i;
    return -1;
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    if (!table.tHead) return;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (cell, i) {
      cell.addEventListener("click", function () {
        // The first click sorts best first: metrics descending; p, MDE, latency (lower is
        // better), names and ranks ascending.
        var low = cell.getAttribute("data-better") === "low";
        var first = (cell.classList.contains("desc") || cell.classList.contains("asc")) ? (cell.classList.contains("desc") ? 1 : -1) : (low || i === 0 || table.id === "question-table" ? 1 : -1);
        sortBy(table, i, first);
      });
    });
  });
  // Filtering the questions: a question id shows exactly that question ("fra-1" is not
  // "fra-10"); other words hide the rows and drill-downs that lack them.
  function qidOf(el) {
    var b = el.tagName === "DETAILS" ? el.querySelector("summary b") : el.querySelector("td a");
    return b ? b.textContent.trim().toLowerCase() : "";
  }
  var filter = document.getElementById("q-filter");
  if (filter) {
    filter.addEventListener("input", function () {
      var term = filter.value.trim().toLowerCase();
      var els = document.querySelectorAll("#question-table tbody tr, details.question");
      var exact = Array.prototype.some.call(els, function (el) { return term !== "" && qidOf(el) === term; });
      Array.prototype.forEach.call(els, function (el) {
        var keep = term === "" || (exact ? qidOf(el) === term : el.textContent.toLowerCase().indexOf(term) >= 0);
        el.classList.toggle("hidden", !keep);
      });
    });
  }
  // The rank of the gold in a grid cell: a number, 98 none in the top k, 99 refused, "" not run.
  function rankIn(row, key) {
    var table = document.getElementById("question-table"), col = column(table, key);
    var cell = col >= 0 ? row.cells[col] : null, v = cell ? cell.getAttribute("data-v") : "";
    return v === "" || v === null ? null : parseFloat(v);
  }
  function detailsOf(row) {
    var a = row.querySelector("td a");
    return a ? document.getElementById(a.getAttribute("href").replace(/^#/, "")) : null;
  }
  // Hide the questions every config ranks alike.
  var agree = document.getElementById("hide-agree");
  if (agree) {
    agree.addEventListener("change", function () {
      var table = document.getElementById("question-table");
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var seen = {}, n = 0;
        for (var i = 1; i < row.cells.length; i++) {
          var v = row.cells[i].getAttribute("data-v");
          if (v !== "" && v !== null && !seen[v]) { seen[v] = true; n++; }
        }
        var hide = agree.checked && n <= 1, d = detailsOf(row);
        row.classList.toggle("hidden-agree", hide);
        if (d) d.classList.toggle("hidden-agree", hide);
      });
    });
  }
  // Pick two configs: the questions one finds and the other misses, and the tally.
  var pa = document.getElementById("pick-a"), pb = document.getElementById("pick-b"), show = document.getElementById("pick-show");
  function pick() {
    var table = document.getElementById("question-table");
    if (!table || !pa || !pb) return;
    var a = pa.value, b = pb.value, mode = show.value, better = 0, worse = 0, same = 0, aOnly = 0, bOnly = 0;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) {
      c.classList.toggle("pick-a", c.getAttribute("data-k") === a);
      c.classList.toggle("pick-b", c.getAttribute("data-k") === b);
    });
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var ra = rankIn(row, a), rb = rankIn(row, b), hideIt = false;
      if (ra === null || rb === null) { hideIt = mode !== "all"; } else {
        var ha = ra < 98, hb = rb < 98;
        if (ha && !hb) aOnly++;
        if (hb && !ha) bOnly++;
        if (ra < rb) better++; else if (rb < ra) worse++; else same++;
        hideIt = (mode === "a-only" && !(ha && !hb)) || (mode === "b-only" && !(hb && !ha)) || (mode === "differ" && ra === rb);
      }
      var d = detailsOf(row);
      row.classList.toggle("hidden-pick", hideIt);
      if (d) d.classList.toggle("hidden-pick", hideIt);
      Array.prototype.forEach.call(row.cells, function (c, i) {
        var k = table.tHead.rows[0].cells[i] && table.tHead.rows[0].cells[i].getAttribute("data-k");
        c.classList.toggle("pick-a", k === a);
        c.classList.toggle("pick-b", k === b);
      });
    });
    var out = document.getElementById("pick-summary");
    if (out) out.textContent = "A ranks the gold higher on " + better + ", B on " + worse + ", the same on " + same + "; only A finds it on " + aOnly + ", only B on " + bOnly + ".";
  }
  [pa, pb, show].forEach(function (el) { if (el) el.addEventListener("change", pick); });
  if (pa && pb) pick();
  // CSV of a table's visible rows (what the sorting and filters left), downloaded as a file.
  Array.prototype.forEach.call(document.querySelectorAll("button.csv"), function (button) {
    button.addEventListener("click", function () {
      var table = document.getElementById(button.getAttribute("data-table"));
      if (!table) return;
      var quote = function (t) { t = t.replace(/\s+/g, " ").trim(); return /[",\n]/.test(t) ? "\"" + t.replace(/"/g, "\"\"") + "\"" : t; };
      var lines = [Array.prototype.map.call(table.tHead.rows[0].cells, function (c) { return quote(c.textContent); }).join(",")];
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        if (row.offsetParent === null) return;
        lines.push(Array.prototype.map.call(row.cells, function (c) {
          var pre = c.querySelector("pre");
          return quote(pre ? pre.textContent.split("\n").join("; ") : c.textContent);
        }).join(","));
      });
      var csv = lines.join("\n") + "\n";
      button.setAttribute("data-csv-rows", String(lines.length - 1));
      var link = document.createElement("a");
      link.href = URL.createObjectURL(new Blob([csv], { type: "text/csv" }));
      link.download = button.getAttribute("data-file") || "table.csv";
      document.body.appendChild(link);
      link.click();
      link.remove();
    });
  });
  // Passages without a link in the page ("3 S2 pp. 39–40"): their source's link from the
  // source list (#src-S2) and their first page.
  Array.prototype.forEach.call(document.querySelectorAll("table.passages a:not([href])"), function (a) {
    var m = /^\d+ (S\d+) pp?\. (\d+)/.exec(a.textContent), src = m && document.getElementById("src-" + m[1]);
    if (src) a.setAttribute("href", src.getAttribute("href") + "#page=" + m[2]);
  });
  // A config's "texts" in a drill-down: each passage's rank, score, source and page, and the
  // start of its text (recorded in the page once, by chunk id).
  var textsEl = document.getElementById("passage-texts"), texts = textsEl ? JSON.parse(textsEl.textContent) : [];
  Array.prototype.forEach.call(document.querySelectorAll("button.texts"), function (button) {
    button.addEventListener("click", function () {
      var cell = button.closest("tr").cells[1], open = cell.querySelector("div.texts");
      if (open) { open.remove(); return; }
      var div = document.createElement("div");
      div.className = "texts";
      Array.prototype.forEach.call(cell.querySelectorAll("a, span"), function (chip) {
        var p = document.createElement("p"), head = document.createElement("b"), t = chip.getAttribute("data-t"), text = t === null ? undefined : texts[parseInt(t, 10)];
        head.textContent = chip.textContent + (chip.getAttribute("data-s") ? " · score " + chip.getAttribute("data-s") : "") + " ";
        if (chip.classList.contains("hit")) p.className = "hit";
        p.appendChild(head);
        p.appendChild(document.createTextNode(text !== undefined ? text + (text.length >= 600 ? " …" : "") : "(text not recorded: the page keeps the relevant and best-ranked passages' texts, up to 512 KiB)"));
        div.appendChild(p);
      });
      cell.appendChild(div);
    });
  });
  // #sort=<column>[,asc] sorts the config table; #q=<question id> opens that question.
  function fromHash() {
    var hash = decodeURIComponent(location.hash.replace(/^#/, ""));
    hash.split("&").forEach(function (part) {
      var kv = part.split("=");
      if (kv.length === 1 && part.indexOf("q-") === 0) {
        var el = document.getElementById(part);
        if (el && el.tagName === "DETAILS") el.open = true;
        return;
      }
      if (kv.length !== 2) return;
      if (kv[0] === "sort") {
        var spec = kv[1].split(","), table = document.getElementById("config-table");
        if (!table) return;
        var col = column(table, spec[0]);
        if (col >= 0) sortBy(table, col, spec[1] === "asc" ? 1 : -1);
      } else if (kv[0] === "q") {
        var d = document.getElementById("q-" + kv[1].replace(/[^A-Za-z0-9_-]/g, "_"));
        if (d) { d.open = true; d.scrollIntoView(); }
      }
    });
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
