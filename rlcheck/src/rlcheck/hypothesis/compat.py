"""Every access rlcheck makes to Hypothesis beyond its documented API, in one place.

rlcheck supports the Hypothesis versions pinned in ``pyproject.toml``
(:data:`SUPPORTED_RANGE`); :func:`check_compat` says whether the installed one is in that
range and whether every access below resolves (the test suite runs it). Nothing else in
rlcheck reaches into Hypothesis's private modules or attributes.

========================================  ==============================================
internal access                           public alternative (used where it exists)
========================================  ==============================================
``PrimitiveProvider``,                    documented for alternative backends (the
``COLLECTION_DEFAULT_MAX_SIZE``           provider API), but importable only from
(``internal.conjecture.providers``)       ``hypothesis.internal``
``AVAILABLE_PROVIDERS`` (the hook)        documented registration point for backends;
                                          none other exists
``choice_permitted``,                     none: the float constraints' meaning
``make_float_clamper``,                   (``smallest_nonzero_magnitude``, signed zeros)
``next_up``/``next_down``                 as Hypothesis checks it
``choice_from_index``                     none: Hypothesis's order of a draw's values
                                          (its simplest first), which its engine uses
                                          for the simplest extension of a prefix
``IntervalSet`` (``draw_string``'s        none: it is the type of the argument
argument)
``_current_build_context``                none for the running test and its random
+ ``data._random``                        stream; ``@seed``/``derandomize`` then apply
``_hypothesis_internal_database_key``,    none: the key Hypothesis files examples under
``function_digest``,
``ConjectureRunner.database_key``
``database._wrapped``                     none: the directory of a wrapped database
``DirectoryBasedExampleDatabase.          ``fetch`` (used for every other database): it
_key_path``                               reads each file whole before its size is known
``INVALID_THRESHOLD_BASE``,               none: the give-up rule's constants (before
``INVALID_PER_VALID``                     them a run stopped at 10 x ``max_examples`` calls)
health-check limits (10 valid /           none: local constants of
50 invalid)                               ``ConjectureRunner.record_for_health_check``
``_hypothesis_internal_use_settings``,    settings profiles (``rlcheck``) for whole
``_hypothesis_state_machine_class``       suites; the plugin still needs a test's own
                                          settings object to change only its backend
                                          (a state machine's: its ``TestCase.settings``)
``with_observability_callback``           ``PrimitiveProvider.on_observation`` (costs
``OBSERVABILITY_COLLECT_COVERAGE``,       observability on every run); ``rlcheck fuzz``
``OBSERVABILITY_CHOICES``                 only, which needs each case's choices (the
                                          ``HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_*``
                                          variables are read at import only)
``statistics.collector``                  none: the per-run statistics behind
                                          ``--hypothesis-show-statistics`` (observability
                                          gives more, at the price of pretty-printing
                                          every test case); also the end of a run
                                          (:func:`on_run_end`: a provider has no hook
                                          there; ``add_observability_callback`` scopes a
                                          run too, but turns observability on)
``BuildContext.data.provider``            none: whether a nested run's end is inside a
                                          case of the run :func:`on_run_end` waits for
``core.failure_exceptions_to_catch``'s    none: which exceptions of a test case end the
rule                                      run (:func:`ends_run`, written out)
``StopTest``, ``UnsatisfiedAssumption``   none: the engine's control-flow exceptions
``run_conformance_test``                  none: Hypothesis's conformance test for
(``internal.conjecture                    providers (the test suite runs it through
.provider_conformance``)                  :func:`run_conformance`)
``HypothesisProvider`` bound to the       none: the default backend's own draws
running test case's ``data``              (boundary values, constants of the code under
                                          test) for a share of the backend's cases
``HypothesisProvider._maybe_draw_constant``  none: the default's constants (its global
(:class:`ConstantSource`)                 pool and the literals of the code under test)
                                          at its rates, from rlcheck's random stream
``ConjectureRunner.tree``,                none: the engine's tree of the cases run
``DataTree.new_observer``,                (:class:`EngineTree`), from which its novel
``ConjectureData.observer``,              prefixes start; for other backends the engine
``DataObserver``                          records none of their cases
``INTEGERS_DISTRIBUTION``                 none: the default's distribution of integer
(:func:`integer_distribution`)            draws (``cdf``/``inverse_cdf``), absent before
                                          its piecewise form (then ``None``)
========================================  ==============================================
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import hypothesis
from hypothesis.errors import BackendCannotProceed, StopTest, UnsatisfiedAssumption
from hypothesis.internal.conjecture.choice import choice_from_index, choice_permitted
from hypothesis.internal.conjecture.data import DataObserver
from hypothesis.internal.conjecture.providers import (
    AVAILABLE_PROVIDERS,
    COLLECTION_DEFAULT_MAX_SIZE,
    PrimitiveProvider,
)
from hypothesis.internal.floats import make_float_clamper, next_down, next_up
from hypothesis.internal.intervalsets import IntervalSet

__all__ = [
    "AVAILABLE_PROVIDERS",
    "COLLECTION_DEFAULT_MAX_SIZE",
    "HEALTH_CHECK_INVALID",
    "HEALTH_CHECK_VALID",
    "INVALID_PER_VALID",
    "INVALID_THRESHOLD_BASE",
    "PASS_THROUGH",
    "REJECTIONS",
    "SUPPORTED_RANGE",
    "CONSTANT_RATES",
    "BackendCannotProceed",
    "ConstantSource",
    "EngineTree",
    "IntervalSet",
    "PrimitiveProvider",
    "check_compat",
    "choice_permitted",
    "simplest_choices",
    "current_test",
    "default_provider",
    "ends_run",
    "on_run_end",
    "bounded_fetch",
    "credit_invalid",
    "database_directory",
    "database_key",
    "integer_distribution",
    "running_database_key",
    "running_engine",
    "make_float_clamper",
    "next_down",
    "next_up",
    "observed_choices",
    "observed_phase",
    "observing",
    "run_conformance",
    "run_random",
    "run_statistics",
    "test_settings",
    "with_test_settings",
]

SUPPORTED_RANGE = ((6, 140, 0), (7, 0, 0))
"""Oldest supported Hypothesis version (inclusive) and the first unsupported one; the
same range as ``pyproject.toml``'s dependency. Checked by hand in a throwaway venv:
on 6.140.0 every access resolves, :func:`run_conformance` passes, and so do the
conformance and plugin tests but one (the README example hit the ``too_slow`` health check
at a machine load of 15); 6.170 is tested in CI."""

try:  # the engine's give-up rule: a run stops after more than BASE + PER_VALID * valid
    from hypothesis.internal.conjecture.engine import INVALID_THRESHOLD_BASE
except ImportError:  # pragma: no cover - versions before the constant was named
    INVALID_THRESHOLD_BASE = 458
try:
    from hypothesis.internal.conjecture.engine import INVALID_PER_VALID
except ImportError:  # pragma: no cover - versions before the constant was named
    INVALID_PER_VALID = 100  # the engine's calls were capped instead: a bound of our own

HEALTH_CHECK_VALID = 10
"""``filter_too_much`` fails a run with ``HEALTH_CHECK_INVALID`` invalid cases before the
``HEALTH_CHECK_VALID``-th valid one (``engine.py``, unchanged over the supported range)."""
HEALTH_CHECK_INVALID = 50

REJECTIONS: tuple[type[BaseException], ...] = (UnsatisfiedAssumption, StopTest)
"""What ends a test case as invalid: ``assume()``/``.filter()`` rejections, overruns."""
PASS_THROUGH: tuple[type[BaseException], ...] = (
    BackendCannotProceed,
    KeyboardInterrupt,
    SystemExit,
    GeneratorExit,
)
"""Exceptions that end a test case with no outcome at all: not counted, not rewarded,
passed on untouched."""


def ends_run(exc: BaseException) -> bool:
    """Whether an exception out of a test case ends Hypothesis's run: one its engine
    neither treats as a failure (``Exception``, ``SystemExit``, ``GeneratorExit``,
    pytest's ``Failed``: ``core.failure_exceptions_to_catch``) nor as an overrun
    (``StopTest``), such as ``KeyboardInterrupt``, a skip, or any other
    ``BaseException`` of the test.

    >>> ends_run(KeyboardInterrupt()), ends_run(ValueError()), ends_run(SystemExit())
    (True, False, False)
    """
    if isinstance(exc, (Exception, SystemExit, GeneratorExit, StopTest)):
        return False
    outcomes = sys.modules.get("_pytest.outcomes")
    failed = getattr(outcomes, "Failed", None)
    return not (isinstance(failed, type) and isinstance(exc, failed))


class RunEnd:
    """The hook :func:`on_run_end` installs: a statistics collector that calls its
    callback at its run's end, then whatever collector it wrapped."""

    __slots__ = ("_callback", "_provider", "outer")

    def __init__(
        self, provider: PrimitiveProvider, callback: Callable[[], object], outer: Any
    ) -> None:
        self._provider = weakref.ref(provider)
        self._callback: Callable[[], object] | None = callback
        self.outer = outer

    def __call__(self, statistics: Any) -> None:
        callback = self._callback
        try:
            if callback is not None and not self._inside_a_case():
                self.cancel()
                callback()
        except Exception:  # pragma: no cover - the callback reports its own errors
            pass  # never the test's failure (the collector runs inside Hypothesis's run)
        if self.outer is not None:
            self.outer(statistics)

    def _inside_a_case(self) -> bool:
        # A run nested in one of our run's cases (``find()``, a @given called from the
        # test) ends while that case runs: not our run's end.
        from hypothesis.control import _current_build_context

        context = _current_build_context.value
        provider = getattr(getattr(context, "data", None), "provider", None)
        return provider is not None and provider is self._provider()

    def cancel(self) -> None:
        """Never call the callback (its run ended otherwise); unhook if on top."""
        from hypothesis.statistics import collector

        self._callback = None
        if collector.value is self:
            collector.value = self.outer


def on_run_end(provider: PrimitiveProvider, callback: Callable[[], object]) -> RunEnd:
    """Have ``callback`` called once when the engine run that ``provider`` serves ends
    normally (after generation and shrinking, before the test reports its outcome), in
    the thread that runs it; call from inside the run (one of its test cases).

    Hypothesis gives a provider no end-of-run hook. The engine hands each run's
    statistics to the statistics collector as the run ends (``note_statistics``), so
    this wraps the collector for the rest of the run; the collector it wrapped is still
    called, with every run's statistics. A run ended by an exception through the engine
    (:func:`ends_run`) never calls it: :meth:`RunEnd.cancel` the hook then. Nor does a
    block that set the collector around the run and reset it before the end.
    """
    from hypothesis.statistics import collector

    hook = RunEnd(provider, callback, collector.value)
    collector.value = hook  # type: ignore[assignment]
    return hook


def _version() -> tuple[int, int, int]:
    parts = [*(int(p) for p in hypothesis.__version__.split(".")[:3] if p.isdigit()), 0, 0, 0]
    return parts[0], parts[1], parts[2]


def current_test() -> tuple[Any, random.Random | None]:
    """The ``@given`` test being run now and the run's random stream (``None``, ``None``
    outside a test)."""
    from hypothesis.control import _current_build_context

    context = _current_build_context.value
    if context is None:
        return None, None
    test = getattr(context, "wrapped_test", None)
    source = getattr(getattr(context, "data", None), "_random", None)
    return test, source if isinstance(source, random.Random) else None


def default_provider() -> PrimitiveProvider | None:
    """Hypothesis's own provider for the running test case (``None`` outside one).

    It draws from the case's random stream and, for collections, through the case's
    ``data`` (unobserved draws, which come back to the running backend's provider: a
    backend that forwards them to this one gets the default backend's whole case).
    """
    from hypothesis.control import _current_build_context
    from hypothesis.internal.conjecture.providers import HypothesisProvider

    context = _current_build_context.value
    data = getattr(context, "data", None)
    if data is None or not isinstance(getattr(data, "_random", None), random.Random):
        return None
    return HypothesisProvider(data)


_ENGINE_FRAMES = 24  # frames searched for the running engine (a test case's, ~12 deep)


def running_engine() -> Any:
    """The engine (``ConjectureRunner``) running the calling test case, found up the
    call stack; ``None`` where there is none (a provider used outside ``@given``)."""
    from hypothesis.internal.conjecture.engine import ConjectureRunner

    frame: FrameType | None = sys._getframe(1)
    for _ in range(_ENGINE_FRAMES):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, ConjectureRunner):
            return owner
        frame = frame.f_back
    return None


