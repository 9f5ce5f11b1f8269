"""Novelty by construction: a tree of the choice sequences already run, to steer away from.

A generator (rlcheck's own, or a Hypothesis strategy through the backend) makes a sequence of
choices per test case; a deterministic test given the same sequence runs the same input
again. :class:`ChoiceTree` records every sequence run so far as a path from the root and
marks a subtree *exhausted* once every sequence through it has been run, so a guide can
refuse, while drawing, any choice that could only repeat an earlier test case. A guide
cannot know which choice is a test case's last one; the tree learns it: a node where a case
ended is a leaf, exhausted at once, and exhaustion rises to a parent when all of the
parent's options are exhausted.

The idea is that of Hypothesis's ``DataTree`` (``generate_novel_prefix`` starts each test
case from a prefix not yet exhausted); this tree works one choice at a time while the guide
decides, and only on choices that pin their value down:

* an **exact** choice among ``n`` options (a boolean, a small integer range, a character of
  a small alphabet, a collection's continue/stop) is a child of its node;
* an **inexact** choice (a magnitude bucket whose value is then drawn at random) opens the
  path: nothing after it is recorded, and the nodes above it never count as exhausted,
  since the same choices may still make a new input.

Call order per test case: :meth:`ChoiceTree.begin`, then for each choice
:meth:`~ChoiceTree.allowed` (which options keep the case new) and :meth:`~ChoiceTree.step`
(the one taken), then :meth:`~ChoiceTree.finish` when the case ran to its end, or
:meth:`~ChoiceTree.abandon` when it was cut short by something other than its choices
(an internal error, a hand-back). A node whose options differ between visits (a test that
is not deterministic) stops being steered, never raises.

Memory is bounded by ``max_nodes``: past it, new paths are not recorded (steering only
weakens).

Examples
--------
>>> tree = ChoiceTree()
>>> for bits in ([0], [1]):
...     tree.begin()
...     for b in bits:
...         tree.step(("coin",), 2, b)
...     tree.finish()
>>> tree.exhausted
True
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from rlcheck.errors import InvalidArgument

__all__ = ["ChoiceTree"]


class _Node:
    """One position in the tree: the choice point met there and the options taken."""

    __slots__ = ("children", "exhausted", "n", "open", "point")

    def __init__(self) -> None:
        self.point: Hashable = None  # the choice point met here; None while unknown
        self.n = 0  # its number of options
        self.children: dict[int, _Node] = {}
        self.exhausted = False
        # An inexact choice was taken here, or the test behaved differently here than
        # before: some sequence through this node is not recorded, so it is never exhausted.
        self.open = False


class ChoiceTree:
    """The choice sequences run so far in one test, with exhausted subtrees marked.

    Parameters
    ----------
    max_nodes:
        Bound on recorded nodes; past it the tree stops growing (it still steers along
        the paths it has).
    """

    __slots__ = ("_node", "_path", "_root", "max_nodes", "nodes")

    def __init__(self, *, max_nodes: int = 1 << 18) -> None:
        if max_nodes < 1:
            raise InvalidArgument(f"max_nodes={max_nodes!r} must be at least 1")
        self.max_nodes = max_nodes
        self._root = _Node()
        self.nodes = 1
        self._path: list[_Node] = []
        self._node: _Node | None = self._root

    @property
    def exhausted(self) -> bool:
        """Whether every choice sequence of the test has been run (nothing new is left)."""
        return self._root.exhausted

    def begin(self) -> None:
        """Start a test case at the root."""
        self._path = [self._root]
        self._node = self._root

    def allowed(self, point: Hashable, n: int) -> list[int] | None:
        """Options at the current choice that can still lead to a new sequence.

        ``None`` means every option can (nothing to avoid, or the path is not tracked).
        The list is never empty: when the current node is itself exhausted (a case
        reached it through a choice not taken from the tree), every option is allowed.
        """
        node = self._node
        if node is None or not node.children or node.exhausted:
            return None
        if node.point is not None and (node.point != point or node.n != n):
            return None
        out = [a for a in range(n) if not _child_exhausted(node, a)]
        return out if len(out) < n and out else None

    def untaken(self, point: Hashable, n: int) -> list[int] | None:
        """Where every earlier case through the current choice took one and the same
        option, the other options that can still lead to a new sequence; ``None``
        anywhere else (a choice not met before, or met with several options taken).

        Hypothesis's engine starts a test case from a *novel prefix*: down its tree of
        the cases run, a choice that every earlier case made alike is made otherwise,
        and the case is new from there. A guide that takes these options while it has
        nothing better to go by explores the way that engine does, shortest novel
        prefixes first.

        >>> tree = ChoiceTree()
        >>> tree.begin(); tree.step(("more",), 2, 1); tree.step(("more",), 2, 0); tree.finish()
        >>> tree.begin(); tree.untaken(("more",), 2)
        [0]
        >>> tree.step(("more",), 2, 1); tree.untaken(("more",), 2)
        [1]
        """
        node = self._node
        if node is None or len(node.children) != 1 or node.exhausted:
            return None
        if node.point != point or node.n != n or n < 2:
            return None
        (taken,) = node.children
        return [a for a in range(n) if a != taken]

    def step(self, point: Hashable, n: int, action: int, *, exact: bool = True) -> None:
        """Record that the current case took option ``action`` of ``n`` at ``point``."""
        node = self._node
        if node is None:
            return
        if node.point is None:
            node.point, node.n = point, n
        elif node.point != point or node.n != n:
            # Not the choice met here before: the test is not deterministic given its
            # choices; stop tracking this case and never mark this node exhausted.
            self._leave_open(node)
            return
        if not exact:
            self._leave_open(node)
            return
        child = node.children.get(action)
        if child is None:
            if self.nodes >= self.max_nodes:
                self._node = None
                return
            child = node.children[action] = _Node()
            self.nodes += 1
        self._path.append(child)
        self._node = child

    def repeats(self, steps: Iterable[tuple[Hashable, int, int, bool]]) -> bool:
        """Whether taking ``steps`` (``(point, n, action, exact)``, as :meth:`step` takes
        them) from the current choice could only repeat sequences already run; nothing
        is recorded. A value chosen by something else than the guide (a replayed or
        mutated one) is checked here before it is taken, then stepped along."""
        node = self._node
        if node is None or node.exhausted:
            return False  # not tracked, or nothing left to avoid here
        for point, n, action, exact in steps:
            if node.point is not None and (node.point != point or node.n != n):
                return False
            if not exact:
                return False
            child = node.children.get(action)
            if child is None:
                return False
            if child.exhausted:
                return True
            node = child
        return False

    def finish(self) -> None:
        """The current case ran to its end: its sequence is done; propagate exhaustion."""
        node = self._node
        if node is None:
            return
        if node.children or node.point is not None:
            # A case ended where another one went on choosing: not deterministic.
            self._leave_open(node)
            return
        node.exhausted = True
        for parent in reversed(self._path[:-1]):
            if (
                parent.exhausted
                or parent.open
                or len(parent.children) < parent.n
                or not all(c.exhausted for c in parent.children.values())
            ):
                break
            parent.exhausted = True
        self._node = None

    def abandon(self) -> None:
        """The current case was cut short: record nothing more for it."""
        self._node = None

    def _leave_open(self, node: _Node) -> None:
        node.open = True
        node.exhausted = False
        self._node = None


def _child_exhausted(node: _Node, action: int) -> bool:
    child = node.children.get(action)
    return child is not None and child.exhausted
