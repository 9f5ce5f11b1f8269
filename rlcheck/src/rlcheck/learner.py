"""The learning rule: tabular every-visit Monte Carlo control, ε-greedy.

This is the one implementation of learning in rlcheck; the generator guide and the
Hypothesis backend both drive a :class:`Policy`.

Call order (one episode = one generated input)::

    policy = Policy(epsilon=0.25, seed=0)
    visits = []
    for each choice point reached while generating:
        i = policy.choose(point, state, n_actions)    # index of the chosen action
        visits.append((point, state, i))
    policy.learn(visits, reward)                      # reward from ``reward_for``

``point`` names a kind of choice point (one Q-table each), ``state`` is any hashable
abstraction of where generation is (see ``rlcheck.state``) and actions are the indices
``0 .. n_actions-1`` of the options offered at that point. Unvisited actions count as
Q = 0, which beats actions that mostly led to invalid inputs (Q < 0); ties are broken at
random; an unseen state gets a uniform choice.

Memory is bounded: each table holds at most ``max_states`` states; past that, the oldest
inserted state is evicted (its knowledge is the least likely to matter to the current
policy, which keeps moving towards inputs it has not made yet).

Speed: the generator guide calls the rule once per choice point, so its hot path is a
fused closure (:meth:`Policy.window_driver`) over rows that cache their greedy action (see
:class:`QTable`); :meth:`Policy.choose` and :meth:`Policy.learn` are the plain reference,
and the tests check that both paths make the same choices from the same seed.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import random
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from rlcheck.errors import InvalidArgument, PolicyFileError
from rlcheck.state import TOKEN_TYPES, AncestorState, LabelledAncestorState, StateAbstraction

__all__ = [
    "REWARD_DUPLICATE",
    "REWARD_INVALID",
    "REWARD_NEW",
    "Policy",
    "PolicyMark",
    "QTable",
    "Tables",
    "Visit",
    "WindowDriver",
    "check_flat_rows",
    "reward_for",
]

REWARD_NEW = 20.0
"""Reward for a valid input never seen before."""
REWARD_DUPLICATE = 0.0
"""Reward for a valid input already produced."""
REWARD_INVALID = -1.0
"""Reward for an invalid input."""

_FORMAT = "rlcheck-policy"
_FORMAT_VERSION = 1


def reward_for(*, valid: bool, new: bool) -> float:
    """The episode's return under the RLCheck reward scheme.

    >>> reward_for(valid=True, new=True), reward_for(valid=True, new=False)
    (20.0, 0.0)
    >>> reward_for(valid=False, new=True)
    -1.0
    """
    if not valid:
        return REWARD_INVALID
    return REWARD_NEW if new else REWARD_DUPLICATE


# A state's row (the value of ``QTable._rows``) is a flat list: a three-slot header
# caching the greedy action, then ``q_a, n_a`` for each action a, grown on demand::
#
#     [n_cached, best, bound, q_0, n_0, q_1, n_1, ...]
#
# While ``row[_N_CACHED] == n`` (0: no cache), ``row[_BOUND]`` is at least the Q of every
# action but the one whose Q sits at ``row[_BEST]``, among the first n (unvisited = 0).
# So ``row[row[_BEST]] > row[_BOUND]`` proves that action the unique greedy one, exactly
# what a full scan would return, without a scan. Crediting another action raises the
# bound when its Q passes it; crediting the cached action needs nothing, since the test
# reads its current Q. Only when the greedy action's Q falls to the bound (or n differs)
# is the row scanned again. (A plain cached argmax does not pay: the greedy action is
# the one credited most, and its value usually falls; the bound rarely forces a rescan.)
#
# A row dropped from its table (evicted, its table dropped, or replaced by a load) is
# marked *detached*: ``row[_N_CACHED] = _DETACHED``, a value no n matches. A chooser that
# memoises rows (``Policy.window_driver``) checks for it before it uses a row it did not
# just look up.
_N_CACHED = 0
_BEST = 1
_BOUND = 2
_HEAD = 3
_DETACHED = -1
_Row = list[Any]  # floats, but for the two int slots _N_CACHED and _BEST

Visit = tuple[_Row, int]
"""One visited choice: the state's row and where the chosen action's Q sits in it."""
_NEG_INF = float("-inf")


def _new_row() -> _Row:
    return [0, 0, 0.0]


_HEADER: _Row = _new_row()  # never changed: rows are built as _HEADER + values
_first = operator.itemgetter(0)
_second = operator.itemgetter(1)


def _greedy(row: _Row, n_actions: int, rng: random.Random) -> int:
    """Greedy action of a row with at least one visit, ties at random; refreshes the
    row's cache when the greedy action is unique.

    Actions past the row's end are unvisited and count as Q = 0.
    """
    if n_actions == 2:
        # Two thirds of a typical generator's choices are yes/no: compared directly, with
        # the draws and the cache of the general case below.
        q0 = row[_HEAD]
        q1 = row[_HEAD + 2] if len(row) > _HEAD + 2 else 0.0
        if q0 == q1:
            row[_N_CACHED] = 0
            return int(rng.random() * 2)
        if q0 > q1:
            row[_N_CACHED], row[_BEST], row[_BOUND] = 2, _HEAD, q1
            return 0
        if len(row) > _HEAD + 2:
            row[_N_CACHED], row[_BEST], row[_BOUND] = 2, _HEAD + 2, q0
        else:
            row[_N_CACHED] = 0
        return 1
    # Built-ins (slice, max, index, count) rather than a Python loop.
    qs = row[_HEAD : _HEAD + 2 * n_actions : 2]
    known = len(qs)
    if known < n_actions:
        qs.extend([0.0] * (n_actions - known))
    top = max(qs)
    action = qs.index(top)
    n_ties = qs.count(top)
    if n_ties > 1:
        row[_N_CACHED] = 0
        # The pick-th tie in index order, found by hopping (no list of ties built).
        for _ in range(int(rng.random() * n_ties)):
            action = qs.index(top, action + 1)
    elif action < known:
        qs[action] = _NEG_INF
        row[_BOUND] = max(qs)
        row[_BEST] = _HEAD + 2 * action
        row[_N_CACHED] = n_actions
    else:
        # An unvisited action past the row's end: about to be visited, so not cached.
        row[_N_CACHED] = 0
    return action


def _detach(rows: Iterable[_Row]) -> None:
    """Mark rows dropped from their table (see ``_DETACHED``)."""
    for row in rows:
        row[_N_CACHED] = _DETACHED


def _slot(row: _Row, action: int) -> int:
    """Where ``action``'s Q sits in ``row``, growing the row to hold it."""
    at = _HEAD + 2 * action
    if len(row) <= at:
        row.extend([0.0] * (at + 2 - len(row)))
    return at