def credit_invalid(count: int) -> int:
    """Take up to ``count`` invalid cases off the give-up count of the engine running the
    calling test case (``ConjectureRunner.invalid_test_cases``; ``invalid_examples`` on
    older versions), so that its own backend, taking the run over, still has all of its
    ``Unsatisfiable`` budget; the number taken off (0 where there is no engine or no such
    counter)."""
    runner = running_engine()
    for name in ("invalid_test_cases", "invalid_examples"):
        current = getattr(runner, name, None)
        if isinstance(current, int) and not isinstance(current, bool):
            taken = max(0, min(count, current))
            setattr(runner, name, current - taken)
            return taken
    return 0


def running_database_key() -> bytes | None:
    """The key of the engine run that the calling test case belongs to, read from the
    engine itself (``ConjectureRunner.database_key``, found up the call stack), or
    ``None`` where there is none to read (then :func:`database_key` computes it).

    The engine computed it already: a digest of the test's source, about 1 ms, which
    is most of a run's start-up where a bug dies in its first few cases.
    """
    key = getattr(running_engine(), "database_key", None)
    return key if isinstance(key, bytes) else None


class _RecordingObserver(DataObserver):
    """The engine's tree observer for one case, made harmless: the first error it
    raises (a test whose draws differ between runs of the same choices) stops the
    recording for the rest of the run instead of failing the case."""

    __slots__ = ("_inner", "_owner")

    def __init__(self, inner: Any, owner: EngineTree) -> None:
        self._inner = inner
        self._owner = owner

    def _call(self, name: str, *args: Any, **kwargs: Any) -> None:
        inner = self._inner
        if inner is None:
            return
        try:
            getattr(inner, name)(*args, **kwargs)
        except Exception:
            self._inner = None
            self._owner.broken = True

    # The engine's observer methods, passed on with whatever arguments this Hypothesis
    # version gives them (their keywords were renamed over the supported range).
    def conclude_test(self, *args: Any, **kwargs: Any) -> None:
        self._call("conclude_test", *args, **kwargs)

    def kill_branch(self) -> None:
        self._call("kill_branch")

    def draw_integer(self, *args: Any, **kwargs: Any) -> None:
        self._call("draw_integer", *args, **kwargs)

    def draw_float(self, *args: Any, **kwargs: Any) -> None:
        self._call("draw_float", *args, **kwargs)

    def draw_string(self, *args: Any, **kwargs: Any) -> None:
        self._call("draw_string", *args, **kwargs)

    def draw_bytes(self, *args: Any, **kwargs: Any) -> None:
        self._call("draw_bytes", *args, **kwargs)

    def draw_boolean(self, *args: Any, **kwargs: Any) -> None:
        self._call("draw_boolean", *args, **kwargs)


