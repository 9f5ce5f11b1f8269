"""Python modules that ``compile()`` accepts and ``pyflakes`` reports nothing for.

The generator writes a module from a small statement grammar (imports, assignments,
``def`` with parameters and ``return``, ``if``, ``for``, calls) with names drawn from a
vocabulary, so most modules use a name before it is bound, import what they never use,
``return`` outside a function, or are not even syntactically valid. Valid when the
module compiles and ``pyflakes`` has no message for it (undefined or unused names,
redefinitions, ...), i.e. ``pyflakes`` would exit with status 0.
"""

from __future__ import annotations

import ast
from typing import Any

import pyflakes
from pyflakes.checker import Checker

from realworld import Benchmark

NAMES = ("x", "y", "f", "os", "path", "items", "undefined")
IMPORTS = ("import os", "from os import path", "import sys", "from . import x")
LITERALS = ("0", "1", "'s'", "None", "[]")
MAX_DEPTH = 2


def _expression(g: Any) -> str:
    kind = g.choice(("name", "literal", "binary", "call", "attribute"), label="expression")
    with g.scope(kind):
        if kind == "name":
            return g.choice(NAMES, label="name")
        if kind == "literal":
            return g.choice(LITERALS, label="literal")
        if kind == "binary":
            op = g.choice(("+", "*", "==", "and", "in"), label="operator")
            return f"({g.choice(NAMES, label='name')} {op} {_expression(g)})"
        if kind == "call":
            return f"{g.choice(NAMES, label='name')}({g.choice(LITERALS, label='literal')})"
        return f"{g.choice(NAMES, label='name')}.{g.choice(('join', 'sep', 'path'), label='attr')}"


def _block(g: Any, indent: str, depth: int) -> list[str]:
    lines: list[str] = []
    for _ in range(g.integer(1, 3, label="n_statements")):
        kind = g.choice(
            ("import", "assign", "def", "if", "for", "return", "call"), label="statement"
        )
        with g.scope(kind):
            if kind == "import":
                lines.append(indent + g.choice(IMPORTS, label="import"))
            elif kind == "assign":
                lines.append(f"{indent}{g.choice(NAMES, label='name')} = {_expression(g)}")
            elif kind == "return":
                lines.append(f"{indent}return {_expression(g)}")
            elif kind == "call":
                lines.append(f"{indent}print({_expression(g)})")
            elif depth >= MAX_DEPTH:
                lines.append(f"{indent}pass")
            elif kind == "def":
                name = g.choice(NAMES, label="name")
                parameter = g.choice(("", "x", "y", "x, y"), label="parameters")
                lines.append(f"{indent}def {name}({parameter}):")
                lines.extend(_block(g, indent + "    ", depth + 1))
            elif kind == "if":
                lines.append(f"{indent}if {_expression(g)}:")
                lines.extend(_block(g, indent + "    ", depth + 1))
            else:
                lines.append(f"{indent}for {g.choice(NAMES, label='name')} in {_expression(g)}:")
                lines.extend(_block(g, indent + "    ", depth + 1))
    return lines


def module(g: Any) -> str:
    """A Python module's source text."""
    return "\n".join(_block(g, "", 0)) + "\n"


def check(source: str) -> bool:
    """``compile()`` accepts ``source`` and ``pyflakes`` reports no message for it."""
    try:
        compile(source, "<generated>", "exec")
    except (SyntaxError, ValueError):
        return False
    return not Checker(ast.parse(source), "<generated>").messages


def make() -> Benchmark:
    """The benchmark."""
    return Benchmark.traced(
        "pymodule", module, check, include=[pyflakes], traced="pyflakes",
        description="Python modules that compile() accepts and pyflakes passes",
    )  # fmt: skip
