"""rlcheck as a Hypothesis backend: RL guidance for unchanged ``@given`` tests.

After ``pip install rlcheck``, any Hypothesis test can run on the backend::

    @settings(backend="rlcheck")
    @given(st.lists(st.integers(0, 20)))
    def test_sorted_input(xs):
        assume(len(xs) >= 3 and xs == sorted(set(xs)))
        ...

Every strategy draws its values through the five primitive draws of a
:class:`~hypothesis.internal.conjecture.providers.PrimitiveProvider`; this module's
:class:`RLCheckProvider` answers those draws with the one learner of rlcheck
(:class:`rlcheck.learner.Policy`). How a draw becomes a choice point:

* **Point** (one Q-table each): the draw's kind and constraints, e.g. ``("i", 0, 20)``
  for ``draw_integer(0, 20)``.
* **State**: the innermost labels of the open strategy spans (``span_start`` labels: the
  ancestor path of the value being built) plus the last few learned choices in draw order
  (``window="sequence"``, the default). ``window="ancestor"`` instead forgets the choices
  made inside a span when it closes, so siblings do not see each other (the RLCheck
  paper's best abstraction for its hand-labelled generators); on Hypothesis strategies,
  whose spans carry no LEFT/RIGHT labels, the sequence window measured better (README).
* **Actions**: small finite domains are learned value by value (booleans, integer ranges
  of at most 32 values, which covers ``sampled_from`` and collection continue/stop
  draws). Large domains are learned through a coarse choice with the rest drawn at
  random: a magnitude bucket for wide integers and floats, a continue/stop decision per
  element plus a character class (or the character itself, for alphabets of at most 16
  characters) for strings and bytes.
* **The default's corner cases**: a wide integer's buckets are weighted, and sampled
  inside, by Hypothesis's own distribution of integers (:func:`buckets.integer_masses`),
  and wide integers, floats, strings and bytes take one of Hypothesis's constants at its
  rates (:attr:`RLCheckProvider.draw_constants`), so a cold policy draws as Hypothesis's
  provider does, and the learned cases keep the boundary values it finds bugs with.
* **Episode** = one test case, closed in :meth:`RLCheckProvider.per_test_case_context_manager`
  and counted by the episode ledger (:mod:`rlcheck.ledger`, shared with ``rlcheck.run``):
  an ``assume()`` or ``.filter()`` rejection (or an overrun) is invalid (reward −1); a
  passing case is valid, +20 when its choice sequence (its identity) is new in this run,
  0 when it repeats one; a failing case is a failure, rewarded likewise among failures.
  ``KeyboardInterrupt``, ``SystemExit`` and ``BackendCannotProceed`` pass through
  untouched: no outcome, no reward.
* **Novelty by construction**: every choice sequence run is recorded in a
  :class:`rlcheck.choice_tree.ChoiceTree`; while drawing, a choice whose every
  continuation has already been run is never taken (Hypothesis's own backend does the
  same with its ``DataTree``), so a valid case never repeats an earlier one through
  choices that pin the value down (all of a small domain's). When every sequence has
  been run, the provider hands the run back (Hypothesis then stops: nothing new is left).
  A valid case that still repeats one (through choices left to chance) is discarded
  after it ran (``realize`` raises ``BackendCannotProceed("discard_test_case")``), so it
  does not count toward ``max_examples``; at most as often as Hypothesis tolerates
  without switching backends (:data:`_DISCARD_SHARE`).
* **Mutation of earlier valid cases** (:mod:`rlcheck.mutation`): a share of the learned
  cases (:attr:`RLCheckProvider.mutate_share`) replay a new valid case run before with
  draws changed by one of its operators (another value, a boundary value, a copy of a like
  draw, the simplest or small values from one draw on), each replayed value placed in the
  choice tree like a learned one and replaced where it could only repeat a case.
* **Duplication before the first valid case** (opt-in,
  :attr:`RLCheckProvider.duplicate_until_valid`): with nothing valid there is nothing to
  learn from or to mutate, so learned cases may copy one span of an earlier (invalid)
  case onto another span of the same label, as Hypothesis's engine does after each case it
  generates (:func:`rlcheck.mutation.duplicated`): inputs with equal parts, which chance
  rarely makes. Off by default: the fresh learned cases it replaces measured better.

Hypothesis facts the design leans on (read in ``hypothesis/internal/conjecture/engine.py``;
every access to Hypothesis internals is in :mod:`rlcheck.hypothesis.compat`): a run
stops after ``max_examples`` valid cases and gives up (``Unsatisfiable``) once invalid
cases exceed ``458 + 100 × valid``; the first case, database replay and
shrinking use Hypothesis's own backend, and every failure found here is replayed on it.
Hence:

* the learned policy is saved in the example database, under the test's database key
  + ``b".rlcheck-policy"``, as contributions that the next run merges
  (:class:`rlcheck.policy_store.DatabasePolicy`), so learning accumulates across runs,
  processes and machines sharing a database, on any database (read-only ones are read);
  a run that loads one is guided from its first case (the probe's valid rate is saved
  with it, so the probe does not run again);
* when invalid cases reach half of Hypothesis's give-up threshold, the provider hands
  the rest of the run to Hypothesis's own backend (``BackendCannotProceed("exhausted")``),
  so a test the default backend can run never becomes ``Unsatisfiable`` here;
* any internal error of the provider does the same, with one :class:`RLCheckWarning`;
* the last half of ``max_examples`` is left to Hypothesis's own backend
  (:attr:`RLCheckProvider.default_tail`): switching backends never takes from a test what
  the default's own engine (its distributions, boundary values, mutations, novelty) would
  find in half the budget.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import itertools
import math
import random
import time
import warnings
import weakref
import zlib
from collections.abc import Container, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from hypothesis import settings as hypothesis_settings

from rlcheck.choice_tree import ChoiceTree
from rlcheck.errors import InvalidArgument, RLCheckWarning
from rlcheck.hypothesis import buckets
from rlcheck.hypothesis.compat import (
    COLLECTION_DEFAULT_MAX_SIZE,
    HEALTH_CHECK_INVALID,
    HEALTH_CHECK_VALID,
    INVALID_PER_VALID,
    INVALID_THRESHOLD_BASE,
    PASS_THROUGH,
    REJECTIONS,
    BackendCannotProceed,
    ConstantSource,
    EngineTree,
    IntervalSet,
    PrimitiveProvider,
    RunEnd,
    bounded_fetch,
    choice_permitted,
    credit_invalid,
    current_test,
    database_directory,
    database_key,
    default_provider,
    ends_run,
    make_float_clamper,
    on_run_end,
    run_random,
    running_database_key,
    simplest_choices,
)
from rlcheck.learner import Policy, Visit
from rlcheck.ledger import Counts, Ledger, Outcome
from rlcheck.mutation import FRESH, SIMPLEST, CasePool, Plan, Span, duplicated, other_integer
from rlcheck.policy_store import DatabasePolicy
from rlcheck.state import SpanState

__all__ = [
    "BACKEND_NAME",
    "FAST_BACKEND_NAME",
    "PROFILE_NAME",
    "BackendStats",
    "FastRLCheckProvider",
    "RLCheckProvider",
    "TestStats",
    "collect_stats",
    "database_key",
    "policy_path",
]

BACKEND_NAME = "rlcheck"
"""The name to pass as ``@settings(backend=...)``."""
FAST_BACKEND_NAME = "rlcheck-fast"
"""``@settings(backend="rlcheck-fast")``: :class:`FastRLCheckProvider`."""
PROFILE_NAME = "rlcheck"
"""The Hypothesis settings profile (registered on import of Hypothesis) that selects it."""

WindowMode = Literal["ancestor", "sequence"]

_WINDOW = 4  # learned choices kept in the state (RLCheck: k = 4-5)
_PATH_DEPTH = 3  # innermost span labels kept in the state
_SOFT_SIZE_CAP = 48  # string/bytes elements past min_size; keeps inputs below overrun size
# Fractions of Hypothesis's give-up limits at which to hand over (see _should_hand_back).
# Half: the backend keeps time to learn, and the default backend keeps half its budget.
_HAND_BACK_UNSATISFIABLE = 0.5
_HAND_BACK_HEALTH_CHECK = 0.5
_SAVE_INTERVAL_S = 5.0
_MAX_SEEN = 1 << 20  # choice-sequence fingerprints kept per run (bounds memory)
# Hypothesis switches to its own backend after more than 10 discarded cases making up
# over 20 % of calls (engine.py); stay below with a margin.
_DISCARD_FREE, _DISCARD_SHARE = 10, 0.15
_LABEL_MASK = (1 << 32) - 1  # span labels are 64-bit; 32 bits keep saved files small
_POLICY_META = {"kind": "rlcheck-hypothesis-backend", "layout": 1}
# The probe's valid rate, kept in the policy as a one-action table whose Monte Carlo mean
# over the probe's cases (return 1 valid or failed, 0 invalid) is that rate; merged across
# runs by the same rule as every value, so a warm run knows it without a probe of its own.
_PROBE_POINT = ("probe-valid",)
# Likewise the small cases' valid rate (_SmallCase): a warm run runs them where it is not 0.
_SMALL_POINT = ("small-valid",)
# Invalid simplest extensions in a row after which the probe makes no more (engine.py's
# consecutive_zero_extend_is_invalid < 5), and the draws of Hypothesis's provider a novel
# prefix retries for a value the probe's tree has not seen (its generate_novel_prefix: 10).
_SIMPLEST_PATIENCE = 5
_NOVEL_ATTEMPTS = 10
# A chain of duplications (duplicate_until_valid) ends after this many mutated cases in a
# row that ran nothing new (engine.py's generate_mutations_from: failed_mutations <= 5).
_DUPLICATE_PATIENCE = 5
# Small cases (_SmallCase): a draw takes at most its 4th simplest value, a case's children
# are kept for at most this many draws, and the queue of cases to run is bounded.
_SMALL_RANK = 3
_SMALL_CHILD_DRAWS = 32
_SMALL_QUEUE = 256
_NOTHING = object()
_END = object()  # in the probe's tree: a case ended here


@dataclass(frozen=True)
class TestStats(Counts):
    """What the backend saw for one test function, summed over its runs.

    Counts are the episode ledger's (:class:`rlcheck.ledger.Counts`): ``unique_valid``
    counts valid cases whose choice sequence was new within its run; ``failures`` are
    counted apart from ``valid``. ``handed_back`` is true when a run handed generation
    back to Hypothesis's own backend (too many invalid cases, nothing to learn, or an
    internal error: then ``fallback`` is true too, and ``reason`` names the error).
    ``stepped_aside`` is true when a run found, within its first cases, that guidance
    could not pay (:meth:`RLCheckProvider._guidance_pays`) and left the rest to
    Hypothesis's own backend. ``learned`` counts the cases the learned policy made (or a
    mutation of an earlier case): the rest of ``cases`` are Hypothesis's own provider's
    (the probe's, the tail's); a run that ended inside its probe learned none.
    """

    __test__: ClassVar[bool] = False  # not a pytest test class despite the name

    runs: int = 0
    handed_back: bool = False
    fallback: bool = False
    stepped_aside: bool = False
    reason: str = ""
    learned: int = 0


class BackendStats:
    """Per-test statistics of the backend's runs, owned by whoever collects them.

    Fill one with :func:`collect_stats`; keys are the tests' qualified names
    (``module.function``). Each run of a test is one entry, updated as the run goes, so
    a statistics object read in the middle of a run is up to date.

    Examples
    --------
    >>> stats = BackendStats()
    >>> stats.update("t.test_a", 0, Counts(cases=3, valid=2, unique_valid=2, invalid=1))
    >>> stats["t.test_a"].valid, stats["t.test_a"].runs
    (2, 1)
    """

    def __init__(self) -> None:
        self._runs: dict[str, dict[int, TestStats]] = {}
        self._next_run = 0

    def start_run(self, name: str) -> int:
        """A new run of test ``name``: its run id for :meth:`update`."""
        run = self._next_run
        self._next_run += 1
        self._runs.setdefault(name, {})[run] = TestStats(runs=1)
        return run

    def update(
        self,
        name: str,
        run: int,
        counts: Counts,
        *,
        handed_back: bool = False,
        fallback: bool = False,
        stepped_aside: bool = False,
        reason: str = "",
        learned: int = 0,
    ) -> None:
        """Set the counts of one run (flags only ever turn on; the first reason stays)."""
        runs = self._runs.setdefault(name, {})
        previous = runs.get(run, TestStats(runs=1))
        runs[run] = TestStats(
            counts.cases,
            counts.valid,
            counts.unique_valid,
            counts.invalid,
            counts.failures,
            1,
            previous.handed_back or handed_back or fallback or stepped_aside,
            previous.fallback or fallback,
            previous.stepped_aside or stepped_aside,
            previous.reason or reason,
            max(previous.learned, learned),
        )

    def __getitem__(self, name: str) -> TestStats:
        total = TestStats()
        for stats in self._runs[name].values():
            total = total + stats
        return total

    def __contains__(self, name: object) -> bool:
        return name in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def as_dict(self) -> dict[str, TestStats]:
        """Every test's statistics, summed over its runs."""
        return {name: self[name] for name in self._runs}


