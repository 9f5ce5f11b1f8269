"""State abstractions: where generation is, as a small hashable key for the Q-tables.

The RL guide does not learn one value per full history (it would never see a state twice);
it learns per *abstract* state. Three abstractions, after RLCheck:

``sequence`` (:class:`SequenceState`)
    The last ``k`` choices made in the episode, in the order they were made.
``ancestor`` (:class:`AncestorState`)
    The last ``k`` choices along the ancestor path of the structure being built: entering a
    scope saves the current window and leaving it restores the window, so a child inherits
    its parent's window and siblings never see each other's choices.
``labelled`` (:class:`LabelledAncestorState`)
    As ``ancestor``, and entering a scope also appends the scope's label ("LEFT", "RIGHT",
    "tag=project", ...) to the window, so the state says *which* child is being built.
``spans`` (:class:`SpanState`)
    For the Hypothesis backend, whose scopes are strategy spans with opaque labels: the
    labels of the innermost open spans beside the last ``k`` choices (in draw order, or
    along the ancestor path with ``ancestor=True``).

Every abstraction follows one call order per episode (driven by the guide)::

    abstraction.reset()
    ... abstraction.state          # read before each choice: the current key
    ... abstraction.record(token)  # after each choice: the chosen option (or its index)
    ... abstraction.push(label)    # on entering a scope
    ... abstraction.pop()          # on leaving it (always balanced with push)

``state`` is a plain attribute, a tuple of at most ``k`` tokens, so the hot path reads it
without a call. Tokens are the chosen options when they are ``str``/``int``/``float``/
``bool``/``None`` (so policies can be saved as JSON) and the option's index otherwise.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

from rlcheck.errors import InvalidArgument

__all__ = [
    "STATE_ABSTRACTIONS",
    "TOKEN_TYPES",
    "AncestorState",
    "LabelledAncestorState",
    "SequenceState",
    "SpanState",
    "StateAbstraction",
    "make_state",
]

TOKEN_TYPES: frozenset[type] = frozenset({str, int, float, bool, type(None)})
"""Chosen options of these types are state tokens as they are; any other option is
represented by its index, which keeps states hashable and policies JSON-serialisable."""


class StateAbstraction:
    """Base class: a window of the last ``k`` tokens; subclasses decide what scopes do.

    Parameters
    ----------
    k:
        Window length (RLCheck: 4 to 5). At least 1.

    Examples
    --------
    >>> s = SequenceState(k=2)
    >>> s.reset(); s.record(3); s.record(True); s.record(7)
    >>> s.state
    (True, 7)
    """

    name: ClassVar[str] = "abstract"
    """The string id used by :func:`make_state`, the CLI and saved policy metadata."""

    __slots__ = ("_keep", "_stack", "k", "state")

    def __init__(self, k: int = 4) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise InvalidArgument(f"k={k!r} must be an int of at least 1 (the window length)")
        self.k = k
        # The part of the window that survives one more token: its last k - 1 entries.
        self._keep = slice(1 - k, None) if k > 1 else slice(0, 0)
        self.state: tuple[Hashable, ...] = ()
        self._stack: list[tuple[Hashable, ...]] = []

    def reset(self) -> None:
        """Start a new episode: empty window, no open scopes."""
        self.state = ()
        self._stack.clear()

    def record(self, token: Hashable) -> None:
        """Append the token of the choice just made, keeping the last ``k``."""
        self.state = self.state[self._keep] + (token,)

    def push(self, label: Hashable) -> None:
        """A scope labelled ``label`` opens."""

    def pop(self) -> None:
        """The innermost open scope closes."""

    def describe(self) -> dict[str, Any]:
        """JSON-able identity (for policy-file metadata): name and window length."""
        return {"state": self.name, "k": self.k}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(k={self.k})"


class SequenceState(StateAbstraction):
    """The last ``k`` choices in the order they were made; scopes are ignored.

    Examples
    --------
    >>> s = SequenceState(k=3)
    >>> s.reset(); s.record(1); s.push("LEFT"); s.record(2); s.pop(); s.record(3)
    >>> s.state
    (1, 2, 3)
    """

    name = "sequence"
    __slots__ = ()


class AncestorState(StateAbstraction):
    """The last ``k`` choices along the ancestor path (siblings do not see each other).

    Examples
    --------
    >>> s = AncestorState(k=4)
    >>> s.reset(); s.record(5)
    >>> s.push("LEFT"); s.record(2); s.pop()   # the left subtree's choices are forgotten
    >>> s.record(True)
    >>> s.state
    (5, True)
    """

    name = "ancestor"
    __slots__ = ()

    def push(self, label: Hashable) -> None:
        self._stack.append(self.state)

    def pop(self) -> None:
        self.state = self._stack.pop()


class LabelledAncestorState(AncestorState):
    """As :class:`AncestorState`, and a scope's label joins the window when it opens.

    Examples
    --------
    >>> s = LabelledAncestorState(k=3)
    >>> s.reset(); s.record(5); s.record(True)
    >>> s.push("LEFT"); s.state
    (5, True, 'LEFT')
    """

    name = "labelled"
    __slots__ = ()

    def push(self, label: Hashable) -> None:
        self._stack.append(self.state)
        self.state = self.state[self._keep] + (label,)


class SpanState(StateAbstraction):
    """The labels of the innermost ``depth`` open scopes, and the last ``k`` choices.

    The state is the pair ``(path, window)``. It is the abstraction for Hypothesis
    strategies, whose spans (``span_start``/``span_end``) carry opaque labels and no
    LEFT/RIGHT: the path says which strategy is drawing, the window what was chosen
    last. ``ancestor=False`` (default) keeps the window in draw order; ``ancestor=True``
    forgets the choices made inside a scope when it closes, so siblings do not see each
    other. A ``pop`` with no open scope is ignored.

    Examples
    --------
    >>> s = SpanState(k=2, depth=2)
    >>> s.reset(); s.push(7); s.record(1); s.push(8); s.push(9); s.record(0)
    >>> s.state
    ((8, 9), (1, 0))
    >>> s.pop(); s.pop(); s.state
    ((7,), (1, 0))
    """

    name = "spans"
    __slots__ = ("_path", "_saved", "_window", "ancestor", "depth")

    def __init__(self, k: int = 4, *, depth: int = 3, ancestor: bool = False) -> None:
        super().__init__(k)
        if not isinstance(depth, int) or depth < 0:
            raise InvalidArgument(f"depth={depth!r} must be a non-negative int")
        self.depth = depth
        self.ancestor = ancestor
        self._path: tuple[Hashable, ...] = ()
        self._window: tuple[Hashable, ...] = ()
        self._saved: list[tuple[tuple[Hashable, ...], tuple[Hashable, ...]]] = []
        self.state = ((), ())

    def reset(self) -> None:
        self._path = self._window = ()
        self._saved.clear()
        self.state = ((), ())

    def record(self, token: Hashable) -> None:
        self._window = window = self._window[self._keep] + (token,)
        self.state = (self._path, window)

    def push(self, label: Hashable) -> None:
        self._saved.append((self._path, self._window))
        if self.depth:
            self._path = (*self._path, label)[-self.depth :]
        self.state = (self._path, self._window)

    def pop(self) -> None:
        if not self._saved:
            return
        path, window = self._saved.pop()
        self._path = path
        if self.ancestor:
            self._window = window
        self.state = (path, self._window)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "depth": self.depth, "ancestor": self.ancestor}


STATE_ABSTRACTIONS: dict[str, type[StateAbstraction]] = {
    cls.name: cls for cls in (SequenceState, AncestorState, LabelledAncestorState)
}
"""The state abstractions by string id."""


def make_state(name: str, *, k: int = 4) -> StateAbstraction:
    """A state abstraction from its string id.

    Parameters
    ----------
    name:
        One of ``"sequence"``, ``"ancestor"``, ``"labelled"`` (:class:`SpanState` is the
        Hypothesis backend's and is made directly).
    k:
        Window length.

    Examples
    --------
    >>> make_state("ancestor", k=5)
    AncestorState(k=5)
    """
    cls = STATE_ABSTRACTIONS.get(name)
    if cls is None:
        raise InvalidArgument(
            f"state={name!r} is not a state abstraction; use one of {sorted(STATE_ABSTRACTIONS)}"
        )
    return cls(k=k)