class EngineTree:
    """Records a backend's test cases in the running engine's ``DataTree``, as the
    engine records its own backend's.

    Hypothesis's engine records no case of another backend: after a hand-back (or in
    the tail it runs itself), its novel prefixes start from an empty tree, so it runs
    again the short inputs the backend ran, and where validity is strict its first
    valid input comes as late as if the backend's cases had never run. Recorded, they
    count for the engine as its own: it goes on from where the backend stopped.

    Call :meth:`begin_case` once a case is sure to run on this backend (before its
    first draw), :meth:`drop_case` when it is cut short by a backend exception (such a
    case's draws end where no test of the same choices would, which the tree would
    take for a test that does not draw the same way twice).
    """

    __slots__ = ("_runner", "broken")

    def __init__(self, runner: Any) -> None:
        self._runner = runner
        self.broken = False  # the tree refused a case: recording stopped for the run

    @classmethod
    def running(cls) -> EngineTree | None:
        """For the engine running the calling test case (``None`` where none is)."""
        runner = running_engine()
        if runner is None or not hasattr(getattr(runner, "tree", None), "new_observer"):
            return None
        return cls(runner)

    def begin_case(self) -> None:
        """Record the running case's draws and its end in the engine's tree."""
        if self.broken:
            return
        data = _running_data()
        # Only a case the engine made for this backend (its observer records nothing);
        # never one it records itself.
        if data is None or type(data.observer) is not DataObserver:
            return
        data.observer = _RecordingObserver(self._runner.tree.new_observer(), self)

    def drop_case(self) -> None:
        """Record nothing more of the running case (it was cut short)."""
        data = _running_data()
        if data is not None and not data.frozen and isinstance(data.observer, _RecordingObserver):
            data.observer = DataObserver()