_COLLECTOR: ContextVar[BackendStats | None] = ContextVar("rlcheck_backend_stats", default=None)


@contextmanager
def collect_stats(stats: BackendStats | None = None) -> Iterator[BackendStats]:
    """Gather the backend's per-test statistics of the runs inside the block.

    Hypothesis creates providers itself, so they find the collector in a context
    variable (local to the thread and task, restored on exit; collectors nest, the
    innermost one wins).

    Examples
    --------
    >>> from hypothesis import given, settings, strategies as st
    >>> @settings(backend="rlcheck", max_examples=10, database=None)
    ... @given(st.booleans())
    ... def test_flag(b):
    ...     pass
    >>> with collect_stats() as stats:
    ...     test_flag()
    >>> [s.runs for s in stats.as_dict().values()]
    [1]
    """
    stats = BackendStats() if stats is None else stats
    token = _COLLECTOR.set(stats)
    try:
        yield stats
    finally:
        _COLLECTOR.reset(token)


def policy_path(database: Any, database_key: bytes | None) -> Path | None:
    """Where earlier versions kept the learned policy of one test, or ``None``.

    Policies now live in the example database itself, under the test's database key +
    ``b".rlcheck-policy"`` (:class:`rlcheck.policy_store.DatabasePolicy`); a file at this
    path (``<database dir>/rlcheck/<digest>.policy.json``) is still read, and moved into
    the database by the first save.

    Examples
    --------
    >>> from hypothesis.database import DirectoryBasedExampleDatabase
    >>> db = DirectoryBasedExampleDatabase("/tmp/db")
    >>> str(policy_path(db, b"k")).startswith("/tmp/db/rlcheck/")
    True
    >>> policy_path(None, b"k") is None
    True
    """
    directory = database_directory(database)
    if directory is None or not database_key:
        return None
    digest = hashlib.sha384(database_key).hexdigest()[:32]
    return Path(directory) / "rlcheck" / f"{digest}.policy.json"


class _Persistence:
    """The learned policy of one test in its example database: load once, save the new
    visits when asked and at the end (:class:`rlcheck.policy_store.DatabasePolicy`).

    The end is the run's: :meth:`final_save` runs when the engine's run ends
    (:func:`~rlcheck.hypothesis.compat.on_run_end`), or as the exception that ends it
    leaves the test case (:func:`~rlcheck.hypothesis.compat.ends_run`); only a run that
    ends some other way leaves it to the provider's collection (``weakref.finalize``:
    garbage collection or interpreter exit). It holds no reference to the provider."""

    def __init__(self, database: Any, key: bytes, policy: Policy) -> None:
        self.store = DatabasePolicy(
            database,
            key,
            meta=_POLICY_META,
            legacy_file=policy_path(database, key),
            fetch=bounded_fetch(database),
        )
        self.policy = policy
        self.dirty = False
        self.final = False  # the last save said this run is done learning
        self.broken = False  # a save failed: no more saves in this run
        self.last_save = time.monotonic()
        self.loaded = False  # a run that ends before its load learned nothing to save

    def load(self) -> bool:
        warm = self.store.load(self.policy)
        self.loaded = True  # not where it raised: then nothing is saved either
        return warm

    def save(self, *, final: bool = False) -> None:
        if self.broken or not self.loaded or (not self.dirty and not (final and not self.final)):
            return
        try:
            self.store.save(self.policy, final=final)
        except BaseException:
            self.broken = True  # reported once, by the caller; no retry at collection
            raise
        self.dirty = False
        self.final = final
        self.last_save = time.monotonic()

    def final_save(self) -> None:
        # Runs at the run's end, or from weakref.finalize: never raises.
        try:
            self.save(final=True)
        except Exception as exc:
            warnings.warn(
                f"rlcheck could not save the learned policy to {self.store.database!r}: {exc}",
                RLCheckWarning,
                stacklevel=1,
            )


