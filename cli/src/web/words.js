// The Limits page's plain words: a spec as a sentence ("5 per second, bursts of 10") and the
// last hour as a chart with axes a person can read. Loaded before app.js, which uses both.
"use strict";

const fmt = (n) => Number(n).toLocaleString("en-US", { maximumFractionDigits: 3 });

// A duration in words: "30 s", "1.5 s", "5 min", "2 h", "1 h 30 min", "3 days".
function duration(s) {
  if (s < 60) return `${fmt(s)} s`;
  if (s < 3600) return s % 60 === 0 ? `${s / 60} min` : `${Math.floor(s / 60)} min ${fmt(s % 60)} s`;
  if (s < 86400 || s % 86400 !== 0) {
    const m = Math.round((s % 3600) / 60);
    return m === 0 ? `${Math.floor(s / 3600)} h` : `${Math.floor(s / 3600)} h ${m} min`;
  }
  return s === 86400 ? "1 day" : `${s / 86400} days`;
}

// "per hour", "per 5 minutes", "per 10 seconds", "per 1.5 seconds".
function per(s) {
  const units = [[604800, "week"], [86400, "day"], [3600, "hour"], [60, "minute"], [1, "second"]];
  for (const [size, unit] of units) {
    if (s === size) return `per ${unit}`;
    if (s > size && s % size === 0) return `per ${fmt(s / size)} ${unit}s`;
  }
  return `per ${fmt(s)} seconds`;
}

// "5 per second", or "1 every 2 s" for rates below one per second.
function rate(r) {
  return r >= 1 || Number.isInteger(r) ? `${fmt(r)} per second` : `1 every ${duration(1 / r)}`;
}

// "1st", "2nd", "15th", "23rd".
function ordinal(n) {
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? "th" : { 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th";
  return `${n}${suffix}`;
}

function calendarWords(s) {
  const periods = {
    day: "per day",
    week: "per week (from Monday)",
    month: s.anchor ? `per billing month from the ${ordinal(s.anchor)}` : "per calendar month",
    year: "per year",
  };
  return `${fmt(s.limit)} ${periods[s.period] || `per ${s.period}`}, ${s.tz || "UTC"}`;
}

// A spec (the JSON of the registry, durations in seconds) in words; the JSON itself for a kind
// this page does not know.
function specWords(spec) {
  const s = typeof spec === "string" ? JSON.parse(spec) : spec;
  const words = kindWords(s);
  // Shadow mode is an option of every kind: said after the limit it does not enforce.
  return s.shadow === true && words !== JSON.stringify(s) ? `${words}, in shadow mode` : words;
}

function kindWords(s) {
  switch (s.kind) {
    case "window":
      return `${fmt(s.limit)} ${per(s.interval)}`;
    case "windows":
      return s.windows.map(([limit, interval]) => `${fmt(limit)} ${per(interval)}`).join(" and ");
    case "bucket":
      return `${fmt(s.limit)} ${per(s.interval)}, in fixed windows`;
    case "sliding_window":
      return s.limits
        .map(([d, limit, precision]) => `${fmt(limit)} ${per(d)}${precision ? ` (in ${duration(precision)} steps)` : ""}`)
        .join(" and ");
    case "token_bucket":
      return `${rate(s.rate)}, bursts of ${fmt(s.capacity)}`;
    case "leased":
      return `${rate(s.rate)}, bursts of ${fmt(s.capacity)}, leased${s.chunk ? ` in chunks of ${fmt(s.chunk)}` : ""} for ${duration(s.lease_ttl)}`;
    case "leaky":
      return `bursts of ${fmt(s.size)}, then 1 every ${duration(s.drain / s.size)}`;
    case "points":
      return `${fmt(s.capacity)} points, refilled over ${duration(s.refill)}`;
    case "concurrent":
      return `${fmt(s.limit)} at once, reclaimed after ${duration(s.lock_timeout)}`;
    case "calendar":
      return calendarWords(s);
    case "partitions":
      return `${rate(s.total_rate)} over ${fmt(s.partitions)} partitions, leased for ${duration(s.lease_ttl)}`;
    case "unlimited":
      return "unlimited";
    default:
      return JSON.stringify(s);
  }
}

// The spec in words, its JSON one click away.
function specCell(spec) {
  const details = document.createElement("details");
  details.className = "spec";
  const summary = document.createElement("summary");
  summary.textContent = specWords(spec);
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