def _running_data() -> Any:
    from hypothesis.control import _current_build_context

    return getattr(_current_build_context.value, "data", None)


def database_key(test: Any) -> bytes | None:
    """The example-database key Hypothesis uses for a ``@given`` test (``None`` if none).

    The same rule as Hypothesis's engine: an explicitly set key, else the digest of the
    undecorated test function (its source and signature).

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


def database_directory(database: Any) -> Path | None:
    """The directory of a directory-based example database, looking inside multiplexed
    and read-only wrappers; ``None`` for other databases."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    if isinstance(database, DirectoryBasedExampleDatabase):
        return Path(database.path)
    inner = getattr(database, "_wrapped", None)
    if isinstance(inner, (list, tuple)):
        for db in inner:
            found = database_directory(db)
            if found is not None:
                return found
    elif inner is not None:
        return database_directory(inner)
    return None


def bounded_fetch(database: Any) -> Callable[[bytes, int, int], Iterator[bytes]]:
    """``fetch(key, max_values, max_bytes)`` over ``database``: at most ``max_values``
    values of at most ``max_bytes`` each (longer ones skipped). A directory database's
    files are sized before they are read (its own ``fetch`` reads each one whole), also
    inside read-only and multiplexed wrappers; other databases are read by ``fetch``."""
    from hypothesis.database import (
        DirectoryBasedExampleDatabase,
        MultiplexedDatabase,
        ReadOnlyDatabase,
    )

    def each(db: Any, key: bytes, max_bytes: int) -> Iterator[bytes]:
        if isinstance(db, DirectoryBasedExampleDatabase):
            directory = db._key_path(key)
            try:
                names = sorted(os.listdir(directory))
            except OSError:
                return
            for name in names:
                with contextlib.suppress(OSError):
                    path = directory / name
                    if path.is_file() and path.stat().st_size <= max_bytes:
                        yield path.read_bytes()
            return
        if isinstance(db, MultiplexedDatabase):
            for wrapped in db._wrapped:
                yield from each(wrapped, key, max_bytes)
            return
        if isinstance(db, ReadOnlyDatabase):
            yield from each(db._wrapped, key, max_bytes)
            return
        for value in db.fetch(key):
            if len(value) <= max_bytes:
                yield value

    def fetch(key: bytes, max_values: int, max_bytes: int) -> Iterator[bytes]:
        seen: set[bytes] = set()
        for value in each(database, key, max_bytes):
            if len(seen) >= max_values:
                return
            if value not in seen:  # a multiplexed database may hold a value twice
                seen.add(value)
                yield value

    return fetch