class RLCheckProvider(PrimitiveProvider):
    """A Hypothesis backend that learns which draws lead to new valid test cases.

    One instance serves one run of one ``@given`` test (``lifetime = "test_function"``);
    see the module docstring for how draws map to the learner.

    Parameters
    ----------
    conjecturedata:
        Always ``None`` for this lifetime (Hypothesis's calling convention).
    epsilon:
        Exploration probability of the ε-greedy policy.
    window:
        ``"sequence"`` (the last choices in draw order) or ``"ancestor"`` (choices inside
        a closed span are forgotten: siblings do not see each other).
    seed:
        Seed of the provider's randomness; by default taken from Hypothesis's own random
        stream, so ``@seed`` and ``derandomize=True`` make runs reproducible.
    persist:
        Load and save the learned policy in the test's example database.

    Examples
    --------
    >>> from hypothesis import given, settings, strategies as st
    >>> @settings(backend="rlcheck", max_examples=20, database=None)
    ... @given(st.booleans())
    ... def test_anything(b):
    ...     pass
    >>> test_anything()
    """

    lifetime: ClassVar[Literal["test_case", "test_function"]] = "test_function"
    #: Defaults of the constructor options; a subclass can change them, since Hypothesis
    #: instantiates a backend without arguments.
    epsilon: ClassVar[float] = 0.25
    #: Share of the valid cases (``max_examples`` counts those) generated wholly by
    #: Hypothesis's own provider (its distributions, boundary values and the constants of
    #: the code under test), interleaved with the learned ones. Those cases are counted
    #: by the ledger but not learned from. Off: :attr:`default_tail` gives the default
    #: backend its share with its whole engine, which measured better (README).
    default_share: ClassVar[float] = 0.0
    #: Invalid cases in a row the default provider may make before the learned policy
    #: gets a case: bounds the default's share of the *cases* where its valid rate is low.
    default_patience: ClassVar[int] = 30
    #: Share of ``max_examples`` left to Hypothesis's own backend, its whole engine, at
    #: the end of a run: once the backend's valid cases (as Hypothesis counts them: not
    #: the discarded repeats) reach ``(1 - default_tail) * max_examples``, it hands the
    #: run back. Unlike :attr:`default_share`'s cases (Hypothesis's provider alone), the
    #: engine also steers away from the inputs it ran, starts from small cases and
    #: mutates earlier cases (copying one part of a case onto another). A run whose
    #: ``max_examples`` is out of reach (one stopped by time) never gets there.
    #: Half: the default backend keeps half of what it would have found alone, and the
    #: learned policy gets as many valid cases as the default.
    default_tail: ClassVar[float] = 0.5
    window: ClassVar[WindowMode] = "sequence"
    #: Count-based exploration bonus (``Policy.learn_rows``'s ``bonus``; the core API's
    #: ``NoveltyRLGuide`` uses 1.0). Off by default (``compare.py``'s
    #: ``rl-hypothesis-novelty`` row turns it on).
    count_bonus: ClassVar[float] = 0.0
    #: Floor on the learning rule's step size (``Policy.learn_rows``'s ``step``): a
    #: choice's value is the running mean of its returns over its first ``1 / step``
    #: visits, then a recency-weighted mean. A new input pays once: with a plain running
    #: mean a choice that led to one new valid input and then only to invalid ones keeps
    #: a value above an untried choice's 0 for about 20 visits. 0: the plain running mean.
    step_floor: ClassVar[float] = 0.0
    #: Cases a run makes before judging whether guidance can pay here
    #: (:meth:`_guidance_pays`); 0: never step aside. Their valid rate is saved with
    #: the policy: a run that loads a policy holding it for as many cases runs no probe
    #: (its cases are learned from the first one on).
    probe_cases: ClassVar[int] = 20
    #: Cases of the probe made as Hypothesis's engine makes its first ones, one before
    #: each of the first probe cases: a novel prefix (drawn by Hypothesis's provider
    #: down a tree of the probe's cases, as the engine's ``generate_novel_prefix`` walks
    #: its ``DataTree``), then every draw's simplest value (:class:`_ProbeCase`). The
    #: engine runs these first, and its cheap early bugs are there (a version's core
    #: ``1.0.0`` after the prefix ``1``); without them a run's first cases were 20 of
    #: Hypothesis's provider alone (``benchmarks/etna.py``'s ``semver-built``: 124 tests to
    #: failure against the default's 16, README). Not counted in the probe's valid rate
    #: (:attr:`probe_cases` of the provider alone still decide), and they stop after 5
    #: invalid ones in a row, as the engine's do. 0: off.
    probe_simplest_cases: ClassVar[int] = 10
    #: Learned cases per case of the probe once the probe can no longer step aside
    #: (:meth:`_probe_turn`): from then on its remaining cases (Hypothesis's provider's,
    #: its simplest extensions, its small cases) are spread among learned ones, so a
    #: strict test is guided from its first cases, while a test that could still step
    #: aside (invalid cases are rare) runs the probe alone, as before. 0: the probe runs
    #: all its cases first. On ``benchmarks/etna.py``'s strict workloads (replay, 20
    #: seeds) 0.36x the default's tests to failure cold against 0.39x (AVL 0.53x against
    #: 0.71x; README).
    probe_spread: ClassVar[int] = 2
    #: Whether the probe's cases of Hypothesis's provider start, as the engine's random
    #: cases do, from a novel prefix (:class:`_ProbeCase`: down the tree of the probe's
    #: cases, a value whose every case has been run drawn again), then draw freely. Off:
    #: the provider alone, which repeats small inputs (``benchmarks/etna.py``'s
    #: jsonpointer: the empty pointer in 8 of 20 cases), each a test that cannot find a
    #: bug, and counts them as valid in the probe's rate.
    probe_novel: ClassVar[bool] = True
    #: How many of the probe's :attr:`probe_simplest_cases` are *small cases* instead
    #: (:class:`_SmallCase`; alternating with the simplest extensions, a small case
    #: first): the simplest case with a few draws moved to their next simplest values,
    #: in order of how many steps they moved (SmallCheck's order: ``1.0.0``, ``0.1.0``,
    #: ``0.0.1``, then ``2.0.0``, ``1.1.0``...), only valid cases extended further.
    #: The engine's simplest extensions take one random draw and zeros after it; these
    #: take small values everywhere, where bugs of comparisons and bounds sit. 0: off.
    probe_small_cases: ClassVar[int] = 5
    #: Whether a run that loaded a policy (and so runs no probe) still runs the probe's
    #: simplest extensions, one before each of its first learned cases
    #: (:meth:`_warm_simplest_turn`). Off: on ``benchmarks/etna.py``'s strict workloads
    #: warm runs took 0.71x the default's tests to failure with them, 0.48x without
    #: (10 seeds; README).
    warm_probe_simplest: ClassVar[bool] = False
    #: Whether a run that loaded a policy (and so runs no probe) still runs the probe's
    #: small cases (:attr:`probe_small_cases`) between its first learned cases
    #: (:meth:`_warm_small_turn`, :attr:`warm_small_by_rate`), unless the earlier runs'
    #: small cases were all invalid (their valid rate is saved with the policy).
    warm_probe_small: ClassVar[bool] = True
    #: Space a warm run's small cases by the earlier runs' valid rate of them: about one
    #: small case per ``1 / rate`` learned ones (every other case at a rate of 1), so a
    #: test whose small cases were mostly invalid gives its learned cases more of its
    #: first tests (``benchmarks/etna.py``'s jsonpointer: 0.27x the default's tests to
    #: failure warm against 0.50x with every other case; README).
    warm_small_by_rate: ClassVar[bool] = True
    #: How many cases of Hypothesis's provider a run that loaded a policy interleaves
    #: with its first learned cases, one before each (:meth:`_warm_provider_turn`; they
    #: are the probe's cases, counted in its stored rate). 0: off (measured: README).
    warm_probe_cases: ClassVar[int] = 0
    #: Valid cases (and failures) per case of the probe at or above which guidance has
    #: nothing to gain: the test rejects too few inputs for learning to raise the rate.
    #: Repeats do not count against it: Hypothesis's engine steers away from the choice
    #: sequences it ran (its ``DataTree``), which the probe's provider alone does not.
    step_aside_rate: ClassVar[float] = 0.8
    #: Share of the learned cases that mutate an earlier new valid case instead of
    #: drawing afresh (:mod:`rlcheck.mutation`: its draws replayed with some changed).
    #: The valid cases of the probe (Hypothesis's own provider's) are mutated too. Half:
    #: measured on ``benchmarks/etna.py`` (README: what each part of the guidance pays).
    mutate_share: ClassVar[float] = 0.5
    #: Until the run's first valid case (or failure), where every earlier learned case
    #: took one option of a choice, a learned case takes another
    #: (:meth:`rlcheck.choice_tree.ChoiceTree.untaken`), as Hypothesis's engine varies
    #: the first such choice of its novel prefixes. With nothing valid there is nothing
    #: to learn from, and a policy that followed the strategy's own distribution overshot
    #: the smallest inputs not yet run: lists of booleans all True and at least 6 long
    #: ended ``Unsatisfiable`` in 5 of 40 seeds where the default passed all 40
    #: (``benchmarks/satisfiability.py``, README). Off: the policy alone.
    vary_until_valid: ClassVar[bool] = True
    #: The fraction of Hypothesis's give-up limit (``Unsatisfiable`` after 458 invalid
    #: cases and no valid one) at which a run with no valid case yet is handed back to
    #: Hypothesis's own backend (:meth:`_should_hand_back`). With nothing valid the
    #: policy has nothing to learn from, so this splits a blind run between two
    #: generators, and the better one depends on the test: on
    #: ``benchmarks/satisfiability.py`` (40 seeds each) lowering it took lists of booleans
    #: all True and at least 7 long from 33 passing runs to 35 (0.25) and 37 (0.1; the
    #: default backend 38), and ``0 < a < b <= a + 16`` over unbounded integers from 34 to
    #: 20 and 13 (the default backend 15). Half, with :attr:`credit_hand_back`: the
    #: default backend keeps all of its own budget after it (39 and 36 of 40).
    hand_back_unsatisfiable: ClassVar[float] = _HAND_BACK_UNSATISFIABLE
    #: At that hand-back, the run's invalid cases so far are taken off the engine's
    #: give-up count (:func:`rlcheck.hypothesis.compat.credit_invalid`), so Hypothesis's
    #: own backend gets the whole budget it has in a run of its own (458 invalid cases),
    #: after the backend's: whatever input the default backend would reach before it gives
    #: up, it still reaches, and a test that is truly unsatisfiable fails after up to 1.5x
    #: the cases. Off: the default backend keeps only the half left.
    credit_hand_back: ClassVar[bool] = True
    #: Until the run's first valid case (or failure), after each case that is not itself
    #: a mutation, up to this many learned cases copy one span of the case before onto
    #: another of the same label (:func:`rlcheck.mutation.duplicated`), each from the last
    #: one that ran something new, as Hypothesis's engine mutates every case it generates,
    #: invalid ones included (its ``generate_mutations_from``: 5 calls). Equal parts
    #: rarely happen by chance (two equal wide integers: found within 100 cases with it,
    #: never in 200 without). Off: on ``benchmarks/satisfiability.py`` (40 seeds) chains
    #: of 5 took ``0 < a < b <= a + 16`` from 34 passing runs to 12 and a record type from
    #: 39 to 35, and lists of booleans all True, at least 7 long, only from 33 to 34 (the
    #: default backend 38): the fresh learned cases they replace find a first valid case
    #: sooner (README). Once a case is valid, valid ones are mutated (:attr:`mutate_share`).
    duplicate_until_valid: ClassVar[int] = 0
    #: Record this backend's cases in the engine's tree of the cases run
    #: (:class:`rlcheck.hypothesis.compat.EngineTree`), as the engine records its own
    #: backend's, so that after a hand-back, and in the tail it runs itself, Hypothesis's
    #: engine goes on from the inputs run here instead of running the shortest ones again.
    #: With :attr:`vary_until_valid`, the test above ended ``Unsatisfiable`` in 7 of 40
    #: seeds at length 7 (the default: 2 of 40), 21 of 40 before (README). Off: the
    #: engine starts from an empty tree at a hand-back.
    record_engine_tree: ClassVar[bool] = True
    #: Weights of the mutation operators (:data:`rlcheck.mutation.OPERATORS`): another
    #: value for one draw, a boundary value for it (the draw's simplest values in
    #: Hypothesis's order, its bounds, the recorded value's neighbours), a copy of a like
    #: draw of the same case, the simplest or small values from one draw on. Small values
    #: alone by default: on ``benchmarks/etna.py`` they paid more than the five together
    #: (README: what each part pays).
    mutate_operators: ClassVar[Mapping[str, float]] = MappingProxyType({"small": 1.0})
    #: Scale the operators' weights, within a run, by their rates of new valid inputs.
    #: Off: a new valid input is not a found bug; on ``benchmarks/etna.py``'s semver the
    #: operators that find its bugs (small values) make fewer new valid inputs, and the
    #: adaptive weights took 2x their tests to failure (README).
    mutate_adaptive: ClassVar[bool] = False
    #: Pick the earlier valid case to mutate by its own rate of new valid inputs
    #: (:class:`rlcheck.mutation.CasePool`'s ``energy``): a case whose mutations keep
    #: failing (a valid leaf: every extension invalid) is mutated less. Off: on
    #: ``benchmarks/etna.py``'s strict workloads it did not pay (20 seeds: 0.36x the
    #: default's tests to failure with it and without it; README).
    mutate_energy: ClassVar[bool] = False
    #: A ``"simplest"`` or ``"small"`` mutation changes the draw at its position: the
    #: recorded value is its last candidate (:meth:`rlcheck.mutation.Plan.replaced`), as a
    #: ``"change"`` takes another value. Off: the position's draw may keep its recorded
    #: value, and the plan is then one of a later position, whose last draws, often ones
    #: the input does not depend on, were what changed.
    mutate_suffix_moves: ClassVar[bool] = False
    #: Share of the mutations that mutate the newest new valid case (its neighbourhood is
    #: the one no mutation has explored yet: :class:`rlcheck.mutation.CasePool`'s
    #: ``recent``). 0: every kept case alike.
    mutate_recent: ClassVar[float] = 0.0
    #: Bounds of a :attr:`mutate_share` that follows the run's own rates: each learned
    #: case mutates with the share ``r_m / (r_m + r_f)``, where ``r_m`` and ``r_f`` are the
    #: rates of new valid inputs of the run's mutated and fresh learned cases so far (one
    #: hit in two cases as prior each, so it starts at a half), held within these bounds.
    #: Cold, mutation found new valid inputs several times as often as fresh learned cases
    #: on ``benchmarks/etna.py``; warm, the learned policy paid more (README). ``None``:
    #: the fixed :attr:`mutate_share`.
    mutate_share_bounds: ClassVar[tuple[float, float] | None] = None
    #: Valid cases per case of the first :attr:`probe_cases` (Hypothesis's own
    #: provider's) below which :attr:`default_tail`'s share is interleaved instead of
    #: handed to Hypothesis's engine at the end (:meth:`_tail_unaffordable`), where
    #: Hypothesis's backend would spend many cases per valid one (``examples/
    #: hypothesis_assume.py`` took 28 000 cases for the tail's 250 valid cases). 3 of 20:
    #: a rate of 1 in 20 is too often seen in 20 cases of a test at 1 in 100.
    tail_min_valid_rate: ClassVar[float] = 0.15
    #: Where the tail is interleaved (:meth:`_tail_unaffordable`), start it where the
    #: engine's tail would start, once the learned half of ``max_examples`` is done, not
    #: from the first learned case: Hypothesis's provider gets up to
    #: :attr:`default_patience` cases in a row, each about as likely to find a bug as one
    #: of the default's, which took the learned cases' place early in a run
    #: (``benchmarks/etna.py``'s jsonpointer warm: README). Off: interleaved throughout.
    tail_interleave_late: ClassVar[bool] = True
    #: Mix Hypothesis's constants into the learned draws of integers outside small
    #: ranges, floats, strings and bytes, at its own rates (5 %, floats 15 %:
    #: :class:`rlcheck.hypothesis.compat.ConstantSource`): its global pool
    #: (``"__dict__"``, ``"NaN"``, ``2**63 - 1``, subnormals...) and the literals of the
    #: code under test. Not learned; placed in the choice tree like a learned value.
    #: Without them the learned half missed what the default finds by them
    #: (``benchmarks/bugs.py``'s identifier: the default found 0 of 20 with its constants
    #: off, 20 of 20 with them; README).
    draw_constants: ClassVar[bool] = True
    #: Cases made as Hypothesis's engine makes its first ones (a few draws of its
    #: provider, then every draw's simplest value: :class:`_SimplestAfter`), after a
    #: probe below :attr:`tail_min_valid_rate`. Where at least
    #: :attr:`small_min_valid_rate` of them are valid, the engine's habit (small cases
    #: first, then mutations of its valid ones) makes valid cases that its provider
    #: alone does not (stateful tests: 50 steps of random rules rarely pass every
    #: ``assume``), so the tail is affordable after all and goes to the engine.
    #: 0 (off): the probe's rate alone decides. At 10, pyrsistent 0.20.0's suite took
    #: 0.84x the plain run's CPU against 1.25x (its stateful tests' tails went to the
    #: engine), but ``benchmarks/bugs.py``'s ``midpoint`` fell to 28 of 40 runs
    #: against 33 without it and the default's 36 (README).
    small_probe_cases: ClassVar[int] = 0
    #: See :attr:`small_probe_cases`.
    small_min_valid_rate: ClassVar[float] = 0.5

    def __init__(
        self,
        conjecturedata: Any = None,
        /,
        *,
        epsilon: float | None = None,
        window: WindowMode | None = None,
        seed: int | None = None,
        persist: bool = True,
    ) -> None:
        super().__init__(conjecturedata)
        epsilon = type(self).epsilon if epsilon is None else epsilon
        window = type(self).window if window is None else window
        if not 0.0 <= epsilon <= 1.0:
            raise InvalidArgument(f"epsilon={epsilon!r} must lie in [0, 1]")
        if window not in ("ancestor", "sequence"):
            raise InvalidArgument(f"window={window!r} must be 'ancestor' or 'sequence'")
        self._seed = seed
        self._persist_enabled = persist
        # The one learner, its one exploration rule following each draw's prior (the
        # strategy's own distribution: a cold policy generates like Hypothesis, which
        # keeps the early valid rate, and so the run, alive while learning starts), and
        # the span state abstraction; the fused chooser holds the visits list and state.
        self._policy = Policy(epsilon=epsilon, seed=seed)
        self._state = SpanState(k=_WINDOW, depth=_PATH_DEPTH, ancestor=window == "ancestor")
        self._visits: list[Visit] = []
        self._choose_fast = self._policy.prior_chooser(self._visits, self._state)
        # Randomness inside a chosen bucket (which value of a range, which character).
        self._rng = random.Random(seed)
        self._started = False
        self._broken: BaseException | None = None
        self._persistence: _Persistence | None = None
        self._final_save: weakref.finalize[Any, Any] | None = None
        self._run_end: RunEnd | None = None
        self._name = "<unknown test>"
        self._in_test = False  # running inside a Hypothesis test (not called directly)
        self._max_examples = 100
        self._health_checked = False
        self._choices: list[Hashable] = []  # this episode's choice sequence (its identity)
        # per run: the episode ledger, the sequences run, and where counts are reported
        self._ledger = Ledger(max_seen=_MAX_SEEN)
        self._tree = ChoiceTree()
        self._stats: BackendStats | None = None
        self._run_id = 0
        self._caches: dict[Hashable, Any] = {}
        # this case's default provider (a small probe case's: wrapped, _SimplestAfter)
        self._delegate: Any = None
        self._discard = False  # the case just run repeats a valid one: discard it
        self._discards = 0
        self._default_valid = 0  # valid cases of the default provider's share
        self._default_streak = 0  # its invalid cases in a row
        self._default_invalid = 0  # its invalid cases
        self._warm = False  # a learned policy was loaded: guidance paid in an earlier run
        # mutation of earlier valid cases (mutate_share > 0)
        self._tracing = type(self).mutate_share > 0
        self._pool = CasePool(
            operators=type(self).mutate_operators,
            adaptive=type(self).mutate_adaptive,
            energy=type(self).mutate_energy,
            recent=type(self).mutate_recent,
            seed=seed,
        )
        self._plan: Any = None  # this case's rlcheck.mutation.Plan, if it mutates one
        # duplication before the first valid case (duplicate_until_valid): this case's
        # spans (recorded while _spanning) and open spans, the case the chain copies
        # from (its draws and spans), its mutated cases left, its failures in a row, and
        # whether this case is one of them
        self._spanning = False
        self._spans: list[Span] = []
        self._open_spans: list[tuple[Hashable, int]] = []
        self._chain_base: tuple[tuple[tuple[Hashable, Any], ...], list[Span]] | None = None
        self._chain_left = 0
        self._chain_failures = 0
        self._duplicating = False
        # learned cases [fresh, mutated]: cases run and new valid inputs (mutate_share_bounds)
        self._arm_cases = [0, 0]
        self._arm_hits = [0, 0]
        self._nested = 0  # draws of Hypothesis's provider under way (see _delegating)
        self._learned = 0  # cases of this run the learned policy made (TestStats.learned)
        # the engine's tree, where this run's cases are recorded (record_engine_tree)
        self._engine_tree: EngineTree | None = None
        self._trace: list[tuple[Hashable, Any]] = []  # this case's (draw key, value)s
        self._probe_rate: float | None = None  # valid per case of the probe (the default's)
        self._constants = ConstantSource(self._rng) if type(self).draw_constants else None
        self._small = False  # this case is one of the small probe cases
        self._small_valid = 0
        # the probe: this case's kind (a _ProbeCase, None: not a probe case), the tree of
        # its cases' values, its provider cases run and their valid ones (and failures),
        # its simplest extensions run and their invalid ones in a row, and its length
        self._probe_case: _ProbeCase | None = None
        self._probe_tree: dict[Any, Any] = {}
        self._probe_seen = 0
        self._probe_hits = 0
        self._probe_simplest = 0
        self._simplest_streak = 0
        # small cases (probe_small_cases): run so far, and those to run (a scan of the
        # simplest case's draws first, then the children of valid ones: _SmallCase)
        self._probe_small = 0
        self._warm_small = True  # a warm run's small cases: none if earlier ones were invalid
        self._warm_small_rate = 1.0  # small cases per learned case (warm_small_by_rate)
        self._load_pending = False  # the stored policy loads at the second case (_configure)
        self._small_hits: list[float] = []  # small cases' outcomes before it loaded
        self._small_queue: collections.deque[tuple[dict[int, int], int, int | None]] = (
            collections.deque([({}, 0, 0)])
        )
        self._probe_length = 0
        self._probe_gap = 0  # learned cases since the probe's last case (probe_spread)

    # -- episodes -------------------------------------------------------------------

    def per_test_case_context_manager(self) -> AbstractContextManager[None]:
        return self._episode()

    @contextmanager
    def _episode(self) -> Iterator[None]:
        self._begin()
        outcome: Outcome | None = "valid"
        last = False
        try:
            yield
        except REJECTIONS:
            # assume()/filter rejections and overruns: the input is not valid.
            outcome = "invalid"
            raise
        except PASS_THROUGH as exc:
            # Interrupts, exits, hand-backs: no outcome, no reward.
            outcome = None
            if self._engine_tree is not None:
                self._engine_tree.drop_case()
            last = ends_run(exc)
            raise
        except BaseException as exc:
            # The test failed: an input that found a bug.
            outcome = "failure"
            last = ends_run(exc)
            raise
        finally:
            self._end(outcome)
            if last:
                self._end_run()  # the exception ends the run: its end is now

    def _begin(self) -> None:
        if not self._started:
            self._start_run()
        if self._broken is not None:
            raise BackendCannotProceed("exhausted")
        try:
            if self._load_pending and self._ledger.cases:
                self._load()
            if not self._guidance_pays():
                # Step aside: Hypothesis's own backend runs the rest at its own cost.
                # Nothing worth keeping was learned: the stored policy stays as it was
                # (saving these cases would make the next run warm, and guided).
                self._record(stepped_aside=True)
                if self._persistence is not None:
                    self._persistence.dirty = False
                    self._persistence.final = True  # the final save has nothing to add
                raise BackendCannotProceed("exhausted")
            exhausted = self._tree.exhausted
            hand_back = self._should_hand_back() or exhausted
            if hand_back or self._tail_reached():
                # The rest of the run is Hypothesis's own backend's: a hand-back (recorded
                # as such), or the planned tail. Nothing more is learned in this run: the
                # final save is now, not at the run's end.
                if hand_back:
                    self._record(handed_back=True)
                    self._credit_hand_back(exhausted)
                persistence = self._persistence
                if persistence is not None and exhausted and not self._warm:
                    # Every choice sequence has been run (a small domain): the next run
                    # enumerates it again, and a saved policy would only make that run
                    # warm, loading it and never stepping aside (on attrs' suite, loads
                    # and saves of such policies were most of the backend's time).
                    persistence.dirty = False
                    persistence.final = True
                elif persistence is not None:
                    persistence.save(final=True)
                raise BackendCannotProceed("exhausted")
            self._state.reset()
            self._visits.clear()
            self._choices = []
            self._delegate = None
            self._discard = False
            self._plan = None
            self._duplicating = False
            self._trace = []
            self._spanning = self._tracing and self._duplication_due()
            if self._spanning:
                self._spans = []
                self._open_spans = []
            self._small = False
            self._probe_case = None
            if self._default_turn():
                self._delegate = default_provider()
                cases = self._ledger.cases
                if self._delegate is None or not self._in_test:
                    pass
                elif self._warm_provider_turn():
                    self._probe_case = _ProbeCase(self._delegate, self._probe_tree, simplest=False)
                    self._delegate = self._probe_case
                elif self._warm_small_turn():
                    self._probe_case = self._next_small_case()
                    self._delegate = self._probe_case
                elif self._probe_turn() or self._warm_simplest_turn():
                    simplest = not self._probing() or self._simplest_turn()
                    if simplest and self._small_turn():
                        self._probe_case = self._next_small_case()
                    else:
                        self._probe_case = _ProbeCase(
                            self._delegate,
                            self._probe_tree,
                            simplest=simplest,
                            novel=type(self).probe_novel,
                        )
                    self._delegate = self._probe_case
                elif self._probe_length <= cases < self._probe_end():
                    self._delegate = _SimplestAfter(self._delegate, self._rng.randrange(8))
                    self._small = True
            if self._delegate is None and self._spanning:
                self._plan = self._duplication()
                self._duplicating = self._plan is not None
            if (
                self._plan is None
                and self._delegate is None
                and self._tracing
                and len(self._pool)
                and self._rng.random() < self._mutate_share()
            ):
                self._plan = self._pool.plan()
            if self._engine_tree is not None:
                self._engine_tree.begin_case()
            # Every case is placed in the tree: a mutated case's values, Hypothesis's
            # provider's (_placed), as the learned ones, so no case repeats another.
            self._tree.begin()
        except BackendCannotProceed:
            raise
        except Exception as exc:
            self._fail(exc)
            raise BackendCannotProceed("exhausted") from exc

    def _duplication_due(self) -> bool:
        """Whether the next case records its spans for :attr:`duplicate_until_valid`:
        before the run's first valid case (or failure)."""
        ledger = self._ledger
        return type(self).duplicate_until_valid > 0 and ledger.valid + ledger.failures == 0

    def _duplication(self) -> Plan | None:
        """This learned case's plan, a span of the chain's case copied onto another
        (:attr:`duplicate_until_valid`), or ``None``: no chain under way, or its case
        has no two spans of one label (then the chain ends)."""
        base = self._chain_base
        if base is None or not self._chain_live():
            return None
        draws = duplicated(base[0], base[1], self._rng)
        if draws is None:
            self._chain_base = None
            return None
        self._chain_left -= 1
        return Plan.replay(draws)

    def _chain_live(self) -> bool:
        """Whether the chain of duplications has mutated cases left to make."""
        return self._chain_left > 0 and self._chain_failures <= _DUPLICATE_PATIENCE

    def _chained(self) -> None:
        """After an invalid case that recorded its spans: where it was a duplication, it
        becomes the chain's case if its draws differ from that case's (else a failure:
        the copy changed nothing), as the engine keeps a mutation that is no worse than
        its case (every case so far is invalid); any other case starts a new chain from
        itself unless one is under way (the probe's cases come between learned ones)."""
        case = (tuple(self._trace), self._spans)
        base = self._chain_base
        if not self._duplicating:
            if base is None or not self._chain_live():
                self._chain_base = case
                self._chain_left = type(self).duplicate_until_valid
                self._chain_failures = 0
        elif base is None or case[0] != base[0]:
            self._chain_base = case
            self._chain_failures = 0
        else:
            self._chain_failures += 1

    def _mutate_share(self) -> float:
        """The share of learned cases that mutate (:attr:`mutate_share`, or one that
        follows the run's rates within :attr:`mutate_share_bounds`)."""
        bounds = type(self).mutate_share_bounds
        if bounds is None:
            return type(self).mutate_share
        fresh, mutated = ((self._arm_hits[i] + 1) / (self._arm_cases[i] + 2) for i in (0, 1))
        return min(max(mutated / (fresh + mutated), bounds[0]), bounds[1])

    def _default_turn(self) -> bool:
        """Whether Hypothesis's own provider generates the next case.

        By valid cases, not by cases: where the learned policy's valid rate is far above
        the default's, a share of cases would leave the default almost none of the valid
        budget. So the default generates while its valid cases are below its share; after
        ``default_patience`` invalid ones in a row, the learned policy gets a case (a
        default that rarely makes a valid input must not stall the run), and once it has
        made as many invalid cases as Hypothesis gives a run, it gets none
        (:meth:`_default_spent`).
        """
        if self._in_test and (
            self._probe_turn()
            or self._probe_length <= self._ledger.cases < self._probe_end()  # its small cases
            or self._warm_simplest_turn()
            or self._warm_small_turn()
            or self._warm_provider_turn()
        ):
            return True  # the probe: what Hypothesis's own provider makes of this test
        share = type(self).default_share
        if (
            share <= 0
            and self._tail_unaffordable()
            and (self._tail_due() or not type(self).tail_interleave_late)
        ):
            share = type(self).default_tail  # the tail's share, interleaved (see there)
        if share <= 0 or self._default_spent():
            return False
        if self._default_streak >= type(self).default_patience:
            self._default_streak = 0
            return False
        ledger = self._ledger
        return self._default_valid < share * (ledger.valid + ledger.failures + 1)

    def _default_spent(self) -> bool:
        """Whether Hypothesis's provider has made as many invalid cases in this run as
        Hypothesis gives a run before it stops (``INVALID_THRESHOLD_BASE`` plus
        ``INVALID_PER_VALID`` per valid case: a valid rate under 1 %). Its own run would
        have ended there, so it gets no more interleaved cases: the rest are learned."""
        threshold = INVALID_THRESHOLD_BASE + INVALID_PER_VALID * self._default_valid
        return self._default_invalid > threshold

    def _guidance_pays(self) -> bool:
        """Whether to keep guiding this run (checked as each case begins).

        Guidance raises the share of cases that are new valid inputs; where the valid share
        is already high, each guided case only costs more than Hypothesis's own. So after
        :attr:`probe_cases` cases of Hypothesis's own provider (the probe), a run whose
        valid cases (and failures) make up at least :attr:`step_aside_rate` of them steps
        aside. They measure the test, not the learner; the simplest extensions the probe
        runs between them (:attr:`probe_simplest_cases`) are not counted. Repeats among them
        are not held against stepping aside: the provider alone repeats short inputs
        (``[]``, ``[0]`` of ``st.lists(st.integers())``, in 4 of 20 cases in some runs,
        which then kept guiding about 1 run in 9), while Hypothesis's engine, which gets the
        rest of the run, steers away from the choice sequences it ran. The probe also says
        whether Hypothesis's backend could afford the :attr:`default_tail`
        (:attr:`tail_min_valid_rate`). A run that loaded a learned policy (guidance paid
        before) and a provider used outside a Hypothesis run (no engine to hand to) never
        step aside. (Stepping aside later, where learning does not raise the rate, was
        tried: at 100 cases the counts were too small to tell, and it stopped strict tests
        that were learning.)
        """
        probe = type(self).probe_cases
        if probe <= 0 or not self._in_test or self._probe_rate is not None:
            return True  # warm: the stored probe's rate (_configure), no probe of its own
        if self._probe_seen < probe:
            return True
        self._probe_rate = self._probe_hits / probe
        self._probe_length = self._ledger.cases
        return self._warm or self._probe_rate < type(self).step_aside_rate

    def _probing(self) -> bool:
        """Whether the next case is the probe's (its valid rate not yet known)."""
        return self._probe_rate is None and self._probe_seen < type(self).probe_cases

    def _probe_turn(self) -> bool:
        """Whether the next case is the probe's (:meth:`_probing`): every case while the
        probe may still end in stepping aside, then one after every :attr:`probe_spread`
        learned cases (the probe's rate is Hypothesis's provider's alone: the learned
        cases between its cases do not change it)."""
        if not self._probing():
            return False
        spread = type(self).probe_spread
        if spread <= 0 or self._probe_gap >= spread:
            return True
        probe = type(self).probe_cases
        best = self._probe_hits + probe - self._probe_seen  # every case left valid
        return not self._warm and best >= type(self).step_aside_rate * probe

    def _simplest_turn(self) -> bool:
        """Whether the probe's next case is a simplest extension (:attr:`probe_simplest_cases`):
        one before each of its provider cases, until there are that many or 5 in a row
        were invalid (Hypothesis's engine gives up its small cases likewise)."""
        return (
            self._probe_simplest < type(self).probe_simplest_cases
            and self._probe_simplest <= self._probe_seen
            and self._simplest_streak < _SIMPLEST_PATIENCE
        )

    def _next_small_case(self) -> _SmallCase:
        """The queue's next small case, over this case's provider (:meth:`_small_ran` fills
        the queue)."""
        changes, last, scan = self._small_queue.popleft()
        return _SmallCase(self._delegate, self._probe_tree, changes, last, scan)

    def _small_turn(self) -> bool:
        """Whether the probe's next simplest-kind case is a small case
        (:attr:`probe_small_cases`): alternating with the simplest extensions, a small
        case first, while there are any to run."""
        small = self._probe_small
        return (
            small < type(self).probe_small_cases
            and small <= self._probe_simplest - small
            and bool(self._small_queue)
        )

    def _warm_small_turn(self) -> bool:
        """Whether a warm run's next case is a small case (:attr:`warm_probe_small`): a
        small case first, then one after every ``1 / rate`` learned cases (the earlier
        runs' valid rate of them, :attr:`warm_small_by_rate`; else after each), until
        there are :attr:`probe_small_cases` or 5 in a row were invalid; none where the
        earlier runs' were all invalid."""
        return (
            type(self).warm_probe_small
            and self._warm_small
            and self._probe_rate is not None
            and self._probe_seen == 0  # no probe ran: the stored rate (_configure)
            and self._probe_small < type(self).probe_small_cases
            and self._probe_small
            <= self._warm_small_rate * (self._ledger.cases - self._probe_small)
            and self._simplest_streak < _SIMPLEST_PATIENCE
            and bool(self._small_queue)
        )

    def _small_ran(self, case: _SmallCase, hit: bool) -> None:
        """Queue what follows a small case: the scan's next draw first (every draw moved
        one step is tried before two steps), then, where it was valid (or failed), its
        children at the back (breadth first)."""
        queue = self._small_queue
        if case.scan is not None and case.at is not None and case.at + 1 < case.draws:
            # the simplest case's draws, as far as this one tells (its length): a scan
            # past them would run the simplest case again
            queue.appendleft(({}, 0, case.at + 1))
        if hit and len(queue) < _SMALL_QUEUE:
            queue.extend(case.children())

    def _warm_simplest_turn(self) -> bool:
        """Whether a warm run's next case is a simplest extension (with
        :attr:`warm_probe_simplest`): a run that loaded a policy runs no probe
        (:meth:`_guidance_pays`); with the option it still runs the probe's simplest
        extensions (:attr:`probe_simplest_cases`), one before each of its first learned
        cases, until there are that many or 5 in a row were invalid (the engine's first
        cases, which find its cheap early bugs). Measured: they cost the learned cases
        more than they found (README)."""
        return (
            type(self).warm_probe_simplest
            and self._probe_rate is not None
            and self._probe_seen == 0  # no probe ran: the stored rate (_configure)
            and self._probe_simplest < type(self).probe_simplest_cases
            and 2 * self._probe_simplest <= self._ledger.cases
            and self._simplest_streak < _SIMPLEST_PATIENCE
        )

    def _warm_provider_turn(self) -> bool:
        """Whether a warm run's next case is Hypothesis's provider's (with
        :attr:`warm_probe_cases`): one before each of its first learned cases, until
        there are that many."""
        return (
            self._warm
            and self._probe_seen < type(self).warm_probe_cases
            and self._probe_rate is not None
            and 2 * self._probe_seen <= self._ledger.cases
        )

    def _probe_end(self) -> int:
        """The number of cases the probe makes: Hypothesis's provider's and their simplest
        extensions, and the small ones (:attr:`small_probe_cases`) after a probe below the
        tail's rate."""
        end = self._probe_length
        rate = self._probe_rate
        if not self._warm and rate is not None and rate < type(self).tail_min_valid_rate:
            end += type(self).small_probe_cases
        return end

    def _tail_reached(self) -> bool:
        """Whether the rest of the run is the default backend's (:attr:`default_tail`)."""
        tail = type(self).default_tail
        if tail <= 0 or not self._in_test:  # outside a @given run: no engine to hand to
            return False
        if self._tail_unaffordable() or self._probing():
            # its share is interleaved instead (_default_turn), or the probe that says
            # whether it is affordable has not ended (its cases spread: probe_spread)
            return False
        return self._tail_due()

    def _tail_due(self) -> bool:
        """Whether the learned half of the valid cases is done (:attr:`default_tail`)."""
        ledger = self._ledger
        counted = ledger.valid + ledger.failures - self._discards
        return counted >= (1.0 - type(self).default_tail) * self._max_examples

    def _tail_unaffordable(self) -> bool:
        """Whether Hypothesis's backend makes too few valid cases here for the tail
        (:attr:`tail_min_valid_rate`, judged on the probe, unless the small cases that
        follow such a probe, :attr:`small_probe_cases`, show that the engine's own first
        cases are valid). Then the tail's share of the valid cases comes from
        Hypothesis's own provider, interleaved with the learned cases at most
        :attr:`default_patience` invalid ones in a row (as with :attr:`default_share`):
        bounded time, where the tail took up to 100 invalid cases per valid one."""
        rate = self._probe_rate
        if rate is None or rate >= type(self).tail_min_valid_rate:
            return False
        small = type(self).small_probe_cases
        if small <= 0 or self._ledger.cases < self._probe_end():
            return True  # its small cases (if any) have not all run yet
        return self._small_valid < type(self).small_min_valid_rate * small

    def _vary_taken(self) -> bool:
        """Whether this learned case varies a choice that every earlier case made alike
        (:attr:`vary_until_valid`): until the run's first valid case (or failure)."""
        ledger = self._ledger
        return type(self).vary_until_valid and ledger.valid + ledger.failures == 0

    def _should_hand_back(self) -> bool:
        """Whether to let Hypothesis's own backend finish this run.

        Hypothesis raises ``Unsatisfiable`` only when a run ends with no valid case at
        all, after more than 458 invalid ones; its ``filter_too_much`` health check fails
        a run with 50 invalid cases before the 10th valid one. Before either limit comes
        close, hand over, so a test the default backend can run keeps running.
        """
        ledger = self._ledger
        valid = ledger.valid + ledger.failures
        if (
            valid == 0
            and ledger.invalid >= type(self).hand_back_unsatisfiable * INVALID_THRESHOLD_BASE
        ):
            return True
        return (
            self._health_checked
            and valid < HEALTH_CHECK_VALID
            and ledger.invalid >= _HAND_BACK_HEALTH_CHECK * HEALTH_CHECK_INVALID
        )

    def _credit_hand_back(self, exhausted: bool) -> None:
        """At a hand-back of a run with no valid case yet (:attr:`credit_hand_back`), take
        this run's invalid cases off the engine's give-up count: Hypothesis's own backend
        then has its whole ``Unsatisfiable`` budget, as in a run of its own."""
        ledger = self._ledger
        if type(self).credit_hand_back and not exhausted and ledger.valid + ledger.failures == 0:
            credit_invalid(ledger.invalid)

    def _end(self, outcome: Outcome | None) -> None:
        # Never raises: an exception here would replace the test's own outcome.
        try:
            self._learn(outcome)
        finally:
            # The case's Hypothesis provider holds its ConjectureData, which holds this
            # provider: dropped here, so no case outlives its run through a cycle of ours.
            self._delegate = self._probe_case = None

    def _end_run(self) -> None:
        """The run's end: the final save now (see :class:`_Persistence`), then let go of
        what only the run needed (the learned tables, the tree of its cases), which would
        otherwise live as long as the provider: until a full garbage collection, since
        Hypothesis's reference cycles hold it. Never raises."""
        if self._run_end is not None:
            self._run_end.cancel()
            self._run_end = None
        if self._final_save is not None:
            self._final_save()  # a weakref.finalize: runs once, then never again
        self._persistence = None
        self._policy.clear()
        self._tree = ChoiceTree()
        self._engine_tree = None

    def _learn(self, outcome: Outcome | None) -> None:
        if outcome is None or self._broken is not None:
            self._tree.abandon()
            return
        try:
            self._tree.finish()
            new = self._ledger.record(outcome, tuple(self._choices))
            self._learned += self._delegate is None
            if self._delegate is not None:
                if outcome == "invalid":
                    self._default_streak += 1
                    self._default_invalid += 1
                else:
                    self._default_valid += 1
                    self._default_streak = 0
                    self._small_valid += self._small
            probe_case = self._probe_case
            self._probe_gap = 0 if probe_case is not None else self._probe_gap + 1
            if probe_case is not None:
                hit = outcome != "invalid"
                if probe_case.simplest:
                    self._probe_simplest += 1
                    self._simplest_streak = 0 if hit else self._simplest_streak + 1
                    if isinstance(probe_case, _SmallCase):
                        self._probe_small += 1
                        self._small_ran(probe_case, hit)
                        if self._load_pending:
                            self._small_hits.append(float(hit))
                        else:
                            self._policy.learn([(_SMALL_POINT, (), 0)], float(hit))
                else:
                    self._probe_seen += 1
                    self._probe_hits += hit
                    self._policy.learn([(_PROBE_POINT, (), 0)], float(hit))
                probe_case.remember()
            if outcome == "valid" and not new:
                allowed = max(_DISCARD_FREE, _DISCARD_SHARE * self._ledger.cases)
                self._discard = self._discards + 1 <= allowed
            found = new and outcome == "valid"  # a new valid input
            if self._spanning and outcome == "invalid":
                self._chained()
            if self._plan is not None and not self._duplicating:
                self._pool.credit(self._plan.operator, found, self._plan)
            if self._delegate is None:
                arm = int(self._plan is not None)
                self._arm_cases[arm] += 1
                self._arm_hits[arm] += found
            if self._tracing and found:
                self._pool.add(*self._trace)
            self._policy.learn_rows(
                self._visits,
                Ledger.reward(outcome, new),
                bonus=type(self).count_bonus,
                step=type(self).step_floor,
            )
            self._record()
            persistence = self._persistence
            if persistence is not None and self._visits:
                persistence.dirty = True
                if (
                    # Hypothesis stops at max_examples valid cases (6.170: distinct
                    # choice sequences, older versions: all), the first (simplest) one
                    # not ours: from our (max_examples - 1)-th on, each may be the last.
                    self._ledger.valid >= self._max_examples - 1
                    # A failure ends generation soon (shrinking is not ours).
                    or outcome == "failure"
                    or time.monotonic() - persistence.last_save > _SAVE_INTERVAL_S
                ):
                    persistence.save()
        except Exception as exc:
            self._fail(exc)

    def _start_run(self) -> None:
        """The run's first case: which test, its settings and statistics, the policy.

        Never raises. A hook may have failed before it (a span opens as each case's
        data is made, before the case's context manager): that failure is recorded here,
        once the statistics of the run exist.
        """
        self._started = True
        test = source = None
        try:
            test, source = current_test()
            if test is not None:
                self._name = f"{test.__module__}.{test.__qualname__}"
                self._in_test = True
                if type(self).record_engine_tree:
                    self._engine_tree = EngineTree.running()
        except Exception as exc:
            self._fail(exc)
        with contextlib.suppress(Exception):  # without statistics, the warning still says
            self._stats = _COLLECTOR.get()
            if self._stats is not None:
                self._run_id = self._stats.start_run(self._name)
                if self._broken is not None:
                    self._record(fallback=True, reason=_describe(self._broken))
        if self._broken is not None:
            return
        try:
            self._configure(test, source)
        except Exception as exc:
            self._fail(exc)

    def _configure(self, test: Any, source: random.Random | None) -> None:
        if self._in_test:  # its end: _end_run (the hook must not keep the provider alive)
            ended = weakref.WeakMethod(self._end_run)
            self._run_end = on_run_end(self, functools.partial(_call_weak, ended))
        current = hypothesis_settings.default
        if current is not None:
            from hypothesis import HealthCheck

            self._max_examples = current.max_examples
            self._health_checked = HealthCheck.filter_too_much not in (
                current.suppress_health_check
            )
        if self._seed is None and source is not None:
            seed = run_random(source)
            self._policy.rng.seed(seed)
            self._rng.seed(seed ^ 0x5DEECE66D)
            self._pool.seed(seed ^ 0x2545F491)
        if (
            self._persist_enabled
            and current is not None
            and current.database is not None
            and test is not None
        ):
            # The engine's own key where it can be read (a digest of the test's source
            # costs about 1 ms: most of a run's start where a bug dies in its first
            # cases), and only where there is a database.
            key = running_database_key() or database_key(test)
            if key:
                self._persistence = _Persistence(current.database, key, self._policy)
                self._final_save = weakref.finalize(self, self._persistence.final_save)
                if self._in_test and self._small_first():
                    # The run's first case is a small case, warm or cold, and needs no
                    # policy: the load waits for the next one (a bug that dies there,
                    # one of Hypothesis's cheap early ones, dies without it).
                    self._load_pending = True
                else:
                    self._load()

    def _small_first(self) -> bool:
        """Whether the run's first case is a small case whatever the stored policy says
        (the probe's first, or a warm run's first: :meth:`_warm_small_turn`)."""
        cls = type(self)
        return (
            cls.probe_small_cases > 0
            and cls.warm_probe_small
            and cls.probe_cases > 0
            and cls.probe_simplest_cases > 0
        )

    def _load(self) -> None:
        """Load the stored policy (:class:`_Persistence`) and what it says of this run."""
        self._load_pending = False
        persistence = self._persistence
        if persistence is None:
            return
        self._warm = persistence.load()
        if self._warm and self._in_test:
            # Guidance paid in earlier runs: learned cases from the first one on, with the
            # earlier probes' valid rate (for the tail), where they ran enough of them;
            # else the probe runs (and the run never steps aside).
            rate, probed = self._policy.table(_PROBE_POINT).value((), 0)
            if probed >= type(self).probe_cases > 0:
                self._probe_rate = rate
            small, tried = self._policy.table(_SMALL_POINT).value((), 0)
            self._warm_small = tried == 0 or small > 0
            if tried and type(self).warm_small_by_rate:
                self._warm_small_rate = small
        for hit in self._small_hits:  # small cases run before the load
            self._policy.learn([(_SMALL_POINT, (), 0)], hit)
        self._small_hits.clear()

    def _record(
        self,
        *,
        handed_back: bool = False,
        fallback: bool = False,
        stepped_aside: bool = False,
        reason: str = "",
    ) -> None:
        if self._stats is not None:
            self._stats.update(
                self._name,
                self._run_id,
                self._ledger.counts(),
                handed_back=handed_back,
                fallback=fallback,
                stepped_aside=stepped_aside,
                reason=reason,
                learned=self._learned,
            )

    def _fail(self, exc: BaseException) -> None:
        """Internal error: warn once and hand the test back to Hypothesis's backend."""
        if self._broken is not None:
            return
        self._broken = exc
        with contextlib.suppress(Exception):
            self._record(fallback=True, reason=_describe(exc))
        # A warnings filter set to "error" (``-W error``, pytest's ``filterwarnings``)
        # makes the warning an exception: it must not become the test's failure either;
        # the statistics above (the plugin's table) still say so.
        with contextlib.suppress(Exception):
            warnings.warn(
                f"rlcheck's Hypothesis backend hit an internal error ({type(exc).__name__}: "
                f"{exc}) in {self._name}; the rest of this run uses Hypothesis's own "
                "backend. Please report this at the rlcheck issue tracker.",
                RLCheckWarning,
                stacklevel=2,
            )

    # -- spans and state -------------------------------------------------------------

    def span_start(self, label: int, /) -> None:
        # Never raises (a span hook has no case to hand back): an error here makes the
        # next draw hand the run back. Labels are ints from strategies, but
        # ``data.draw(strategy, label=...)`` passes whatever the user gave (a string).
        if self._broken is not None:
            return
        try:
            label = label & _LABEL_MASK if type(label) is int else _span_label(label)
            self._state.push(label)
            if self._spanning:
                self._open_spans.append((label, len(self._trace)))
        except Exception as exc:
            self._fail(exc)

    def span_end(self, discard: bool, /) -> None:
        if self._broken is not None:
            return
        try:
            self._state.pop()
            if self._spanning and self._open_spans:
                label, start = self._open_spans.pop()
                if not discard:
                    self._spans.append((label, start, len(self._trace)))
        except Exception as exc:
            self._fail(exc)

    def _choose(
        self,
        point: Hashable,
        n: int,
        prior: Sequence[float] | None,
        *,
        inexact: Container[int] = (),
        whole: bool = False,
    ) -> int:
        """One learned choice among ``n`` (``prior``: cumulative weights), never one the
        choice tree has exhausted.

        ``inexact`` holds the actions that leave part of the value to chance (a bucket of
        several values): the tree cannot tell their repeats apart, so it stops there.
        ``whole``: the choice is a whole draw of Hypothesis's (a boolean, an integer of a
        small range), which :attr:`RLCheckProvider.vary_until_valid` varies as the
        engine varies its draws; not a part of one (a string's characters and length, a
        magnitude bucket), where varying would enumerate the parts, shortest first.
        """
        tree = self._tree
        allowed = tree.untaken(point, n) if whole and self._vary_taken() else None
        if allowed is None:
            allowed = tree.allowed(point, n)
        if allowed is None:
            index = self._choose_fast(point, n, prior)
        else:
            index = self._policy.choose_allowed(
                point, self._state.state, allowed, prior, self._visits
            )
            self._state.record(index)
        tree.step(point, n, index, exact=index not in inexact)
        return index

    def _guarded(self, exc: Exception) -> BackendCannotProceed:
        self._fail(exc)
        return BackendCannotProceed("exhausted")

    # -- the five primitive draws ----------------------------------------------------

    def draw_boolean(self, p: float = 0.5) -> bool:
        if p <= 0 or p >= 1:
            self._choices.append(p >= 1)  # forced, but part of the choice sequence
            return p >= 1
        if self._broken is not None:
            raise BackendCannotProceed("exhausted")
        try:
            key = ("b", p)
            if self._delegate is not None:
                with self._delegating():
                    value = self._delegate.draw_boolean(p)
                return self._placed("boolean", {"p": p}, key, value)
            if self._plan is not None:
                planned = self._planned(key, "boolean", {"p": p})
                if planned is not FRESH:
                    return bool(planned)
            if p < 0.02 or p > 0.98:
                # Rare-event switches inside Hypothesis's strategies: learning them would
                # make the rare branch common under a fresh (uniform) policy. Not learned,
                # but still steered away from what has been run.
                point = ("B", round(p, 6))
                allowed = self._tree.allowed(point, 2)
                value = self._rng.random() < p if allowed is None else bool(allowed[0])
                self._tree.step(point, 2, int(value))
            else:
                value = self._choose(("b", round(p, 3)), 2, (1.0 - p, 1.0), whole=True) == 1
            self._choices.append(value)
            if self._tracing:
                self._trace.append((key, value))
            return value
        except Exception as exc:
            raise self._guarded(exc) from exc

    def draw_integer(
        self,
        min_value: int | None = None,
        max_value: int | None = None,
        *,
        weights: dict[int, float] | None = None,
        shrink_towards: int = 0,
    ) -> int:
        if self._broken is not None:
            raise BackendCannotProceed("exhausted")
        try:
            key = ("i", min_value, max_value)
            if self._delegate is not None:
                with self._delegating():
                    value = self._delegate.draw_integer(
                        min_value, max_value, weights=weights, shrink_towards=shrink_towards
                    )
                constraints: dict[str, Any] = {"min_value": min_value, "max_value": max_value}
                return self._placed("integer", constraints, key, value)
            if self._plan is not None:
                constraints = {
                    "min_value": min_value,
                    "max_value": max_value,
                    "weights": weights,
                    "shrink_towards": shrink_towards,
                }
                planned = self._planned(key, "integer", constraints)
                if planned is not FRESH:
                    return int(planned)
            if self._constants is not None and not _small_range(min_value, max_value):
                constraints = {
                    "min_value": min_value,
                    "max_value": max_value,
                    "weights": weights,
                    "shrink_towards": shrink_towards,
                }
                constant = self._constant("integer", constraints)
                if constant is not FRESH:
                    return self._delegated(key, int(constant))
            value = self._draw_integer(min_value, max_value)
            self._choices.append(value)
            if self._tracing:
                self._trace.append((key, value))
            return value
        except Exception as exc:
            raise self._guarded(exc) from exc

    def _draw_integer(self, min_value: int | None, max_value: int | None) -> int:
        if _small_range(min_value, max_value):
            assert min_value is not None and max_value is not None
            n = max_value - min_value + 1
            return min_value + self._choose(("i", min_value, max_value), n, None, whole=True)
        lo, hi = buckets.integer_bounds(min_value, max_value)
        ranges = self._cached(("ib", lo, hi), lambda: buckets.integer_buckets(lo, hi))
        prior = self._cached(
            ("iw", lo, hi), lambda: _cumulative(buckets.integer_prior(ranges, lo, hi))
        )
        wide = self._cached(("iw+", lo, hi), lambda: _wide(ranges))
        spans = self._cached(("im", lo, hi), lambda: (buckets.integer_masses(ranges),))[0]
        point = ("I", min_value, max_value)
        action = self._choose(point, len(ranges), prior, inexact=wide)
        a, b = ranges[action]
        return buckets.sample_integer(self._rng, a, b, None if spans is None else spans[action])

    def draw_float(
        self,
        *,
        min_value: float = -math.inf,
        max_value: float = math.inf,
        allow_nan: bool = True,
        smallest_nonzero_magnitude: float,
    ) -> float:
        if self._broken is not None:
            raise BackendCannotProceed("exhausted")
        try:
            constraints = {
                "min_value": min_value,
                "max_value": max_value,
                "allow_nan": allow_nan,
                "smallest_nonzero_magnitude": smallest_nonzero_magnitude,
            }
            key = ("f", min_value, max_value, allow_nan, smallest_nonzero_magnitude)
            if self._delegate is not None:
                with self._delegating():
                    value = self._delegate.draw_float(
                        min_value=min_value,
                        max_value=max_value,
                        allow_nan=allow_nan,
                        smallest_nonzero_magnitude=smallest_nonzero_magnitude,
                    )
                value = self._permitted_float(value, constraints)
                return self._placed("float", constraints, key, value)
            if self._plan is not None:
                planned = self._planned(key, "float", constraints)
                if planned is not FRESH:
                    return planned
            constant = self._constant("float", constraints)
            if constant is not FRESH:
                return self._delegated(key, self._permitted_float(constant, constraints))
            lo_key, hi_key = buckets.float_key(min_value), buckets.float_key(max_value)
            specials, ranges = self._float_buckets(constraints)
            n = len(ranges) + (1 if specials else 0)
            # Float ranges always hold many values; the specials are one action.
            wide = _Below(len(ranges) + (len(specials) > 1))
            action = self._choose(("f", lo_key, hi_key), n, None, inexact=wide)
            if action < len(ranges):
                value = buckets.sample_range(self._rng, *ranges[action])
            else:
                value = self._rng.choice(specials)
            value = self._permitted_float(value, constraints)
            self._choices.append(value)
            if self._tracing:
                self._trace.append((key, value))
            return value
        except Exception as exc:
            raise self._guarded(exc) from exc

    def draw_string(
        self,
        intervals: IntervalSet,
        *,
        min_size: int = 0,
        max_size: int = COLLECTION_DEFAULT_MAX_SIZE,
    ) -> str:
        if self._broken is not None:
            raise BackendCannotProceed("exhausted")
        try:
            key = ("s", intervals, min_size, max_size)
            constraints = {"intervals": intervals, "min_size": min_size, "max_size": max_size}
            if self._delegate is not None:
                with self._delegating():
                    value = self._delegate.draw_string(
                        intervals, min_size=min_size, max_size=max_size
                    )
                return self._placed("string", constraints, key, value)
            if len(intervals) == 0:
                self._choices.append("")
                return ""
            if self._plan is not None:
                planned = self._planned(key, "string", constraints)
                if planned is not FRESH:
                    return planned
            constant = self._constant("string", constraints)
            if constant is not FRESH:
                return self._delegated(key, constant)
            classes, prior = self._cached(("sc", intervals), lambda: _char_domain(intervals))
            point = ("c", len(intervals), len(classes))
            wide = self._cached(("sc+", intervals), lambda: _wide((0, len(c) - 1) for c in classes))
            chars = []
            for _ in self._sizes(min_size, max_size, "s"):
                cls = classes[self._choose(point, len(classes), prior, inexact=wide)]
                chars.append(chr(cls[self._rng.randrange(len(cls))]))
            value = "".join(chars)
            self._choices.append(value)
            if self._tracing:
                self._trace.append((key, value))
            return value
        except Exception as exc:
            raise self._guarded(exc) from exc

    def draw_bytes(
        self,
        min_size: int = 0,
        max_size: int = COLLECTION_DEFAULT_MAX_SIZE,
    ) -> bytes:
        if self._broken is not None:
            raise BackendCannotProceed("exhausted")
        try:
            key = ("y", min_size, max_size)
            constraints = {"min_size": min_size, "max_size": max_size}
            if self._delegate is not None:
                with self._delegating():
                    value = self._delegate.draw_bytes(min_size, max_size)
                return self._placed("bytes", constraints, key, value)
            if self._plan is not None:
                planned = self._planned(key, "bytes", constraints)
                if planned is not FRESH:
                    return planned
            constant = self._constant("bytes", constraints)
            if constant is not FRESH:
                return self._delegated(key, constant)
            out = bytearray()
            for _ in self._sizes(min_size, max_size, "y"):
                n = len(buckets.BYTE_CLASSES)
                a, b = buckets.BYTE_CLASSES[
                    self._choose(("y",), n, _BYTE_PRIOR, inexact=_WIDE_BYTE_CLASSES)
                ]
                out.append(self._rng.randint(a, b))
            value = bytes(out)
            self._choices.append(value)
            if self._tracing:
                self._trace.append((key, value))
            return value
        except Exception as exc:
            raise self._guarded(exc) from exc

    def _planned(self, key: Hashable, kind: str, constraints: dict[str, Any]) -> Any:
        """This draw's value from the case's mutation plan (:mod:`rlcheck.mutation`), or
        :data:`~rlcheck.mutation.FRESH` where the draw is made as usual.

        The plan's value, and its alternatives where it has some (the other simplest
        values, the other boundary values), are checked against the choice tree as the
        guide's own choices are: the first that can still lead to a new case is taken
        and stepped along; where none can, the draw is made afresh, steered by the tree
        (so a mutated case does not repeat a case run before through exact choices).
        """
        plan = self._plan
        value = plan.next(key)
        if value is SIMPLEST:
            index = plan.small_index()
            candidates = simplest_choices(kind, constraints, 4)
            if index:
                candidates.insert(0, candidates.pop(min(index, len(candidates) - 1)))
            if type(self).mutate_suffix_moves:
                recorded = plan.replaced(key)
                if recorded is not FRESH and recorded in candidates:
                    candidates.remove(recorded)
                    candidates.append(recorded)
        elif value is FRESH:
            recorded = plan.changed()
            if recorded is FRESH:
                return FRESH
            candidates = self._changed_values(kind, constraints, recorded, plan)
        else:
            if kind == "float":
                value = self._permitted_float(value, constraints)
            candidates = [value]
        for value in candidates:
            path = self._tree_path(kind, constraints, value)
            if path is None or not self._tree.repeats(path):
                self._follow(path)
                return self._replayed(key, value)
        return FRESH

    def _constant(self, kind: str, constraints: dict[str, Any]) -> Any:
        """One of Hypothesis's constants for this draw, at its rate (:attr:`draw_constants`),
        or :data:`~rlcheck.mutation.FRESH`: most of the time, and where the constant could
        only repeat a case run before through exact choices (then it is drawn as usual)."""
        source = self._constants
        if source is None:
            return FRESH
        value = source.draw(kind, constraints)
        if value is None:
            return FRESH
        path = self._tree_path(kind, constraints, value)
        if path is not None and self._tree.repeats(path):
            return FRESH
        self._follow(path)
        return value

    def _changed_values(
        self, kind: str, constraints: dict[str, Any], recorded: Any, plan: Any
    ) -> list[Any]:
        """Values for a mutated draw, other than ``recorded`` where it can: the boundary
        values (:func:`_boundary_values`, from the plan's pick on), else another value
        (another boolean, a uniform other integer; none for the other kinds: a fresh
        draw)."""
        if plan.boundary:
            candidates = _boundary_values(kind, constraints, recorded)
            if candidates:
                pick = plan.pick % len(candidates)
                return candidates[pick:] + candidates[:pick]
        if kind == "boolean":
            return [not recorded]
        if kind == "integer":
            lo, hi = buckets.integer_bounds(constraints["min_value"], constraints["max_value"])
            return [other_integer(self._rng, lo, hi, recorded)]
        return []

    def _tree_path(
        self, kind: str, constraints: dict[str, Any], value: Any
    ) -> list[tuple[Hashable, int, int, bool]] | None:
        """The choice-tree steps the learned draw takes to make ``value`` (``(point, n,
        action, exact)``, as :meth:`_choose` steps them), up to the first inexact one;
        ``None`` where it could not make it (a string past the soft size cap)."""
        if kind == "boolean":
            p = constraints["p"]
            point: Hashable = ("B", round(p, 6)) if p < 0.02 or p > 0.98 else ("b", round(p, 3))
            return [(point, 2, int(value), True)]
        if kind == "integer":
            lo_v, hi_v = constraints["min_value"], constraints["max_value"]
            if lo_v is not None and hi_v is not None and hi_v - lo_v < buckets.SMALL_DOMAIN:
                return [(("i", lo_v, hi_v), hi_v - lo_v + 1, value - lo_v, True)]
            lo, hi = buckets.integer_bounds(lo_v, hi_v)
            ranges = self._cached(("ib", lo, hi), lambda: buckets.integer_buckets(lo, hi))
            for index, (a, b) in enumerate(ranges):
                if a <= value <= b:
                    return [(("I", lo_v, hi_v), len(ranges), index, a == b)]
            return None
        if kind == "float":
            lo_key = buckets.float_key(constraints["min_value"])
            hi_key = buckets.float_key(constraints["max_value"])
            specials, ranges = self._float_buckets(constraints)
            n = len(ranges) + (1 if specials else 0)
            return [(("f", lo_key, hi_key), n, 0, False)]  # buckets of many values: opens
        size_kind = "s" if kind == "string" else "y"
        if kind == "string":
            intervals = constraints["intervals"]
            classes, _ = self._cached(("sc", intervals), lambda: _char_domain(intervals))
            point = ("c", len(intervals), len(classes))
        else:
            classes, point = _BYTE_CLASS_SETS, ("y",)
        min_size, max_size = constraints["min_size"], constraints["max_size"]
        cap = min(max_size, min_size + _SOFT_SIZE_CAP)
        if len(value) > cap:
            return None
        steps: list[tuple[Hashable, int, int, bool]] = []
        for n, element in enumerate(value):
            if n >= min_size:
                steps.append((("more", size_kind), 2, 1, True))
            code = ord(element) if kind == "string" else element
            found = next((i for i, c in enumerate(classes) if code in c), None)
            if found is None:
                return None
            exact = len(classes[found]) == 1
            steps.append((point, len(classes), found, exact))
            if not exact:
                return steps  # the tree opens here: nothing after it is recorded
        if len(value) < cap:
            steps.append((("more", size_kind), 2, 0, True))
        return steps

    def _follow(self, path: list[tuple[Hashable, int, int, bool]] | None) -> None:
        """Step the choice tree along a value the guide did not choose."""
        tree = self._tree
        if path is None:
            tree.abandon()
            return
        for point, n, action, exact in path:
            tree.step(point, n, action, exact=exact)

    def realize(self, value: Any, *, for_failure: bool = False) -> Any:
        """Discards a valid case that repeated an earlier one (see the module docstring).

        Hypothesis realizes each choice of a case after the case ran, and counts a
        case discarded there as neither valid nor a failure. Only choice values are
        refused (the engine's other calls, on events and notes, swallow the refusal).
        """
        try:
            discard = self._should_discard(value, for_failure)
        except Exception as exc:
            self._fail(exc)
            return value
        if discard:
            raise BackendCannotProceed("discard_test_case")
        return value

    def _should_discard(self, value: Any, for_failure: bool) -> bool:
        discard = (
            self._discard
            and not for_failure
            and self._broken is None
            and type(value) in _CHOICE_TYPES
        )
        if discard:
            self._discard = False
            self._discards += 1
        return discard

    def _float_buckets(
        self, constraints: dict[str, Any]
    ) -> tuple[list[float], list[tuple[float, float]]]:
        key = (
            "fb",
            buckets.float_key(constraints["min_value"]),
            buckets.float_key(constraints["max_value"]),
            constraints["allow_nan"],
            constraints["smallest_nonzero_magnitude"],
        )
        return self._cached(key, lambda: buckets.float_buckets(constraints))

    def _permitted_float(self, value: float, constraints: dict[str, Any]) -> float:
        """``value`` if the draw's constraints permit it, else the nearest that they do.

        Every source of a float passes through here, Hypothesis's own provider (the fast
        variant's delegate) included: for a range whose nonzero values all lie below
        ``smallest_nonzero_magnitude`` it returned the excluded bound, which Hypothesis's
        clamper maps back onto that bound, so the buckets' permitted specials decide.
        """
        if choice_permitted(value, constraints):  # type: ignore[arg-type]
            return value
        clamped = make_float_clamper(
            constraints["min_value"],
            constraints["max_value"],
            allow_nan=constraints["allow_nan"],
            smallest_nonzero_magnitude=constraints["smallest_nonzero_magnitude"],
        )(value)
        if choice_permitted(clamped, constraints):  # type: ignore[arg-type]
            return clamped
        specials, _ = self._float_buckets(constraints)
        return specials[0] if specials else clamped

    def _delegated(self, key: Hashable, value: Any) -> Any:
        """A value from Hypothesis's own provider or its constants (kept as a case to
        mutate, if valid)."""
        self._choices.append(value)
        if self._tracing:
            self._trace.append((key, value))
        return value

    @contextmanager
    def _delegating(self) -> Iterator[None]:
        """Around a draw of Hypothesis's provider: the draws it makes of its own (a
        string's characters, through the case's data) come back here nested."""
        self._nested += 1
        try:
            yield
        finally:
            self._nested -= 1

    def _placed(self, kind: str, constraints: dict[str, Any], key: Hashable, value: Any) -> Any:
        """A value of Hypothesis's provider, placed in the choice tree as the learned
        draw that makes it would be (its outermost draws only: a nested one is part of
        the value drawn around it), so learned cases do not repeat the cases it ran."""
        if not self._nested:
            self._follow(self._tree_path(kind, constraints, value))
        return self._delegated(key, value)

    def _replayed(self, key: Hashable, value: Any) -> Any:
        """A value from the case being mutated (or its changed draw), not learned."""
        self._choices.append(value)
        self._trace.append((key, value))
        return value

    def _sizes(self, min_size: int, max_size: int, kind: str) -> Iterator[int]:
        """Element indices of a string or bytes draw, with learned continue/stop."""
        cap = min(max_size, min_size + _SOFT_SIZE_CAP)
        # Hypothesis's average size for these draws, as a continue probability.
        average = min(max(min_size * 2, min_size + 5), 0.5 * (min_size + max_size))
        p_more = (average - min_size) / (average - min_size + 1.0)
        prior = (1.0 - p_more, 1.0)
        n = 0
        while n < cap:
            if n >= min_size and self._choose(("more", kind), 2, prior) == 0:
                return
            yield n
            n += 1

    def _cached(self, key: Hashable, make: Any) -> Any:
        found = self._caches.get(key)
        if found is None:
            if len(self._caches) > 1024:  # bounded: constraints vary with the test
                self._caches.clear()
            found = self._caches[key] = make()
        return found


