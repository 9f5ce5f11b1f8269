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
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any

from rlcheck.errors import InvalidArgument, PolicyFileError

__all__ = [
    "REWARD_DUPLICATE",
    "REWARD_INVALID",
    "REWARD_NEW",
    "Policy",
    "QTable",
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


def _greedy(row: list[float], n_actions: int, rng: random.Random) -> int:
    """Greedy action of a non-empty row ``[q_0, n_0, q_1, n_1, ...]``, ties at random.

    Actions past the row's end are unvisited and count as Q = 0.
    """
    # Built-ins (slice, max, count) rather than a Python loop: this runs once per choice.
    # (A cached argmax does not pay: the greedy action is the one updated most and its
    # value usually falls, forcing a rescan anyway.)
    qs = row[: 2 * n_actions : 2]
    known = len(qs)
    if known < n_actions:
        qs.extend([0.0] * (n_actions - known))
    top = max(qs)
    action = qs.index(top)
    n_ties = qs.count(top)
    if n_ties > 1:
        # The pick-th tie in index order, found by hopping (no list of ties built).
        for _ in range(int(rng.random() * n_ties)):
            action = qs.index(top, action + 1)
    return action


def _credit_all(visits: Iterable[tuple[list[float], int]], ret: float) -> None:
    """The update rule, for each visited ``(row, action)``: Q <- Q + (G - Q) / N, with N
    counting the visits of that state-action pair (every-visit Monte Carlo, no discount)."""
    for row, action in visits:
        q_at = 2 * action
        if len(row) <= q_at + 1:
            row.extend([0.0] * (q_at + 2 - len(row)))
        n = row[q_at + 1] + 1.0
        row[q_at + 1] = n
        row[q_at] += (ret - row[q_at]) / n


class QTable:
    """Action values for one kind of choice point, keyed by (state, action index).

    Each state maps to a list ``[q_0, n_0, q_1, n_1, ...]`` grown on demand, which keeps the
    hot path (``best``) to one dict lookup and a short scan.
    """

    __slots__ = ("_order", "_rows", "max_states")

    def __init__(self, *, max_states: int = 200_000) -> None:
        if max_states < 1:
            raise InvalidArgument(f"max_states={max_states!r} must be at least 1")
        self.max_states = max_states
        self._rows: dict[Hashable, list[float]] = {}
        # States in insertion order, for O(1) eviction of the oldest: taking a dict's first
        # key instead costs O(deleted entries) in CPython (measured: 240 µs per new state
        # once a 100 000-state table is full, against 4 µs before).
        self._order: deque[Hashable] = deque()

    def __len__(self) -> int:
        return len(self._rows)

    def value(self, state: Hashable, action: int) -> tuple[float, int]:
        """``(Q, visit count)`` of one state-action pair; ``(0.0, 0)`` when never visited."""
        row = self._rows.get(state)
        if row is None or 2 * action >= len(row):
            return 0.0, 0
        return row[2 * action], int(row[2 * action + 1])

    def best(self, state: Hashable, n_actions: int, rng: random.Random) -> int:
        """The greedy action index (ties at random); uniform when the state is unseen."""
        row = self._rows.get(state)
        if not row:
            return int(rng.random() * n_actions)
        return _greedy(row, n_actions, rng)

    def update(self, state: Hashable, action: int, ret: float) -> None:
        """Every-visit Monte Carlo update: running mean of the returns seen after (s, a)."""
        _credit_all(((self.row(state), action),), ret)

    def row(self, state: Hashable) -> list[float]:
        """The (mutable) value row of ``state``, inserted empty when new.

        When the table is full, the oldest inserted state is evicted first.
        """
        row = self._rows.get(state)
        if row is None:
            row = []
            self._put(state, row)
        return row

    def _put(self, state: Hashable, row: list[float]) -> None:
        rows = self._rows
        if state not in rows:
            if len(rows) >= self.max_states:
                del rows[self._order.popleft()]
            self._order.append(state)
        rows[state] = row

    def items(self) -> Iterable[tuple[Hashable, list[float]]]:
        return self._rows.items()


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

    Examples
    --------
    >>> p = Policy(seed=1)
    >>> a = p.choose("coin", (), 2)
    >>> p.learn([("coin", (), a)], reward_for(valid=True, new=True))
    >>> p.table("coin").value((), a)
    (20.0, 1)
    """

    def __init__(
        self, *, epsilon: float = 0.25, seed: int | None = None, max_states: int = 200_000
    ) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise InvalidArgument(f"epsilon={epsilon!r} must lie in [0, 1]")
        self.epsilon = epsilon
        self.max_states = max_states
        self.rng = random.Random(seed)
        self._tables: dict[Hashable, QTable] = {}

    def table(self, point: Hashable) -> QTable:
        """The Q-table of one kind of choice point (created empty on first use)."""
        t = self._tables.get(point)
        if t is None:
            t = self._tables[point] = QTable(max_states=self.max_states)
        return t

    @property
    def points(self) -> list[Hashable]:
        return list(self._tables)

    def n_states(self) -> int:
        """Total number of states stored over all tables."""
        return sum(len(t) for t in self._tables.values())

    def choose(self, point: Hashable, state: Hashable, n_actions: int) -> int:
        """Pick an action index in ``range(n_actions)`` for ``state`` at ``point``."""
        if n_actions <= 1:
            if n_actions == 1:
                return 0
            raise InvalidArgument(f"n_actions={n_actions!r} must be positive at {point!r}")
        rng = self.rng
        # int(random() * n) rather than randrange(n): several times cheaper on this hot path,
        # always in range for n < 2**53, and uniform up to a 2**-53 bias.
        if rng.random() < self.epsilon:
            return int(rng.random() * n_actions)
        t = self._tables.get(point)
        if t is None:
            return int(rng.random() * n_actions)
        return t.best(state, n_actions, rng)

    def learn(self, visits: Iterable[tuple[Hashable, Hashable, int]], reward: float) -> None:
        """Credit ``reward`` (undiscounted return) to every visited (point, state, action)."""
        tables = self._tables
        for point, state, action in visits:
            t = tables.get(point)
            if t is None:
                t = self.table(point)
            t.update(state, action, reward)

    # -- fused fast path (same rule): one table lookup per choice instead of two ------

    def choose_row(
        self,
        point: Hashable,
        state: Hashable,
        n_actions: int,
        visits: list[tuple[list[float], int]],
    ) -> int:
        """:meth:`choose`, also appending ``(row, action)`` to ``visits`` for
        :meth:`learn_rows`.

        The visit holds the state's value row itself, so the end-of-episode update needs
        no second lookup. Equivalent to ``choose`` + ``learn`` except that an unseen state
        gets its (empty) row when chosen rather than when credited. Needs
        ``n_actions >= 1``; a single option is returned without a visit.

        Examples
        --------
        >>> p, visits = Policy(seed=0), []
        >>> a = p.choose_row("coin", (), 2, visits)
        >>> p.learn_rows(visits, 20.0)
        >>> p.table("coin").value((), a)
        (20.0, 1)
        """
        if n_actions <= 1:
            if n_actions == 1:
                return 0
            raise InvalidArgument(f"n_actions={n_actions!r} must be positive at {point!r}")
        t = self._tables.get(point)
        if t is None:
            t = self.table(point)
        row = t._rows.get(state)
        if row is None:
            row = t.row(state)
        rng = self.rng
        if rng.random() < self.epsilon or not row:
            action = int(rng.random() * n_actions)
        elif n_actions == 2 and len(row) == 4:
            # Yes/no choices, the most common kind: _greedy's rule without the call.
            q0 = row[0]
            q1 = row[2]
            action = (0 if q0 > q1 else 1) if q0 != q1 else int(rng.random() * 2)
        else:
            action = _greedy(row, n_actions, rng)
        visits.append((row, action))
        return action

    def learn_rows(self, visits: Iterable[tuple[list[float], int]], reward: float) -> None:
        """Credit ``reward`` to every visit recorded by :meth:`choose_row`."""
        _credit_all(visits, reward)

    # -- persistence (plain JSON-able data; rlcheck never unpickles) -----------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot of the learned values (not the random stream)."""
        tables = []
        for point, table in self._tables.items():
            rows = [[_encode(state), row] for state, row in table.items()]
            tables.append([_encode(point), rows])
        return {
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "epsilon": self.epsilon,
            "tables": tables,
        }

    def load_dict(self, data: Any) -> None:
        """Replace the learned values with a snapshot from :meth:`to_dict`.

        Raises :class:`PolicyFileError` when ``data`` is not such a snapshot; the policy is
        left unchanged in that case.
        """
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise PolicyFileError("not an rlcheck policy snapshot")
        if data.get("version") != _FORMAT_VERSION:
            raise PolicyFileError(
                f"policy format version {data.get('version')!r} is not {_FORMAT_VERSION}"
            )
        tables: dict[Hashable, QTable] = {}
        try:
            for point_enc, rows in data["tables"]:
                table = QTable(max_states=self.max_states)
                for state_enc, row in rows:
                    values = [float(v) for v in row]
                    if len(values) % 2 or any(values[i] < 0 for i in range(1, len(values), 2)):
                        raise PolicyFileError("malformed Q-table row")
                    if len(table) < self.max_states:
                        table._put(_decode(state_enc), values)
                tables[_decode(point_enc)] = table
        except (KeyError, TypeError, ValueError) as exc:
            raise PolicyFileError(f"malformed policy snapshot: {exc}") from exc
        self._tables = tables


def _encode(key: Hashable) -> Any:
    """Hashable key (nested tuples of str/int/float/bool/None) -> JSON value."""
    if isinstance(key, tuple):
        return {"t": [_encode(k) for k in key]}
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
    return value