def _credit_all(visits: Iterable[Visit], ret: float) -> None:
    """The update rule, for each visit ``(row, _slot(row, action))``: Q <- Q + (G - Q) / N,
    with N counting the visits of that state-action pair (every-visit Monte Carlo, no
    discount); keeps the row's greedy cache valid (see ``_HEAD``)."""
    # Literal offsets (_BEST = 1, _BOUND = 2): this loop runs once per choice made.
    for row, at in visits:
        count = at + 1
        n = row[count] + 1.0
        row[count] = n
        q = row[at]
        q += (ret - q) / n
        row[at] = q
        if q > row[2] and at != row[1]:
            row[2] = q


def _credit_recent(visits: Iterable[Visit], ret: float, step: float) -> None:
    """:func:`_credit_all` with a floor on the step size: Q <- Q + (G - Q) * max(1 / N,
    ``step``), a running mean over the first ``1 / step`` visits, then a recency-weighted
    one (each return's weight decays by ``1 - step`` a visit). The reward of a choice
    falls once its inputs have been made (a new input pays once); a plain running mean
    keeps an early +20 for ever (a choice whose every extension is then invalid stays
    above the unvisited ones' 0 for about 20 visits), a recency-weighted one forgets it
    within a few."""
    for row, at in visits:
        count = at + 1
        n = row[count] + 1.0
        row[count] = n
        q = row[at]
        q += (ret - q) * max(1.0 / n, step)
        row[at] = q
        if q > row[2] and at != row[1]:
            row[2] = q


def _credit_bonus(visits: Iterable[Visit], ret: float, bonus: float) -> None:
    """:func:`_credit_all` with a count-based exploration bonus: each visit is credited
    ``ret + bonus / sqrt(N)``, N its state-action pair's visit count including this one,
    so rarely taken pairs keep some value after a few failures (the bonus decays as the
    pair is taken again)."""
    sqrt = math.sqrt
    for row, at in visits:
        count = at + 1
        n = row[count] + 1.0
        row[count] = n
        q = row[at]
        q += (ret + bonus / sqrt(n) - q) / n
        row[at] = q
        if q > row[2] and at != row[1]:
            row[2] = q


def _sample(random_: Callable[[], float], n: int, cumulative: Sequence[float] | None) -> int:
    """An action drawn from the prior (cumulative weights), uniform when ``None``."""
    # int(random() * n) rather than randrange(n): several times cheaper on the hot path,
    # always in range for n < 2**53, and uniform up to a 2**-53 bias.
    if cumulative is None:
        return int(random_() * n)
    return min(bisect.bisect_right(cumulative, random_() * cumulative[-1]), n - 1)


def _sample_weighted(
    random_: Callable[[], float], actions: Sequence[int], weights: Sequence[float]
) -> int:
    """One of ``actions`` drawn by ``weights``; uniform when they are all zero."""
    total = sum(weights)
    if total <= 0:
        return actions[int(random_() * len(actions))]
    x = random_() * total
    for action, w in zip(actions, weights, strict=True):
        x -= w
        if x < 0:
            return action
    return actions[-1]


def _follow_prior(row: _Row, n: int, cumulative: Sequence[float] | None) -> bool:
    """The yes/no twist of the exploration rule (see :meth:`Policy.choose`)."""
    if cumulative is None or n != 2:
        return False
    size = len(row)
    # Each of the two actions is untried (past the row's end, or never credited) or < 0.
    return all(at + 1 >= size or not row[at + 1] or row[at] < 0 for at in (_HEAD, _HEAD + 2))


_MAX_NODES = 1 << 15
"""Most window states a driver interns before it starts over (bounds its memory: a few
hundred bytes each)."""


class _Node:
    """A window state interned by :meth:`Policy.window_driver`: its key, its row at each
    point (memoised; detached rows are looked up again) and the state each token leads
    to."""

    __slots__ = ("key", "rows", "succ")

    def __init__(self, key: tuple[Hashable, ...]) -> None:
        self.key = key
        self.rows: dict[Hashable, _Row] = {}
        self.succ: dict[Hashable, _Node] = {}


def _forget(nodes: dict[Hashable, _Node]) -> None:
    """Empty a chooser's interned states, cutting their links so none outlives it."""
    for node in nodes.values():
        node.rows.clear()
        node.succ.clear()
    nodes.clear()


