"""A small AST mutation operator set, applied in memory (the Etna benchmark's bug injector).

A *site* is one node of a module's AST that an operator can change; a mutant is one site and
one replacement. Sites are enumerated in a fixed order (a walk of the tree), so a mutant is
named by ``(file, index)`` and the description of its change, which the benchmark checks
again before running it (a changed vendored file cannot silently rename the mutants).

Operators (the classic ones of mutation testing, as in mutmut and Etna's mutants):

* ``cmp``: a comparison operator flipped: ``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``,
  ``is`` ↔ ``is not``, ``in`` ↔ ``not in``;
* ``const``: an integer constant off by one (``n + 1`` and ``n - 1``);
* ``boolop``: ``and`` ↔ ``or``;
* ``arith``: ``+`` ↔ ``-``, ``*`` → ``+``, ``//`` → ``*``... (the binary operator swapped
  for its partner);
* ``not``: ``not x`` → ``x``; an ``if``/``while`` condition negated;
* ``return``: ``return True`` ↔ ``return False``, ``return <expr>`` → ``return None``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

_CMP_SWAP: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_ARITH_SWAP: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Add,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
}
_SYMBOL = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.And: "and",
    ast.Or: "or",
}


@dataclass(frozen=True)
class Mutant:
    """One change to one module: its site ``index`` in the walk, and what it does."""

    file: str
    index: int
    operator: str
    line: int
    function: str
    description: str

    @property
    def id(self) -> str:
        return f"{self.file}:{self.index}"


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """Every function of a module with its qualified name (methods as ``Class.name``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    yield f"{node.name}.{item.name}", item


def _sites(function: ast.AST) -> Iterator[tuple[ast.AST, str, int, str]]:
    """(node, operator, variant, description) for every mutation of one function body."""
    for node in ast.walk(function):
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                swap = _CMP_SWAP.get(type(op))
                if swap is not None:
                    yield node, "cmp", i, f"{_SYMBOL[type(op)]} -> {_SYMBOL[swap]}"
        elif isinstance(node, ast.BoolOp):
            other = "or" if isinstance(node.op, ast.And) else "and"
            yield node, "boolop", 0, f"{_SYMBOL[type(node.op)]} -> {other}"
        elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH_SWAP:
            swap = _ARITH_SWAP[type(node.op)]
            yield node, "arith", 0, f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[swap]}"
        elif isinstance(node, ast.AugAssign) and type(node.op) in _ARITH_SWAP:
            swap = _ARITH_SWAP[type(node.op)]
            yield node, "arith", 0, f"{_SYMBOL[type(node.op)]}= -> {_SYMBOL[swap]}="
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            yield node, "const", 1, f"{node.value} -> {node.value + 1}"
            yield node, "const", -1, f"{node.value} -> {node.value - 1}"
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not", 0, "not x -> x"
        elif isinstance(node, (ast.If, ast.While)):
            yield node, "not", 1, "condition negated"
        elif isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                yield node, "return", 0, f"return {value.value} -> return {not value.value}"
            elif not (isinstance(value, ast.Constant) and value.value is None):
                yield node, "return", 1, "return x -> return None"


def _walk(tree: ast.AST, functions: tuple[str, ...] | None) -> Iterator[tuple]:
    for name, function in _functions(tree):
        if functions is not None and name not in functions:
            continue
        for node, operator, variant, description in _sites(function):
            yield name, node, operator, variant, description


def enumerate_mutants(
    source: str, file: str, functions: tuple[str, ...] | None = None
) -> list[Mutant]:
    """Every mutant of ``source`` (optionally only inside ``functions``), in site order."""
    tree = ast.parse(source)
    return [
        Mutant(file, index, operator, getattr(node, "lineno", 0), name, description)
        for index, (name, node, operator, _, description) in enumerate(_walk(tree, functions))
    ]


def apply(source: str, mutant: Mutant, functions: tuple[str, ...] | None = None) -> ast.Module:
    """The AST of ``source`` with ``mutant`` applied (checked against its description)."""
    tree = ast.parse(source)
    for index, (name, node, operator, variant, description) in enumerate(_walk(tree, functions)):
        if index != mutant.index:
            continue
        if (operator, description, name) != (mutant.operator, mutant.description, mutant.function):
            raise ValueError(
                f"mutant {mutant.id} no longer matches its source: expected "
                f"{mutant.function}: {mutant.description}, found {name}: {description}"
            )
        return ast.fix_missing_locations(
            _Replace(node, _mutated(node, operator, variant)).visit(tree)
        )
    raise ValueError(f"mutant {mutant.id}: the source has no site {mutant.index}")


class _Replace(ast.NodeTransformer):
    """Puts ``new`` where ``old`` (that very node) stands."""

    def __init__(self, old: ast.AST, new: ast.AST) -> None:
        self.old, self.new = old, new

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if node is self.old:
            return self.new
        return super().generic_visit(node)


def _mutated(node: ast.AST, operator: str, variant: int) -> ast.AST:
    """The replacement of ``node`` (changed in place where the node's type stays)."""
    if operator == "cmp":
        assert isinstance(node, ast.Compare)
        node.ops[variant] = _CMP_SWAP[type(node.ops[variant])]()
    elif operator == "boolop":
        assert isinstance(node, ast.BoolOp)
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif operator == "arith":
        assert isinstance(node, (ast.BinOp, ast.AugAssign))
        node.op = _ARITH_SWAP[type(node.op)]()
    elif operator == "const":
        assert isinstance(node, ast.Constant)
        node.value = node.value + variant
    elif operator == "not" and variant == 0:
        assert isinstance(node, ast.UnaryOp)
        return ast.copy_location(ast.Call(ast.Name("bool", ast.Load()), [node.operand], []), node)
    elif operator == "not":
        assert isinstance(node, (ast.If, ast.While))
        node.test = ast.UnaryOp(ast.Not(), node.test)
    elif operator == "return" and variant == 0:
        assert isinstance(node, ast.Return) and isinstance(node.value, ast.Constant)
        node.value = ast.Constant(not node.value.value)
    else:
        assert isinstance(node, ast.Return)
        node.value = ast.Constant(None)
    return node
