#!/usr/bin/env python3
"""Draws the dashboard's panels (contrib/grafana/ratekeeper.json) without Grafana, for the
Observability page's picture: a minute of scripted load on a real redis-server (started here on a
free loopback port, stopped by pid), a `backend.prometheus()` snapshot every second (read by
prometheus_client's parser), each panel's queries evaluated over the snapshots, the panels drawn
as SVG in one HTML page and photographed by headless Chromium (Debian's `chromium`).

    python contrib/grafana/render.py [--seconds 60] [--out docs/src/assets/observability-dashboard.png]

Only the PromQL the dashboard uses is evaluated: `sum by (labels) (rate(name{matchers}[w]))`,
`sum by (labels) (name{matchers})` (a gauge),
`histogram_quantile(q, sum by (le[, label]) (rate(name_bucket{matchers}[w])))` and a ratio of two
`sum(rate(...))`; `$__rate_interval` is 10 s and `$limiter` matches every limiter. A query of
another shape is an error, so the picture is the dashboard's own queries or nothing.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import random
import re
import socket
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

import ratekeeper

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WINDOW = 10  # seconds: $__rate_interval
Sample = tuple[str, frozenset[tuple[str, str]], float]

SUM_RATE = re.compile(r"^sum(?: by \((?P<by>[^)]*)\))? \(rate\((?P<name>\w+)(?:\{(?P<m>[^}]*)\})?\[[^\]]+\]\)\)$")
SUM_GAUGE = re.compile(r"^sum(?: by \((?P<by>[^)]*)\))? \((?P<name>\w+)(?:\{(?P<m>[^}]*)\})?\)$")
QUANTILE = re.compile(r"^histogram_quantile\((?P<q>[\d.]+), (?P<inner>.*)\)$")
RATIO = re.compile(r"^(?P<a>sum\(rate\(.*?\)\)) / (?P<b>sum\(rate\(.*\)\))$")


def matchers(text: str | None) -> list[tuple[str, str, str]]:
    out = []
    for label, op, value in re.findall(r'(\w+)(=~|=)"([^"]*)"', text or ""):
        out.append((label, op, ".*" if value.startswith("$") else value))
    return out


def sum_rate(expr: str, before: list[Sample], after: list[Sample], seconds: float) -> dict[str, float]:
    m = SUM_RATE.match(expr.replace("sum(rate", "sum (rate"))
    gauge = SUM_GAUGE.match(expr) if not m else None
    if not m and not gauge:
        raise ValueError(f"not a query this renderer evaluates: {expr}")
    if gauge:
        # A gauge: its value now, not a rate.
        m, before, seconds = gauge, [], 1.0
    by = [b.strip() for b in (m["by"] or "").split(",") if b.strip()]
    wanted = matchers(m["m"])

    def selected(samples: list[Sample]) -> dict[frozenset[tuple[str, str]], float]:
        out = {}
        for name, labels, value in samples:
            d = dict(labels)
            if name == m["name"] and all(
                (re.fullmatch(v, d.get(k, "")) if op == "=~" else d.get(k) == v) for k, op, v in wanted
            ):
                out[labels] = value
        return out

    old, new = selected(before), selected(after)
    groups: dict[str, float] = defaultdict(float)
    for labels, value in new.items():
        d = dict(labels)
        groups[",".join(d.get(b, "") for b in by)] += max(value - old.get(labels, 0.0), 0.0) / seconds
    return dict(groups)


def quantile(q: float, buckets: dict[str, float]) -> float:
    """Prometheus's histogram_quantile over cumulative buckets keyed by `le`."""
    bounds = sorted((float(le), count) for le, count in buckets.items())
    if not bounds or bounds[-1][1] == 0:
        return math.nan
    rank = q * bounds[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in bounds:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / max(count - lower_count, 1e-12)
        lower_bound, lower_count = bound, count
    return bounds[-1][0]


def evaluate(expr: str, before: list[Sample], after: list[Sample], seconds: float) -> dict[str, float]:
    if m := QUANTILE.match(expr):
        # Grouped by `le` and maybe one label more: one quantile per value of that label.
        per: dict[str, dict[str, float]] = defaultdict(dict)
        for group, value in sum_rate(m["inner"], before, after, seconds).items():
            le, _, rest = group.partition(",")
            per[rest][le] = value
        return {rest: quantile(float(m["q"]), buckets) for rest, buckets in per.items()}
    if m := RATIO.match(expr):
        a = sum_rate(m["a"], before, after, seconds).get("", 0.0)
        b = sum_rate(m["b"], before, after, seconds).get("", 0.0)
        return {"": a / b if b else math.nan}
    return sum_rate(expr, before, after, seconds)


def snapshot(backend: ratekeeper.Backend) -> list[Sample]:
    return [(s.name, frozenset(s.labels.items()), s.value)
            for f in text_string_to_metric_families(backend.prometheus()) for s in f.samples]


def legend(template: str, expr: str, group: str) -> str:
    quantile_of = QUANTILE.match(expr)
    inner = quantile_of["inner"] if quantile_of else expr
    m = SUM_RATE.match(inner.replace("sum(rate", "sum (rate")) or SUM_GAUGE.match(inner)
    by = [b.strip() for b in ((m and m["by"]) or "").split(",") if b.strip()]
    if quantile_of:
        by = [b for b in by if b != "le"]
    values = dict(zip(by, group.split(","))) if by else {}
    return re.sub(r"\{\{(\w+)\}\}", lambda x: values.get(x[1], ""), template)


def load(backend: ratekeeper.Backend, seconds: float, stop: threading.Event) -> None:
    """The scripted traffic: a ramp on `api` past its rate (some refusals answered by the deny
    cache), a login window, leases of `pool` held a random while, a block on `partner` a third of
    the way in and a clamped pause later, settles of `llm`."""
    api = backend.token_bucket("api", 40, 40).with_deny_cache(True)
    login = backend.window("login", 30, 10)
    llm = backend.token_bucket("llm", 2000, 4000)
    partner = backend.token_bucket("partner", 20, 20)
    start = time.monotonic()

    def pool_worker() -> None:
        pool = backend.concurrent("pool", 3, 30)
        while not stop.is_set():
            d = pool.check("tenant")
            if d.lease is not None:
                time.sleep(random.uniform(0.05, 0.4))
                pool.release(d.lease, "tenant")
            else:
                time.sleep(0.05)

    workers = [threading.Thread(target=pool_worker, daemon=True) for _ in range(4)]
    for w in workers:
        w.start()
    blocked = paused = False
    while not stop.is_set():
        t = (time.monotonic() - start) / seconds
        for _ in range(int(20 + 60 * t)):
            api.check(f"user-{random.randrange(5)}")
        for _ in range(5):
            login.check("ip")
        d = llm.check("tenant", cost=200)
        if d.allowed:
            llm.settle(d, random.randint(50, 350))
        if t > 0.33 and not blocked:
            partner.block(15.0, "acct")
            blocked = True
        if t > 0.66 and not paused:
            partner.with_max_pause(5.0).pause(60.0, "acct")
            paused = True
        partner.check("acct")
        time.sleep(0.1)
    for w in workers:
        w.join()


def svg(series: dict[str, list[float]], unit: str, width: int = 640, height: int = 220) -> str:
    colors = ["#73bf69", "#f2495c", "#5794f2", "#ff9830", "#b877d9", "#fade2a", "#8ab8ff", "#ff7383"]
    values = [v for vs in series.values() for v in vs if not math.isnan(v)]
    top = max(values, default=1.0) * 1.1 or 1.0
    n = max((len(v) for v in series.values()), default=2)
    left, bottom = 56, 20
    out = [f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for i in range(5):
        y = 5 + (height - bottom - 5) * i / 4
        value = top * (1 - i / 4)
        label = f"{value * 1000:.1f} ms" if unit == "s" else f"{value:.3g}"
        out.append(f'<line x1="{left}" x2="{width}" y1="{y}" y2="{y}" stroke="#2c3235"/>'
                   f'<text x="{left - 6}" y="{y + 4}" fill="#9fa7b3" font-size="11" text-anchor="end">{label}</text>')
    for (name, vs), color in zip(series.items(), colors * 4):
        points = " ".join(f"{left + (width - left) * i / max(n - 1, 1):.1f},{5 + (height - bottom - 5) * (1 - v / top):.1f}"
                          for i, v in enumerate(vs) if not math.isnan(v))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>')
    out.append("</svg>")
    legend_html = "".join(f'<span class="key"><i style="background:{c}"></i>{html.escape(name)}</span>'
                          for name, c in zip(series, colors * 4))
    return "".join(out) + f'<div class="legend">{legend_html}</div>'


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", default=str(REPO / "docs" / "src" / "assets" / "observability-dashboard.png"))
    args = parser.parse_args()
    dashboard = json.loads((HERE / "ratekeeper.json").read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="rk-dashboard-")
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                              cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        backend = ratekeeper.Backend.redis(f"redis://127.0.0.1:{port}", prefix="dashboard")
        stop = threading.Event()
        traffic = threading.Thread(target=load, args=(backend, args.seconds, stop), daemon=True)
        snapshots = [snapshot(backend)]
        traffic.start()
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            time.sleep(1.0)
            snapshots.append(snapshot(backend))
        stop.set()
        traffic.join()
    finally:
        server.terminate()
        server.wait()
    cards = []
    for panel in dashboard["panels"]:
        steps = len(snapshots) - WINDOW
        # A series that appears late (a first clamped pause) starts where it appeared.
        series: dict[str, list[float]] = defaultdict(lambda: [math.nan] * steps)
        for target in panel["targets"]:
            for step, i in enumerate(range(WINDOW, len(snapshots))):
                for group, value in evaluate(target["expr"], snapshots[i - WINDOW], snapshots[i], WINDOW).items():
                    series[legend(target["legendFormat"], target["expr"], group)][step] = value
        cards.append(f'<div class="panel"><h2>{html.escape(panel["title"])}</h2>'
                     f'{svg(dict(series), panel["fieldConfig"]["defaults"]["unit"])}</div>')
    page = HERE / "render.html"
    page.write_text(
        "<!doctype html><meta charset=utf-8><style>body{background:#111217;color:#ccccdc;font:13px sans-serif;margin:12px}"
        "h1{font-size:16px;margin:4px 8px 10px}.grid{display:grid;grid-template-columns:1fr 1fr;gap:10px}"
        ".panel{background:#181b1f;border:1px solid #2c3235;border-radius:3px;padding:8px}"
        "h2{font-size:13px;margin:0 0 6px}.legend{margin-top:4px}.key{margin-right:12px;white-space:nowrap}"
        ".key i{display:inline-block;width:12px;height:3px;margin-right:5px;vertical-align:middle}</style>"
        f"<h1>{html.escape(dashboard['title'])}: the dashboard's queries over {args.seconds:.0f} s of scripted load "
        f"(rate window {WINDOW} s)</h1><div class=grid>{''.join(cards)}</div>")
    try:
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={args.out}", "--window-size=1360,1230", page.as_uri()],
                       check=True, capture_output=True, timeout=120)
    finally:
        page.unlink()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
