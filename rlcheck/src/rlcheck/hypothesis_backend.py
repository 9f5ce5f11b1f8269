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
* **Episode** = one test case, closed in :meth:`RLCheckProvider.per_test_case_context_manager`:
  an ``assume()`` or ``.filter()`` rejection (or an overrun) is invalid (reward −1); a
  passing or failing case is valid, +20 when its choice sequence is new in this run, 0 when
  it repeats one.

Hypothesis facts the design leans on (read in ``hypothesis/internal/conjecture/engine.py``,
6.170): a run stops after ``max_examples`` valid cases and gives up (``Unsatisfiable``)
once invalid cases exceed ``458 + 100 × valid``; the first case, database replay and
shrinking use Hypothesis's own backend, and every failure found here is replayed on it.
Hence:

* the learned policy is saved under the example database's directory, keyed by the
  test's database key (atomic JSON via :mod:`rlcheck.policy_store`), and loaded by the
  next run, so learning accumulates across runs;
* when invalid cases reach half of Hypothesis's give-up threshold, the provider hands
  the rest of the run to Hypothesis's own backend (``BackendCannotProceed("exhausted")``),
  so a test the default backend can run never becomes ``Unsatisfiable`` here;
* any internal error of the provider does the same, with one :class:`RLCheckWarning`.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import math
import random
import struct
import time
import warnings
import weakref
from collections.abc import Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from hypothesis import settings as hypothesis_settings
from hypothesis.errors import BackendCannotProceed, StopTest, UnsatisfiedAssumption
from hypothesis.internal.conjecture.choice import choice_permitted
from hypothesis.internal.conjecture.providers import (
    COLLECTION_DEFAULT_MAX_SIZE,
    PrimitiveProvider,
)
from hypothesis.internal.floats import make_float_clamper, next_down, next_up
from hypothesis.internal.intervalsets import IntervalSet

from rlcheck.errors import InvalidArgument, RLCheckWarning
from rlcheck.learner import Policy, reward_for
from rlcheck.policy_store import load_policy, save_policy

try:  # the engine's give-up rule; the fallback value is that of Hypothesis 6.170
    from hypothesis.internal.conjecture.engine import (
        INVALID_THRESHOLD_BASE as _INVALID_THRESHOLD_BASE,
    )
except ImportError:  # pragma: no cover - older or newer engines
    _INVALID_THRESHOLD_BASE = 458

__all__ = [
    "BACKEND_NAME",
    "PROFILE_NAME",
    "RLCheckProvider",
    "TestStats",
    "backend_stats",
    "database_key",
    "policy_path",
    "reset_backend_stats",
]

BACKEND_NAME = "rlcheck"
"""The name to pass as ``@settings(backend=...)``."""
PROFILE_NAME = "rlcheck"
"""The Hypothesis settings profile (registered on import of Hypothesis) that selects it."""

WindowMode = Literal["ancestor", "sequence"]

SMALL_DOMAIN = 32
"""Integer ranges with at most this many values are learned value by value."""
SMALL_ALPHABET = 16
"""Alphabets with at most this many characters are learned character by character."""
_WINDOW = 4  # learned choices kept in the state (RLCheck: k = 4-5)
_PATH_DEPTH = 3  # innermost span labels kept in the state
_SOFT_SIZE_CAP = 48  # string/bytes elements past min_size; keeps inputs below overrun size
# Fractions of Hypothesis's give-up limits at which to hand over (see _should_hand_back).
# Half: the backend keeps time to learn, and the default backend keeps half its budget.
_HAND_BACK_UNSATISFIABLE = 0.5
_HAND_BACK_HEALTH_CHECK = 0.5
_HEALTH_CHECK_VALID, _HEALTH_CHECK_INVALID = 10, 50  # filter_too_much (engine.py, 6.170)
_SAVE_INTERVAL_S = 5.0
_MAX_SEEN = 1 << 20  # choice-sequence hashes kept per run (bounds memory)
_LABEL_MASK = (1 << 32) - 1  # span labels are 64-bit; 32 bits keep saved files small
_POLICY_META = {"kind": "rlcheck-hypothesis-backend", "layout": 1}

