"""The guide protocol: what decides each choice a generator makes."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar

from rlcheck.state import TOKEN_TYPES

__all__ = ["TOKEN_TYPES", "Guide"]


class Guide:
    """Decides every choice of a generator; subclasses override :meth:`choose`.

    Call order, driven by :func:`rlcheck.run` and the generation context
    :class:`rlcheck.Gen`::

        guide.start_campaign(name)               # once, before the first episode
        for each episode (one call of the generator = one input):
            guide.start_episode()
            i = guide.choose(point, options)     # at each choice point: an index into options
            guide.enter_scope(label)             # ``with g.scope(label):`` opens ...
            guide.exit_scope()                   # ... and closes (always balanced)
            guide.end_episode(valid=..., new=...)  # the outcome of checking the input
        guide.end_campaign()                     # once, after the last episode

    ``point`` identifies the kind of choice point: its label, or ``(filename, lineno)`` of
    the call site when unlabelled. ``options`` is a non-empty sequence (a ``range`` for
    :meth:`Gen.integer`, ``(False, True)`` for :meth:`Gen.boolean`). ``end_episode`` is
    called only for episodes that reached the check or were rejected as invalid; an
    episode aborted by an error in the generator itself gets no ``end_episode``, and the
    next ``start_episode`` must discard whatever it left behind.

    All methods but :meth:`choose` default to doing nothing, so a stateless guide is a
    few lines. Guides are seeded and deterministic: the same seed, generator and check
    give the same inputs.

    :class:`~rlcheck.Gen` calls the functions returned by :meth:`chooser` and
    :meth:`scope_hooks` (fetched once per context) instead of :meth:`choose`,
    :meth:`enter_scope` and :meth:`exit_scope` themselves, so a guide may hand out
    faster equivalents.
    """

    name: ClassVar[str] = "guide"
    """Short string id (used in results, the CLI and benchmark tables)."""

    def choose(self, point: Hashable, options: Sequence[Any]) -> int:
        """Index into ``options`` of the option to take at ``point``."""
        raise NotImplementedError

    def chooser(self) -> Callable[[Hashable, Sequence[Any]], int]:
        """The function the generation context calls at each choice point: :meth:`choose`
        unless the guide overrides this with an equivalent that is faster to call.

        Examples
        --------
        >>> from rlcheck.guides import RandomGuide, RLGuide
        >>> guide = RandomGuide(seed=0)
        >>> guide.chooser() == guide.choose
        True
        >>> RLGuide(seed=0).chooser()("coin", (False, True)) in (0, 1)
        True
        """
        return self.choose

    def scope_hooks(self) -> tuple[Callable[[Hashable], None], Callable[[], None]]:
        """The functions the generation context calls when a scope opens and closes:
        :meth:`enter_scope` and :meth:`exit_scope` unless the guide overrides this with
        equivalents that are faster to call (as :meth:`chooser`).

        Examples
        --------
        >>> from rlcheck.guides import RandomGuide
        >>> guide = RandomGuide(seed=0)
        >>> guide.scope_hooks() == (guide.enter_scope, guide.exit_scope)
        True
        """
        return self.enter_scope, self.exit_scope

    def start_campaign(self, name: str) -> None:
        """A campaign on the generator called ``name`` begins."""

    def start_episode(self) -> None:
        """A new input is about to be generated."""

    def enter_scope(self, label: Hashable) -> None:
        """A ``with g.scope(label):`` block opens."""

    def exit_scope(self) -> None:
        """The innermost open scope closes."""

    def end_episode(self, *, valid: bool, new: bool) -> None:
        """The input was checked: ``valid``, and if so whether it was ``new``."""

    def end_campaign(self) -> None:
        """The campaign is over (a place to persist what was learned)."""

    def reseed(self, seed: int | None) -> None:
        """Restart the guide's random stream from ``seed``."""

    def describe(self) -> dict[str, Any]:
        """JSON-able settings of this guide, recorded in results."""
        return {"guide": self.name}
