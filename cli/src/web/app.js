// The Limits page: polls the JSON API every 2 s and renders the registry, one limiter's detail
// and a key's state. Writes send the token typed into the page as a bearer header (never a
// cookie), so another site cannot make this browser send them.
"use strict";

const POLL_MS = 2000;
const $ = (sel) => document.querySelector(sel);
let lastInspectKey = null;

const tokenInput = $("#token");
tokenInput.value = sessionStorage.getItem("ratekeeper-token") || "";
tokenInput.addEventListener("input", () => sessionStorage.setItem("ratekeeper-token", tokenInput.value));

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
const code = (value) => el("code", {}, typeof value === "string" ? value : JSON.stringify(value));
const num = (n) => Number(n).toLocaleString("en-US");

function ago(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

// Each override in words, with the key it is for: "tenant-7: 2,000 per hour; all keys: ...".
function overridesText(overrides) {
  if (!overrides.length) return "–";
  return overrides.map((o) => `${o.key === null ? "all keys" : o.key}: ${o.spec_words}`).join("; ");
}

async function api(path, options = {}) {
  const response = await fetch(path, { cache: "no-store", ...options });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = body.error ? body.error.message : `HTTP ${response.status}`;
    throw Object.assign(new Error(message), { status: response.status });
  }
  return body;
}

function setStatus(text) {
  $("#status").textContent = text;
}

// "1,234" over the last minute; while the server has been read for less than a minute, the
// span it covers is shown too ("812 in 24s").
function lastMinute(l, field) {
  if (!l.last_minute) return "–";
  const n = num(l.last_minute[field]);
  return l.last_minute.seconds >= 59.5 ? n : `${n} in ${Math.round(l.last_minute.seconds)}s`;
}