def run_random(seed_source: random.Random) -> int:
    """A 64-bit seed drawn from a run's random stream."""
    return seed_source.getrandbits(64)


def test_settings(test: Any, owner: type | None = None) -> Any:
    """The settings a test runs with (its own, else the current default), read where
    :func:`with_test_settings` changes them; ``None`` for anything else."""
    from hypothesis import settings

    func = getattr(test, "__func__", test)
    if getattr(func, "_hypothesis_state_machine_class", None) is not None:
        own = getattr(owner, "settings", None)
        return own if isinstance(own, settings) else settings.default
    if not hasattr(func, "_hypothesis_internal_use_settings"):
        return None
    return func._hypothesis_internal_use_settings or settings.default


@contextlib.contextmanager
def with_test_settings(test: Any, owner: type | None = None, **changes: Any) -> Iterator[bool]:
    """Run with the settings of one test changed by ``changes`` (e.g. ``backend=``),
    then restore them; yields whether it could (``False``: the test runs unchanged).

    ``test`` is a ``@given`` function or bound method, or the ``runTest`` of a
    ``RuleBasedStateMachine.TestCase``, whose settings live on its class (``owner``).
    """
    from hypothesis import settings

    func = getattr(test, "__func__", test)
    if getattr(func, "_hypothesis_state_machine_class", None) is not None:
        if owner is None or not isinstance(getattr(owner, "settings", None), settings):
            yield False
            return
        own = owner.__dict__.get("settings")
        owner.settings = settings(owner.settings, **changes)  # type: ignore[attr-defined]
        try:
            yield True
        finally:
            if own is None:
                del owner.settings  # type: ignore[attr-defined]
            else:
                owner.settings = own  # type: ignore[attr-defined]
        return
    original = getattr(func, "_hypothesis_internal_use_settings", None)
    if original is None:
        yield False
        return
    func._hypothesis_internal_use_settings = settings(original, **changes)
    try:
        yield True
    finally:
        func._hypothesis_internal_use_settings = original


