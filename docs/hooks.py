"""MkDocs hooks of the ratekeeper site (docs/mkdocs.yml: `hooks:`).

Pages that other work in progress writes (the Ruby binding, the HTTP middleware) join the nav as
soon as their file exists, at the place given here: the strict build passes before they land
(no nav entry to a missing file) and after (no page left out of the nav), whatever the order in
which the branches merge. Once a page has landed, its entry can move into `nav:` itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# (section title in the nav, entry title, path under docs/src, entry title it goes after)
EXPECTED = [
    ("Getting started", "Ruby", "getting-started/ruby.md", "C"),
    ("Guides", "HTTP APIs", "guides/http/index.md", None),
    ("Guides", "HTTP APIs: Python", "guides/http/python.md", "HTTP APIs"),
    ("Guides", "HTTP APIs: Node", "guides/http/node.md", "HTTP APIs: Python"),
    ("Guides", "From Sidekiq Enterprise", "guides/sidekiq.md", "Testing with a manual clock"),
]


def _title(entry: Any) -> str | None:
    return next(iter(entry)) if isinstance(entry, dict) else None


def on_config(config: Any) -> Any:
    docs = Path(config["docs_dir"])
    nav = config["nav"]
    for section, title, path, after in EXPECTED:
        if not (docs / path).is_file():
            continue
        entries = next((e[section] for e in nav if _title(e) == section), None)
        if entries is None:
            raise ValueError(f"docs/hooks.py: no nav section {section!r} for {path}")
        if any(isinstance(e, dict) and path in e.values() for e in entries):
            continue  # already in the nav by hand
        at = next((i + 1 for i, e in enumerate(entries) if _title(e) == after), None)
        if at is None:
            # first after the section's index page (a bare path), if any
            at = 1 if entries and isinstance(entries[0], str) else 0
        entries.insert(at, {title: path})
    return config
