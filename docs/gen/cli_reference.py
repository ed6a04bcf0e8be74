#!/usr/bin/env python3
"""Writes the CLI reference page from clap's own help (scripts/test-docs runs it before the build).

Usage: docs/gen/cli_reference.py PATH/TO/ratekeeper > docs/src/reference/cli.md

The page is `ratekeeper --help` followed by `ratekeeper help SUBCOMMAND` for each subcommand
clap lists, verbatim, so it says exactly what the binary says: a changed flag or help text
changes the page at the next build, with no copy to keep in step.
"""

from __future__ import annotations

import os
import subprocess
import sys


def help_text(binary: str, *args: str) -> str:
    run = subprocess.run([binary, *args], capture_output=True, text=True, check=True, env={**os.environ, "NO_COLOR": "1"})
    return run.stdout.rstrip() + "\n"


def subcommands(top: str) -> list[str]:
    """The names under clap's `Commands:` heading, in its order (without `help` itself)."""
    names: list[str] = []
    lines = iter(top.splitlines())
    for line in lines:
        if line.strip() == "Commands:":
            break
    for line in lines:
        if not line.strip():
            break
        if line.startswith("  ") and not line.startswith("   "):
            name = line.split()[0]
            if name != "help":
                names.append(name)
    return names


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    binary = sys.argv[1]
    top = help_text(binary, "--help")
    names = subcommands(top)
    if not names:
        print("cli_reference: no subcommands found under `Commands:` in --help", file=sys.stderr)
        return 1
    version = help_text(binary, "--version").strip()
    out = [
        "# CLI reference",
        "",
        f"Generated at build time from the binary's own help (`{version}`; clap). How to use it day to",
        "day: [The CLI](../operating/cli.md) and [The Limits page](../operating/serve.md).",
        "",
        "## ratekeeper",
        "",
        "```text",
        top.rstrip(),
        "```",
    ]
    for name in names:
        out += ["", f"## ratekeeper {name}", "", "```text", help_text(binary, "help", name).rstrip(), "```"]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