@contextlib.contextmanager
def observing(callback: Callable[[Any], None], *, choices: bool = False) -> Iterator[None]:
    """Deliver test-case observations to ``callback`` inside the block, coverage tracing
    off (counting needs none, and it slows both backends); ``choices=True`` includes each
    case's choice nodes (``metadata["choice_nodes"]``). The module flags are restored.
    Costs a pretty-printed representation of every test case: ``rlcheck fuzz`` uses it
    (it needs each case's choices), the pytest plugin does not."""
    from hypothesis.internal import observability

    saved = observability.OBSERVABILITY_COLLECT_COVERAGE, observability.OBSERVABILITY_CHOICES
    observability.OBSERVABILITY_COLLECT_COVERAGE = False
    observability.OBSERVABILITY_CHOICES = choices
    try:
        with observability.with_observability_callback(callback):
            yield
    finally:
        observability.OBSERVABILITY_COLLECT_COVERAGE, observability.OBSERVABILITY_CHOICES = saved


def observed_choices(observation: Any) -> tuple[Any, ...] | None:
    """The choice sequence of a test-case observation made inside
    ``observing(..., choices=True)`` (``None`` when it carries none)."""
    metadata = getattr(observation, "metadata", None)
    nodes = (
        metadata.get("choice_nodes")
        if isinstance(metadata, dict)
        else getattr(metadata, "choice_nodes", None)
    )
    if nodes is None:
        return None
    return tuple(node.value for node in nodes)


def observed_phase(observation: Any) -> str | None:
    """The phase (``"generate"``, ``"reuse"``, ``"shrink"``, ...) of a test-case
    observation."""
    metadata = getattr(observation, "metadata", None)
    if isinstance(metadata, dict):
        return metadata.get("phase")
    return getattr(metadata, "phase", None)