# Integer magnitude buckets: offsets 0, 1, 2-3, 4-7, ... 256-1023, then wide steps.
_INT_EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1 << 10, 1 << 16, 1 << 24, 1 << 32, 1 << 64)
# Float magnitude buckets (positive side; mirrored for negatives).
_FLOAT_EDGES = (5e-324, 1e-6, 1.0, 1e3, 1e9, 1.7976931348623157e308)
_BYTE_CLASSES = ((0, 0), (1, 31), (32, 126), (127, 255))
_BYTE_PRIOR = [float(b - a + 1) for a, b in _BYTE_CLASSES]  # uniform bytes
_CHAR_CLASSES = tuple(
    IntervalSet(iv)
    for iv in (
        ((48, 57),),  # digits
        ((97, 122),),  # lowercase ASCII
        ((65, 90),),  # uppercase ASCII
        ((32, 47), (58, 64), (91, 96), (123, 126)),  # space and punctuation
        ((0, 31), (127, 127)),  # ASCII control
        ((128, 0xFFFF),),  # rest of the BMP
        ((0x10000, 0x10FFFF),),  # astral planes
    )
)


@dataclass(frozen=True)
class TestStats:
    """What the backend saw for one test function, summed over its runs.

    ``unique_valid`` counts valid cases whose choice sequence was new within its run.
    ``handed_back`` is true when a run handed generation back to Hypothesis's own backend
    (too many invalid cases, or an internal error: then ``fallback`` is true too).
    """

    __test__: ClassVar[bool] = False  # not a pytest test class despite the name

    cases: int = 0
    valid: int = 0
    unique_valid: int = 0
    invalid: int = 0
    failures: int = 0
    runs: int = 0
    handed_back: bool = False
    fallback: bool = False


_STATS: dict[str, TestStats] = {}


def backend_stats() -> dict[str, TestStats]:
    """Per-test statistics of every test run on the backend in this process.

    Keys are the tests' qualified names (``module.function``).

    Examples
    --------
    >>> isinstance(backend_stats(), dict)
    True
    """
    return dict(_STATS)


def reset_backend_stats() -> None:
    """Forget the statistics gathered so far (e.g. between benchmark rounds)."""
    _STATS.clear()


def policy_path(database: Any, database_key: bytes | None) -> Path | None:
    """Where the backend keeps the learned policy of one test, or ``None`` if nowhere.

    Policies live next to the failing examples, under ``<database dir>/rlcheck/``, one
    file per test named after its Hypothesis database key. Tests without a key, and
    databases that are not directories (in-memory), get no persistence.

    Examples
    --------
    >>> from hypothesis.database import DirectoryBasedExampleDatabase
    >>> db = DirectoryBasedExampleDatabase("/tmp/db")
    >>> str(policy_path(db, b"k")).startswith("/tmp/db/rlcheck/")
    True
    >>> policy_path(None, b"k") is None
    True
    """
    directory = _database_directory(database)
    if directory is None or not database_key:
        return None
    digest = hashlib.sha384(database_key).hexdigest()[:32]
    return Path(directory) / "rlcheck" / f"{digest}.policy.json"


def database_key(test: Any) -> bytes | None:
    """The example-database key Hypothesis uses for a ``@given`` test (``None`` if none).

    The same rule as Hypothesis's engine: an explicitly set key, else the digest of the
    undecorated test function (its source and signature), so the key, and the policy
    file with it, stays the same from run to run while the test is unchanged.

    Examples
    --------
    >>> from hypothesis import given, strategies as st
    >>> @given(st.integers())
    ... def test_example(n):
    ...     pass
    >>> len(database_key(test_example))
    48
    """
    explicit = getattr(test, "_hypothesis_internal_database_key", None)
    if explicit is not None:
        return bytes(explicit)
    inner = getattr(getattr(test, "hypothesis", None), "inner_test", None)
    if inner is None:
        return None
    from hypothesis.internal.reflection import function_digest

    return function_digest(inner)


def _database_directory(database: Any) -> Path | None:
    from hypothesis.database import DirectoryBasedExampleDatabase

    if isinstance(database, DirectoryBasedExampleDatabase):
        return Path(database.path)
    # Multiplexed and read-only wrappers keep their inner databases in ``_wrapped``.
    inner = getattr(database, "_wrapped", None)
    if isinstance(inner, (list, tuple)):
        for db in inner:
            found = _database_directory(db)
            if found is not None:
                return found
    elif inner is not None:
        return _database_directory(inner)
    return None


