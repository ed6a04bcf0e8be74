#!/usr/bin/env python3
"""Writes the spec reference page from the JSON Schema that core/examples/spec_schema.rs derives
from the core's parser (scripts/test-docs runs both before the build).

Usage: docs/gen/spec_reference.py SCHEMA.json > docs/src/reference/specs.md
"""

from __future__ import annotations

import json
import sys
from typing import Any


def kind_type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " \\| ".join(f'`"{v}"`' for v in schema["enum"])
    if schema.get("type") == "array":
        items = schema["items"]
        shape = f"{items['minItems']}" if items["minItems"] == items["maxItems"] else f"{items['minItems']}–{items['maxItems']}"
        return f"array of arrays of {shape} numbers"
    return str(schema.get("type", ""))


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    schema = json.load(open(sys.argv[1], encoding="utf-8"))
    out = [
        "# Spec reference",
        "",
        "Every field of every kind of [spec](../concepts/specs.md), generated at build time from the",
        "core's own parser by `core/examples/spec_schema.rs`: a field is required when the parser",
        "refuses a spec without it, its default is what the canonical form fills in, and it is an",
        "integer when the parser refuses a fraction. Durations are seconds. Values are also",
        "range-checked when the limiter is built; every refusal names the field by its path.",
        "The same facts as a JSON Schema: [spec.schema.json](spec.schema.json).",
    ]
    for kind in schema["oneOf"]:
        name = kind["title"]
        props = kind["properties"]
        out += ["", f"## `{name}`", "", "| field | type | required or default | example |", "|---|---|---|---|"]
        for field, spec in props.items():
            if field == "kind":
                continue
            if field in kind["required"]:
                need = "required"
            elif spec.get("default") is None:
                need = "optional (no default: left out of the canonical form)"
            else:
                need = f"default `{json.dumps(spec['default'])}`"
            example = json.dumps(spec["examples"][0], separators=(",", ":"))
            out.append(f"| `{field}` | {kind_type(spec)} | {need} | `{example}` |")
        canonical = [kind["x-canonical"]]
        if kind["x-canonical-of-required"] != kind["x-canonical"]:
            canonical.append(kind["x-canonical-of-required"])
        out += [
            "",
            "Canonical form (what every language reads back, byte for byte)"
            + (", of the sample and of its required fields alone:" if len(canonical) > 1 else ":"),
            "",
            "```json",
            *canonical,
            "```",
        ]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