// A duration for a table cell: "2.4s", "42s", "3m 5s", "2h 10m".
function secs(s) {
  if (s === null || s === undefined) return "–";
  if (s < 10) return `${s.toFixed(1)}s`;
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.floor(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

// A limiter's current use in one cell: a concurrent limiter's holders (with their lease ages)
// and waiters of its busiest key; a counting limiter's busiest keys.
function usageText(l) {
  const u = l.usage;
  if (!u) return "–";
  if (u.concurrent) {
    const c = u.concurrent;
    const key = c.key === "" ? "" : ` on ${c.key}`;
    const ages = c.holders.slice(0, 3).map((h) => secs(h.age)).join(", ");
    return `${c.held} held${key}${ages ? ` (ages ${ages})` : ""}, ${c.waiters} waiting`;
  }
  if (!u.busiest_keys.length) return "–";
  return u.busiest_keys.map((k) => `${k.key === "" ? "(no key)" : k.key} ${num(k.used)}/${num(k.limit)}`).join(", ");
}

// The specs whose JSON the reader opened: the list is redrawn every poll, and they stay open.
const openSpecs = new Set();
function keepOpen(details, name) {
  details.open = openSpecs.has(name);
  details.addEventListener("toggle", () => (details.open ? openSpecs.add(name) : openSpecs.delete(name)));
  return details;
}

// An override no process has used yet (set ahead of a deploy).
const WAITING = "waiting for a first user";

// One name, one spec and one kind: what the registry reported (two specs in use, or a use of
// another kind it could not take).
function conflictText(l) {
  if (l.conflict.includes(" specs in use: ")) {
    return `${l.conflict} (one name, one spec: each process enforces its own number on the same counter; ` +
      "give every process the same spec, or change it fleet-wide with an override)";
  }
  return `${l.conflict} (one name, one kind: this ${l.kind} keeps the name; rename the other)`;
}

function renderList(data) {
  const tbody = $("#limiters tbody");
  tbody.replaceChildren();
  for (const l of data.limiters) {
    const link = el("a", { href: `#/limiter/${encodeURIComponent(l.name)}` }, l.name);
    // Each cell carries its column's name, shown beside it when a phone stacks the cells.
    const td = (label, attrs, ...children) => el("td", { "data-label": label, ...attrs }, ...children);
    const pair = (cls, a, b, hot) =>
      [el("span", { class: `${cls}-allowed` }, a), " / ", el("span", { class: hot ? `${cls}-refused hot` : `${cls}-refused` }, b)];
    tbody.append(
      el("tr", { "data-name": l.name },
        td("Name", { class: "name" }, link,
          el("span", { class: l.conflict ? "kind conflict" : "kind", title: l.conflict ? conflictText(l) : "" },
            l.conflict ? `${l.kind} ⚠` : l.kind)),
        td("Limit", { class: "spec" }, keepOpen(specCell(l.spec, l.spec_words), l.name)),
        td("Overrides", { class: "overrides" }, overridesText(l.overrides)),
        td("Used by", { class: "users" }, el("span", { class: "user-list" }, l.users.join(", ")),
          el("span", { class: "processes" }, `${num(l.processes)} ${l.processes === 1 ? "process" : "processes"}`)),
        td("Last seen", { class: "seen last-seen" }, l.waiting ? WAITING : ago(data.now - l.last_seen)),
        td("Allowed / refused", { class: "num total" }, ...pair("total", num(l.allowed), num(l.refused), l.refused > 0),
          ...(l.shadow_refused > 0 ? [el("span", { class: "total-shadow", title: "admitted by shadow mode; enforcing would have refused them" },
            ` (${num(l.shadow_refused)} shadow-refused)`)] : [])),
        td("Last minute", { class: "num minute" }, ...pair("minute", lastMinute(l, "allowed"), lastMinute(l, "refused"), false)),
        td("In use now", { class: "usage" }, usageText(l)),
        td("Last hour", { class: "chart" }, l.usage ? historyChart(l.usage.history, { width: 170, height: 28, compact: true }) : "–"),
      ),
    );
  }
  $("#empty").hidden = data.limiters.length > 0;
}

function dl(target, rows) {
  target.replaceChildren();
  for (const [label, value] of rows) target.append(el("dt", {}, label), el("dd", {}, value));
}

function currentName() {
  const m = location.hash.match(/^#\/limiter\/(.+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

async function renderDetail(name) {
  const key = lastInspectKey;
  const query = key ? `?key=${encodeURIComponent(key)}` : "";
  const d = await api(`/api/limiters/${encodeURIComponent(name)}${query}`);
  $("#detail-name").textContent = `${d.name} (${d.kind})`;
  // Which keys each figure is for: the limiter's totals cover all its keys; the inspected key's
  // figures (below) cover that key only.
  dl($("#detail-info"), [
    ["limit", keepOpen(specCell(d.spec, d.spec_words), `detail ${d.name}`)],
    ["overrides", overridesText(d.overrides)],
    ["users", d.users.join(", ")],
    ["processes", d.processes],
    ["last seen", d.waiting ? WAITING : ago(d.now - d.last_seen)],
    ["conflict", d.conflict ? conflictText(d) : "–"],
    ["allowed, all keys", num(d.allowed)],
    ["refused, all keys", num(d.refused)],
    ["shadow-refused, all keys", num(d.shadow_refused)],
  ]);
  dl($("#inspect-result"), [
    ["key", d.key === null ? "(no key: the limiter's own)" : d.key],
    ["deciding spec", keepOpen(specCell(d.effective_spec, d.effective_spec_words), `deciding ${d.name}`)],
    ["allowed now", String(d.allowed_now)],
    ["limit", num(d.limit)],
    ["remaining", num(d.remaining)],
    ["retry after", `${d.retry_after.toFixed(3)} s`],
    ["reset after", `${d.reset_after.toFixed(3)} s`],
  ]);
  renderUsage(d);
}

function table(target, header, rows) {
  target.replaceChildren(
    el("thead", {}, el("tr", {}, ...header.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))),
  );
  target.hidden = rows.length === 0;
}

// The detail's current use: holders and waiters (concurrent), busiest keys, the last hour.
function renderUsage(d) {
  const c = d.concurrent;
  $("#concurrent").hidden = !c;
  if (c) {
    const key = c.key === "" ? "the limiter's own key (no key)" : `key ${c.key}`;
    $("#concurrent-key").textContent = key;
    // The figures are for one key; when another key is busier, say so (the list shows that one).
    const busiest = d.busiest_keys[0];
    const elsewhere = busiest && busiest.key !== c.key
      ? ` The busiest key is ${busiest.key === "" ? "the limiter's own" : busiest.key} (${num(busiest.used)} of ${num(busiest.limit)} in use): click it under "Busiest keys now" to see its holders.`
      : "";
    $("#concurrent-summary").textContent = `${num(c.held)} held on ${key}, ${num(c.waiters)} waiting.${elsewhere}`;
    table($("#holders"), ["Lease", "Fencing token", "Age", "Expires in"], c.holders.map((h) => [
      code(h.lease),
      h.fencing_token === null ? "–" : String(h.fencing_token),
      secs(h.age),
      h.overdue ? "overdue" : secs(h.expires_in),
    ]));
  }
  // A busiest key's name inspects it (its holders, for a concurrent limiter).
  const inspectLink = (key) => {
    const link = el("a", { href: "#", class: "inspect-key" }, key === "" ? "(no key)" : key);
    link.addEventListener("click", (event) => {
      event.preventDefault();
      lastInspectKey = key || null;
      $("#inspect-form input[name=key]").value = key;
      refresh();
    });
    return link;
  };
  table($("#busiest"), ["Key", "Used", "Limit"], d.busiest_keys.map((k) => [
    inspectLink(k.key), num(k.used), num(k.limit),
  ]));
  $("#busiest-empty").hidden = d.busiest_keys.length > 0;
  $("#history-chart").replaceChildren(historyChart(d.history, { width: 640, height: 140, compact: false }));
}

async function refresh() {
  const name = currentName();
  $("#list-view").hidden = name !== null;
  $("#detail-view").hidden = name === null;
  try {
    if (name === null) renderList(await api("/api/limiters"));
    else await renderDetail(name);
    setStatus(`updated ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    setStatus(`error: ${e.message}`);
  }
}

async function write(method, path, body) {
  const headers = { Authorization: `Bearer ${tokenInput.value}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  return api(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
}

function report(promise, success) {
  const out = $("#action-result");
  promise.then(
    () => { out.className = "result ok"; out.textContent = success; refresh(); },
    (e) => { out.className = "result error"; out.textContent = `refused: ${e.message}`; },
  );
}

$("#inspect-form").addEventListener("submit", (event) => {
  event.preventDefault();
  lastInspectKey = event.target.key.value || null;
  refresh();
});

$("#reset-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const name = currentName();
  const key = event.target.key.value;
  const query = key ? `?key=${encodeURIComponent(key)}` : "";
  report(write("POST", `/api/limiters/${encodeURIComponent(name)}/reset${query}`), `reset ${key || "the limiter's own key"}`);
});

$("#resume-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const name = currentName();
  const key = event.target.key.value;
  const query = key ? `?key=${encodeURIComponent(key)}` : "";
  const who = key || "the limiter's own key";
  const resumed = write("POST", `/api/limiters/${encodeURIComponent(name)}/resume${query}`);
  const out = $("#action-result");
  resumed.then(
    (r) => { out.className = "result ok"; out.textContent = r.resumed ? `resumed ${who}` : `${who} was not paused`; refresh(); },
    (e) => { out.className = "result error"; out.textContent = `refused: ${e.message}`; },
  );
});

$("#block-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const name = encodeURIComponent(currentName());
  const form = event.target;
  const key = form.key.value;
  const who = key || "the limiter's own key";
  const keyQuery = key ? `key=${encodeURIComponent(key)}` : "";
  const out = $("#action-result");
  const done = (text) => { out.className = "result ok"; out.textContent = text; refresh(); };
  const refused = (e) => { out.className = "result error"; out.textContent = `refused: ${e.message}`; };
  if (event.submitter && event.submitter.value === "unblock") {
    write("POST", `/api/limiters/${name}/unblock${keyQuery ? `?${keyQuery}` : ""}`).then(
      (r) => done(r.unblocked ? `unblocked ${who}` : `${who} was not blocked`),
      refused,
    );
  } else {
    const query = [keyQuery, `seconds=${encodeURIComponent(form.seconds.value)}`].filter(Boolean).join("&");
    write("POST", `/api/limiters/${name}/block?${query}`).then((r) => done(`blocked ${who} for ${r.blocked_for}s`), refused);
  }
});

$("#forget-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const name = currentName();
  const out = $("#action-result");
  write("POST", `/api/limiters/${encodeURIComponent(name)}/forget`).then(
    (r) => { out.className = "result ok"; out.textContent = r.forgotten ? `forgot ${name}` : `${name} was not listed`; refresh(); },
    (e) => { out.className = "result error"; out.textContent = `refused: ${e.message}`; },
  );
});

$("#override-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const name = encodeURIComponent(currentName());
  const form = event.target;
  const key = form.key.value;
  if (event.submitter && event.submitter.value === "clear") {
    const query = key ? `?key=${encodeURIComponent(key)}` : "";
    report(write("DELETE", `/api/limiters/${name}/override${query}`), "override cleared");
    return;
  }
  let spec;
  try {
    spec = JSON.parse(form.spec.value);
  } catch (e) {
    $("#action-result").className = "result error";
    $("#action-result").textContent = `refused: the spec is not JSON (${e.message})`;
    return;
  }
  report(write("POST", `/api/limiters/${name}/override`, { spec, key: key || null }), "override set");
});

window.addEventListener("hashchange", () => {
  lastInspectKey = null;
  $("#inspect-form input[name=key]").value = "";
  $("#action-result").textContent = "";
  refresh();
});
refresh();
setInterval(refresh, POLL_MS);
