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
        // Metrics sort best first on the first click; names and ranks ascending.
        var first = (cell.classList.contains("desc") || cell.classList.contains("asc")) ? (cell.classList.contains("desc") ? 1 : -1) : (i === 0 || table.id === "question-table" ? 1 : -1);
        sortBy(table, i, first);
      });
    });
  });
  // Filtering the questions: a word or an id hides the rows and drill-downs that lack it.
  var filter = document.getElementById("q-filter");
  if (filter) {
    filter.addEventListener("input", function () {
      var term = filter.value.toLowerCase();
      Array.prototype.forEach.call(document.querySelectorAll("#question-table tbody tr, details.question"), function (el) {
        el.classList.toggle("hidden", term !== "" && el.textContent.toLowerCase().indexOf(term) < 0);
      });
    });
  }
  // Passages without a link in the page ("3 S2 pp. 39–40"): their source's link from the
  // source list (#src-S2) and their first page.
  Array.prototype.forEach.call(document.querySelectorAll("table.passages a:not([href])"), function (a) {
    var m = /^\d+ (S\d+) pp?\. (\d+)/.exec(a.textContent), src = m && document.getElementById("src-" + m[1]);
    if (src) a.setAttribute("href", src.getAttribute("href") + "#page=" + m[2]);
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
