"""The greybox baseline: coverage-guided mutation of recorded choice sequences (Zest-style)."""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from rlcheck.errors import InvalidArgument
from rlcheck.guides.base import Guide

__all__ = ["GreyboxGuide"]

# Range of a fresh index in a mutated sequence; taken modulo the options at its point, so
# any width well above the largest choice (rlcheck.gen.MAX_OPTIONS = 1024) is near-uniform.
_INDEX_RANGE = 1 << 16

Measure = Callable[[Any], tuple[bool, frozenset[Hashable]]]


class GreyboxGuide(Guide):
    """Mutates the choice sequences of inputs that reached new branches (after Zest).

    Each input's choice sequence is recorded. An input joins the *corpus* when the run
    of the program under test on it executed a branch no earlier run had (or, for a
    valid input, one no earlier valid input had). Each new input is a corpus entry,
    picked at random, with 1 to ``max_mutations`` mutations (replace, insert or delete a
    choice), replayed leniently: an index is taken modulo the options at its point, and
    choices past the end are random. While the corpus is empty, and with probability
    ``fresh`` afterwards, the input is plain random.

    The branches come from the check: wrap it with :meth:`observe`, which takes a
    ``measure(value) -> (valid, branches)`` function (e.g.
    :meth:`rlcheck.coverage.BranchCoverage.measure`), and pass the result to
    :func:`rlcheck.run` as the check. Without it the guide has no coverage to go on and
    keeps the new valid inputs instead (mutational fuzzing on novelty, black-box).

    Parameters
    ----------
    seed:
        Seed of the guide's random stream.
    max_mutations:
        Most mutations applied to a parent sequence (at least one is).
    fresh:
        Probability of a plain random input once the corpus has entries.

    Examples
    --------
    >>> import rlcheck
    >>> from rlcheck.coverage import BranchCoverage
    >>> import json
    >>> def document(g):
    ...     return g.choice(["[", "]", "1", ",", '"a"'], label="token") * g.integer(1, 3)
    >>> guide = GreyboxGuide(seed=0)
    >>> measure = BranchCoverage([json]).measure(json.loads)
    >>> result = rlcheck.run(document, guide.observe(measure), guide=guide, trials=200)
    >>> len(guide.corpus) > 0
    True
    """

    name = "greybox"

    def __init__(
        self, *, seed: int | None = None, max_mutations: int = 4, fresh: float = 0.05
    ) -> None:
        if not isinstance(max_mutations, int) or max_mutations < 1:
            raise InvalidArgument(f"max_mutations={max_mutations!r} must be a positive int")
        if not 0.0 <= fresh <= 1.0:
            raise InvalidArgument(f"fresh={fresh!r} must lie in [0, 1]")
        self._seed = seed
        self._rng = _random.Random(seed)
        self.max_mutations = max_mutations
        self.fresh = fresh
        self.corpus: list[tuple[int, ...]] = []
        """Choice sequences kept as parents, in the order they were found."""
        self._covered: set[Hashable] = set()
        self._valid_covered: set[Hashable] = set()
        self._script: list[int] = []
        self._chosen: list[int] = []
        self._branches: frozenset[Hashable] | None = None

    def observe(self, measure: Measure) -> Callable[[Any], bool]:
        """The check to run: ``measure``'s verdict, its branches kept for this guide."""

        def check(value: Any) -> bool:
            valid, self._branches = measure(value)
            return valid

        return check

    def _mutate(self, parent: tuple[int, ...]) -> list[int]:
        rng = self._rng
        script = list(parent)
        for _ in range(1 + int(rng.random() * self.max_mutations)):
            op = rng.random()
            at = int(rng.random() * (len(script) + 1))
            if op < 1 / 3 and at < len(script):
                del script[at]
            elif op < 2 / 3:
                script.insert(at, int(rng.random() * _INDEX_RANGE))
            elif script:
                script[min(at, len(script) - 1)] = int(rng.random() * _INDEX_RANGE)
        return script

    def start_episode(self) -> None:
        self._chosen = []
        self._branches = None
        if not self.corpus or self._rng.random() < self.fresh:
            self._script = []
        else:
            self._script = self._mutate(self.corpus[int(self._rng.random() * len(self.corpus))])

    def choose(self, point: Hashable, options: Sequence[Any]) -> int:
        chosen = self._chosen
        pos = len(chosen)
        n = len(options)
        # Indices are taken modulo the options: any mutated sequence replays to some input.
        index = self._script[pos] % n if pos < len(self._script) else int(self._rng.random() * n)
        chosen.append(index)
        return index

    def end_episode(self, *, valid: bool, new: bool) -> None:
        branches = self._branches
        self._branches = None
        if branches is None:  # no coverage observed: keep what is new and valid
            keep = valid and new
        else:
            keep = not branches <= self._covered
            if keep:
                self._covered.update(branches)
            if valid and not branches <= self._valid_covered:
                self._valid_covered.update(branches)
                keep = True
        if keep:
            self.corpus.append(tuple(self._chosen))

    @property
    def branches_covered(self) -> int:
        """Distinct branches executed so far (by any input)."""
        return len(self._covered)

    def reseed(self, seed: int | None) -> None:
        self._seed = seed
        self._rng.seed(seed)

    def describe(self) -> dict[str, Any]:
        return {
            "guide": self.name,
            "seed": self._seed,
            "max_mutations": self.max_mutations,
            "fresh": self.fresh,
        }

    def __repr__(self) -> str:
        return f"GreyboxGuide(seed={self._seed!r})"
