"""The baseline guide: every option equally likely (QuickCheck-style random generation)."""

from __future__ import annotations

import random as _random
from collections.abc import Hashable, Sequence
from typing import Any

from rlcheck.guides.base import Guide

__all__ = ["RandomGuide"]


class RandomGuide(Guide):
    """Picks uniformly among the options at every choice point; learns nothing.

    Parameters
    ----------
    seed:
        Seed of the guide's random stream; ``None`` draws one from the OS.

    Examples
    --------
    >>> import rlcheck
    >>> gen = lambda g: g.integer(0, 9)
    >>> result = rlcheck.run(gen, lambda x: x < 5, guide=RandomGuide(seed=0), trials=100)
    >>> result.unique_valid
    5
    """

    name = "random"

    def __init__(self, *, seed: int | None = None) -> None:
        self._seed = seed
        self._rng = _random.Random(seed)
        self._random = self._rng.random

    def choose(self, point: Hashable, options: Sequence[Any]) -> int:
        # The same primitive as the RL guide's exploration (rlcheck.learner), so speed
        # comparisons between guides measure the learning, not the random-number call.
        return int(self._random() * len(options))

    def reseed(self, seed: int | None) -> None:
        self._seed = seed
        self._rng.seed(seed)

    def describe(self) -> dict[str, Any]:
        return {"guide": self.name, "seed": self._seed}

    def __repr__(self) -> str:
        return f"RandomGuide(seed={self._seed!r})"
