"""The campaign runner: generate, check, count, learn, under a budget of trials or time.

One *episode* is one call of the generator. Its input is then checked:

- ``check(value)`` returns true, or ``None`` (an assert-style check: it passes unless it
  raises, like a pytest test): valid. It is *new* when its key has not been seen
  before (the key is the value itself, or ``key(value)``); the guide gets +20 for new,
  0 for a duplicate.
- ``check(value)`` returns false, or the generator or the check raises
  :class:`rlcheck.Invalid` or one of the exception types given as ``invalid_on`` (a
  parser's ``ValueError`` on malformed input, say): invalid (−1).
- ``check(value)`` raises anything else: a found bug, recorded as a :class:`Failure` with
  the input, its choice sequence (replay it with :func:`rlcheck.replay`) and the
  exception itself. The run stops
  after ``max_failures`` of them. A failure is rewarded like a valid input: finding it was
  the point, and a second identical one earns nothing.

An exception raised by the guide itself (in ``choose``, a scope, ``start_campaign``,
``start_episode`` or ``end_episode``: a bug in a learner, not in the generator or the
check) does not lose the campaign: the episode in progress is dropped, one
:class:`~rlcheck.RLCheckWarning` says what happened, the rest of the run uses plain random
generation (:class:`~rlcheck.RandomGuide`, same seed), and :attr:`Result.guide_fallback`
records it. The failed guide's ``end_campaign`` is not called, so a policy file is not
overwritten with what a broken learner left. This happens once: what random generation
raises as well is not a learner's bug (the generator's, more likely), and ends the run
(a second fallback would drop every episode, uncounted, and never end).

Ctrl-C (``KeyboardInterrupt``) stops the run and propagates, so that a test calling
``run`` is interrupted rather than passed on part of its budget; the guide's campaign is
ended first (a learned policy is saved) and a found bug is named in a note on the
exception. ``run(catch_interrupt=True)`` returns the :class:`Result` so far instead, with
``stop_reason="interrupted"`` (what a command line wants). A failure found before the
interrupt is in it, shrunk as far as shrinking got.

The default guide steps aside where learning cannot pay (a guide passed to ``run``
does so with ``step_aside=True``). The first :data:`PROBE_TRIALS` episodes are random
generation (the guide's own would measure how fast it learns, not the generator); when
nearly all of them are valid (at least :data:`STEP_ASIDE_RATE`), there is no validity
to learn, and every learned choice costs more than a random one (about 25x the time per
input on a generator of integers in 0..1000: random made about 20 000 unique valid
inputs a second, RL 800), so the rest of the run is random generation too (same seed)
and :attr:`Result.stepped_aside` says from which trial on. Otherwise the guide takes
over from there.

Counting, rewards and uniqueness are the episode ledger's (:mod:`rlcheck.ledger`, shared
with the Hypothesis backend): an input's identity here is its key, and the ledger keeps a
64-bit fingerprint of it rather than the input (about 80 bytes per distinct valid input,
77 measured at 200 000, whatever the inputs' size).
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from rlcheck.errors import CheckTimeout, Invalid, InvalidArgument, RLCheckWarning
from rlcheck.gen import Gen
from rlcheck.guides.base import Guide
from rlcheck.guides.random import RandomGuide
from rlcheck.guides.rl import RLGuide
from rlcheck.ledger import Ledger, Outcome

__all__ = ["Failure", "Result", "Sample", "run"]

T = TypeVar("T")

PROBE_TRIALS = 50
"""Episodes a learning guide runs before the campaign judges whether it can pay."""
STEP_ASIDE_RATE = 0.8
"""Share of valid inputs (and failures) among those episodes at or above which a
learning guide steps aside for random generation."""
_MAX_SAMPLES = 1024
_FIRST_SAMPLE_INTERVAL = 0.05
_PROGRESS_INTERVAL = 0.25


@dataclass(frozen=True)
class Sample:
    """One point of a campaign's time series (counts so far after ``seconds``)."""

    seconds: float
    trials: int
    valid: int
    unique_valid: int


