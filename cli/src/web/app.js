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

function overridesText(overrides) {
  if (!overrides.length) return "–";
  return overrides.map((o) => `${o.key === null ? "*" : o.key}=${JSON.stringify(o.spec)}`).join(" ");
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

function renderList(data) {
  const tbody = $("#limiters tbody");
  tbody.replaceChildren();
  for (const l of data.limiters) {
    const link = el("a", { href: `#/limiter/${encodeURIComponent(l.name)}` }, l.name);
    tbody.append(
      el("tr", { "data-name": l.name },
        el("td", {}, link),
        el("td", {}, l.kind),
        el("td", {}, code(l.spec)),
        el("td", { class: "overrides" }, overridesText(l.overrides)),
        el("td", {}, l.users.join(", ")),
        el("td", { class: "num" }, l.processes),
        el("td", {}, ago(data.now - l.last_seen)),
        el("td", { class: "num allowed" }, num(l.allowed)),
        el("td", { class: l.refused > 0 ? "num refused hot" : "num refused" }, num(l.refused)),
        el("td", { class: "num allowed-minute" }, lastMinute(l, "allowed")),
        el("td", { class: "num refused-minute" }, lastMinute(l, "refused")),
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
  dl($("#detail-info"), [
    ["spec", code(d.spec)],
    ["overrides", overridesText(d.overrides)],
    ["users", d.users.join(", ")],
    ["processes", d.processes],
    ["last seen", ago(d.now - d.last_seen)],
    ["allowed", num(d.allowed)],
    ["refused", num(d.refused)],
  ]);
  dl($("#inspect-result"), [
    ["key", d.key === null ? "(the limiter's own)" : d.key],
    ["deciding spec", code(d.effective_spec)],
    ["allowed now", String(d.allowed_now)],
    ["limit", num(d.limit)],
    ["remaining", num(d.remaining)],
    ["retry after", `${d.retry_after.toFixed(3)} s`],
    ["reset after", `${d.reset_after.toFixed(3)} s`],
    ...(d.holders === null ? [] : [["holders", num(d.holders)]]),
  ]);
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
  $("#action-result").textContent = "";
  refresh();
});
refresh();
setInterval(refresh, POLL_MS);