class FastRLCheckProvider(RLCheckProvider):
    """The backend at bounded cost on strict tests: half of the *cases* Hypothesis's own.

    ``backend="rlcheck"`` gives Hypothesis's own backend half of the valid cases; where its
    valid rate is low, that half is interleaved from Hypothesis's provider with up to
    :attr:`~RLCheckProvider.default_patience` (30) invalid cases in a row, so a valid case
    there costs up to 30 cases. This variant interleaves Hypothesis's provider one case at
    a time (patience 1): where the provider's cases are mostly invalid, about every other
    case is the learned policy's, so the run's cases stay within about twice those of the
    learned policy alone, and where they are mostly valid it still gets half of the valid
    cases. No default-backend tail. On ``examples/hypothesis_assume.py``'s test at
    ``max_examples=100`` (README) it ran 2 100 cases against 3 000-3 850, and its
    mutants on ``benchmarks/etna.py --quick`` were killed alike (README: "when to switch
    the backend on").
    """

    default_share: ClassVar[float] = 0.5
    default_patience: ClassVar[int] = 1
    #: Mutation as in ``rlcheck``: without it (0.0 until December 2026) nothing made the
    #: equal values Hypothesis's engine makes by copying one draw onto another, and a list
    #: with a repeated element failed a test in 2-4 of 20 seeds against the default's 20
    #: (``test_the_fast_backend_finds_what_the_engines_copies_find``).
    mutate_share: ClassVar[float] = 0.5
    default_tail: ClassVar[float] = 0.0