@dataclass(frozen=True)
class Failure:
    """A found bug: the check raised something other than :class:`rlcheck.Invalid`."""

    trial: int
    """1-based index of the episode that found it."""
    value_repr: str
    """``repr`` of the input."""
    choices: tuple[int, ...]
    """The input's choice sequence; ``rlcheck.replay(generator, choices)`` rebuilds it."""
    exception: BaseException = field(compare=False)
    """The exception the check raised (for the shrunk input), traceback included; JSON
    (:meth:`Result.to_dict`) keeps its type name."""
    exception_type: str
    """Type name of the exception raised by the check."""
    message: str
    traceback: str
    value: Any = field(default=None, compare=False, repr=False)
    """The input itself (not written to JSON)."""
    found_choices: tuple[int, ...] = ()
    """The choice sequence as found, before shrinking (``choices`` is the shrunk one)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: the exception as its type name, without the input object."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "value"}
        data["exception"] = self.exception_type
        data["choices"], data["found_choices"] = list(self.choices), list(self.found_choices)
        return data


@dataclass(frozen=True)
class Result:
    """What a campaign produced.

    ``trials = valid + invalid + len(failures)``; ``unique_valid`` counts distinct valid
    inputs; ``series`` samples the counts over time (at most 1024 points, evenly thinned).
    """

    generator: str
    guide: dict[str, Any]
    seed: int | None
    trials: int
    valid: int
    unique_valid: int
    invalid: int
    failures: tuple[Failure, ...]
    seconds: float
    stop_reason: str
    """``"trials"``, ``"seconds"``, ``"failures"`` or ``"interrupted"`` (Ctrl-C, with
    ``run(catch_interrupt=True)``; without it the interrupt propagates)."""
    series: tuple[Sample, ...]
    guide_fallback: str | None = None
    """``None``, or what the guide raised and from which trial on random generation took
    over (the counts cover the whole run)."""
    stepped_aside: int | None = None
    """``None``, or the number of trials after which the learning guide stepped aside for
    random generation (nothing to learn: see the module docstring)."""

    @property
    def trials_per_second(self) -> float:
        """Generation throughput (episodes per second, check included)."""
        return self.trials / self.seconds if self.seconds > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (failures without the input object itself)."""
        data = asdict(replace(self, failures=()))
        data["failures"] = [failure.to_dict() for failure in self.failures]
        data["trials_per_second"] = self.trials_per_second
        return data

    def write_json(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_dict` as JSON to ``path``.

        Examples
        --------
        >>> import os, tempfile, rlcheck
        >>> result = rlcheck.run(lambda g: g.boolean(), bool, trials=10, seed=0)
        >>> path = os.path.join(tempfile.mkdtemp(), "result.json")
        >>> result.write_json(path)
        """
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, default=str) + "\n")

    def plot(self, path: str | os.PathLike[str], *, x: str = "seconds") -> None:
        """Write a PNG of unique valid inputs over ``x`` (``"seconds"`` or ``"trials"``).

        Needs matplotlib (``pip install 'rlcheck[plot]'``).
        """
        from rlcheck.plot import plot_unique_valid

        plot_unique_valid({self.guide.get("guide", "run"): self}, path, x=x)


def _identity(value: Any, key: Callable[[Any], Hashable] | None) -> Hashable:
    """An input's identity for the ledger (see :mod:`rlcheck.ledger`)."""
    return value if key is None else key(value)


def _fallback_seed(guide: Guide, seed: int | None) -> int | None:
    """The run's seed, else the failed guide's own (so a seeded guide stays reproducible)."""
    if seed is not None:
        return seed
    try:
        own = guide.describe().get("seed")
    except Exception:  # the guide is broken already; a fresh stream will do
        return None
    return own if isinstance(own, int) else None


def _name_of(obj: object) -> str:
    module = getattr(obj, "__module__", None) or "?"
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"{module}:{name}"


def run(
    generator: Callable[[Gen], T],
    check: Callable[[T], object],
    *,
    guide: Guide | None = None,
    seconds: float | None = None,
    trials: int | None = None,
    seed: int | None = None,
    key: Callable[[T], Hashable] | None = None,
    max_failures: int = 1,
    max_choices: int = 10_000,
    progress: Callable[[Sample], None] | None = None,
    shrink: bool = True,
    check_timeout: float | None = None,
    invalid_on: type[BaseException] | tuple[type[BaseException], ...] = (),
    step_aside: bool | None = None,
    catch_interrupt: bool = False,
) -> Result:
    """Run a generation campaign and count the (distinct) valid inputs.

    Parameters
    ----------
    generator:
        Function of a :class:`rlcheck.Gen` returning an input.
    check:
        Validity check: returns true (or ``None``, as an assert-style check does) for a
        valid input, false for an invalid one; raising :class:`rlcheck.Invalid` marks the
        input invalid; any other exception is a found bug.
    guide:
        Decides the choices; default ``RLGuide()`` (ancestor path with labels, k = 4).
    seconds, trials:
        Budget: stop after this many seconds or episodes, whichever comes first. At least
        one is required.
    seed:
        Reseeds the guide (same seed, same inputs). ``None`` keeps the guide's own seed.
    key:
        Identity of an input for uniqueness (default: the input itself).
    max_failures:
        Stop after this many found bugs (0: never stop for them).
    max_choices:
        Choices allowed per input; beyond it the input is invalid (see :class:`Overrun`).
    progress:
        Called about four times a second with the counts so far.
    check_timeout:
        Seconds one call of the check may take; a longer one is interrupted and recorded
        as a found bug (:class:`~rlcheck.errors.CheckTimeout`). Uses ``SIGALRM``: POSIX,
        main thread only.
    shrink:
        Shrink each found failure before recording it: shorter, then smaller choice
        sequences are replayed through the generator (past the end of a sequence, every
        choice takes its first option), and one is kept when the check still raises the
        same exception type. At most 1000 replays or 5 s per failure.
    invalid_on:
        Exception types (one, or a tuple) that mark an input invalid when the generator
        or the check raises them, like :class:`rlcheck.Invalid`: for a check that calls
        a parser raising ``ValueError`` on malformed input. Anything else raised is a
        found bug; rlcheck's own :class:`~rlcheck.InvalidArgument` from the generator (``g``
        used wrongly) propagates, even where it is a ``ValueError`` listed here.
    step_aside:
        Let a learning guide hand over to random generation where the first
        :data:`PROBE_TRIALS` episodes show nothing to learn (module docstring). By
        default (``None``) only the default guide does; a guide passed explicitly (to
        compare guides, say) runs throughout unless ``step_aside=True``.
    catch_interrupt:
        ``False`` (default): Ctrl-C (``KeyboardInterrupt``) ends the run and propagates,
        after the guide's campaign is ended; a bug found so far is named in a note on the
        exception (Python 3.11+). ``True``: Ctrl-C ends the run like a budget, and the
        :class:`Result` so far comes back with ``stop_reason="interrupted"``, a failure
        found before it included (shrunk as far as shrinking got).

    Returns
    -------
    Result

    Examples
    --------
    >>> import rlcheck
    >>> def small_sorted_pair(g):
    ...     return g.integer(0, 20, label="a"), g.integer(0, 20, label="b")
    >>> result = rlcheck.run(small_sorted_pair, lambda p: p[0] < p[1], trials=2000, seed=1)
    >>> result.trials, result.valid + result.invalid
    (2000, 2000)
    >>> result.unique_valid <= 210
    True
    """
    if not callable(generator):
        raise InvalidArgument(f"generator={generator!r} is not callable")
    if not callable(check):
        raise InvalidArgument(f"check={check!r} is not callable; pass a function value -> bool")
    if seconds is None and trials is None:
        raise InvalidArgument("give a budget: seconds=... or trials=... (or both)")
    if seconds is not None and not seconds > 0:
        raise InvalidArgument(f"seconds={seconds!r} must be positive")
    if trials is not None and (not isinstance(trials, int) or trials < 0):
        raise InvalidArgument(f"trials={trials!r} must be a non-negative int")
    if check_timeout is not None:
        if not check_timeout > 0:
            raise InvalidArgument(f"check_timeout={check_timeout!r} must be positive")
        if not hasattr(signal, "setitimer") or (
            threading.current_thread() is not threading.main_thread()
        ):
            raise InvalidArgument("check_timeout needs SIGALRM: a POSIX system and the main thread")
        check = _timed(check, check_timeout)
    if not isinstance(max_failures, int) or max_failures < 0:
        raise InvalidArgument(f"max_failures={max_failures!r} must be a non-negative int")
    rejected = _invalid_types(invalid_on)
    if step_aside is None:
        step_aside = guide is None
    if guide is None:
        guide = RLGuide(seed=seed)
    elif seed is not None:
        guide.reseed(seed)
    g = Gen(guide, max_choices=max_choices)
    name = _name_of(generator)
    max_trials = trials if trials is not None else -1

    ledger = Ledger()
    failures: list[Failure] = []
    series: list[Sample] = [Sample(0.0, 0, 0, 0)]
    sample_interval = _FIRST_SAMPLE_INTERVAL
    stop_reason = "trials"

    described = guide.describe()
    fallback: str | None = None
    stepped_aside: int | None = None
    learning: Guide | None = None  # the guide waiting for the probe's verdict
    if step_aside and isinstance(guide, RLGuide) and fallback is None:
        learning, guide, g = guide, *_random_part(guide, seed, max_choices)
    try:
        guide.start_campaign(name)
    except Exception as exc:
        guide, g, fallback = _fall_back(guide, "start_campaign", exc, 0, seed, max_choices, None)
    start = time.perf_counter()
    deadline = start + seconds if seconds is not None else math.inf
    next_sample = start + sample_interval
    next_progress = start + _PROGRESS_INTERVAL
    try:
        while ledger.cases != max_trials:
            now = time.perf_counter()
            if now >= deadline:
                stop_reason = "seconds"
                break
            if now >= next_sample:
                series.append(Sample(now - start, ledger.cases, ledger.valid, ledger.unique_valid))
                if len(series) >= _MAX_SAMPLES:
                    # Keep memory bounded on long runs: halve the resolution.
                    series = series[::2]
                    sample_interval *= 2
                next_sample = now + sample_interval
            if progress is not None and now >= next_progress:
                progress(Sample(now - start, ledger.cases, ledger.valid, ledger.unique_valid))
                next_progress = now + _PROGRESS_INTERVAL

            if learning is not None and ledger.cases == PROBE_TRIALS:
                if _nothing_to_learn(ledger):
                    stepped_aside = ledger.cases
                    _end_quietly(learning)
                else:
                    guide, g = learning, Gen(learning, max_choices=max_choices)
                learning = None
            g.reset()
            try:
                guide.start_episode()
            except Exception as exc:
                guide, g, fallback = _fall_back(
                    guide, "start_episode", exc, ledger.cases, seed, max_choices, fallback
                )
                continue
            outcome: Outcome | None = None
            cut_short: KeyboardInterrupt | None = None  # Ctrl-C while shrinking
            try:
                value = generator(g)
            except InvalidArgument:
                if g.guide_error is None:
                    # ``g`` used wrongly (a float bound, say): the user's to see, even where
                    # ``invalid_on=ValueError`` would take it for an invalid input.
                    raise
                outcome = "invalid"
            except rejected:
                outcome = "invalid"
            except Exception:
                if g.guide_error is None:
                    raise  # a bug in the generator itself: the user's to see
                outcome = "invalid"
            guide_error = g.guide_error
            if guide_error is not None:
                # The guide failed inside a choice point or scope (even if the generator
                # caught it): this episode is dropped, random generation takes over.
                guide, g, fallback = _fall_back(
                    guide, *guide_error, ledger.cases, seed, max_choices, fallback
                )
                continue
            if outcome is None:
                try:
                    ok = check(value)
                except rejected:
                    outcome = "invalid"
                except Exception as exc:
                    found = shrunk = tuple(g.choices)
                    if shrink:
                        simpler, cut_short = _shrink(
                            generator, check, found, exc, max_choices, rejected
                        )
                        if simpler is not None:
                            value, exc, shrunk = simpler
                    failures.append(_failure(ledger.cases + 1, value, shrunk, exc, found))
                    outcome = "failure"
                else:
                    # ``None`` (an assert-style check that returned nothing) passes.
                    outcome = "valid" if ok is None or ok else "invalid"
            new = ledger.record(outcome, None if outcome == "invalid" else _identity(value, key))
            try:
                guide.end_episode(valid=outcome != "invalid", new=new)
            except Exception as exc:
                guide, g, fallback = _fall_back(
                    guide, "end_episode", exc, ledger.cases, seed, max_choices, fallback
                )
            if cut_short is not None:
                # Ctrl-C came while shrinking: the failure is recorded and its episode
                # counted (as found, or the best shrink so far); now stop.
                raise cut_short
            if outcome == "failure" and len(failures) == max_failures:
                stop_reason = "failures"
                break
    except KeyboardInterrupt as stop:
        stop_reason = "interrupted"  # the episode in progress is not counted
        interrupt: KeyboardInterrupt | None = stop
    else:
        interrupt = None
    elapsed = time.perf_counter() - start
    if learning is not None:  # the run ended within the probe
        _end_quietly(learning)
    try:
        guide.end_campaign()
    except Exception as exc:
        fallback = f"{type(guide).__name__}.end_campaign raised {type(exc).__name__}: {exc}"
        warnings.warn(f"the guide failed at the end of the run: {fallback}", RLCheckWarning, 2)
    series.append(Sample(elapsed, ledger.cases, ledger.valid, ledger.unique_valid))
    result = Result(
        generator=name,
        guide=described,
        seed=seed,
        trials=ledger.cases,
        valid=ledger.valid,
        unique_valid=ledger.unique_valid,
        invalid=ledger.invalid,
        failures=tuple(failures),
        seconds=elapsed,
        stop_reason=stop_reason,
        series=tuple(series),
        guide_fallback=fallback,
        stepped_aside=stepped_aside,
    )
    if interrupt is not None and not catch_interrupt:
        # A test calling ``run`` must stop at Ctrl-C, not pass on part of its budget.
        for failure in result.failures:
            _add_note(
                interrupt,
                f"rlcheck.run was interrupted after finding a bug at trial {failure.trial}: "
                f"{failure.exception_type}: {failure.message}; input {failure.value_repr}, "
                f"choices {list(failure.choices)}",
            )
        raise interrupt
    return result


def _invalid_types(
    invalid_on: type[BaseException] | tuple[type[BaseException], ...],
) -> tuple[type[BaseException], ...]:
    """``Invalid`` plus the user's ``invalid_on`` types, checked."""
    given = invalid_on if isinstance(invalid_on, tuple) else (invalid_on,)
    for kind in given:
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            raise InvalidArgument(
                f"invalid_on={invalid_on!r}: each entry must be an Exception subclass "
                f"(e.g. invalid_on=(ValueError,)); got {kind!r}"
            )
    return (Invalid, *given)


def _nothing_to_learn(ledger: Ledger) -> bool:
    """Whether the episodes so far are nearly all valid (module docstring)."""
    return ledger.valid + ledger.failures >= STEP_ASIDE_RATE * ledger.cases


def _random_part(guide: Guide, seed: int | None, max_choices: int) -> tuple[Guide, Gen]:
    """Random generation standing in for ``guide`` (its seed): the probe, or the rest of
    a run where learning cannot pay."""
    random_guide = RandomGuide(seed=_fallback_seed(guide, seed))
    random_guide.start_campaign("")
    return random_guide, Gen(random_guide, max_choices=max_choices)


def _end_quietly(guide: Guide) -> None:
    """End the campaign of a learning guide that stepped aside (it may save a policy)."""
    try:
        guide.end_campaign()
    except Exception as exc:
        warnings.warn(f"the guide failed at the end of the run: {exc}", RLCheckWarning, 3)


def _fall_back(
    guide: Guide,
    where: str,
    error: BaseException,
    trials: int,
    seed: int | None,
    max_choices: int,
    fallback: str | None,
) -> tuple[Guide, Gen, str]:
    """Random generation for the rest of a run whose guide raised ``error``; one warning.

    Once: when the run has fallen back already (``fallback``, the reason, is set), random
    generation raised ``error`` too, so it is not a learner's bug; it is raised, ending
    the run, since falling back again would drop every episode, uncounted, forever.
    """
    if fallback is not None:
        _add_note(error, f"rlcheck: raised by random generation too, after: {fallback}")
        raise error
    fallback_seed = _fallback_seed(guide, seed)
    reason = (
        f"{type(guide).__name__}.{where} raised {type(error).__name__}: {error}; "
        f"trials {trials + 1} on used RandomGuide(seed={fallback_seed!r})"
    )
    warnings.warn(
        f"the guide failed, so the run goes on with random generation: {reason}",
        RLCheckWarning,
        stacklevel=3,
    )
    random_guide = RandomGuide(seed=fallback_seed)
    random_guide.start_campaign("")
    return random_guide, Gen(random_guide, max_choices=max_choices), reason


def _add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)`` where Python has it (3.11+): shown with the traceback."""
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(note)


def _failure(
    trial: int,
    value: object,
    choices: tuple[int, ...],
    exc: BaseException,
    found: tuple[int, ...],
) -> Failure:
    try:
        shown = repr(value)
    except Exception as repr_exc:  # a broken __repr__ must not hide the bug itself
        shown = f"<unrepresentable {type(value).__name__}: {repr_exc!r}>"
    return Failure(
        trial=trial,
        value_repr=shown,
        choices=choices,
        exception=exc,
        exception_type=type(exc).__name__,
        message=str(exc),
        traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        found_choices=found,
        value=value,
    )


_SHRINK_ATTEMPTS = 1000
_SHRINK_SECONDS = 5.0


class _ShrinkGuide(Guide):
    """Replays a candidate sequence, clamping indices; past its end, option 0."""

    name = "shrink"

    def __init__(self, choices: list[int]) -> None:
        self._choices = choices
        self._at = 0

    def choose(self, point: Hashable, options: Any) -> int:
        at = self._at
        self._at = at + 1
        return min(self._choices[at], len(options) - 1) if at < len(self._choices) else 0


def _shrink(
    generator: Callable[[Gen], Any],
    check: Callable[[Any], object],
    choices: tuple[int, ...],
    error: Exception,
    max_choices: int,
    rejected: tuple[type[BaseException], ...] = (Invalid,),
) -> tuple[tuple[Any, Exception, tuple[int, ...]] | None, KeyboardInterrupt | None]:
    """A simpler failing input: ``(value, exception, choices)`` (see ``run(shrink=)``),
    or ``None`` when none was found; and the ``KeyboardInterrupt`` that cut shrinking
    short, or ``None``. Ctrl-C stops shrinking with the best input so far, which the
    caller records before passing the interrupt on (a found bug must not be lost).

    Greedy passes until none helps: cut the tail, delete blocks of 8, 4, 2 and 1 choices,
    lower a choice while deleting a later one, set each choice to 0, halve it, lower it.
    A candidate counts when the check raises the same exception type; the choices it
    really consumed replace the best so far when they are shorter, or as long and smaller.
    A candidate on which the generator raises (anything) is rejected: only the check's
    exception is the bug being shrunk.
    """
    kind = type(error)
    best: tuple[int, ...] = choices
    best_value: Any = None
    best_error = error
    attempts = 0
    deadline = time.perf_counter() + _SHRINK_SECONDS
    found_value = False

    def attempt(candidate: list[int]) -> bool:
        nonlocal best, best_value, best_error, attempts, found_value
        if attempts >= _SHRINK_ATTEMPTS or time.perf_counter() > deadline:
            return False
        attempts += 1
        g = Gen(_ShrinkGuide(candidate), max_choices=max_choices)
        try:
            value = generator(g)
        except Exception:  # ``Invalid``, an overrun, or a value this generator cannot make
            return False
        try:
            check(value)
        except rejected:
            return False
        except Exception as exc:
            used = tuple(g.choices)
            if type(exc) is kind and (len(used), used) < (len(best), best):
                best, best_value, best_error, found_value = used, value, exc, True
                return True
        return False

    try:
        improved = True
        while improved and attempts < _SHRINK_ATTEMPTS and time.perf_counter() <= deadline:
            improved = False
            n = len(best)
            for cut in (n // 2, n - 1):  # drop the tail (later choices take option 0)
                if 0 <= cut < len(best) and attempt(list(best[:cut])):
                    improved = True
            for size in (8, 4, 2, 1):
                i = 0
                while i + size <= len(best):
                    if not attempt(list(best[:i] + best[i + size :])):
                        i += 1
                    else:
                        improved = True
            # Lower one choice and delete a later one (a count and one of the elements it
            # counts): neither helps alone.
            i = 0
            while i < len(best):
                for j in range(i + 1, min(i + 9, len(best))):
                    if best[i] > 0 and attempt(
                        [*best[:i], best[i] - 1, *best[i + 1 : j], *best[j + 1 :]]
                    ):
                        improved = True
                        break
                i += 1
            for i in range(len(best)):
                for smaller in (0, best[i] // 2, best[i] - 1) if i < len(best) else ():
                    if i < len(best) and 0 <= smaller < best[i]:
                        candidate = list(best)
                        candidate[i] = smaller
                        if attempt(candidate):
                            improved = True
                            break
    except KeyboardInterrupt as interrupt:  # stop here; the caller records the best
        return ((best_value, best_error, best) if found_value else None), interrupt
    return ((best_value, best_error, best) if found_value else None), None


def _timed(check: Callable[[T], object], seconds: float) -> Callable[[T], object]:
    """``check`` interrupted by :class:`CheckTimeout` after ``seconds`` (``SIGALRM``)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise CheckTimeout(f"the check ran longer than check_timeout={seconds!r} s")

    def timed(value: T) -> object:
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return check(value)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    return timed
