// Draws the audit page's charts from the JSON the server put in the page (no other data).
(function () {
  "use strict";
  var node = document.getElementById("chart-data");
  if (!node || typeof Plotly === "undefined") { return; }
  var data = JSON.parse(node.textContent);
  var specs = {
    by_table: { key: "table", series: [["read", "Reads", "#2b6cb0"], ["denied", "Denials", "#c53030"]] },
    by_user: { key: "user", series: [["read", "Reads", "#2b6cb0"], ["denied", "Denials", "#c53030"]] },
    tagged_columns: { key: "column", series: [["masked", "Masked", "#2f855a"], ["clear", "Clear", "#b7791f"]] }
  };
  document.querySelectorAll("[data-chart]").forEach(function (el) {
    var spec = specs[el.getAttribute("data-chart")];
    var rows = data[el.getAttribute("data-chart")] || [];
    if (!rows.length) { el.textContent = "No lines."; el.removeAttribute("role"); return; }
    var labels = rows.map(function (r) { return r[spec.key]; });
    var traces = spec.series.map(function (s) {
      return { type: "bar", name: s[1], x: labels, y: rows.map(function (r) { return r[s[0]]; }), marker: { color: s[2] } };
    });
    Plotly.newPlot(el, traces, {
      barmode: "stack", height: 280, margin: { t: 10, r: 10, b: 90, l: 40 },
      legend: { orientation: "h" }, font: { size: 12 }
    }, { displayModeBar: false, responsive: true, staticPlot: false });
  });
})();
