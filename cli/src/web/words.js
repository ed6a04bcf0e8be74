// The Limits page's plain words: a spec as the sentence the server sends with it ("5 per
// second, bursts of 10") and the last hour as a chart with axes a person can read. Loaded
// before app.js, which uses both.
"use strict";

const fmt = (n) => Number(n).toLocaleString("en-US", { maximumFractionDigits: 3 });

// The spec in words (as the server words it: each kind words its own fields in the core), its
// JSON one click away.
function specCell(spec, words) {
  const details = document.createElement("details");
  details.className = "spec";
  const summary = document.createElement("summary");
  summary.textContent = words;
  const code = document.createElement("code");
  code.textContent = typeof spec === "string" ? spec : JSON.stringify(spec);
  details.append(summary, code);
  return details;
}

const SVG_NS = "http://www.w3.org/2000/svg";
function svgNode(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  node.append(...children);
  return node;
}

// A round top for the count axis: 1, 2, 5, 10, 20, 50, ... at or above `n`.
function niceTop(n) {
  let step = 1;
  for (;;) {
    for (const m of [1, 2, 5]) if (step * m >= n) return step * m;
    step *= 10;
  }
}

const clock = (seconds) => new Date(seconds * 1000).toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit" });

// The last hour, one bar per minute: allowed (below) and refused (stacked on top). `compact`
// (the list's cell) labels the peak and the ends of the hour; the full chart (the detail) has a
// count axis with gridlines and a clock axis every 15 minutes. Each bar's tooltip gives its
// minute and counts.
function historyChart(history, { width, height, compact }) {
  const top = niceTop(Math.max(1, ...history.map((m) => m.allowed + m.refused)));
  const left = compact ? 0 : 44;
  const bottom = compact ? 0 : 20;
  const plotW = width - left - (compact ? 0 : 8);
  const plotH = height - bottom - (compact ? 0 : 8);
  const y0 = height - bottom;
  const step = plotW / Math.max(1, history.length);
  const total = history.reduce((t, m) => [t[0] + m.allowed, t[1] + m.refused], [0, 0]);
  const root = svgNode("svg", { class: "history", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" },
    svgNode("title", {}, `last hour, all keys: ${fmt(total[0])} allowed, ${fmt(total[1])} refused`));
  if (!compact) {
    for (const value of [0, top / 2, top]) {
      const y = y0 - (value / top) * plotH;
      root.append(
        svgNode("line", { class: "grid", x1: left, x2: left + plotW, y1: y, y2: y }),
        svgNode("text", { class: "axis y", x: left - 6, y: y + 4, "text-anchor": "end" }, fmt(value)),
      );
    }
  }
  history.forEach((m, i) => {
    const a = (m.allowed / top) * plotH;
    const r = (m.refused / top) * plotH;
    const x = left + i * step;
    root.append(svgNode("g", { "data-minute": m.start },
      svgNode("title", {}, `${clock(m.start)}: ${fmt(m.allowed)} allowed, ${fmt(m.refused)} refused`),
      svgNode("rect", { class: "allowed", x, y: y0 - a, width: Math.max(1, step - 1), height: a }),
      svgNode("rect", { class: "refused", x, y: y0 - a - r, width: Math.max(1, step - 1), height: r })));
    if (!compact && (i % 15 === 0 || i === history.length - 1)) {
      const label = i === history.length - 1 ? "now" : clock(m.start);
      const anchor = i === 0 ? "start" : i === history.length - 1 ? "end" : "middle";
      root.append(svgNode("text", { class: "axis x", x: i === history.length - 1 ? x + step : x, y: height - 4, "text-anchor": anchor }, label));
    }
  });
  if (!compact) return root;
  // The list's cell: the bars, then "60 min ago · peak N/min · now" under them.
  const figure = document.createElement("figure");
  figure.className = "spark";
  const caption = document.createElement("figcaption");
  for (const text of ["60 min ago", `peak ${fmt(Math.max(0, ...history.map((m) => m.allowed + m.refused)))}/min`, "now"]) {
    const span = document.createElement("span");
    span.textContent = text;
    caption.append(span);
  }
  figure.append(root, caption);
  return figure;
}
