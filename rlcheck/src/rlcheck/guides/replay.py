"""Replaying a recorded choice sequence (the input behind a failure, or a mutated one)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from rlcheck.errors import InvalidArgument, ReplayError
from rlcheck.guides.base import Guide
from rlcheck.guides.random import RandomGuide

__all__ = ["ReplayGuide"]


class ReplayGuide(Guide):
    """Answers each choice point with the next index of a recorded sequence.

    Parameters
    ----------
    choices:
        Option indices, as recorded in :attr:`rlcheck.Gen.choices`.
    strict:
        ``True`` (default): an index out of range, a sequence that runs out, or one with
        choices left over raises :class:`~rlcheck.errors.ReplayError`. ``False``: indices
        wrap around modulo the number of options and choices past the end come from
        ``fallback``, so any sequence (e.g. a mutated one) yields some input.
    fallback:
        Guide for choices past the end in lenient mode (default: ``RandomGuide(seed=0)``).

    Examples
    --------
    >>> from rlcheck.gen import Gen
    >>> g = Gen(ReplayGuide([2, 1]))
    >>> g.integer(0, 9), g.boolean()
    (2, True)
    """

    name = "replay"

    def __init__(
        self, choices: Iterable[int], *, strict: bool = True, fallback: Guide | None = None
    ) -> None:
        self.choices = tuple(choices)
        for i, c in enumerate(self.choices):
            if not isinstance(c, int) or c < 0:
                raise InvalidArgument(
                    f"choices[{i}]={c!r} is not a non-negative int; pass indices as recorded "
                    "in Gen.choices"
                )
        self.strict = strict
        self.fallback = fallback if fallback is not None else RandomGuide(seed=0)
        self.position = 0

    def start_episode(self) -> None:
        self.position = 0

    def choose(self, point: Hashable, options: Sequence[Any]) -> int:
        n = len(options)
        pos = self.position
        self.position = pos + 1
        if pos >= len(self.choices):
            if self.strict:
                raise ReplayError(
                    f"the recorded sequence of {len(self.choices)} choices ran out at choice "
                    f"point {point!r}: the generator asks for more choices than were recorded "
                    "(was it changed since?); pass strict=False to continue at random"
                )
            return self.fallback.choose(point, options)
        index = self.choices[pos]
        if index >= n:
            if self.strict:
                raise ReplayError(
                    f"choices[{pos}]={index} does not fit choice point {point!r}, which offers "
                    f"{n} options; was the sequence recorded on another generator? Pass "
                    "strict=False to wrap indices around"
                )
            index %= n
        return index

    def check_consumed(self) -> None:
        """Raise :class:`ReplayError` if a strict replay left recorded choices unused."""
        if self.strict and self.position < len(self.choices):
            raise ReplayError(
                f"the generator made {self.position} choices but {len(self.choices)} were "
                "recorded: the sequence does not belong to this generator"
            )