class WindowDriver(NamedTuple):
    """A window and a policy's choices, driven together (:meth:`Policy.window_driver`).

    Call order per episode, as :class:`rlcheck.state.StateAbstraction`'s: ``reset()``;
    then ``choose(point, options)`` at each choice point (the chosen index), ``push(label)``
    when a scope opens and ``pop()`` when it closes (balanced); then
    :meth:`Policy.learn_rows` over the visits recorded. Use these rather than the
    window's own methods while driving it.
    """

    choose: Callable[[Hashable, Sequence[Any]], int]
    push: Callable[[Hashable], None]
    pop: Callable[[], None]
    reset: Callable[[], None]


class QTable:
    """Action values for one kind of choice point, keyed by (state, action index).

    Each state maps to one flat list of floats (a small cache of its greedy action, then
    Q and visit count per action, grown on demand), which keeps the hot path to one dict
    lookup and, usually, two comparisons.
    """

    __slots__ = ("_order", "_rows", "max_states")

    def __init__(self, *, max_states: int = 200_000) -> None:
        if max_states < 1:
            raise InvalidArgument(f"max_states={max_states!r} must be at least 1")
        self.max_states = max_states
        self._rows: dict[Hashable, _Row] = {}
        # States in insertion order, for O(1) eviction of the oldest: taking a dict's first
        # key instead costs O(deleted entries) in CPython (measured: 240 µs per new state
        # once a 100 000-state table is full, against 4 µs before).
        self._order: deque[Hashable] = deque()

    def __len__(self) -> int:
        return len(self._rows)

    def value(self, state: Hashable, action: int) -> tuple[float, int]:
        """``(Q, visit count)`` of one state-action pair; ``(0.0, 0)`` when never visited."""
        row = self._rows.get(state)
        at = _HEAD + 2 * action
        if row is None or at >= len(row):
            return 0.0, 0
        return row[at], int(row[at + 1])

    def best(self, state: Hashable, n_actions: int, rng: random.Random) -> int:
        """The greedy action index (ties at random); uniform when the state is unseen."""
        row = self._rows.get(state)
        if row is None or len(row) == _HEAD:
            return int(rng.random() * n_actions)
        return _greedy(row, n_actions, rng)

    def update(self, state: Hashable, action: int, ret: float) -> None:
        """Every-visit Monte Carlo update: running mean of the returns seen after (s, a)."""
        row = self.row(state)
        _credit_all(((row, _slot(row, action)),), ret)

    def row(self, state: Hashable) -> _Row:
        """The (mutable, internal) row of ``state``, inserted empty when new.

        When the table is full, the oldest inserted state is evicted first.
        """
        row = self._rows.get(state)
        if row is None:
            row = _new_row()
            self._put(state, row)
        return row

    def _put(self, state: Hashable, row: _Row) -> None:
        rows = self._rows
        if state not in rows:
            if len(rows) >= self.max_states:
                _detach((rows.pop(self._order.popleft()),))
            self._order.append(state)
        else:
            _detach((rows[state],))
        rows[state] = row

    def _fill(self, rows: Sequence[tuple[Hashable, list[float]]]) -> bool:
        """Fill this empty table with checked ``(state, [q_0, n_0, ...])`` rows at C
        speed, the first ``max_states`` of them (a load into a fresh policy); ``False``
        (and nothing changed) when a state comes twice, whose rows must be merged."""
        if len(rows) > self.max_states:
            rows = rows[: self.max_states]
        built = dict(zip(map(_first, rows), map(_HEADER.__add__, map(_second, rows)), strict=True))
        if len(built) != len(rows):
            return False
        self._rows = built
        self._order = deque(built)
        return True

    def items(self) -> Iterator[tuple[Hashable, list[float]]]:
        """``(state, [q_0, n_0, q_1, n_1, ...])`` for each state, oldest first (copies)."""
        for state, row in self._rows.items():
            yield state, row[_HEAD:]


