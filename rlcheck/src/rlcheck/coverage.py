"""Branch coverage of chosen Python code, one call at a time.

What the greybox guide learns from and what the comparison harness measures afterwards:
the set of *arcs* (transitions from one executed line to the next inside a function,
function entry and exit included, the same notion of a branch as ``coverage.py``'s
branch mode) that one call executes inside the code under test.

Implementation: ``sys.settrace`` during the call only. Frames of code outside the chosen
files return no local tracer, so they cost one Python call each and no line events.
Python 3.11 has no ``sys.monitoring``; ``coverage.py``'s C tracer is faster per line but
its public API collects into a data file for a whole process, not a set per call (see the
package README for the measured cost of this tracer).

Examples
--------
>>> import json
>>> cov = BranchCoverage([json])
>>> result, arcs = cov.run(json.loads, "[1, 2]")
>>> result, len(arcs) > 0
([1, 2], True)
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterable
from types import CodeType, FrameType, ModuleType
from typing import Any, TypeVar

from rlcheck.errors import InvalidArgument

__all__ = ["Arc", "BranchCoverage"]

T = TypeVar("T")

Arc = tuple[str, int, int]
"""``(filename, from_line, to_line)``; a negative line is the function's entry or exit
(minus the line of its ``def``), as in ``coverage.py``."""

_Tracer = Callable[[FrameType, str, Any], Any]


def _roots(include: Iterable[str | os.PathLike[str] | ModuleType]) -> tuple[str, ...]:
    roots: list[str] = []
    for item in include:
        if isinstance(item, ModuleType):
            paths = list(getattr(item, "__path__", []))  # a package: its directories
            if not paths:
                if not getattr(item, "__file__", None):
                    raise InvalidArgument(f"include={item!r}: a module without a source file")
                paths = [str(item.__file__)]
        elif isinstance(item, str) and os.sep not in item and not item.endswith(".py"):
            spec = importlib.util.find_spec(item)  # a module name
            if spec is None:
                raise InvalidArgument(f"include={item!r}: no such module")
            paths = list(spec.submodule_search_locations or [spec.origin or ""])
        else:
            paths = [os.fspath(item)]
        roots.extend(os.path.realpath(p) for p in paths if p)
    if not roots:
        raise InvalidArgument("include= names no code to trace; pass modules or paths")
    return tuple(roots)


class BranchCoverage:
    """Records the arcs one call executes inside the chosen code.

    Parameters
    ----------
    include:
        Modules, packages (all their files), module names, or file/directory paths: the
        code under test. Everything else runs untraced.

    The tracer is installed for the duration of :meth:`run` on the calling thread only,
    and the tracer that was there before (a debugger, ``coverage.py``) is put back.
    """

    def __init__(self, include: Iterable[str | os.PathLike[str] | ModuleType]) -> None:
        self.roots = _roots(include)
        # Code object -> its filename when traced, "" when not (decided once per code).
        self._traced: dict[CodeType, str] = {}

    def _filename(self, code: CodeType) -> str:
        path = os.path.realpath(code.co_filename)
        for root in self.roots:
            if path == root or path.startswith(root + os.sep):
                return code.co_filename
        return ""

    def run(self, func: Callable[..., T], *args: Any) -> tuple[T, frozenset[Arc]]:
        """``func(*args)`` and the arcs it executed in the traced code (an exception from
        ``func`` propagates, the tracer removed)."""
        arcs: set[Arc] = set()
        add = arcs.add
        traced = self._traced
        filename_of = self._filename

        def on_call(frame: FrameType, event: str, arg: Any) -> _Tracer | None:
            code = frame.f_code
            name = traced.get(code)
            if name is None:
                name = traced[code] = filename_of(code)
            if not name:
                return None
            last = -code.co_firstlineno

            def on_line(frame: FrameType, event: str, arg: Any) -> _Tracer:
                nonlocal last
                if event == "line":
                    line = frame.f_lineno
                    add((name, last, line))
                    last = line
                elif event == "return":
                    add((name, last, -code.co_firstlineno))
                return on_line

            return on_line

        previous = sys.gettrace()
        sys.settrace(on_call)
        try:
            result = func(*args)
        finally:
            sys.settrace(previous)
        return result, frozenset(arcs)

    def measure(
        self, check: Callable[[Any], object]
    ) -> Callable[[Any], tuple[bool, frozenset[Arc]]]:
        """``check`` turned into ``value -> (verdict, arcs)``; an exception from ``check``
        (a program that rejects an input by raising) is a false verdict, with the arcs
        executed up to it."""

        def verdict(value: Any) -> bool:
            try:
                return bool(check(value))
            except Exception:
                return False

        def measured(value: Any) -> tuple[bool, frozenset[Arc]]:
            return self.run(verdict, value)

        return measured
