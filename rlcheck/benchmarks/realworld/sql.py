"""SQL queries that SQLite executes on a fixed schema of three small tables.

The generator writes ``SELECT`` queries from a grammar (joins, ``WHERE``, ``GROUP BY`` /
``HAVING``, ``ORDER BY``, ``LIMIT``), with column, table and function names from
vocabularies that include wrong ones (``price``, ``customers``, ``len``). Valid when the
in-memory database prepares and runs the query to the end.

SQLite is C code, so there are no Python branches to trace: the branch set of a query is
the set of consecutive opcode pairs of its compiled program (``EXPLAIN``), SQLite's own
view of what the query makes it do. That is a coarser signal than branch coverage, and it
costs one more prepare per query.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Hashable
from typing import Any

from realworld import Benchmark

SCHEMA = """
CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, age INTEGER);
CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users(id),
                     amount REAL, status TEXT);
CREATE TABLE items (order_id INTEGER REFERENCES orders(id), sku TEXT, qty INTEGER);
INSERT INTO users VALUES (1, 'ann', 31), (2, 'bob', 45), (3, 'cy', NULL);
INSERT INTO orders VALUES (1, 1, 9.5, 'paid'), (2, 1, 20.0, 'open'), (3, 2, 3.25, 'paid');
INSERT INTO items VALUES (1, 'x1', 2), (1, 'y2', 1), (2, 'x1', 5), (3, 'z9', 1);
"""
TABLES = ("users", "orders", "items", "customers")
COLUMNS = ("id", "name", "age", "user_id", "amount", "status", "sku", "qty", "price")
FUNCTIONS = ("count", "sum", "max", "length", "upper", "abs", "len")
OPERATORS = ("=", "<", ">", "<>", "+", "LIKE", "==>")
LITERALS = ("1", "0", "'paid'", "'a%'", "NULL", "2.5")


def _operand(g: Any) -> str:
    kind = g.choice(("column", "literal", "call"), label="operand")
    if kind == "column":
        return g.choice(COLUMNS, label="column")
    if kind == "literal":
        return g.choice(LITERALS, label="literal")
    with g.scope("call"):
        return f"{g.choice(FUNCTIONS, label='function')}({g.choice(COLUMNS, label='column')})"


def _condition(g: Any) -> str:
    with g.scope("condition"):
        text = f"{_operand(g)} {g.choice(OPERATORS, label='operator')} {_operand(g)}"
        if g.boolean(label="more"):
            text += f" {g.choice(('AND', 'OR', 'NOT'), label='connective')} {_condition(g)}"
    return text


def query(g: Any) -> str:
    """A ``SELECT`` query's text."""
    with g.scope("select"):
        distinct = "DISTINCT " if g.boolean(label="distinct") else ""
        columns = ", ".join(_operand(g) for _ in range(g.integer(1, 3, label="n_columns")))
    with g.scope("from"):
        text = f"SELECT {distinct}{columns} FROM {g.choice(TABLES, label='table')}"
        if g.boolean(label="join"):
            text += f" JOIN {g.choice(TABLES, label='table')} ON {_condition(g)}"
    if g.boolean(label="where"):
        text += f" WHERE {_condition(g)}"
    if g.boolean(label="group_by"):
        with g.scope("group"):
            text += f" GROUP BY {g.choice(COLUMNS, label='column')}"
            if g.boolean(label="having"):
                text += f" HAVING {_condition(g)}"
    if g.boolean(label="order_by"):
        with g.scope("order"):
            text += f" ORDER BY {_operand(g)} {g.choice(('ASC', 'DESC', ''), label='direction')}"
    if g.boolean(label="limit"):
        text += f" LIMIT {g.choice(('1', '10', '-1', 'x'), label='limit')}"
    return text


def make() -> Benchmark:
    """The benchmark, with its own in-memory database."""
    connection = sqlite3.connect(":memory:", check_same_thread=False)
    connection.executescript(SCHEMA)

    def check(text: str) -> bool:
        try:
            connection.execute(text).fetchall()
        except (sqlite3.Error, sqlite3.Warning, OverflowError):
            return False
        return True

    def measure(text: str) -> tuple[bool, frozenset[Hashable]]:
        if not check(text):
            return False, frozenset()
        opcodes = [row[1] for row in connection.execute("EXPLAIN " + text)]
        return True, frozenset(itertools.pairwise(opcodes))

    return Benchmark(
        name="sql",
        generator=query,
        check=check,
        measure=measure,
        description="SELECT queries SQLite runs on a three-table schema",
        coverage="consecutive opcode pairs of SQLite's compiled query (EXPLAIN); C code",
    )
