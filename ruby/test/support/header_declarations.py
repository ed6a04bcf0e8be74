"""The declarations of include/ratekeeper.h as JSON, read by a C parser (pycparser).

The Ruby gem declares the C functions and structs it uses by hand (ruby/lib/ratekeeper/native.rb);
ruby/test/native_header_test.rb compares those declarations with this output, so a signature
or a struct field that changes in the header fails the Ruby suite.

Usage: python header_declarations.py include/ratekeeper.h

Prints {"functions": {name: {"return": T, "params": [T, ...]}},
        "structs": {name: [[field, T], ...]},
        "enums": {name: {constant: value}}}
where each T is the C type as text with typedefs of the header resolved: `uint64_t`, `bool`,
`const char *`, `struct rk_decision *`, `enum rk_status`, `char[65]`, `fn *` (a function
pointer). The standard headers are not parsed (pycparser reads plain C, not glibc's extensions):
their few types are declared as opaque typedef names, so they keep their names.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from pycparser import c_ast, c_parser

# The standard types the header uses, as typedef names (their definitions do not matter: the
# comparison is by name).
STANDARD = ["bool", "size_t", "uintptr_t"] + [f"{s}int{n}_t" for s in ("", "u") for n in (8, 16, 32, 64)]


def preprocess(path: str) -> str:
    """The header without its standard includes, through the C preprocessor (no predefined
    macros: `__cplusplus` is not defined, so its `extern "C"` wrapper goes away)."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"^#include <[^>]+>$", "", f.read(), flags=re.M)
    prelude = "".join(f"typedef int {name};\n" for name in STANDARD)
    return subprocess.run(
        ["cpp", "-P", "-undef", "-nostdinc"], input=prelude + text, capture_output=True, text=True, check=True
    ).stdout


class Types:
    """C types as text, with the header's typedefs resolved."""

    def __init__(self, ast: c_ast.FileAST) -> None:
        self.typedefs = {
            node.name: node.type
            for node in ast.ext
            if isinstance(node, c_ast.Typedef) and node.name not in STANDARD
        }

    def text(self, node: c_ast.Node) -> str:
        if isinstance(node, c_ast.TypeDecl):
            quals = "".join(f"{q} " for q in node.quals)
            return quals + self.text(node.type)
        if isinstance(node, c_ast.IdentifierType):
            name = " ".join(node.names)
            return self.text(self.typedefs[name]) if name in self.typedefs else name
        if isinstance(node, c_ast.Struct):
            return f"struct {node.name}"
        if isinstance(node, c_ast.Enum):
            return f"enum {node.name}"
        if isinstance(node, c_ast.PtrDecl):
            target = node.type
            if isinstance(target, c_ast.FuncDecl):
                return "fn *"
            inner = self.text(target)
            return (inner + " *" if not inner.endswith("*") else inner + "*") + "".join(f" {q}" for q in node.quals)
        if isinstance(node, c_ast.ArrayDecl):
            return f"{self.text(node.type)}[{node.dim.value}]"
        if isinstance(node, c_ast.FuncDecl):
            return "fn"
        raise ValueError(f"a C type this script does not know: {node!r}")


def declarations(path: str) -> dict:
    ast = c_parser.CParser().parse(preprocess(path), filename=path)
    types = Types(ast)
    functions, structs, enums = {}, {}, {}
    for node in ast.ext:
        if isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl):
            params = node.type.args.params if node.type.args else []
            texts = [types.text(p.type) for p in params]
            functions[node.name] = {"return": types.text(node.type.type), "params": [] if texts == ["void"] else texts}
        inner = node.type.type if isinstance(node, (c_ast.Typedef, c_ast.Decl)) else None
        if isinstance(inner, c_ast.TypeDecl):
            inner = inner.type
        if isinstance(inner, c_ast.Struct) and inner.decls is not None:
            structs[inner.name] = [[field.name, types.text(field.type)] for field in inner.decls]
        if isinstance(inner, c_ast.Enum) and inner.values is not None:
            values, next_value = {}, 0
            for e in inner.values.enumerators:
                next_value = int(e.value.value, 0) if e.value is not None else next_value
                values[e.name] = next_value
                next_value += 1
            enums[inner.name] = values
    return {"functions": functions, "structs": structs, "enums": enums}


if __name__ == "__main__":
    json.dump(declarations(sys.argv[1]), sys.stdout, indent=1, sort_keys=True)
