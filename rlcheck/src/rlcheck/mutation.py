"""Mutation of earlier valid cases: replay a valid test case's draws with one changed.

Where validity is strict, a fresh input is mostly invalid, but a valid input with one
choice changed is often still valid and is a *different* valid input: the neighbourhood of
what already passed is where inputs that are both valid and new are dense (Zest's insight,
and part of Hypothesis's own engine). :class:`CasePool` keeps the draws of recent valid
cases that were new; :meth:`CasePool.plan` picks one and a position to change, and the
:class:`Plan` answers each draw of the next case:

* before the position, the recorded value (while the draws line up: the same kind of draw
  with the same constraints, so the value is permitted);
* at the position, :data:`FRESH`: the front end draws a value other than the recorded
  one (:meth:`Plan.changed`): the other boolean, another integer (a boundary value, a
  bound or the recorded value's neighbour, when :attr:`Plan.boundary`), a fresh draw;
* after it, the recorded values again while the draws still line up (a point mutation),
  and :data:`FRESH` from the first draw that does not (the changed choice moved the rest:
  the case goes on as a fresh one from a valid prefix).

Front-end neutral: a draw is named by a hashable ``key`` that holds its constraints, its
value is whatever the front end returns. Memory is bounded by ``size`` cases of at most
``max_draws`` draws each.

Examples
--------
>>> pool = CasePool(seed=0)
>>> pool.add((("i", 0, 9), 3), (("i", 0, 9), 5))
>>> plan = pool.plan(position=1)
>>> plan.next(("i", 0, 9)), plan.next(("i", 0, 9)) is FRESH
(3, True)
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any

from rlcheck.errors import InvalidArgument

__all__ = ["FRESH", "CasePool", "Plan", "boundary_integer", "other_integer"]


class _Fresh:
    __slots__ = ()

    def __repr__(self) -> str:
        return "FRESH"


FRESH: Any = _Fresh()
"""What :meth:`Plan.next` returns for a draw the guide must make itself."""

Draw = tuple[Hashable, Any]


class Plan:
    """The draws of one mutated case (see the module docstring)."""

    __slots__ = ("_at", "_boundary", "_draws", "_i", "_lined_up")

    def __init__(self, draws: tuple[Draw, ...], at: int, *, boundary: bool = False) -> None:
        self._draws = draws
        self._at = at
        self._i = 0
        self._lined_up = True
        self._boundary = boundary

    @property
    def position(self) -> int:
        return self._at

    def next(self, key: Hashable) -> Any:
        """The value for the next draw (named ``key``), or :data:`FRESH`."""
        i = self._i
        self._i += 1
        if not self._lined_up or i >= len(self._draws):
            return FRESH
        recorded_key, value = self._draws[i]
        if recorded_key != key:
            self._lined_up = False
            return FRESH
        if i == self._at:
            return FRESH
        return value

    @property
    def boundary(self) -> bool:
        """Whether the changed draw, an integer one, should take a boundary value."""
        return self._boundary

    def changed(self) -> Any:
        """Right after :meth:`next` answered the changed draw: its recorded value (the
        one to move away from); :data:`FRESH` at any other draw."""
        if not self._lined_up or self._i - 1 != self._at:
            return FRESH
        return self._draws[self._at][1]


class CasePool:
    """The draws of recent new valid cases, to mutate (bounded: ``size`` cases).

    Parameters
    ----------
    size:
        Cases kept; a new one replaces a random old one once full (a reservoir that keeps
        old and recent cases alike).
    max_draws:
        Longer cases are not kept (they would cost memory and rarely line up).
    boundary:
        Share of plans whose changed draw, when it is an integer draw, takes a boundary
        value (:func:`boundary_integer`) instead of a fresh one.
    seed:
        Seed of the pool's randomness (which case, which position).
    """

    __slots__ = ("_cases", "_rng", "added", "boundary", "max_draws", "size")

    def __init__(
        self,
        *,
        size: int = 256,
        max_draws: int = 512,
        boundary: float = 0.0,
        seed: int | None = None,
    ) -> None:
        if size < 1:
            raise InvalidArgument(f"size={size!r} must be at least 1")
        if not 0.0 <= boundary <= 1.0:
            raise InvalidArgument(f"boundary={boundary!r} must lie in [0, 1]")
        self.size = size
        self.max_draws = max_draws
        self.boundary = boundary
        self._cases: list[tuple[Draw, ...]] = []
        self._rng = random.Random(seed)
        self.added = 0

    def __len__(self) -> int:
        return len(self._cases)

    def seed(self, seed: int) -> None:
        self._rng.seed(seed)

    def add(self, *draws: Draw) -> None:
        """Keep the draws of one valid case (empty or overlong cases are skipped)."""
        if not draws or len(draws) > self.max_draws:
            return
        self.added += 1
        if len(self._cases) < self.size:
            self._cases.append(draws)
        else:
            self._cases[self._rng.randrange(self.size)] = draws

    def plan(self, *, position: int | None = None) -> Plan | None:
        """A plan for the next case: one kept case with one draw to change."""
        if not self._cases:
            return None
        draws = self._cases[self._rng.randrange(len(self._cases))]
        at = self._rng.randrange(len(draws)) if position is None else position
        return Plan(draws, at, boundary=self._rng.random() < self.boundary)


def boundary_integer(rng: random.Random, lo: int, hi: int, recorded: int) -> int:
    """A boundary value of ``[lo, hi]`` other than ``recorded`` where there is one: a
    bound, or a neighbour of ``recorded``."""
    options = [v for v in (lo, hi, recorded - 1, recorded + 1) if lo <= v <= hi and v != recorded]
    return options[rng.randrange(len(options))] if options else recorded


def other_integer(rng: random.Random, lo: int, hi: int, recorded: int) -> int:
    """A uniform value of ``[lo, hi]`` other than ``recorded`` (``recorded`` if none)."""
    if not lo <= recorded <= hi or lo == hi:
        return rng.randint(lo, hi)
    value = rng.randint(lo, hi - 1)
    return value + 1 if value >= recorded else value