@contextlib.contextmanager
def run_statistics(callback: Callable[[dict[str, Any]], None]) -> Iterator[None]:
    """Deliver each test run's statistics dictionary (the one ``--hypothesis-show-statistics``
    prints: per phase its test cases' statuses and its duration, and why generation
    stopped) to ``callback`` inside the block. The engine gathers them on every run, so
    this costs nothing, unlike observability. Collectors nest: the outer one is called
    too."""
    from hypothesis.statistics import collector

    outer = collector.value

    def both(statistics: dict[str, Any]) -> None:
        callback(statistics)
        if outer is not None:
            outer(statistics)

    with collector.with_value(both):  # type: ignore[arg-type]
        yield


CONSTANT_RATES = {"integer": 0.05, "float": 0.15, "string": 0.05, "bytes": 0.05}
"""How often Hypothesis's own provider answers a draw of each kind with a constant
(``HypothesisProvider.draw_*``'s ``_maybe_draw_constant(..., p=...)``)."""


class ConstantSource:
    """Hypothesis's constants for a draw, at its rates (:data:`CONSTANT_RATES`), chosen
    with ``rng``: the values its own provider mixes into every kind of draw but booleans,
    half from its global pool (``"__dict__"``, ``"NaN"``, ``2**63 - 1``, ``1e-308``...),
    half from the literals of the code under test (``HypothesisProvider.
    _maybe_draw_constant``; no public alternative). Where the installed version has no
    constants, :meth:`draw` always returns ``None``.

    >>> source = ConstantSource(random.Random(0))
    >>> values = [source.draw("string", {"intervals": IntervalSet(((97, 122),)),
    ...                                  "min_size": 0, "max_size": 10}) for _ in range(400)]
    >>> 5 <= sum(v is not None for v in values) <= 40
    True
    """

    def __init__(self, rng: random.Random) -> None:
        from hypothesis.internal.conjecture.providers import HypothesisProvider

        provider = HypothesisProvider(None)
        provider._random = rng  # its own draws take the running case's stream
        self._draw = getattr(provider, "_maybe_draw_constant", None)

    def draw(self, choice_type: str, constraints: dict[str, Any]) -> Any:
        """A constant the draw permits, or ``None`` (most of the time)."""
        if self._draw is None:
            return None
        return self._draw(choice_type, constraints, p=CONSTANT_RATES[choice_type])


def integer_distribution() -> Any:
    """Hypothesis's distribution of integer draws (``cdf`` and ``inverse_cdf`` over the
    reals; a draw rounds ``inverse_cdf`` of a uniform between the cdf of its bounds ±
    0.5), or ``None`` on versions that draw integers otherwise."""
    from hypothesis.internal.conjecture import providers

    dist = getattr(providers, "INTEGERS_DISTRIBUTION", None)
    if callable(getattr(dist, "cdf", None)) and callable(getattr(dist, "inverse_cdf", None)):
        return dist
    return None


def simplest_choices(choice_type: str, constraints: dict[str, Any], count: int) -> list[Any]:
    """Up to ``count`` of the simplest values a draw permits, in Hypothesis's order (the
    first is what its engine's ``ChoiceTemplate("simplest")`` takes), without repeats.

    >>> simplest_choices("integer", {"min_value": 3, "max_value": 4, "weights": None,
    ...                              "shrink_towards": 0}, 3)
    [3, 4]
    >>> simplest_choices("boolean", {"p": 0.5}, 5)
    [False, True]
    """
    out: list[Any] = []
    seen: set[Any] = set()
    for index in range(2 * count):  # a few of the first indices, past the range, repeat
        try:
            value = choice_from_index(index, choice_type, constraints)  # type: ignore[arg-type]
        except Exception:  # past the last value of a small domain: Hypothesis asserts
            break
        key = (type(value), repr(value))  # 0.0 and -0.0 apart, NaN equal to itself
        if key in seen or not choice_permitted(value, constraints):  # type: ignore[arg-type]
            continue
        seen.add(key)
        out.append(value)
        if len(out) >= count:
            break
    return out