class Policy:
    """ε-greedy tabular policy over many kinds of choice points, learned by MC control.

    Parameters
    ----------
    epsilon:
        Exploration probability (RLCheck: 0.25).
    seed:
        Seed of the policy's own random stream (exploration and tie-breaking).
    max_states:
        Cap on states per choice point's table (bounds memory on long campaigns).
    max_tables:
        Cap on the number of tables (kinds of choice point); past it the oldest table is
        dropped, and a loaded snapshot keeps its first ``max_tables`` tables.

    Examples
    --------
    >>> p = Policy(seed=1)
    >>> a = p.choose("coin", (), 2)
    >>> p.learn([("coin", (), a)], reward_for(valid=True, new=True))
    >>> p.table("coin").value((), a)
    (20.0, 1)
    """

    def __init__(
        self,
        *,
        epsilon: float = 0.25,
        seed: int | None = None,
        max_states: int = 200_000,
        max_tables: int = 10_000,
    ) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise InvalidArgument(f"epsilon={epsilon!r} must lie in [0, 1]")
        if max_tables < 1:
            raise InvalidArgument(f"max_tables={max_tables!r} must be at least 1")
        self._epsilon = epsilon
        self.max_states = max_states
        self.max_tables = max_tables
        self._rng = random.Random(seed)
        # Changed in place only (see load_dict): the drivers' closures hold it, and the
        # random stream, and read epsilon once (hence both are read-only).
        self._tables: dict[Hashable, QTable] = {}

    @property
    def epsilon(self) -> float:
        """Exploration probability (fixed at construction)."""
        return self._epsilon

    @property
    def rng(self) -> random.Random:
        """The policy's random stream (reseed it in place: ``policy.rng.seed(s)``)."""
        return self._rng

    def table(self, point: Hashable) -> QTable:
        """The Q-table of one kind of choice point (created empty on first use)."""
        t = self._tables.get(point)
        if t is None:
            if len(self._tables) >= self.max_tables:
                _detach(self._tables.pop(next(iter(self._tables)))._rows.values())
            t = self._tables[point] = QTable(max_states=self.max_states)
        return t

    def clear(self) -> None:
        """Forget every learned value, in place (choosers made before see empty tables).

        >>> p = Policy(seed=0)
        >>> p.learn([("coin", (), 1)], 20.0)
        >>> p.clear()
        >>> p.n_states()
        0
        """
        for table in self._tables.values():
            _detach(table._rows.values())
        self._tables.clear()

    @property
    def points(self) -> list[Hashable]:
        return list(self._tables)

    def n_states(self) -> int:
        """Total number of states stored over all tables."""
        return sum(len(t) for t in self._tables.values())

    def choose(
        self,
        point: Hashable,
        state: Hashable,
        n_actions: int,
        prior: Sequence[float] | None = None,
    ) -> int:
        """Pick an action index in ``range(n_actions)`` for ``state`` at ``point``.

        The one exploration rule: with probability ε, or when the state has no visited
        action yet, the action is drawn from ``prior`` (weights, e.g. the strategy's own
        distribution; uniform when ``None``); otherwise the greedy action. One twist for
        a yes/no choice with a prior: when every tried answer so far scored below zero
        (led only to invalid inputs), the prior is followed too, so a skewed prior (a
        collection's continue/stop) is not flattened to 50/50 by trying both.
        """
        if n_actions <= 1:
            if n_actions == 1:
                return 0
            raise InvalidArgument(f"n_actions={n_actions!r} must be positive at {point!r}")
        rng = self._rng
        cumulative = None if prior is None else list(itertools.accumulate(prior))
        explore = rng.random() < self._epsilon
        t = self._tables.get(point)
        row = None if t is None else t._rows.get(state)
        if explore or row is None or len(row) == _HEAD or _follow_prior(row, n_actions, cumulative):
            return _sample(rng.random, n_actions, cumulative)
        return _greedy(row, n_actions, rng)

    def learn(self, visits: Iterable[tuple[Hashable, Hashable, int]], reward: float) -> None:
        """Credit ``reward`` (undiscounted return) to every visited (point, state, action)."""
        tables = self._tables
        for point, state, action in visits:
            t = tables.get(point)
            if t is None:
                t = self.table(point)
            t.update(state, action, reward)

    # -- fused fast path (same rule): one call per choice point -----------------------

    def window_driver(self, visits: list[Visit], window: StateAbstraction) -> WindowDriver:
        """The generator guide's hot path: ``choose``, and the window's ``push``, ``pop``
        and ``reset`` that keep up with it (see :class:`WindowDriver`).

        ``choose(point, options)`` reads the state of ``window``, makes the
        choice :meth:`choose` would make there (same rule, same random stream), appends
        the visit to ``visits`` for :meth:`learn_rows` (it holds the state's row itself,
        so crediting needs no second lookup) and records the chosen option in
        ``window``. A single option is answered without a visit, as there is nothing to
        learn. The one difference from :meth:`choose` + :meth:`learn`: an unseen state
        gets its (empty) row when chosen rather than when credited.

        Speed: this runs once per choice point, so it is closures with everything bound
        to locals. The driver interns the window's states as nodes that remember their
        row at each point and, for the built-in abstractions (:mod:`rlcheck.state`), the
        state each token or scope label leads to, so a choice or a scope builds no tuple
        and hashes none (``window.state`` is kept up to date all the same). So the
        window must be moved through the driver only; a window of another class is
        moved by its own methods and looked up by its ``state`` at each choice.

        Examples
        --------
        >>> from rlcheck.state import LabelledAncestorState
        >>> p, visits, window = Policy(seed=0), [], LabelledAncestorState(k=3)
        >>> driver = p.window_driver(visits, window)
        >>> driver.reset(); a = driver.choose("value", range(3)); driver.push("LEFT")
        >>> window.state == (a, "LEFT")
        True
        >>> driver.pop(); window.state == (a,)
        True
        """
        rng, random_, epsilon, append, row_of = self._hot_path(visits)
        tokens = TOKEN_TYPES
        kind = type(window)
        # The built-in window moves (see rlcheck.state), memoised; anything else is the
        # window's own method.
        own_record = kind.record is StateAbstraction.record
        labels = kind.push is LabelledAncestorState.push
        saves = (
            own_record
            and kind.pop is AncestorState.pop
            and (labels or kind.push is AncestorState.push)
        )
        still = kind.push is StateAbstraction.push and kind.pop is StateAbstraction.pop
        keep = window._keep
        nodes: dict[Hashable, _Node] = {}
        # Memoised rows are the tables' own, but a node costs memory too: no more nodes
        # than a table may hold states.
        max_nodes = min(_MAX_NODES, self.max_states)
        stack: list[_Node] = []

        def node_of(state: tuple[Hashable, ...]) -> _Node:
            node = nodes.get(state)
            if node is None:
                if len(nodes) >= max_nodes:
                    _forget(nodes)
                node = nodes[state] = _Node(state)
            return node

        def row_at(node: _Node, point: Hashable) -> _Row:
            row = node.rows[point] = row_of(point, node.key)
            return row

        def successor(node: _Node, token: Hashable) -> _Node:
            nxt = node.succ[token] = node_of(node.key[keep] + (token,))
            return nxt

        current = node_of(window.state)

        def choose(point: Hashable, options: Sequence[Any]) -> int:
            nonlocal current
            n = len(options)
            node = current if own_record else node_of(window.state)
            if n > 1:
                row = node.rows.get(point)
                if row is None:
                    row = row_at(node, point)
                # The random draws come in the plain rule's order: ε first, then uniform
                # or tie-breaking; a cache hit draws nothing, like a scan finding a
                # unique maximum. Row offsets are literals here (_N_CACHED = 0, _BEST = 1,
                # _BOUND = 2, _HEAD = 3).
                explore = random_() < epsilon
                if not explore and row[0] == n and row[row[1]] > row[2]:
                    at = row[1]
                    index = (at - 3) >> 1
                else:
                    if row[0] == -1:  # _DETACHED: dropped from its table since memoised
                        row = row_at(node, point)
                    index = int(random_() * n) if explore or len(row) == 3 else _greedy(row, n, rng)
                    at = 3 + 2 * index
                    if len(row) <= at:  # _slot, inline
                        row.extend([0.0] * (at + 2 - len(row)))
                append((row, at))
            else:
                index = 0
            token = options[index]
            if token.__class__ not in tokens:
                token = index
            if own_record:
                nxt = node.succ.get(token)
                if nxt is None:
                    nxt = successor(node, token)
                current = nxt
                window.state = nxt.key
            else:
                window.record(token)
            return index

        def push(label: Hashable) -> None:
            nonlocal current
            if not saves:
                if not still:
                    window.push(label)
                return
            node = current
            stack.append(node)
            if labels:
                nxt = node.succ.get(label)
                current = successor(node, label) if nxt is None else nxt
                window.state = current.key

        def pop() -> None:
            nonlocal current
            if not saves:
                if not still:
                    window.pop()
                return
            current = stack.pop()
            window.state = current.key

        def reset() -> None:
            nonlocal current
            window.reset()
            stack.clear()
            current = node_of(window.state)

        return WindowDriver(choose, push, pop, reset)

    def prior_chooser(
        self, visits: list[Visit], window: StateAbstraction
    ) -> Callable[[Hashable, int, Sequence[float] | None], int]:
        """A fast ``choose(point, n_actions, cumulative_prior) -> index`` (the Hypothesis
        backend's hot path).

        The same rule as :meth:`choose` with ``prior`` given as cumulative weights
        (``itertools.accumulate(prior)``, computed once per kind of draw by the caller;
        ``None``: uniform), the same random stream; reads the state from
        ``window.state``, appends the visit to ``visits`` for :meth:`learn_rows` and
        records the chosen index in ``window``.

        Examples
        --------
        >>> from rlcheck.state import SpanState
        >>> p, visits, window = Policy(seed=0), [], SpanState(k=2)
        >>> choose = p.prior_chooser(visits, window)
        >>> a = choose("more", 2, (0.2, 1.0))
        >>> window.state == ((), (a,))
        True
        """
        rng, random_, epsilon, append, row_of = self._hot_path(visits)
        record = window.record

        def choose(point: Hashable, n: int, cumulative: Sequence[float] | None) -> int:
            if n > 1:
                row = row_of(point, window.state)
                # Literal row offsets as in window_driver (_HEAD = 3).
                if (
                    random_() < epsilon
                    or len(row) == 3
                    or (n == 2 and cumulative is not None and _follow_prior(row, 2, cumulative))
                ):
                    index = _sample(random_, n, cumulative)
                elif row[0] == n and row[row[1]] > row[2]:
                    index = (row[1] - 3) >> 1
                else:
                    index = _greedy(row, n, rng)
                at = 3 + 2 * index
                if len(row) <= at:
                    row.extend([0.0] * (at + 2 - len(row)))
                append((row, at))
            else:
                index = 0
            record(index)
            return index

        return choose

    def _hot_path(
        self, visits: list[Visit]
    ) -> tuple[
        random.Random,
        Callable[[], float],
        float,
        Callable[[Visit], None],
        Callable[[Hashable, Hashable], _Row],
    ]:
        """What the fast choosers bind to locals: the random stream and its ``random``,
        ε, ``visits.append`` and a row lookup ``row_of(point, state)`` (the row, inserted
        empty when new)."""
        tables = self._tables
        table = self.table

        def row_of(point: Hashable, state: Hashable) -> _Row:
            t = tables.get(point)
            if t is None:
                t = table(point)
            row = t._rows.get(state)
            return t.row(state) if row is None else row

        return self._rng, self._rng.random, self._epsilon, visits.append, row_of

    def choose_allowed(
        self,
        point: Hashable,
        state: Hashable,
        allowed: Sequence[int],
        cumulative: Sequence[float] | None,
        visits: list[Visit],
    ) -> int:
        """:meth:`choose` restricted to the ``allowed`` action indices (ascending, not
        empty): the choice tree's steering away from choices already run to their end.

        ``cumulative`` is the prior over all actions, as :meth:`prior_chooser` takes it.
        A single allowed action is taken without a visit (nothing was chosen).

        Examples
        --------
        >>> p, visits = Policy(seed=0), []
        >>> p.choose_allowed("coin", (), [1], None, visits), visits
        (1, [])
        >>> p.choose_allowed("die", (), [2, 5], None, visits) in (2, 5), len(visits)
        (True, 1)
        """
        if len(allowed) == 1:
            return allowed[0]
        row = self.table(point).row(state)
        random_ = self._rng.random
        if random_() < self._epsilon or len(row) == _HEAD:
            if cumulative is None:
                index = allowed[int(random_() * len(allowed))]
            else:
                weights = [cumulative[a] - (cumulative[a - 1] if a else 0.0) for a in allowed]
                index = _sample_weighted(random_, allowed, weights)
        else:
            qs = [row[_HEAD + 2 * a] if _HEAD + 2 * a < len(row) else 0.0 for a in allowed]
            top = max(qs)
            ties = [a for a, q in zip(allowed, qs, strict=True) if q == top]
            index = ties[int(random_() * len(ties))]
        visits.append((row, _slot(row, index)))
        return index

    def choose_row(
        self,
        point: Hashable,
        state: Hashable,
        n_actions: int,
        visits: list[Visit],
    ) -> int:
        """:meth:`choose`, also appending the visit to ``visits`` for :meth:`learn_rows`.

        Examples
        --------
        >>> p, visits = Policy(seed=0), []
        >>> a = p.choose_row("coin", (), 2, visits)
        >>> p.learn_rows(visits, 20.0)
        >>> p.table("coin").value((), a)
        (20.0, 1)
        """
        action = self.choose(point, state, n_actions)
        if n_actions > 1:
            row = self.table(point).row(state)
            visits.append((row, _slot(row, action)))
        return action

    def learn_rows(
        self, visits: Iterable[Visit], reward: float, *, bonus: float = 0.0, step: float = 0.0
    ) -> None:
        """Credit ``reward`` to every visit recorded by :meth:`window_driver` or
        :meth:`choose_row`; with ``bonus`` > 0, each visit gets ``reward + bonus /
        sqrt(N)`` instead, N its state-action pair's visit count including this one
        (count-based exploration).

        Examples
        --------
        >>> p, visits = Policy(seed=0), []
        >>> a = p.choose_row("coin", (), 2, visits)
        >>> p.learn_rows(visits, -1.0, bonus=2.0)
        >>> p.table("coin").value((), a)
        (1.0, 1)
        """
        if bonus:
            _credit_bonus(visits, reward, bonus)
        elif step:
            _credit_recent(visits, reward, step)
        else:
            _credit_all(visits, reward)

    # -- persistence (plain JSON-able data; rlcheck never unpickles) -----------------

    def to_dict(self, *, since: PolicyMark | None = None) -> dict[str, Any]:
        """A JSON-serialisable snapshot of the learned values (not the random stream).

        With ``since`` (a :meth:`mark` of this policy), only what was learned after the
        mark: each state-action pair's visits since then and the mean of their returns
        (so :meth:`merge_dict` of the marked snapshot and this one gives the policy back).
        Pairs without new visits hold ``[0.0, 0]``; rows and tables without any are left out.

        Raises :class:`InvalidArgument` naming the table and key when a point or state
        key cannot be saved (a type JSON cannot hold, or a NaN or infinite float).

        Examples
        --------
        >>> p = Policy(seed=0)
        >>> p.learn([("coin", (), 1)], 20.0)
        >>> mark = p.mark()
        >>> p.learn([("coin", (), 1)], 10.0)
        >>> p.to_dict(since=mark)["tables"]
        [['coin', [[{'t': []}, [0.0, 0.0, 10.0, 1.0]]]]]
        """
        tables = []
        for point, rows in self.tables_since(since):
            try:
                tables.append([_encode(point), [[_encode(state), row] for state, row in rows]])
            except InvalidArgument as exc:
                raise InvalidArgument(f"cannot save the table of point {point!r}: {exc}") from exc
        return {
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "epsilon": self._epsilon,
            "tables": tables,
        }

    def tables_since(self, since: PolicyMark | None = None) -> Tables:
        """What :meth:`to_dict` holds, with its keys as they are: ``[(point, [(state,
        [q_0, n_0, ...]), ...]), ...]`` (row copies), oldest first; with ``since``, the
        visits made after that mark (rows and tables without any left out).

        Examples
        --------
        >>> p = Policy(seed=0)
        >>> p.learn([("coin", (), 1)], 20.0)
        >>> p.tables_since()
        [('coin', [((), [0.0, 0.0, 20.0, 1.0])])]
        """
        tables: Tables = []
        if since is None:
            for point, table in self._tables.items():
                tables.append((point, list(table.items())))
            return tables
        for point, table in self._tables.items():
            before = since.rows.get(point, {}).get
            rows = []
            for state, row in table._rows.items():
                kept = _row_since(row, _HEAD, before(state))
                if kept is not None:
                    rows.append((state, kept))
            if rows:
                tables.append((point, rows))
        return tables

    def mark(self) -> PolicyMark:
        """What the policy holds now, for ``to_dict(since=...)`` (a copy of every row)."""
        return PolicyMark(
            {
                point: {s: row[_HEAD:] for s, row in t._rows.items()}
                for point, t in self._tables.items()
            }
        )

    def load_dict(self, data: Any) -> None:
        """Replace the learned values with a snapshot from :meth:`to_dict`.

        Raises :class:`PolicyFileError` when ``data`` is not such a snapshot (values must
        be numbers: Q within ±1e9, visit counts whole and non-negative); the policy is
        left unchanged in that case. Past ``max_tables`` tables and ``max_states`` rows
        per table, the rest is dropped.
        """
        tables: dict[Hashable, QTable] = {}
        for point, rows in _parse_snapshot(data, self.max_tables, self.max_states):
            table = tables[point] = QTable(max_states=self.max_states)
            for state, row in rows:
                table._put(state, _new_row() + row)
        # In place: a chooser made before the load keeps seeing the policy's tables (and
        # drops the rows it memoised from the old ones: they are detached).
        for old in self._tables.values():
            _detach(old._rows.values())
        self._tables.clear()
        self._tables.update(tables)

    def merge_dict(self, data: Any) -> None:
        """Add a snapshot from :meth:`to_dict` to what the policy has learned.

        The merge is the learning rule's own: Monte Carlo values are means of returns, so
        a state-action pair seen ``n1`` times with value ``q1`` here and ``n2`` times with
        ``q2`` in the snapshot becomes ``(n1 q1 + n2 q2) / (n1 + n2)`` over ``n1 + n2``
        visits, as if one learner had made both sets of episodes. The caps hold as in
        learning (``max_tables``, ``max_states``: the oldest is dropped). Raises
        :class:`PolicyFileError` like :meth:`load_dict`, leaving the policy unchanged.

        Examples
        --------
        >>> a, b = Policy(seed=0), Policy(seed=0)
        >>> a.learn([("coin", (), 1)], 20.0)
        >>> b.learn([("coin", (), 1)], -1.0); b.learn([("coin", (), 1)], -1.0)
        >>> a.merge_dict(b.to_dict())
        >>> a.table("coin").value((), 1)
        (6.0, 3)
        """
        self.merge_tables(_parse_snapshot(data, self.max_tables, self.max_states))

    def merge_tables(self, tables: Tables) -> None:
        """:meth:`merge_dict` of tables already checked (as :meth:`tables_since` gives
        them: finite Q values within ±1e9, whole non-negative visit counts, even row
        lengths; :func:`check_flat_rows` checks them): the first ``max_tables`` tables,
        the first ``max_states`` rows of each.

        Examples
        --------
        >>> a, b = Policy(seed=0), Policy(seed=0)
        >>> b.learn([("coin", (), 1)], -1.0)
        >>> a.merge_tables(b.tables_since())
        >>> a.table("coin").value((), 1)
        (-1.0, 1)
        """
        for point, rows in itertools.islice(tables, self.max_tables):
            table = self.table(point)
            if not table._rows and table._fill(rows):
                continue
            got = table._rows.get
            put = table._put
            for state, incoming in itertools.islice(rows, self.max_states):
                row = got(state)
                if row is None:
                    put(state, _new_row() + incoming)
                    continue
                if len(row) < _HEAD + len(incoming):
                    row.extend([0.0] * (_HEAD + len(incoming) - len(row)))
                for i in range(0, len(incoming), 2):
                    n2 = incoming[i + 1]
                    if not n2:
                        continue
                    at = _HEAD + i
                    n1 = row[at + 1]
                    n = n1 + n2
                    row[at] = (n1 * row[at] + n2 * incoming[i]) / n
                    row[at + 1] = n
                row[_N_CACHED] = 0  # values changed: the greedy action is found again

    def merge_contributions(self, contributions: Iterable[Tables]) -> PolicyMark:
        """:meth:`merge_tables` of each of ``contributions`` in turn, then what
        :meth:`mark` would give, built from the incoming rows: into an empty policy (a
        run's load), a row that came from one contribution alone is marked as it came,
        without a copy, and only rows merged from several are copied. The incoming rows
        then belong to the mark (the caller must not change them).

        Examples
        --------
        >>> a, b = Policy(seed=0), Policy(seed=0)
        >>> a.learn([("coin", (), 1)], 20.0)
        >>> b.learn([("coin", (), 1)], -1.0)
        >>> merged = Policy(seed=0)
        >>> mark = merged.merge_contributions([a.tables_since(), b.tables_since()])
        >>> mark.rows["coin"][()], merged.table("coin").value((), 1)
        ([0.0, 0.0, 9.5, 2.0], (9.5, 2))
        """
        if self._tables:  # rows learned here: the mark copies them anyway
            for tables in contributions:
                self.merge_tables(tables)
            return self.mark()
        marked: dict[Hashable, dict[Hashable, list[float]]] = {}
        merged: list[tuple[Hashable, Iterable[Hashable]]] = []
        for tables in contributions:
            tables = list(itertools.islice(tables, self.max_tables))
            for point, rows in tables:
                incoming = dict(itertools.islice(rows, self.max_states))
                held = marked.get(point)
                if held is None:
                    marked[point] = incoming
                else:
                    merged.append((point, held.keys() & incoming.keys()))
                    held.update(incoming)
                if len(incoming) < min(len(rows), self.max_states):
                    merged.append((point, incoming))  # a state twice in one table
            self.merge_tables(tables)
        held_now = self._tables
        if len(marked) != len(held_now) or any(
            point not in held_now or len(rows) != len(held_now[point])
            for point, rows in marked.items()
        ):
            return self.mark()  # a cap dropped tables or rows: mark what is held
        for point, states in merged:
            now, held = held_now[point]._rows, marked[point]
            for state in states:
                held[state] = now[state][_HEAD:]
        return PolicyMark(marked)