class _Persistence:
    """The policy file of one test: load once, save when asked and at the end."""

    def __init__(self, path: Path | None, policy: Policy) -> None:
        self.path = path
        self.policy = policy
        self.dirty = False
        self.last_save = time.monotonic()

    def load(self) -> bool:
        if self.path is None:
            return False
        return load_policy(self.path, self.policy, expect_meta=_POLICY_META)

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        save_policy(self.path, self.policy, meta=_POLICY_META)
        self.dirty = False
        self.last_save = time.monotonic()

    def final_save(self) -> None:
        # Runs from weakref.finalize (garbage collection or interpreter exit): never raise.
        try:
            self.save()
        except Exception as exc:
            warnings.warn(
                f"rlcheck could not save the learned policy to {str(self.path)!r}: {exc}",
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
        Load and save the learned policy under the example database directory.

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
    window: ClassVar[WindowMode] = "sequence"

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
        self._epsilon = epsilon
        self._ancestor = window == "ancestor"
        self._seed = seed
        self._persist_enabled = persist
        # The learner's own ε-exploration is uniform; here exploration follows the
        # strategy's own distribution instead (see ``_choose``), so the learner is greedy.
        self._policy = Policy(epsilon=0.0, seed=seed)
        self._rng = random.Random(seed)
        self._started = False
        self._broken: BaseException | None = None
        self._persistence: _Persistence | None = None
        self._name = "<unknown test>"
        self._max_examples = 100
        self._health_checked = False
        # per-episode state
        self._labels: list[int] = []
        self._window: tuple[Hashable, ...] = ()
        self._saved_windows: list[tuple[Hashable, ...]] = []
        self._visits: list[tuple[Hashable, Hashable, int]] = []
        self._choices: list[Hashable] = []
        # per-run counters
        self._seen: set[int] = set()
        self._cases = self._valid = self._unique = self._invalid = self._failures = 0
        self._caches: dict[Hashable, Any] = {}

    # -- episodes -------------------------------------------------------------------

    def per_test_case_context_manager(self) -> AbstractContextManager[None]:
        return self._episode()

    @contextmanager
    def _episode(self) -> Iterator[None]:
        self._begin()
        outcome: str | None = "valid"
        try:
            yield
        except (UnsatisfiedAssumption, StopTest):
            # assume()/filter rejections and overruns: the input is not valid.
            outcome = "invalid"
            raise
        except BackendCannotProceed:
            outcome = None
            raise
        except BaseException:
            # The test failed: a valid input that found a bug.
            outcome = "failure"
            raise
        finally:
            self._end(outcome)

    def _begin(self) -> None:
        if self._broken is not None:
            raise BackendCannotProceed("exhausted")
        try:
            if not self._started:
                self._start_run()
            if self._should_hand_back():
                self._record(handed_back=True)
                raise BackendCannotProceed("exhausted")
        except BackendCannotProceed:
            raise
        except Exception as exc:
            self._fail(exc)
            raise BackendCannotProceed("exhausted") from exc
        self._labels = []
        self._window = ()
        self._saved_windows = []
        self._visits = []
        self._choices = []

    def _should_hand_back(self) -> bool:
        """Whether to let Hypothesis's own backend finish this run.

        Hypothesis raises ``Unsatisfiable`` only when a run ends with no valid case at
        all, after more than 458 invalid ones; its ``filter_too_much`` health check fails
        a run with 50 invalid cases before the 10th valid one. Before either limit comes
        close, hand over, so a test the default backend can run keeps running.
        """
        if self._valid == 0 and self._invalid >= _HAND_BACK_UNSATISFIABLE * _INVALID_THRESHOLD_BASE:
            return True
        return (
            self._health_checked
            and self._valid < _HEALTH_CHECK_VALID
            and self._invalid >= _HAND_BACK_HEALTH_CHECK * _HEALTH_CHECK_INVALID
        )

    def _end(self, outcome: str | None) -> None:
        # Never raises: an exception here would replace the test's own outcome.
        if outcome is None or self._broken is not None:
            return
        try:
            self._cases += 1
            valid = outcome != "invalid"
            new = False
            if valid:
                self._valid += 1
                self._failures += outcome == "failure"
                key = hash(tuple(self._choices))
                new = key not in self._seen
                if new:
                    self._unique += 1
                    if len(self._seen) < _MAX_SEEN:
                        self._seen.add(key)
            else:
                self._invalid += 1
            self._policy.learn(self._visits, reward_for(valid=valid, new=new))
            self._record()
            persistence = self._persistence
            if persistence is not None and self._visits:
                persistence.dirty = True
                if (
                    # The engine's first (simplest) case is not ours: the run's last
                    # valid case is our (max_examples - 1)-th.
                    self._valid == self._max_examples - 1
                    # A failure ends generation soon (shrinking is not ours).
                    or outcome == "failure"
                    or time.monotonic() - persistence.last_save > _SAVE_INTERVAL_S
                ):
                    persistence.save()
        except Exception as exc:
            self._fail(exc)

    def _start_run(self) -> None:
        self._started = True
        context = _build_context()
        test = getattr(context, "wrapped_test", None) if context is not None else None
        if test is not None:
            self._name = f"{test.__module__}.{test.__qualname__}"
        current = hypothesis_settings.default
        if current is not None:
            from hypothesis import HealthCheck

            self._max_examples = current.max_examples
            self._health_checked = HealthCheck.filter_too_much not in (
                current.suppress_health_check
            )
        if self._seed is None and context is not None:
            source = getattr(context.data, "_random", None)
            if source is not None:
                seed = source.getrandbits(64)
                self._policy.rng.seed(seed)
                self._rng.seed(seed ^ 0x5DEECE66D)
        previous = _STATS.get(self._name, TestStats())
        _STATS[self._name] = replace(previous, runs=previous.runs + 1)
        self._base = _STATS[self._name]
        if self._persist_enabled and current is not None and test is not None:
            path = policy_path(current.database, database_key(test))
            if path is not None:
                self._persistence = _Persistence(path, self._policy)
                self._persistence.load()
                weakref.finalize(self, self._persistence.final_save)

    def _record(self, *, handed_back: bool = False, fallback: bool = False) -> None:
        base = getattr(self, "_base", None) or TestStats(runs=1)
        _STATS[self._name] = TestStats(
            cases=base.cases + self._cases,
            valid=base.valid + self._valid,
            unique_valid=base.unique_valid + self._unique,
            invalid=base.invalid + self._invalid,
            failures=base.failures + self._failures,
            runs=base.runs,
            handed_back=base.handed_back or handed_back or fallback,
            fallback=base.fallback or fallback,
        )

    def _fail(self, exc: BaseException) -> None:
        """Internal error: warn once and hand the test back to Hypothesis's backend."""
        if self._broken is not None:
            return
        self._broken = exc
        warnings.warn(
            f"rlcheck's Hypothesis backend hit an internal error ({type(exc).__name__}: "
            f"{exc}) in {self._name}; the rest of this run uses Hypothesis's own backend. "
            "Please report this at the rlcheck issue tracker.",
            RLCheckWarning,
            stacklevel=2,
        )
        with contextlib.suppress(Exception):  # the warning above is what matters
            self._record(fallback=True)

    # -- spans and state -------------------------------------------------------------

    def span_start(self, label: int, /) -> None:
        self._labels.append(label & _LABEL_MASK)
        self._saved_windows.append(self._window)

    def span_end(self, discard: bool, /) -> None:
        if not self._labels:
            return
        self._labels.pop()
        saved = self._saved_windows.pop()
        if self._ancestor:
            self._window = saved

    def _choose(self, point: Hashable, n_actions: int, prior: list[float] | None = None) -> int:
        """One learned choice among ``n_actions``.

        ε-greedy, where both the ε share and states never visited draw from ``prior``
        (the strategy's own distribution, uniform when ``None``) instead of uniformly:
        a cold policy then generates like Hypothesis does, which keeps the early valid
        rate, and so the run, alive while learning starts. (Following the prior also
        until the first valid case, instead of the greedy sweep over untried actions that
        Q = 0 for unvisited actions causes, measured worse: fewer runs found any. But for
        yes/no choices with a skewed prior, such as a collection's continue/stop, a state
        where every tried answer led only to invalid inputs keeps following the prior:
        the sweep would make them 50/50 and collections far smaller than Hypothesis's.)
        """
        state = (tuple(self._labels[-_PATH_DEPTH:]), self._window)
        table = self._policy.table(point)
        rng = self._rng
        values = [table.value(state, a) for a in range(n_actions)]
        if (
            rng.random() < self._epsilon
            or not any(n for _, n in values)
            or (n_actions == 2 and prior is not None and all(q < 0 for q, n in values if n))
        ):
            if prior is None:
                action = rng.randrange(n_actions)
            else:
                action = rng.choices(range(n_actions), prior)[0]
        else:
            action = self._policy.choose(point, state, n_actions)
        self._visits.append((point, state, action))
        self._window = (*self._window[-(_WINDOW - 1) :], action)
        return action

    def _guarded(self, exc: Exception) -> BackendCannotProceed:
        self._fail(exc)
        return BackendCannotProceed("exhausted")

    # -- the five primitive draws ----------------------------------------------------

    def draw_boolean(self, p: float = 0.5) -> bool:
        if p <= 0:
            return False
        if p >= 1:
            return True
        if self._broken is not None:
            raise BackendCannotProceed("exhausted")
        try:
            if p < 0.02 or p > 0.98:
                # Rare-event switches inside Hypothesis's strategies: learning them would
                # make the rare branch common under a fresh (uniform) policy.
                value = self._rng.random() < p
            else:
                value = self._choose(("b", round(p, 3)), 2, [1.0 - p, p]) == 1
            self._choices.append(value)
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
            value = self._draw_integer(min_value, max_value)
            self._choices.append(value)
            return value
        except Exception as exc:
            raise self._guarded(exc) from exc

    def _draw_integer(self, min_value: int | None, max_value: int | None) -> int:
        if min_value is not None and max_value is not None and max_value - min_value < SMALL_DOMAIN:
            return min_value + self._choose(("i", min_value, max_value), max_value - min_value + 1)
        lo, hi = _integer_bounds(min_value, max_value)
        buckets = self._cached(("ib", lo, hi), lambda: _integer_buckets(lo, hi))
        weights = self._cached(("iw", lo, hi), lambda: _integer_prior(buckets, lo, hi))
        a, b = buckets[self._choose(("I", min_value, max_value), len(buckets), weights)]
        return self._rng.randint(a, b)

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
            key = (
                "fb",
                _float_key(min_value),
                _float_key(max_value),
                allow_nan,
                smallest_nonzero_magnitude,
            )
            specials, ranges = self._cached(key, lambda: _float_buckets(constraints))
            n = len(ranges) + (1 if specials else 0)
            action = self._choose(("f", _float_key(min_value), _float_key(max_value)), n)
            if action < len(ranges):
                value = _sample_range(self._rng, *ranges[action])
            else:
                value = self._rng.choice(specials)
            if not choice_permitted(value, constraints):  # type: ignore[arg-type]
                clamp = make_float_clamper(
                    min_value,
                    max_value,
                    allow_nan=allow_nan,
                    smallest_nonzero_magnitude=smallest_nonzero_magnitude,
                )
                value = clamp(value)
            self._choices.append(("f", _float_key(value)))
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
            if len(intervals) == 0:
                return ""
            classes, weights = self._cached(("sc", intervals), lambda: _char_classes(intervals))
            point = ("c", len(intervals), len(classes))
            chars = []
            for _ in self._sizes(min_size, max_size, "s"):
                cls = classes[self._choose(point, len(classes), weights)]
                chars.append(chr(cls[self._rng.randrange(len(cls))]))
            value = "".join(chars)
            self._choices.append(value)
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
            out = bytearray()
            for _ in self._sizes(min_size, max_size, "y"):
                a, b = _BYTE_CLASSES[self._choose(("y",), len(_BYTE_CLASSES), _BYTE_PRIOR)]
                out.append(self._rng.randint(a, b))
            value = bytes(out)
            self._choices.append(value)
            return value
        except Exception as exc:
            raise self._guarded(exc) from exc

    def _sizes(self, min_size: int, max_size: int, kind: str) -> Iterator[int]:
        """Element indices of a string or bytes draw, with learned continue/stop."""
        cap = min(max_size, min_size + _SOFT_SIZE_CAP)
        # Hypothesis's average size for these draws, as a continue probability.
        average = min(max(min_size * 2, min_size + 5), 0.5 * (min_size + max_size))
        p_more = (average - min_size) / (average - min_size + 1.0)
        prior = [1.0 - p_more, p_more]
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


# -- domains ----------------------------------------------------------------------------


def _build_context() -> Any:
    from hypothesis.control import _current_build_context

    return _current_build_context.value


def _integer_bounds(min_value: int | None, max_value: int | None) -> tuple[int, int]:
    # The same caps as Hypothesis's own provider for unbounded sides.
    if min_value is None and max_value is None:
        return -(2**128), 2**128
    if min_value is None:
        assert max_value is not None
        return -max(2**128, 2 * abs(max_value)), max_value
    if max_value is None:
        return min_value, max(2**128, 2 * abs(min_value))
    return min_value, max_value


def _offset_buckets(span: int) -> list[tuple[int, int]]:
    """Offsets ``0..span`` cut at powers of two: [0,0], [1,1], [2,3], [4,7], ..."""
    out = [(0, 0)]
    lo = 1
    for edge in _INT_EDGES[1:]:
        if lo > span:
            return out
        out.append((lo, min(edge - 1, span)))
        lo = edge
    if lo <= span:
        out.append((lo, span))
    return out


def _integer_buckets(lo: int, hi: int) -> list[tuple[int, int]]:
    """Value ranges by magnitude: around zero when the range holds it, else from the
    bound nearest to zero (where Hypothesis shrinks towards)."""
    if lo >= 0:
        return [(lo + a, lo + b) for a, b in _offset_buckets(hi - lo)]
    if hi <= 0:
        return [(hi - b, hi - a) for a, b in _offset_buckets(hi - lo)]
    positive = [(a, b) for a, b in _offset_buckets(hi)[1:]]
    negative = [(-b, -a) for a, b in _offset_buckets(-lo)[1:]]
    return [(0, 0), *positive, *negative]


def _float_key(f: float) -> int:
    """Bit pattern of a float: distinguishes -0.0 from 0.0 and is JSON-safe."""
    return int(struct.unpack("<q", struct.pack("<d", f))[0])


def _float_buckets(
    constraints: dict[str, Any],
) -> tuple[list[float], list[tuple[float, float]]]:
    lo, hi = constraints["min_value"], constraints["max_value"]
    smallest = constraints["smallest_nonzero_magnitude"]
    ranges: list[tuple[float, float]] = []
    for sign in (1.0, -1.0):
        for a, b in itertools.pairwise(_FLOAT_EDGES):
            a = max(a, smallest)
            if a > b:
                continue
            x, y = (a, b) if sign > 0 else (-b, -a)
            x, y = max(x, lo), min(y, hi)
            if x <= y and not (x == 0 and y == 0):
                ranges.append((x, y))
    candidates = [0.0, -0.0, math.inf, -math.inf, math.nan, lo, hi]
    if math.isfinite(lo):
        candidates.append(next_up(lo))
    if math.isfinite(hi):
        candidates.append(next_down(hi))
    specials = [f for f in candidates if choice_permitted(f, constraints)]  # type: ignore[arg-type]
    if not ranges and not specials:
        # Degenerate constraints (e.g. a single subnormal): fall back to the clamper.
        specials = [lo]
    return specials, ranges


def _sample_range(rng: random.Random, x: float, y: float) -> float:
    """Log-uniform in [x, y] (both of one sign); uniform where the range crosses zero."""
    if x == y:
        return x
    if x > 0:
        value = math.exp(rng.uniform(math.log(x), math.log(y)))
    elif y < 0:
        value = -math.exp(rng.uniform(math.log(-y), math.log(-x)))
    else:
        value = rng.uniform(x, y)
    return min(max(value, x), y)


_LATIN1 = IntervalSet(((0, 255),))


def _char_classes(intervals: IntervalSet) -> tuple[list[IntervalSet], list[float] | None]:
    """The learned character classes of an alphabet and their prior weights.

    The prior mirrors Hypothesis's own string draws: 80 % of characters from the first
    256 code points of the alphabet, 20 % from the rest.
    """
    if len(intervals) <= SMALL_ALPHABET:
        return [IntervalSet(((c, c),)) for c in intervals], None
    classes = [c for c in (intervals & cls for cls in _CHAR_CLASSES) if len(c)]
    low_total = len(intervals & _LATIN1)
    high_total = len(intervals) - low_total
    weights = []
    for c in classes:
        low = len(c & _LATIN1)
        w = 0.8 * low / low_total if low_total else 0.0
        w += 0.2 * (len(c) - low) / high_total if high_total else 0.0
        weights.append(w + 1e-3)  # every class stays reachable
    return classes, weights


def _integer_prior(buckets: list[tuple[int, int]], lo: int, hi: int) -> list[float]:
    """Prior weights of magnitude buckets, shaped like Hypothesis's integers: about 80 %
    uniform within 256 of the origin (zero, or the bound nearest to it), the rest spread
    over the wider buckets."""
    origin = 0 if lo < 0 < hi else (lo if lo >= 0 else hi)
    core = [max(0, min(b, origin + 256) - max(a, origin - 256) + 1) for a, b in buckets]
    outer = [i for i, w in enumerate(core) if w == 0]
    total = sum(core) or 1
    weights = [0.8 * w / total if outer else w / total for w in core]
    for i in outer:
        weights[i] = 0.2 / len(outer)
    return weights