def _boundary_values(kind: str, constraints: dict[str, Any], recorded: Any) -> list[Any]:
    """A draw's boundary values other than ``recorded``: its simplest values in
    Hypothesis's order (``0``, ``1``, ``-1``...; ``""``, ``"a"``...), and for numbers its
    finite bounds (and an integer's neighbours of ``recorded``)."""
    values = simplest_choices(kind, constraints, 4)
    if kind == "integer":
        values += [v for v in (constraints["min_value"], constraints["max_value"]) if v is not None]
        values += [recorded - 1, recorded + 1]
    elif kind == "float":
        values += [
            v for v in (constraints["min_value"], constraints["max_value"]) if math.isfinite(v)
        ]
    out: list[Any] = []
    seen = {(type(recorded), repr(recorded))}
    for value in values:
        key = (type(value), repr(value))  # 0.0 and -0.0 apart
        if key not in seen and choice_permitted(value, constraints):  # type: ignore[arg-type]
            seen.add(key)
            out.append(value)
    return out


class _Shaped:
    """Hypothesis's provider (``inner``) with each draw passed through :meth:`_draw`
    (its kind, constraints, and the inner provider's draw), which may answer it instead."""

    def __init__(self, inner: PrimitiveProvider) -> None:
        self._inner = inner

    def _draw(self, kind: str, constraints: dict[str, Any], draw: Any) -> Any:
        return draw()

    def draw_boolean(self, p: float = 0.5) -> bool:
        return bool(self._draw("boolean", {"p": p}, lambda: self._inner.draw_boolean(p)))

    def draw_integer(
        self,
        min_value: int | None = None,
        max_value: int | None = None,
        *,
        weights: dict[int, float] | None = None,
        shrink_towards: int = 0,
    ) -> int:
        constraints = {
            "min_value": min_value,
            "max_value": max_value,
            "weights": weights,
            "shrink_towards": shrink_towards,
        }
        return int(
            self._draw(
                "integer",
                constraints,
                lambda: self._inner.draw_integer(
                    min_value, max_value, weights=weights, shrink_towards=shrink_towards
                ),
            )
        )

    def draw_float(
        self,
        *,
        min_value: float = -math.inf,
        max_value: float = math.inf,
        allow_nan: bool = True,
        smallest_nonzero_magnitude: float,
    ) -> float:
        constraints = {
            "min_value": min_value,
            "max_value": max_value,
            "allow_nan": allow_nan,
            "smallest_nonzero_magnitude": smallest_nonzero_magnitude,
        }
        return float(
            self._draw(
                "float",
                constraints,
                lambda: self._inner.draw_float(
                    min_value=min_value,
                    max_value=max_value,
                    allow_nan=allow_nan,
                    smallest_nonzero_magnitude=smallest_nonzero_magnitude,
                ),
            )
        )

    def draw_string(
        self,
        intervals: IntervalSet,
        *,
        min_size: int = 0,
        max_size: int = COLLECTION_DEFAULT_MAX_SIZE,
    ) -> str:
        constraints = {"intervals": intervals, "min_size": min_size, "max_size": max_size}
        return str(
            self._draw(
                "string",
                constraints,
                lambda: self._inner.draw_string(intervals, min_size=min_size, max_size=max_size),
            )
        )

    def draw_bytes(self, min_size: int = 0, max_size: int = COLLECTION_DEFAULT_MAX_SIZE) -> bytes:
        constraints = {"min_size": min_size, "max_size": max_size}
        return bytes(
            self._draw("bytes", constraints, lambda: self._inner.draw_bytes(min_size, max_size))
        )