Tables = list[tuple[Hashable, list[tuple[Hashable, list[float]]]]]
"""A policy's tables with their keys as they are (:meth:`Policy.tables_since`)."""


def check_flat_rows(values: Sequence[float]) -> None:
    """Raise :class:`PolicyFileError` unless ``values`` (rows ``q_0, n_0, q_1, n_1, ...``
    laid end to end, each of even length) are what a loaded row may hold: finite Q values
    within ±1e9, whole visit counts in ``[0, 2**53]``; C-speed passes over the values, not
    a Python loop per value (:func:`_checked_row` is the one-row reference).

    >>> check_flat_rows([1.5, 2.0, -1.0, 1.0])
    >>> check_flat_rows([1.5, 0.5])
    Traceback (most recent call last):
    ...
    rlcheck.errors.PolicyFileError: malformed Q-table rows: a visit count is not whole
    """
    if len(values) % 2:
        raise PolicyFileError("malformed Q-table rows: not (Q, count) pairs")
    if not values:
        return
    # A NaN or an infinity makes the sum non-finite, and so do finite values so large
    # that it overflows (refused below anyway): one C-speed pass instead of isfinite each.
    if not math.isfinite(sum(values)):
        raise PolicyFileError("malformed Q-table rows: a value is not a finite number")
    qs, ns = values[::2], values[1::2]
    if max(qs) > _MAX_ABS_Q or min(qs) < -_MAX_ABS_Q:
        raise PolicyFileError("malformed Q-table rows: a Q value is out of range")
    if min(ns) < 0 or max(ns) > _MAX_COUNT:
        raise PolicyFileError("malformed Q-table rows: a visit count is out of range")
    if not all(map(float.is_integer, ns)):
        raise PolicyFileError("malformed Q-table rows: a visit count is not whole")


