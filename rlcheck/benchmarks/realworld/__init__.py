"""Real-world validity benchmarks: generators whose inputs a real program accepts or rejects.

Each benchmark is one generator written once against the generation context
(:class:`rlcheck.Gen`), usable three ways:

* with the core API: ``rlcheck.run(b.generator, b.check, guide=...)``;
* as a Hypothesis strategy: :func:`strategy` runs the same generator with every choice
  drawn by Hypothesis (``sampled_from``, ``integers``, ``booleans``), so Hypothesis's
  backends (its own, ``backend="rlcheck"``) see the same choices;
* with branch feedback: ``b.measure(value)`` returns the verdict and the set of branches
  of the program under test that the check executed (:mod:`rlcheck.coverage`), which is
  what the greybox guide learns from and what the comparison harness replays afterwards.

Validity is always decided by the real program (``jsonschema`` with the GitHub Actions
workflow schema vendored by ``check-jsonschema``, ``xmlschema``, SQLite, ``compile`` and
``pyflakes``, the BST invariant), never by a re-implementation of it. Generators draw
keys, tags and names from vocabularies that include wrong ones, as in the RLCheck paper,
so that random generation is mostly invalid.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from hypothesis import strategies as st

from rlcheck.coverage import BranchCoverage

# The benchmarks directory holds bst.py, which the tree benchmark reuses.
_BENCHMARKS = str(Path(__file__).resolve().parents[1])
if _BENCHMARKS not in sys.path:
    sys.path.insert(0, _BENCHMARKS)

__all__ = ["BENCHMARKS", "Benchmark", "DrawGen", "load", "strategy"]

T = TypeVar("T")

Branches = frozenset[Hashable]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: a generator, its validity check, and branch feedback for the check."""

    name: str
    generator: Callable[[Any], Any]
    """Function of a :class:`rlcheck.Gen` (or :class:`DrawGen`) returning an input."""
    check: Callable[[Any], bool]
    """The real program's verdict: true when it accepts the input."""
    measure: Callable[[Any], tuple[bool, Branches]]
    """The verdict and the branches of the program under test executed while reaching it."""
    description: str
    coverage: str
    """What a branch is here (which code is traced)."""

    @classmethod
    def traced(
        cls,
        name: str,
        generator: Callable[[Any], Any],
        check: Callable[[Any], bool],
        *,
        include: Sequence[str | ModuleType],
        traced: str,
        description: str,
    ) -> Benchmark:
        """A benchmark whose branches are the arcs ``check`` executes in ``include``
        (:class:`rlcheck.coverage.BranchCoverage`); ``traced`` names that code."""
        return cls(
            name=name,
            generator=generator,
            check=check,
            measure=BranchCoverage(include).measure(check),
            description=description,
            coverage=f"arcs executed in {traced}",
        )


BENCHMARKS = ("workflow", "xsd", "sql", "pymodule", "bst")
"""Names accepted by :func:`load`, each the module ``realworld.<name>`` with a ``make()``."""


def load(name: str) -> Benchmark:
    """Build the benchmark called ``name`` (imports its program under test)."""
    if name not in BENCHMARKS:
        raise ValueError(f"benchmark={name!r} is not one of {', '.join(BENCHMARKS)}")
    module = importlib.import_module(f"{__name__}.{name}")
    benchmark: Benchmark = module.make()
    return benchmark


class DrawGen:
    """The generation context's choice points, each answered by a Hypothesis draw.

    ``scope`` is accepted and ignored: Hypothesis sees the structure through its own
    strategy spans. One strategy is built per distinct choice point shape (options,
    bounds) and kept in ``strategies``: building and validating a fresh ``sampled_from``
    at every draw took about a third of a test case's time, a cost of this adapter, not
    of Hypothesis.
    """

    __slots__ = ("_draw", "_strategies")

    def __init__(
        self,
        draw: Callable[[st.SearchStrategy[Any]], Any],
        strategies: dict[Hashable, st.SearchStrategy[Any]] | None = None,
    ) -> None:
        self._draw = draw
        self._strategies = {} if strategies is None else strategies

    def _drawn(self, key: Hashable, make: Callable[[], st.SearchStrategy[Any]]) -> Any:
        strategy = self._strategies.get(key)
        if strategy is None:
            strategy = self._strategies[key] = make()
        return self._draw(strategy)

    def choice(self, options: Sequence[T], *, label: Hashable | None = None) -> T:
        result: T = self._drawn(("choice", tuple(options)), lambda: st.sampled_from(options))
        return result

    def integer(self, low: int, high: int, *, label: Hashable | None = None) -> int:
        result: int = self._drawn(("integer", low, high), lambda: st.integers(low, high))
        return result

    def boolean(self, *, label: Hashable | None = None) -> bool:
        result: bool = self._drawn("boolean", st.booleans)
        return result

    @contextlib.contextmanager
    def scope(self, label: Hashable) -> Iterator[None]:
        yield


def strategy(generator: Callable[[Any], T]) -> st.SearchStrategy[T]:
    """The generator as a Hypothesis strategy (same choices, drawn by Hypothesis)."""

    strategies: dict[Hashable, st.SearchStrategy[Any]] = {}  # this strategy's own cache

    @st.composite
    def drawn(draw: Callable[[st.SearchStrategy[Any]], Any]) -> T:
        return generator(DrawGen(draw, strategies))

    result: st.SearchStrategy[T] = drawn()
    return result
