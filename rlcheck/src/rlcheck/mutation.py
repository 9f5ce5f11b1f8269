"""Mutation of earlier valid cases: replay a valid test case's draws with some changed.

Where validity is strict, a fresh input is mostly invalid, but a valid input with one
choice changed is often still valid and is a *different* valid input: the neighbourhood of
what already passed is where inputs that are both valid and new are dense (Zest's insight,
and part of Hypothesis's own engine). :class:`CasePool` keeps the draws of recent valid
cases that were new; :meth:`CasePool.plan` picks one, an operator and a position, and the
:class:`Plan` answers each draw of the next case. The operators (:data:`OPERATORS`), each a
habit of Hypothesis's own engine:

* ``"change"``: the draw at the position takes another value (:data:`FRESH`: the front
  end draws one, other than the recorded one where it can: :meth:`Plan.changed`);
* ``"boundary"``: it takes a boundary value: one of the simplest values of the draw in
  Hypothesis's order (``0``, ``""``, ``False``...), a bound, the recorded value's
  neighbour (the front end computes the candidates; :attr:`Plan.pick` chooses one);
* ``"copy"``: it takes the value of another draw of the same case with the same
  constraints (Hypothesis copies one span of a case onto another with the same label:
  equal parts are what comparisons get wrong, and rarely happen by chance);
* ``"simplest"``: every draw from the position on takes its simplest value
  (:data:`SIMPLEST`), as Hypothesis's engine runs the simplest extension of each new
  prefix: a valid prefix with everything after it as small as it goes;
* ``"small"``: every draw from the position on takes one of its few simplest values
  (:meth:`Plan.small_index`: the simplest one half the time): small inputs, the ones
  exhaustive small-scope testing (SmallCheck) relies on, at random.

Where no case is valid yet, :func:`duplicated` gives the front end Hypothesis's own
mutation of any case: one span of the case copied onto another span of the same label
(the whole subtree, not one draw), replayed as a plan (:meth:`Plan.replay`).

Before the position, a draw gets the recorded value while the draws line up (the same kind
of draw with the same constraints, so the value is permitted); after it, the recorded
values again while they still line up (a point mutation), and :data:`FRESH` from the first
draw that does not (the change moved the rest: the case goes on as a fresh one from a valid
prefix).

The operators but ``"change"`` are deterministic given the case, the position and the pick:
the pool remembers which of those plans it made (bounded) and does not make one twice, so
a mutation does not run an input it ran before through them.

Front-end neutral: a draw is named by a hashable ``key`` that holds its constraints, its
value is whatever the front end returns. Memory is bounded by ``size`` cases of at most
``max_draws`` draws each, and ``max_tried`` plans remembered.

Examples
--------
>>> pool = CasePool(seed=0)
>>> pool.add((("i", 0, 9), 3), (("i", 0, 9), 5))
>>> plan = pool.plan(position=1)
>>> plan.next(("i", 0, 9)), plan.next(("i", 0, 9)) is FRESH
(3, True)
>>> plan = pool.plan(position=0, operator="copy")
>>> plan.next(("i", 0, 9)), plan.next(("i", 0, 9))
(5, 5)
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping
from typing import Any

from rlcheck.errors import InvalidArgument

__all__ = [
    "FRESH",
    "OPERATORS",
    "SIMPLEST",
    "CasePool",
    "Plan",
    "Span",
    "duplicated",
    "other_integer",
]


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


FRESH: Any = _Sentinel("FRESH")
"""What :meth:`Plan.next` returns for a draw the guide must make itself."""
SIMPLEST: Any = _Sentinel("SIMPLEST")
"""What :meth:`Plan.next` returns for a draw that takes its simplest value."""

OPERATORS = ("change", "boundary", "copy", "simplest", "small")
"""The mutation operators (see the module docstring)."""

Draw = tuple[Hashable, Any]
Span = tuple[Hashable, int, int]
"""A span of a case: its label and the indices of its first draw and of the draw after it."""


class Plan:
    """The draws of one mutated case (see the module docstring).

    ``pick`` chooses among the front end's boundary candidates (``"boundary"``);
    ``source`` is the draw whose value a ``"copy"`` takes.
    """

    __slots__ = (
        "_at",
        "_draws",
        "_i",
        "_lined_up",
        "_rng",
        "operator",
        "origin",
        "pick",
        "source",
    )

    def __init__(
        self,
        draws: tuple[Draw, ...],
        at: int,
        *,
        operator: str = "change",
        pick: int = 0,
        source: int | None = None,
        seed: int = 0,
    ) -> None:
        if operator not in OPERATORS:
            raise InvalidArgument(f"operator={operator!r} must be one of {OPERATORS}")
        if operator == "copy" and (source is None or draws[source][0] != draws[at][0]):
            raise InvalidArgument(f"source={source!r} must be a draw like draw {at}")
        self._draws = draws
        self._at = at
        self._i = 0
        self._lined_up = True
        self.operator = operator
        self.pick = pick
        self.source = source
        self.origin = -1  # the pool's index of the case mutated (CasePool.credit)
        self._rng = random.Random(seed) if operator == "small" else None

    @classmethod
    def replay(cls, draws: tuple[Draw, ...]) -> Plan:
        """A plan that replays ``draws`` while they line up with the test's draws, then
        leaves the rest to the front end (:data:`FRESH`): no draw changed."""
        return cls(draws, len(draws))

    @property
    def position(self) -> int:
        return self._at

    @property
    def boundary(self) -> bool:
        """Whether the changed draw should take a boundary value."""
        return self.operator == "boundary"

    def next(self, key: Hashable) -> Any:
        """The value for the next draw (named ``key``), :data:`FRESH` or :data:`SIMPLEST`."""
        i = self._i
        self._i += 1
        if i >= self._at and self.operator in _SUFFIX:
            if i == self._at and (i >= len(self._draws) or self._draws[i][0] != key):
                self._lined_up = False
            return SIMPLEST
        if not self._lined_up or i >= len(self._draws):
            return FRESH
        recorded_key, value = self._draws[i]
        if recorded_key != key:
            self._lined_up = False
            return FRESH
        if i == self._at:
            if self.operator == "copy":
                assert self.source is not None
                return self._draws[self.source][1]
            return FRESH
        return value

    def small_index(self) -> int:
        """After :meth:`next` answered :data:`SIMPLEST`: which of the draw's simplest values
        to take (0: the simplest; ``"small"`` plans take 1-3 half the time)."""
        rng = self._rng
        if rng is None or rng.random() < 0.5:
            return 0
        return rng.randint(1, 3)

    def replaced(self, key: Hashable) -> Any:
        """Right after :meth:`next` answered the position's draw (named ``key``) of a
        ``"simplest"`` or ``"small"`` plan with :data:`SIMPLEST`: its recorded value, where
        the draws lined up to it (the value to put last, so that the position's draw
        changes, as a ``"change"`` plan's does: a suffix that starts with the recorded
        value is the plan of a later position, or a case run before); :data:`FRESH` at
        any other draw."""
        at = self._at
        if self._i - 1 != at or self.operator not in _SUFFIX or at >= len(self._draws):
            return FRESH
        if not self._lined_up:
            return FRESH
        recorded_key, value = self._draws[at]
        return value if recorded_key == key else FRESH

    def changed(self) -> Any:
        """Right after :meth:`next` answered the changed draw of a ``"change"`` or
        ``"boundary"`` plan with :data:`FRESH`: its recorded value (the one to move away
        from); :data:`FRESH` at any other draw."""
        at = self._at
        if (
            not self._lined_up
            or self._i - 1 != at
            or at >= len(self._draws)  # a replay (Plan.replay): nothing changed
            or self.operator not in _CHANGING
        ):
            return FRESH
        return self._draws[at][1]


_CHANGING = frozenset(("change", "boundary"))
_SUFFIX = frozenset(("simplest", "small"))


class CasePool:
    """The draws of recent new valid cases, to mutate (bounded: ``size`` cases).

    Parameters
    ----------
    size:
        Cases kept; a new one replaces a random old one once full (a reservoir that keeps
        old and recent cases alike).
    max_draws:
        Longer cases are not kept (they would cost memory and rarely line up).
    operators:
        Weight of each operator (:data:`OPERATORS`) in the plans; the default: ``"change"``
        alone.
    picks:
        Boundary candidates a ``"boundary"`` plan chooses among (:attr:`Plan.pick` lies
        in ``range(picks)``; the front end takes it modulo its candidates).
    max_tried:
        Deterministic plans remembered, so as not to make one twice.
    adaptive:
        Scale each operator's weight by its rate of new valid inputs so far
        (:meth:`credit`); off: the weights alone.
    energy:
        Pick the case to mutate by its own rate of new valid inputs so far (a Laplace
        estimate: a case not yet mutated starts at one half), as greybox fuzzers give a
        seed its energy: a valid case whose neighbours are all invalid or run before is
        mutated less; off: every kept case alike.
    recent:
        Share of the plans that mutate the case kept last (the newest valid case, whose
        neighbourhood no plan has explored yet; a greybox fuzzer's queue runs a new seed
        first); the others pick as ``energy`` says. 0: none singled out.
    seed:
        Seed of the pool's randomness (which case, which operator, which position).
    """

    __slots__ = (
        "_case_stats",
        "_cases",
        "_gains",
        "_names",
        "_newest",
        "_rng",
        "_tried",
        "_tries",
        "_weights",
        "adaptive",
        "added",
        "energy",
        "max_draws",
        "max_tried",
        "picks",
        "recent",
        "size",
    )

    def __init__(
        self,
        *,
        size: int = 256,
        max_draws: int = 512,
        operators: Mapping[str, float] | None = None,
        picks: int = 8,
        max_tried: int = 1 << 16,
        adaptive: bool = True,
        energy: bool = False,
        recent: float = 0.0,
        seed: int | None = None,
    ) -> None:
        if size < 1:
            raise InvalidArgument(f"size={size!r} must be at least 1")
        weights = dict(operators) if operators is not None else {"change": 1.0}
        unknown = sorted(set(weights) - set(OPERATORS))
        if unknown:
            raise InvalidArgument(f"operators={weights!r}: {unknown} not in {OPERATORS}")
        if any(not w >= 0 for w in weights.values()) or not sum(weights.values()) > 0:
            raise InvalidArgument(f"operators={weights!r} must have weights >= 0, some > 0")
        if picks < 1:
            raise InvalidArgument(f"picks={picks!r} must be at least 1")
        if not 0.0 <= recent <= 1.0:
            raise InvalidArgument(f"recent={recent!r} must lie in [0, 1]")
        self.size = size
        self.max_draws = max_draws
        self.picks = picks
        self.max_tried = max_tried
        self.adaptive = adaptive
        self.energy = energy
        self.recent = recent
        self._newest = -1
        self._names = [name for name in OPERATORS if weights.get(name, 0.0) > 0]
        self._weights = [weights[name] for name in self._names]
        self._tries = dict.fromkeys(self._names, 0)
        self._gains = dict.fromkeys(self._names, 0)
        self._cases: list[tuple[Draw, ...]] = []
        self._case_stats: list[list[int]] = []  # per kept case: [plans made, new valid]
        self._tried: set[int] = set()
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
            self._newest = len(self._cases)
            self._cases.append(draws)
            self._case_stats.append([0, 0])
        else:
            i = self._rng.randrange(self.size)
            self._cases[i] = draws
            self._case_stats[i] = [0, 0]
            self._newest = i

    def plan(
        self, *, position: int | None = None, operator: str | None = None, tries: int = 8
    ) -> Plan | None:
        """A plan for the next case: a kept case, an operator, a position; ``None`` when
        every one of ``tries`` attempts drew a deterministic plan made before."""
        if not self._cases:
            return None
        rng = self._rng
        for _ in range(tries):
            origin = self._pick_case()
            draws = self._cases[origin]
            name = operator or self._operator()
            at = rng.randrange(len(draws)) if position is None else position
            pick, source = 0, None
            if name == "copy":
                key, value = draws[at]
                sources = [
                    j for j, (k, v) in enumerate(draws) if j != at and k == key and v != value
                ]
                if not sources:
                    name = "change"  # nothing to copy from: change the draw instead
                else:
                    source = sources[rng.randrange(len(sources))]
            elif name == "boundary":
                pick = rng.randrange(self.picks)
            if name == "change":
                return self._made(Plan(draws, at), origin)
            if name == "small":
                return self._made(Plan(draws, at, operator=name, seed=rng.getrandbits(32)), origin)
            if name == "simplest":
                # the outcome depends only on the replayed prefix
                signature = hash((name, draws[:at]))
            else:
                signature = hash((name, draws, at, pick, source))
            if signature in self._tried:
                continue
            if len(self._tried) >= self.max_tried:
                self._tried.clear()
            self._tried.add(signature)
            return self._made(Plan(draws, at, operator=name, pick=pick, source=source), origin)
        return None

    def _pick_case(self) -> int:
        """The index of the kept case to mutate: the newest one (``recent`` of the time),
        else uniform, or by its energy (``energy``)."""
        rng = self._rng
        if self.recent and rng.random() < self.recent:
            return self._newest
        if not self.energy:
            return rng.randrange(len(self._cases))
        scores = [(gains + 1) / (made + 2) for made, gains in self._case_stats]
        x = rng.random() * sum(scores)
        for i, score in enumerate(scores):
            x -= score
            if x < 0:
                return i
        return len(scores) - 1

    def _made(self, plan: Plan, origin: int) -> Plan:
        plan.origin = origin
        return plan

    def credit(self, operator: str, new_valid: bool, plan: Plan | None = None) -> None:
        """The outcome of a case made by a plan of ``operator``: whether it was a new valid
        input (see :meth:`_operator`); with ``plan``, credited to the case it mutated too
        (``energy``), unless that case has been replaced since."""
        if self.adaptive and operator in self._tries:
            self._tries[operator] += 1
            self._gains[operator] += new_valid
        if (
            plan is not None
            and 0 <= plan.origin < len(self._cases)
            and self._cases[plan.origin] is plan._draws
        ):
            stats = self._case_stats[plan.origin]
            stats[0] += 1
            stats[1] += new_valid

    def _operator(self) -> str:
        """An operator, by its weight times its rate of new valid inputs in this run so far
        (a Laplace estimate, so an untried operator starts at one half): one that mostly
        repeats inputs run before, or breaks validity, on this test is made less often."""
        names = self._names
        if len(names) == 1:
            return names[0]
        scores = [
            w * (self._gains[n] + 1) / (self._tries[n] + 2)
            for n, w in zip(names, self._weights, strict=True)
        ]
        x = self._rng.random() * sum(scores)
        for name, score in zip(names, scores, strict=True):
            x -= score
            if x < 0:
                return name
        return names[-1]


def duplicated(
    draws: tuple[Draw, ...], spans: list[Span], rng: random.Random
) -> tuple[Draw, ...] | None:
    """The draws of a case with one span copied onto another of the same label, or ``None``
    where no label has two non-empty spans.

    Hypothesis's engine does this after each case it generates, invalid ones included:
    equal parts of an input (every element of a list alike, two equal keys) rarely happen
    by chance and are what many conditions and many bugs hang on. Two spans of one label
    are picked; where one holds the other (a tree: one strategy drawn inside itself), the
    part of the outer span before the inner one is repeated (the tree grows by a copy of
    its path), otherwise both spans take the draws of one of them. The result replays as
    a plan (:meth:`Plan.replay`): where the copy no longer lines up with the draws the test
    makes, the rest is drawn afresh.

    >>> draws = ((("b",), True), (("b",), False), (("b",), True))
    >>> spans = [("e", 0, 1), ("e", 1, 2), ("e", 2, 3)]
    >>> sorted({duplicated(draws, spans, random.Random(s)) for s in range(40)})[0]
    ((('b',), False), (('b',), False), (('b',), True))
    """
    groups: dict[Hashable, list[tuple[int, int]]] = {}
    for label, start, end in spans:
        if end > start:
            groups.setdefault(label, []).append((start, end))
    labels = [label for label, group in groups.items() if len(set(group)) > 1]
    if not labels:
        return None
    group = sorted(set(groups[labels[rng.randrange(len(labels))]]))
    (start1, end1), (start2, end2) = rng.sample(group, 2)
    if start1 > start2:
        (start1, end1), (start2, end2) = (start2, end2), (start1, end1)
    if start1 <= start2 <= end2 <= end1:
        return draws[:start2] + draws[start1:]
    start, end = (start1, end1) if rng.random() < 0.5 else (start2, end2)
    copy = draws[start:end]
    return draws[:start1] + copy + draws[end1:start2] + copy + draws[end2:]


def other_integer(rng: random.Random, lo: int, hi: int, recorded: int) -> int:
    """A uniform value of ``[lo, hi]`` other than ``recorded`` (``recorded`` if none)."""
    if not lo <= recorded <= hi or lo == hi:
        return rng.randint(lo, hi)
    value = rng.randint(lo, hi - 1)
    return value + 1 if value >= recorded else value