class _SimplestAfter(_Shaped):
    """Hypothesis's provider for the first ``start`` draws of a case, then every draw's
    simplest value: the shape of the first cases of Hypothesis's engine (a short novel
    prefix, then ``ChoiceTemplate("simplest")``)."""

    def __init__(self, inner: PrimitiveProvider, start: int) -> None:
        super().__init__(inner)
        self._start = start
        self._draws = 0

    def _draw(self, kind: str, constraints: dict[str, Any], draw: Any) -> Any:
        self._draws += 1
        if self._draws > self._start:
            simplest = simplest_choices(kind, constraints, 1)
            if simplest:
                return simplest[0]
        return draw()


class _ProbeCase(_Shaped):
    """One case of the probe: Hypothesis's provider, its values kept in ``tree`` (a trie of
    the probe's cases: value -> subtree) by :meth:`remember`.

    With ``simplest``, the case is the engine's *simplest extension of a novel prefix*
    (``generate_novel_prefix``, then ``ChoiceTemplate("simplest")``): it walks the tree
    draw by draw with the provider's values; where a node holds one value only, the draw
    is retried (up to :data:`_NOVEL_ATTEMPTS` times) for another, as the engine does; the
    first value the tree has not seen there ends the prefix, and every later draw takes
    its simplest value. The engine's first case (every draw's simplest value) is in the
    tree from the start. With ``novel`` alone, the same novel prefix, then the provider's
    own draws: the engine's random case (``generate_novel_prefix``, then random draws).
    """

    def __init__(
        self,
        inner: PrimitiveProvider,
        tree: dict[Any, Any],
        *,
        simplest: bool,
        novel: bool = False,
    ) -> None:
        super().__init__(inner)
        self.simplest = simplest
        self._novel = simplest or novel
        self._tree = tree
        self._node: dict[Any, Any] | None = tree  # None: past the novel prefix
        self._zero = True  # every value so far the simplest: on the engine's first case
        self._values: list[Any] = []

    def _draw(self, kind: str, constraints: dict[str, Any], draw: Any) -> Any:
        if not self._novel:
            value = draw()
        elif self._node is None:
            simplest = simplest_choices(kind, constraints, 1) if self.simplest else []
            value = simplest[0] if simplest else draw()
        else:
            value = self._walk(kind, constraints, draw)
        self._values.append(value)
        return value

    def _walk(self, kind: str, constraints: dict[str, Any], draw: Any) -> Any:
        """One draw of the novel prefix, and the step down the tree it takes."""
        nested = kind in ("string", "bytes")
        if nested:
            # Their sizes are drawn first, through this case (nested draws, which walk the
            # tree themselves and may end the prefix): drawn once, not retried.
            value = draw()
        node = self._node
        if node is None:
            return value
        simplest = simplest_choices(kind, constraints, 1) if self._zero else []
        zero = simplest[0] if simplest else _NOTHING
        if not nested:
            value = draw()
            # Where the tree holds one value (or none but the engine's first case), a value
            # seen is retried for another, as the engine does; a value whose every case
            # has been run (a case ended there; the engine's first case, as far as the
            # probe knows) is retried everywhere.
            single = len(node.keys() - {_END}) + (zero is not _NOTHING and zero not in node) <= 1
            for _ in range(_NOVEL_ATTEMPTS):
                status = self._status(node, value, zero)
                if status == "novel" or (status == "seen" and not single):
                    break
                value = draw()
        status = self._status(node, value, zero)
        if status == "novel":
            self._node = None  # a value not seen here: the prefix ends
        else:
            self._zero = self._zero and value == zero and type(value) is type(zero)
            self._node = node.get(value, {})
        return value

    @staticmethod
    def _status(node: dict[Any, Any], value: Any, zero: Any) -> str:
        """``"novel"``, ``"seen"``, or ``"run"`` (every case below it has been run)."""
        child = node.get(value)
        if child is None:
            return "run" if value == zero and type(value) is type(zero) else "novel"
        return "run" if child.keys() == {_END} else "seen"

    def remember(self) -> None:
        """Put this case's values in the probe's tree (a case's end: :data:`_END`)."""
        node = self._tree
        for value in self._values:
            node = node.setdefault(value, {})
        node[_END] = {}


