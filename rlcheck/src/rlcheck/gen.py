"""The generation context: choice points, scopes, and replayable choice sequences.

A generator is a plain function of one argument, the context ``g``, returning the input::

    def bst(g: Gen, depth: int = 0) -> tuple | None:
        value = g.integer(0, 10, label="value")
        left = right = None
        if depth < 4 and g.boolean(label="has_left"):
            with g.scope("LEFT"):
                left = bst(g, depth + 1)
        ...

Each choice point has a stable identity, its *point*: the ``label`` when given, otherwise
``(filename, lineno)`` of the call site. A guide learns one table per point, so give the
same label to choices that mean the same thing wherever they are made, and labels to
points whose learned policy should survive edits to the file (line numbers move). Labels
(of choice points and of scopes) should be strings, numbers or tuples of them: that is
what a saved policy file can hold.

Every choice is recorded as an option index in :attr:`Gen.choices`; :func:`replay` re-runs
a generator on such a sequence and gets the same input back.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Hashable, Iterable, Sequence
from types import TracebackType
from typing import TypeVar

from rlcheck.errors import Invalid, InvalidArgument
from rlcheck.guides.base import Guide
from rlcheck.guides.replay import ReplayGuide

__all__ = ["MAX_OPTIONS", "Gen", "Overrun", "replay"]

T = TypeVar("T")

MAX_OPTIONS = 1024
"""Most options one choice point may offer: a tabular learner needs small action sets
(split a large range into a few coarser choices instead)."""

_BOOLS = (False, True)
_SEQUENCE_TYPES = (tuple, list, range, str)


class Overrun(Invalid):
    """An episode made more than ``max_choices`` choices; the input counts as invalid.

    This keeps a guide that learns to keep recursing from hanging a campaign: the overrun
    earns the invalid reward, and the guide learns to stop.
    """


class Gen:
    """The generation context handed to a generator: it asks its guide at each choice.

    Parameters
    ----------
    guide:
        Decides each choice (see :class:`rlcheck.guides.Guide`).
    max_choices:
        Choices allowed per episode before :class:`Overrun` is raised.

    Attributes
    ----------
    choices:
        The option indices chosen so far in this episode (the replayable sequence).

    Examples
    --------
    >>> from rlcheck.guides import RandomGuide
    >>> g = Gen(RandomGuide(seed=3))
    >>> x = g.choice(["a", "b", "c"], label="letter")
    >>> x in "abc", len(g.choices)
    (True, 1)
    """

    __slots__ = ("_choose", "_enter", "_exit", "_guide_error", "choices", "guide", "max_choices")

    def __init__(self, guide: Guide, *, max_choices: int = 10_000) -> None:
        if not isinstance(guide, Guide):
            raise InvalidArgument(
                f"guide={guide!r} is not an rlcheck guide; use RandomGuide(), RLGuide() or "
                "a subclass of rlcheck.guides.Guide"
            )
        if not isinstance(max_choices, int) or max_choices < 1:
            raise InvalidArgument(f"max_choices={max_choices!r} must be a positive int")
        self.guide = guide
        self.max_choices = max_choices
        self.choices: list[int] = []
        self._choose = guide.chooser()
        self._enter, self._exit = guide.scope_hooks()
        # The guide method that raised here and its exception: the campaign tells a broken
        # guide from a broken generator by it (the exception itself passes through as is).
        self._guide_error: tuple[str, Exception] | None = None

    @property
    def guide_error(self) -> tuple[str, Exception] | None:
        """``(guide method, exception)`` when the guide raised during this episode (in a
        choice point or a scope, even if the generator caught it), else ``None``: a
        campaign tells a broken guide from a broken generator by it."""
        return self._guide_error

    def reset(self) -> None:
        """Forget the recorded choices (the campaign calls this before each episode)."""
        self.choices = []

    def _guide_raised(self, method: str, exc: Exception, label: Hashable) -> None:
        """Record that the guide raised ``exc`` in ``method`` (see :attr:`guide_error`), or
        raise :class:`InvalidArgument` when the caller's ``label`` is at fault.

        An unhashable label (a list, say) makes any learner's table lookup raise
        ``TypeError``; that is the generator's mistake, not the guide's, and blaming the
        guide would hide it behind a fallback to random generation. Checked here, once the
        guide has raised, rather than up front: hashing every label costs every choice.
        """
        try:
            hash(label)
        except TypeError:
            raise InvalidArgument(
                f"label={label!r} is not hashable; use a string, a number or a tuple of them"
            ) from exc
        self._guide_error = (method, exc)

    def _overrun(self) -> Overrun:
        return Overrun(
            f"the generator made more than max_choices={self.max_choices} choices in one "
            "input; bound its recursion or raise max_choices"
        )

    def choice(self, options: Sequence[T], *, label: Hashable | None = None) -> T:
        """One of a small sequence of options.

        Parameters
        ----------
        options:
            A non-empty sequence (tuple, list, range, str ...) of at most
            :data:`MAX_OPTIONS` options.
        label:
            Identity of this choice point (default: the call site).

        Examples
        --------
        >>> from rlcheck.guides import ReplayGuide
        >>> Gen(ReplayGuide([1])).choice(("+", "-", "*"), label="op")
        '-'
        """
        if label is None:
            frame = sys._getframe(1)
            label = (frame.f_code.co_filename, frame.f_lineno)
        if options.__class__ not in _SEQUENCE_TYPES and not isinstance(options, Sequence):
            raise InvalidArgument(
                f"options={options!r} at {label!r} is not a sequence; pass a tuple or list "
                "(sets have no stable order to learn over)"
            )
        n = len(options)
        if not 0 < n <= MAX_OPTIONS:
            raise InvalidArgument(
                f"choice at {label!r} offers {n} options; it needs between 1 and {MAX_OPTIONS}"
            )
        choices = self.choices
        if len(choices) >= self.max_choices:
            raise self._overrun()
        # (choice, integer and boolean repeat these lines rather than share a helper:
        # one call fewer per choice point is a measurable share of generation time.)
        try:
            index = self._choose(label, options)
        except Exception as exc:
            self._guide_raised("choose", exc, label)
            raise
        choices.append(index)
        return options[index]

    def integer(self, low: int, high: int, *, label: Hashable | None = None) -> int:
        """An integer in ``[low, high]`` (both inclusive; a small range).

        ``low`` and ``high`` are ints (or integers of another type, such as NumPy's: anything
        with ``__index__``); anything else, a float such as ``n / 2`` say, raises
        :class:`InvalidArgument`.

        Examples
        --------
        >>> from rlcheck.guides import ReplayGuide
        >>> Gen(ReplayGuide([3])).integer(10, 20)
        13
        """
        if label is None:
            frame = sys._getframe(1)
            label = (frame.f_code.co_filename, frame.f_lineno)
        if low.__class__ is not int or high.__class__ is not int:
            low, high = _int_bounds(low, high, label)
        if not 0 <= high - low < MAX_OPTIONS:
            raise InvalidArgument(
                f"integer({low!r}, {high!r}) at {label!r} must have low <= high and at most "
                f"{MAX_OPTIONS} values; split a wide range into several choices"
            )
        choices = self.choices
        if len(choices) >= self.max_choices:
            raise self._overrun()
        # Built outside the ``try``: only what the guide raises is the guide's.
        options = range(low, high + 1)
        try:
            index = self._choose(label, options)
        except Exception as exc:
            self._guide_raised("choose", exc, label)
            raise
        choices.append(index)
        return low + index

    def boolean(self, *, label: Hashable | None = None) -> bool:
        """``False`` or ``True``.

        Examples
        --------
        >>> from rlcheck.guides import ReplayGuide
        >>> Gen(ReplayGuide([1])).boolean(label="has_left")
        True
        """
        if label is None:
            frame = sys._getframe(1)
            label = (frame.f_code.co_filename, frame.f_lineno)
        choices = self.choices
        if len(choices) >= self.max_choices:
            raise self._overrun()
        try:
            index = self._choose(label, _BOOLS)
        except Exception as exc:
            self._guide_raised("choose", exc, label)
            raise
        choices.append(index)
        return index == 1

    def scope(self, label: Hashable) -> _Scope:
        """Mark a part of the structure: ``with g.scope("LEFT"): ...``.

        Scopes nest; the guide sees them as the ancestor path of each choice (see
        :mod:`rlcheck.state`).

        Examples
        --------
        >>> from rlcheck.guides import RandomGuide
        >>> g = Gen(RandomGuide(seed=0))
        >>> with g.scope("LEFT"):
        ...     _ = g.boolean(label="has_left")
        """
        return _Scope(self, label)


class _Scope:
    __slots__ = ("_gen", "_label")

    def __init__(self, gen: Gen, label: Hashable) -> None:
        self._gen = gen
        self._label = label

    def __enter__(self) -> None:
        try:
            self._gen._enter(self._label)
        except Exception as exc:
            self._gen._guide_raised("enter_scope", exc, self._label)
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._gen._exit()
        except Exception as error:
            self._gen._guide_error = ("exit_scope", error)
            raise


def _int_bounds(low: int, high: int, label: Hashable) -> tuple[int, int]:
    """``integer``'s bounds as ints, or :class:`InvalidArgument`: checked before the guide
    is asked, since ``range`` raising inside the guide's call would be blamed on the guide."""
    try:
        return operator.index(low), operator.index(high)
    except TypeError:
        raise InvalidArgument(
            f"integer({low!r}, {high!r}) at {label!r} needs int bounds, got "
            f"{type(low).__name__} and {type(high).__name__}; use // rather than / for a "
            "bound computed by division"
        ) from None


def replay(generator: Callable[[Gen], T], choices: Iterable[int], *, strict: bool = True) -> T:
    """Re-run ``generator`` on a recorded choice sequence and return its input.

    Parameters
    ----------
    generator:
        The generator the sequence was recorded on.
    choices:
        Option indices, e.g. :attr:`rlcheck.Failure.choices` or :attr:`Gen.choices`.
    strict:
        ``True``: raise :class:`~rlcheck.errors.ReplayError` when the sequence runs out,
        has an index that does not fit, or has choices left over. ``False``: wrap indices
        and continue at random past the end (any sequence yields an input).

    Examples
    --------
    >>> def pair(g):
    ...     return g.integer(0, 9), g.boolean()
    >>> replay(pair, [7, 0])
    (7, False)
    """
    guide = ReplayGuide(choices, strict=strict)
    guide.start_episode()
    value = generator(Gen(guide, max_choices=max(len(guide.choices), 1) + 10_000))
    guide.check_consumed()
    return value