def check_compat() -> dict[str, bool]:
    """Whether the installed Hypothesis is in :data:`SUPPORTED_RANGE` and each access
    above resolves (names → ``True``/``False``).

    >>> all(check_compat().values())
    True
    """
    from hypothesis import control, database, given, strategies

    @given(strategies.none())
    def _probe(x: None) -> None:
        pass

    from hypothesis import statistics
    from hypothesis.internal import observability, reflection
    from hypothesis.internal.conjecture import data, datatree, engine

    low, high = SUPPORTED_RANGE
    return {
        "version in range": low <= _version() < high,
        "_current_build_context": hasattr(control, "_current_build_context"),
        "ConjectureData._random": "_random" in data.ConjectureData.__init__.__code__.co_names,
        "_hypothesis_internal_use_settings": hasattr(_probe, "_hypothesis_internal_use_settings"),
        "function_digest": hasattr(reflection, "function_digest"),
        "ConjectureRunner.database_key": "database_key"
        in engine.ConjectureRunner.__init__.__code__.co_names,
        "DirectoryBasedExampleDatabase._key_path": hasattr(
            database.DirectoryBasedExampleDatabase, "_key_path"
        ),
        "statistics.collector": hasattr(statistics, "collector"),
        "note_statistics (the end of a run)": hasattr(statistics, "note_statistics"),
        "with_observability_callback": hasattr(observability, "with_observability_callback"),
        "OBSERVABILITY_COLLECT_COVERAGE": hasattr(observability, "OBSERVABILITY_COLLECT_COVERAGE"),
        "OBSERVABILITY_CHOICES": hasattr(observability, "OBSERVABILITY_CHOICES"),
        "AVAILABLE_PROVIDERS": isinstance(AVAILABLE_PROVIDERS, dict),
        "HypothesisProvider": _has_hypothesis_provider(),
        "PrimitiveProvider.span_start": hasattr(PrimitiveProvider, "span_start"),
        "IntervalSet": callable(IntervalSet),
        "run_conformance_test": _has_conformance_test(),
        "float helpers": all(
            map(callable, (choice_permitted, make_float_clamper, next_up, next_down))
        ),
        "choice_from_index": simplest_choices("boolean", {"p": 0.5}, 2) == [False, True],
        "_maybe_draw_constant": ConstantSource(random.Random(0))._draw is not None,
        "ConjectureRunner.tree, DataTree.new_observer, ConjectureData.observer (EngineTree)": (
            "tree" in engine.ConjectureRunner.__init__.__code__.co_names
            and hasattr(datatree.DataTree, "new_observer")
            and "observer" in data.ConjectureData.__init__.__code__.co_names
        ),
        # INTEGERS_DISTRIBUTION is optional (absent on 6.140: buckets keeps its own prior)
    }


def _has_conformance_test() -> bool:
    try:
        from hypothesis.internal.conjecture import provider_conformance
    except ImportError:  # pragma: no cover - outside the supported range
        return False
    return callable(getattr(provider_conformance, "run_conformance_test", None))


def _has_hypothesis_provider() -> bool:
    from hypothesis.internal.conjecture import providers

    return isinstance(getattr(providers, "HypothesisProvider", None), type)


def run_conformance(
    provider: type[PrimitiveProvider],
    *,
    max_examples: int | None = None,
    check_findability: bool = True,
) -> None:
    """Hypothesis's own conformance test for providers
    (``internal.conjecture.provider_conformance.run_conformance_test``; no public
    alternative), with the options the installed version has: ``check_findability``
    exists from after 6.140, where it is not, the test always checks findability."""
    import inspect

    from hypothesis.internal.conjecture.provider_conformance import run_conformance_test

    options: dict[str, Any] = {}
    if max_examples is not None:
        options["settings"] = hypothesis.settings(
            max_examples=max_examples, stateful_step_count=max_examples, deadline=None
        )
    if "check_findability" in inspect.signature(run_conformance_test).parameters:
        options["check_findability"] = check_findability
    run_conformance_test(provider, **options)