class _SmallCase(_ProbeCase):
    """A small case of the probe (:attr:`RLCheckProvider.probe_small_cases`): every draw
    its simplest value (the engine's first case), but draw ``i`` its ``changes[i]``-th
    simplest (0: the simplest), in Hypothesis's order (:func:`simplest_choices`); with
    ``scan``, the first draw at or after position ``scan`` that has a second simplest
    value takes it (:attr:`at`): a sweep over the simplest case's draws, one moved one
    step, that needs no record of that case (the engine ran it on its own backend).

    A case's children (:meth:`children`) move one more draw one more step, at or after
    ``last`` (the last position moved), so each set of moves is made once; the draws a
    case made (how many simplest values each has) say which moves exist.
    """

    def __init__(
        self,
        inner: PrimitiveProvider,
        tree: dict[Any, Any],
        changes: dict[int, int],
        last: int,
        scan: int | None,
    ) -> None:
        super().__init__(inner, tree, simplest=True)
        self._changes = changes
        self._last = last
        self.scan = scan
        self.at: int | None = None  # the scan's moved draw
        self._ranks: list[int] = []  # per draw: how many simplest values it has

    def _draw(self, kind: str, constraints: dict[str, Any], draw: Any) -> Any:
        i = len(self._ranks)
        choices = simplest_choices(kind, constraints, _SMALL_RANK + 1)
        self._ranks.append(len(choices))
        if not choices:
            value = draw()
        else:
            k = self._changes.get(i, 0)
            if self.scan is not None and self.at is None and i >= self.scan and len(choices) > 1:
                self.at, self._changes, self._last, k = i, {i: 1}, i, 1
            value = choices[min(k, len(choices) - 1)]
        self._values.append(value)
        return value

    @property
    def draws(self) -> int:
        """How many draws the case made."""
        return len(self._ranks)

    def children(self) -> list[tuple[dict[int, int], int, int | None]]:
        """The small cases one move further: ``(changes, last moved, None)``."""
        if self.scan is not None and self.at is None:
            return []  # the scan moved nothing: the simplest case, run by the engine
        out: list[tuple[dict[int, int], int, int | None]] = []
        for j in range(self._last, min(len(self._ranks), self._last + _SMALL_CHILD_DRAWS)):
            k = self._changes.get(j, 0) + 1
            if k < self._ranks[j]:
                out.append(({**self._changes, j: k}, j, None))
        return out