class PolicyMark(NamedTuple):
    """The rows of a policy at one moment (:meth:`Policy.mark`): per point, per state,
    ``[q_0, n_0, ...]`` (never changed after: a mark's rows are its own)."""

    rows: dict[Hashable, dict[Hashable, list[float]]]


def _row_since(row: list[float], head: int, before: list[float] | None) -> list[float] | None:
    """The visits of ``row[head:]`` made after ``before`` (``q_0, n_0, ...``), a new list,
    ``None`` if none."""
    if before is None:
        return row[head:] if any(row[head + 1 :: 2]) else None
    if row[head:] == before:
        return None  # no visit since (most rows of a warm run)
    out = [0.0] * (len(row) - head)
    fresh = False
    for i in range(0, len(out), 2):
        n = row[head + i + 1]
        if i + 1 < len(before):
            n0, q0 = before[i + 1], before[i]
        else:
            n0, q0 = 0.0, 0.0
        if n > n0:  # fewer visits than at the mark: the row was evicted and re-made
            out[i] = (n * row[head + i] - n0 * q0) / (n - n0)
            out[i + 1] = n - n0
            fresh = True
    return out if fresh else None


def _parse_snapshot(
    data: Any, max_tables: int, max_states: int
) -> list[tuple[Hashable, list[tuple[Hashable, list[float]]]]]:
    """The checked ``(point, [(state, row), ...])`` tables of a :meth:`Policy.to_dict`
    snapshot, at most ``max_tables`` of at most ``max_states`` rows, or
    :class:`PolicyFileError`."""
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise PolicyFileError("not an rlcheck policy snapshot")
    if data.get("version") != _FORMAT_VERSION:
        raise PolicyFileError(
            f"policy format version {data.get('version')!r} is not {_FORMAT_VERSION}"
        )
    tables: list[tuple[Hashable, list[tuple[Hashable, list[float]]]]] = []
    try:
        for point_enc, rows in data["tables"]:
            if len(tables) >= max_tables:
                break
            checked: list[tuple[Hashable, list[float]]] = []
            for state_enc, row in rows:
                if len(checked) >= max_states:
                    break
                checked.append((_decode(state_enc), _checked_row(row)))
            tables.append((_decode(point_enc), checked))
    except (KeyError, TypeError, ValueError) as exc:
        raise PolicyFileError(f"malformed policy snapshot: {exc}") from exc
    return tables


