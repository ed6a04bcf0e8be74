#!/usr/bin/env python3
"""Renders the benchmark tables from the JSON the benches wrote to `bench/results/`, into the
Markdown files that carry generated markers, so no figure on a page is copied by hand:

    <!-- bench:begin NAME -->  ...generated...  <!-- bench:end NAME -->

NAME is `summary` (one row per area: the README), `all` (every result: the docs' benchmarks page)
or a result's name (`http-python`: that result's table alone, e.g. on a guide's "How fast").

    python3 bench/render.py           # rewrites the blocks
    python3 bench/render.py --check   # exits 1, with a diff, if a block differs from its render
"""

from __future__ import annotations

import difflib
import json
import pathlib
import re
import sys
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
# The files that may hold blocks: the README and every page of the docs.
PAGES = [REPO / "README.md", *sorted((REPO / "docs" / "src").rglob("*.md"))]
AREAS = ["Redis", "memory", "leased", "Python", "Node", "C", "Go", "HTTP middleware"]
BLOCK = re.compile(r"(<!-- bench:begin (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- bench:end (?P=name) -->)", re.S)


def load() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}


def number(value: float) -> str:
    """A figure at the precision a shared machine's run supports (three significant digits)."""
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.1f}k"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def figure(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{number(value)} {unit}"


def verdict(row: dict[str, Any]) -> str:
    if row["target"] is None:
        return ""
    return f"{row['target']} — {'met' if row['met'] else 'missed'}"


def run(result: dict[str, Any]) -> str:
    m = result["machine"]
    load = "load average " + " / ".join(f"{v:.2f}" for v in m["load"]) if m["load"] else "load not recorded"
    quick = ", quick run" if result["quick"] else ""
    return f"{m['date']}, commit `{m['commit']}`, {load} on {m['cpus']} CPUs{quick}"


def table(name: str, result: dict[str, Any]) -> str:
    lines = [
        f"**{result['title']}** (`{result['command']}`; {result['method']}). Run {run(result)}:",
        "",
        "| scenario | ratekeeper | compared with (same run) | ratio | target |",
        "|---|---:|---|---:|---|",
    ]
    for row in result["rows"]:
        peer = "—" if row["peer"] is None else f"{figure(row['peer_value'], row['unit'])} ({row['peer']})"
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}×"
        lines.append(f"| {row['scenario']} | {figure(row['ratekeeper'], row['unit'])} | {peer} | {ratio} | {verdict(row)} |")
    return "\n".join(lines) + "\n"


def headline(results: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    """The area's row for the README: the one a bench marked, else its lowest ratio against a target."""
    marked = [(r, row, "") for r in results for row in r["rows"] if row["headline"]]
    if marked:
        return marked[0]
    targeted = [(r, row) for r in results for row in r["rows"] if row["target"] is not None and row["ratio"] is not None]
    if not targeted:
        return None
    r, row = min(targeted, key=lambda pair: pair[1]["ratio"] / pair[1]["target_ratio"])
    return r, row, f" (the lowest of {len(targeted)})"


def summary(results: dict[str, dict[str, Any]]) -> str:
    lines = ["| area | scenario | compared with | ratio | target | run |", "|---|---|---|---:|---|---|"]
    for area in AREAS:
        picked = headline([r for r in results.values() if r["area"] == area])
        if picked is None:
            lines.append(f"| {area} | no benchmark yet | | | | |")
            continue
        r, row, note = picked
        m = r["machine"]
        lines.append(f"| {area} | {r['language']}: {row['scenario']}{note} | {row['peer']} | {row['ratio']:.2f}× "
                     f"| {verdict(row)} | {m['date'][:10]}, load {m['load'][0] if m['load'] else '?'}{', quick' if r['quick'] else ''} |")
    return "\n".join(lines) + "\n"


def render_block(name: str, results: dict[str, dict[str, Any]]) -> str:
    if name == "summary":
        return summary(results)
    if name == "all":
        ordered = sorted(results.items(), key=lambda kv: (AREAS.index(kv[1]["area"]), kv[0]))
        parts = []
        for area in AREAS:
            tables = [table(n, r) for n, r in ordered if r["area"] == area]
            if tables:
                parts.append(f"### {area}\n\n" + "\n".join(tables))
        return "\n".join(parts)
    if name not in results:
        raise SystemExit(f"no bench/results/{name}.json for the block {name!r}")
    return table(name, results[name])


def render(text: str, results: dict[str, dict[str, Any]]) -> str:
    return BLOCK.sub(lambda m: m.group(1) + render_block(m.group("name"), results) + m.group(4), text)


def main() -> None:
    check = "--check" in sys.argv[1:]
    results = load()
    stale = []
    for page in PAGES:
        text = page.read_text()
        if "<!-- bench:begin" not in text:
            continue
        new = render(text, results)
        if new == text:
            continue
        if check:
            stale.append(page)
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                                       str(page.relative_to(REPO)), "rendered from bench/results/"))
        else:
            page.write_text(new)
            print(f"rendered {page.relative_to(REPO)}")
    if stale:
        sys.exit(f"{len(stale)} file(s) differ from the tables rendered from bench/results/: run python3 bench/render.py")


if __name__ == "__main__":
    main()