def _call_weak(method: weakref.WeakMethod[Any]) -> None:
    """Call a weakly held method unless its object is gone."""
    bound = method()
    if bound is not None:
        bound()


def _small_range(min_value: int | None, max_value: int | None) -> bool:
    """Whether an integer draw is learned value by value (:data:`buckets.SMALL_DOMAIN`)."""
    return (
        min_value is not None
        and max_value is not None
        and max_value - min_value < buckets.SMALL_DOMAIN
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _span_label(label: object) -> int:
    """A span label as the int the state keeps: a user's ``draw(..., label=...)`` may be
    any object; a string keeps its identity across runs (CRC-32, not ``hash``, which
    varies per process), anything else counts by its type."""
    if isinstance(label, int):
        return int(label) & _LABEL_MASK
    text = label if isinstance(label, str) else type(label).__qualname__
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


def _cumulative(weights: list[float]) -> tuple[float, ...]:
    """Prior weights as the cumulative form :meth:`Policy.prior_chooser` takes."""
    return tuple(itertools.accumulate(weights))


def _char_domain(intervals: IntervalSet) -> tuple[list[IntervalSet], tuple[float, ...] | None]:
    classes, weights = buckets.char_classes(intervals)
    return classes, None if weights is None else _cumulative(weights)


_BYTE_PRIOR = _cumulative(buckets.BYTE_PRIOR)


def _wide(ranges: Iterable[tuple[int, int]]) -> frozenset[int]:
    """Indices of the ranges holding more than one value (inexact choices)."""
    return frozenset(i for i, (a, b) in enumerate(ranges) if a != b)


_WIDE_BYTE_CLASSES = _wide(buckets.BYTE_CLASSES)
_BYTE_CLASS_SETS = tuple(range(a, b + 1) for a, b in buckets.BYTE_CLASSES)


@dataclass(frozen=True)
class _Below:
    """The actions ``0 .. n - 1``, as a container without building it."""

    n: int

    def __contains__(self, action: object) -> bool:
        return isinstance(action, int) and 0 <= action < self.n


_CHOICE_TYPES = frozenset((bool, int, float, str, bytes))