_MAX_ABS_Q = 1e9  # far beyond any mean of rewards; rejects 1e308-style garbage
_MAX_COUNT = float(2**53)
_NUMBER = (int, float)


def _finite(v: float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int past float's range
        return False


def _checked_row(row: Any) -> list[float]:
    """A stored row ``[q_0, n_0, q_1, n_1, ...]`` as floats, or :class:`PolicyFileError`."""
    if not isinstance(row, list) or len(row) % 2:
        raise PolicyFileError("malformed Q-table row: not a list of (Q, count) pairs")
    for i, v in enumerate(row):
        # bool is an int subclass: refused, as are strings that float() would accept;
        # JSON's integers have no size limit, so a finite check may overflow.
        if type(v) not in _NUMBER or not _finite(v):
            raise PolicyFileError(f"malformed Q-table row: value {v!r} is not a finite number")
        if i % 2 and not (0 <= v <= _MAX_COUNT and v == int(v)):
            raise PolicyFileError(f"malformed Q-table row: visit count {v!r}")
        if not i % 2 and abs(v) > _MAX_ABS_Q:
            raise PolicyFileError(f"malformed Q-table row: Q value {v!r} out of range")
    return [float(v) for v in row]


def _encode(key: Hashable) -> Any:
    """Hashable key (nested tuples of str/int/float/bool/None) -> JSON value."""
    if isinstance(key, tuple):
        return {"t": [_encode(k) for k in key]}
    if isinstance(key, float) and not math.isfinite(key):
        raise InvalidArgument(
            f"key {key!r} is not a finite float; JSON policy files cannot hold NaN or "
            "infinities (use a label or a string in place of the value)"
        )
    if key is None or isinstance(key, (str, int, float, bool)):
        return key
    raise InvalidArgument(
        f"state or point key {key!r} of type {type(key).__name__} cannot be saved; "
        "use tuples of str, int, float, bool or None"
    )


def _decode(value: Any) -> Hashable:
    if isinstance(value, dict):
        return tuple(_decode(v) for v in value["t"])
    if isinstance(value, list):
        raise TypeError("lists are not valid keys")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"key {value!r} is not a finite float")
    return value
