"""The campaign runner: accounting, outcomes, found bugs, budgets, determinism, outputs."""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import rlcheck
from rlcheck import Gen, Invalid, InvalidArgument, RandomGuide, RLGuide, replay
from rlcheck.campaign import _MAX_SAMPLES


def pair(g: Gen) -> tuple[int, int]:
    return g.integer(0, 9, label="a"), g.integer(0, 9, label="b")


class Judge:
    """a < b is valid, a == b raises Invalid, a > b is invalid; keeps every input."""

    def __init__(self) -> None:
        self.inputs: list[tuple[int, int]] = []

    def __call__(self, p: tuple[int, int]) -> bool:
        self.inputs.append(p)
        if p[0] == p[1]:
            raise Invalid("equal")
        return p[0] < p[1]


@pytest.mark.parametrize("guide", [RandomGuide(seed=1), RLGuide(seed=1)], ids=["random", "rl"])
def test_accounting_matches_an_independent_count(guide: rlcheck.Guide) -> None:
    judge = Judge()
    result = rlcheck.run(pair, judge, guide=guide, trials=1500)
    valid = [p for p in judge.inputs if p[0] < p[1]]
    assert result.trials == len(judge.inputs) == 1500
    assert result.valid == len(valid)
    assert result.unique_valid == len(set(valid))
    assert result.invalid == result.trials - result.valid
    assert result.failures == ()
    assert result.stop_reason == "trials"
    last = result.series[-1]
    assert (last.trials, last.valid, last.unique_valid) == (1500, result.valid, result.unique_valid)


def test_invalid_from_the_generator_counts_as_invalid() -> None:
    def picky(g: Gen) -> int:
        x = g.integer(0, 3)
        if x == 0:
            raise Invalid("rejected early")
        return x

    judge: list[int] = []
    result = rlcheck.run(picky, lambda x: judge.append(x) or True, trials=400, seed=0)
    assert result.valid == len(judge)
    assert result.invalid == 400 - len(judge) > 0
    assert result.unique_valid == 3


def test_runaway_generator_is_an_invalid_input() -> None:
    def deep(g: Gen) -> int:
        n = 0
        while g.boolean(label="more"):
            n += 1
        return n

    result = rlcheck.run(deep, lambda n: True, guide=RandomGuide(seed=0), trials=300, max_choices=3)
    assert result.invalid > 0
    assert result.valid + result.invalid == 300


def test_a_crashing_check_is_a_found_bug_with_a_replayable_input() -> None:
    def check(p: tuple[int, int]) -> bool:
        if p == (3, 4):
            raise ZeroDivisionError("planted bug")
        return True

    result = rlcheck.run(pair, check, guide=RandomGuide(seed=0), trials=100_000)
    assert result.stop_reason == "failures"
    (failure,) = result.failures
    assert failure.exception_type == "ZeroDivisionError" and failure.message == "planted bug"
    assert failure.value == (3, 4) and failure.value_repr == "(3, 4)"
    assert replay(pair, failure.choices) == (3, 4)
    assert "planted bug" in failure.traceback
    assert result.trials == failure.trial
    assert result.trials == result.valid + result.invalid + 1


def test_failure_keeps_the_exception_object() -> None:
    def check(p: tuple[int, int]) -> bool:
        if p[0] == 3:
            raise KeyError(("planted", p))
        return True

    result = rlcheck.run(pair, check, guide=RandomGuide(seed=0), trials=10_000)
    (failure,) = result.failures
    assert isinstance(failure.exception, KeyError) and failure.exception_type == "KeyError"
    assert failure.exception.args[0] == ("planted", failure.value)  # the shrunk input's
    assert failure.exception.__traceback__ is not None
    data = result.to_dict()["failures"][0]  # JSON keeps the type name
    assert data["exception"] == "KeyError" and json.dumps(data)


def _parse_digits(text: str) -> int:
    return int(text)  # ValueError on anything but digits: malformed input, not a bug


def _digits(g: Gen) -> str:
    return "".join(g.choice("0123456789x-", label="c") for _ in range(g.integer(1, 4, label="n")))


def test_invalid_on_makes_a_checks_own_exception_an_invalid_input() -> None:
    result = rlcheck.run(
        _digits, _parse_digits, guide=RandomGuide(seed=0), trials=500, invalid_on=ValueError
    )
    assert not result.failures and result.invalid > 100 and result.valid > 100

    # A tuple, and from the generator as well; other exceptions are still bugs.
    def check(text: str) -> bool:
        if text.startswith("9"):
            raise ZeroDivisionError("planted")
        return _parse_digits(text) >= 0

    def gen(g: Gen) -> str:
        text = _digits(g)
        if text.endswith("-"):
            raise KeyError(text)  # a generator's "cannot build this" exception
        return text

    result = rlcheck.run(
        gen, check, guide=RandomGuide(seed=1), trials=5000, invalid_on=(ValueError, KeyError)
    )
    (failure,) = result.failures
    assert isinstance(failure.exception, ZeroDivisionError) and failure.value.startswith("9")
    # Without it, the parser's ValueError is the bug found.
    plain = rlcheck.run(_digits, _parse_digits, guide=RandomGuide(seed=0), trials=500)
    assert plain.failures and plain.failures[0].exception_type == "ValueError"


@pytest.mark.parametrize("bad", [ValueError("x"), int, (ValueError, "x"), KeyboardInterrupt])
def test_invalid_on_takes_exception_types_only(bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="invalid_on="):
        rlcheck.run(pair, bool, trials=1, invalid_on=bad)


def _nothing_to_learn(g: Gen) -> tuple[tuple[int, ...], bool]:
    n = g.integer(0, 5, label="n")
    return tuple(g.integer(0, 1000, label="x") for _ in range(n)), g.boolean(label="b")


def test_the_default_guide_steps_aside_where_every_input_is_valid() -> None:
    result = rlcheck.run(_nothing_to_learn, lambda v: True, trials=500, seed=0)
    assert result.stepped_aside == rlcheck.campaign.PROBE_TRIALS
    assert result.trials == 500 and result.guide["guide"] == "rl"  # described as asked
    # Where validity is strict it learns (after the random probe).
    strict = rlcheck.run(pair, lambda p: p[0] < p[1] < 3, trials=3000, seed=0)
    rnd = rlcheck.run(pair, lambda p: p[0] < p[1] < 3, guide=RandomGuide(seed=0), trials=3000)
    assert strict.stepped_aside is None and strict.valid > 3 * rnd.valid
    # A guide given explicitly runs throughout, unless asked to step aside.
    explicit = rlcheck.run(_nothing_to_learn, lambda v: True, guide=RLGuide(seed=0), trials=500)
    assert explicit.stepped_aside is None
    asked = rlcheck.run(
        _nothing_to_learn, lambda v: True, guide=RLGuide(seed=0), trials=500, step_aside=True
    )
    assert asked.stepped_aside == rlcheck.campaign.PROBE_TRIALS


@pytest.mark.slow
def test_rl_is_not_worse_than_random_where_there_is_nothing_to_learn() -> None:
    # Unique valid inputs per second, 3 seeds, the guides interleaved per seed. Before
    # stepping aside, RL made 1/25 of random's (about 800 against 20 000 a second).
    totals = {"random": 0.0, "rl": 0.0}
    for seed in range(3):
        for name in ("random", "rl"):  # rl: the default guide
            guide = RandomGuide(seed=seed) if name == "random" else None
            result = rlcheck.run(
                _nothing_to_learn, lambda v: True, guide=guide, seed=seed, seconds=1.0
            )
            totals[name] += result.unique_valid / result.seconds
    assert totals["rl"] >= 0.75 * totals["random"], totals


def test_campaign_can_continue_past_bugs() -> None:
    def check(p: tuple[int, int]) -> bool:
        if p[0] == 0:
            raise KeyError(p)
        return True

    result = rlcheck.run(pair, check, guide=RandomGuide(seed=0), trials=500, max_failures=0)
    assert result.stop_reason == "trials"
    assert len(result.failures) > 10
    assert result.trials == result.valid + result.invalid + len(result.failures)


def test_assert_style_check_returning_none_passes_unless_it_raises() -> None:
    def check(p: tuple[int, int]) -> None:
        assert p[0] != 3, "planted"

    result = rlcheck.run(pair, check, guide=RandomGuide(seed=0), trials=300, max_failures=0)
    assert result.valid > 200 and result.invalid == 0
    assert result.failures and all(f.exception_type == "AssertionError" for f in result.failures)


def test_uniqueness_by_key_and_for_unhashable_inputs() -> None:
    by_sum = rlcheck.run(pair, lambda p: True, key=sum, trials=2000, seed=0)
    assert by_sum.unique_valid == 19  # sums 0..18

    def as_list(g: Gen) -> list[int]:
        return [g.integer(0, 2), g.integer(0, 2)]

    listed = rlcheck.run(as_list, lambda v: True, guide=RandomGuide(seed=0), trials=500)
    assert listed.unique_valid == 9


@pytest.mark.parametrize("make", [RandomGuide, RLGuide], ids=["random", "rl"])
def test_same_seed_same_inputs(make: Any) -> None:
    def inputs(seed: int) -> list[tuple[int, int]]:
        judge = Judge()
        rlcheck.run(pair, judge, guide=make(), trials=400, seed=seed)
        return judge.inputs

    assert inputs(5) == inputs(5)
    assert inputs(5) != inputs(6)


def test_default_guide_is_rl_with_labelled_ancestor_state() -> None:
    result = rlcheck.run(pair, lambda p: True, trials=10, seed=3)
    assert result.guide["guide"] == "rl" and result.guide["state"] == "labelled"
    assert result.seed == 3
    assert result.generator.endswith(":pair")


def test_time_budget_and_progress() -> None:
    seen: list[rlcheck.Sample] = []
    start = time.perf_counter()
    result = rlcheck.run(pair, lambda p: True, seconds=0.6, progress=seen.append, seed=0)
    assert 0.6 <= time.perf_counter() - start < 5
    assert result.stop_reason == "seconds" and result.seconds >= 0.6
    assert seen and all(s.trials <= result.trials for s in seen)
    xs = [s.seconds for s in result.series]
    assert xs == sorted(xs) and len(result.series) >= 3
    assert [s.unique_valid for s in result.series] == sorted(s.unique_valid for s in result.series)


def test_series_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # a sampling interval of zero would record every trial: thinning must keep it bounded
    monkeypatch.setattr(rlcheck.campaign, "_FIRST_SAMPLE_INTERVAL", 0.0)
    result = rlcheck.run(pair, lambda p: True, guide=RandomGuide(seed=0), trials=5000)
    assert len(result.series) <= _MAX_SAMPLES + 1


def interrupted_on_call(n: int) -> Any:
    """A check that passes, except that its ``n``-th call is a Ctrl-C."""
    calls = 0

    def check(p: tuple[int, int]) -> bool:
        nonlocal calls
        calls += 1
        if calls == n:
            raise KeyboardInterrupt
        return True

    return check


def test_keyboard_interrupt_returns_what_was_done_when_caught() -> None:
    check = interrupted_on_call(6)
    result = rlcheck.run(pair, check, trials=100, seed=0, catch_interrupt=True)
    assert result.stop_reason == "interrupted"
    assert result.trials == 5


def test_keyboard_interrupt_propagates_after_ending_the_campaign(tmp_path: Path) -> None:
    # Under pytest, Ctrl-C inside a test calling run() must stop the session, not pass
    # the test on part of its budget; the learned policy is still saved.
    policy = tmp_path / "p.json"
    check = interrupted_on_call(60)
    with pytest.raises(KeyboardInterrupt):
        rlcheck.run(pair, check, guide=RLGuide(seed=0, policy_file=policy), trials=100)
    assert policy.exists()


def test_a_bug_found_before_ctrl_c_is_named_on_the_interrupt() -> None:
    calls = 0

    def check(p: tuple[int, int]) -> bool:
        nonlocal calls
        calls += 1
        if calls == 20:
            raise KeyboardInterrupt
        if p[0] == 9:
            raise AssertionError(f"nine in {p}")
        return True

    with pytest.raises(KeyboardInterrupt) as caught:
        rlcheck.run(pair, check, guide=RandomGuide(seed=0), trials=100, max_failures=0)
    if sys.version_info >= (3, 11):
        (note,) = caught.value.__notes__
        assert "AssertionError: nine in (9, " in note and "choices [9, " in note


def ctrl_c_while_shrinking(after: int) -> tuple[Any, Any]:
    """A generator of lists and a check failing on sums over 20 that presses Ctrl-C on
    its ``after``-th call once the bug is found (while the bug is being shrunk)."""
    calls_since_found: list[int] = []

    def numbers(g: Gen) -> list[int]:
        return [g.integer(0, 9, label="x") for _ in range(g.integer(0, 8, label="len"))]

    def check(xs: list[int]) -> None:
        if calls_since_found:
            calls_since_found[0] += 1
            if calls_since_found[0] == after:
                raise KeyboardInterrupt
        if sum(xs) > 20:
            calls_since_found[:] = calls_since_found or [0]
            raise AssertionError(f"sum {sum(xs)}")

    return numbers, check


@pytest.mark.parametrize("after", [1, 40])
def test_ctrl_c_while_shrinking_keeps_the_found_bug(after: int) -> None:
    numbers, check = ctrl_c_while_shrinking(after)
    result = rlcheck.run(
        numbers, check, guide=RandomGuide(seed=0), trials=10_000, catch_interrupt=True
    )
    assert result.stop_reason == "interrupted"
    (failure,) = result.failures  # the bug found, as found or shrunk as far as it got
    assert sum(failure.value) > 20 and replay(numbers, failure.choices) == failure.value
    assert result.trials == result.valid + result.invalid + 1
    if after == 1:  # interrupted at the first candidate: kept as found
        assert failure.choices == failure.found_choices
    else:  # interrupted part way: the best shrink so far
        assert len(failure.choices) < len(failure.found_choices)
        assert failure.exception_type == "AssertionError"
    # Without catch_interrupt the interrupt propagates, and names the bug.
    numbers, check = ctrl_c_while_shrinking(after)
    with pytest.raises(KeyboardInterrupt) as caught:
        rlcheck.run(numbers, check, guide=RandomGuide(seed=0), trials=10_000)
    if sys.version_info >= (3, 11):
        assert "AssertionError: sum " in caught.value.__notes__[0]


def test_generator_bugs_propagate() -> None:
    def broken(g: Gen) -> int:
        raise AttributeError("typo in the generator")

    with pytest.raises(AttributeError, match="typo"):
        rlcheck.run(broken, bool, trials=3)


# -- a failing guide does not lose the campaign (RELIABILITY.md, rlcheck row 2) ----------


class FlakyLearner:
    """Stands in for a learner method: works ``calls`` times, then raises."""

    def __init__(self, real: Any, calls: int) -> None:
        self.real, self.calls = real, calls

    def __call__(self, *args: Any) -> Any:
        self.calls -= 1
        if self.calls < 0:
            raise RuntimeError("injected learner bug")
        return self.real(*args)


def run_with_broken_update(seed: int, tmp_path: Path | None = None) -> rlcheck.Result:
    guide = RLGuide(seed=seed, policy_file=tmp_path / "p.json" if tmp_path else None)
    # The end-of-episode update of the learner fails on the 301st episode.
    guide.policy.learn_rows = FlakyLearner(guide.policy.learn_rows, 300)  # type: ignore[method-assign]
    return rlcheck.run(pair, Judge(), guide=guide, trials=1000)


def test_a_learner_error_falls_back_to_random_with_one_warning() -> None:
    with pytest.warns(rlcheck.RLCheckWarning, match="injected learner bug") as caught:
        result = run_with_broken_update(seed=3)
    assert len(caught) == 1
    assert result.trials == 1000 and result.stop_reason == "trials"
    assert result.trials == result.valid + result.invalid
    assert result.guide_fallback is not None
    assert "RLGuide.end_episode raised RuntimeError" in result.guide_fallback
    # the 301st input was made and checked (and counted) before its update failed
    assert "trials 302 on used RandomGuide(seed=3)" in result.guide_fallback
    assert result.guide["guide"] == "rl"  # the guide the run was asked for
    assert result.to_dict()["guide_fallback"] == result.guide_fallback
    # the fallback is seeded too: the same run gives the same result
    with pytest.warns(rlcheck.RLCheckWarning):
        again = run_with_broken_update(seed=3)
    assert (again.valid, again.unique_valid) == (result.valid, result.unique_valid)


def test_a_guide_error_inside_a_choice_point_drops_that_episode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import rlcheck.learner

    # The greedy scan fails on its 50th call, in the middle of generating an input.
    monkeypatch.setattr(rlcheck.learner, "_greedy", FlakyLearner(rlcheck.learner._greedy, 49))
    judge = Judge()
    with pytest.warns(rlcheck.RLCheckWarning, match="RLGuide.choose raised RuntimeError"):
        result = rlcheck.run(pair, judge, guide=RLGuide(seed=0), trials=500)
    assert result.trials == 500 == len(judge.inputs)  # the broken episode is not counted
    assert result.guide_fallback is not None and "choose" in result.guide_fallback


def test_a_generator_swallowing_the_guide_error_still_falls_back() -> None:
    class BrokenGuide(RandomGuide):
        def choose(self, point: Any, options: Any) -> int:
            raise ValueError("no choice today")

    def forgiving(g: Gen) -> int:
        try:
            return g.integer(0, 9)
        except ValueError:
            return 0

    with pytest.warns(rlcheck.RLCheckWarning, match="no choice today"):
        result = rlcheck.run(forgiving, lambda x: True, guide=BrokenGuide(seed=1), trials=200)
    assert result.trials == 200 and result.unique_valid == 10  # random found every digit
    assert "trials 1 on" in (result.guide_fallback or "")


@pytest.mark.parametrize("method", ["start_campaign", "start_episode", "enter_scope", "exit_scope"])
def test_errors_in_other_guide_methods_fall_back_too(method: str) -> None:
    def boom(*args: Any, **kwargs: Any) -> None:
        raise OSError(f"{method} is broken")

    def scoped(g: Gen) -> int:
        with g.scope("inner"):
            return g.integer(0, 3)

    guide = RLGuide(seed=0)
    setattr(guide, method, boom)
    with pytest.warns(rlcheck.RLCheckWarning, match=f"{method} is broken"):
        result = rlcheck.run(scoped, lambda x: True, guide=guide, trials=50)
    assert result.trials == 50 and f"RLGuide.{method} raised OSError" in (
        result.guide_fallback or ""
    )


def test_an_error_random_generation_hits_too_ends_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Stubborn(RandomGuide):
        def choose(self, point: Any, options: Any) -> int:
            raise LookupError("no option fits")

    # The fallback's random generation fails the same way: that is not the learner's bug,
    # and dropping every episode (uncounted) and falling back again would never end.
    monkeypatch.setattr(rlcheck.campaign, "RandomGuide", Stubborn)
    start = time.perf_counter()
    with (
        pytest.warns(rlcheck.RLCheckWarning, match="no option fits") as caught,
        pytest.raises(LookupError, match="no option fits"),
    ):
        rlcheck.run(pair, bool, guide=Stubborn(seed=0), trials=100, seconds=5)
    assert len(caught) == 1 and time.perf_counter() - start < 4


@pytest.mark.parametrize("invalid_on", [(), (ValueError,)])
def test_misusing_g_is_the_generators_error_not_the_guides(
    invalid_on: tuple[type[Exception], ...],
) -> None:
    # A float bound (n / 2) and an unhashable label: raised to the caller as rlcheck's
    # InvalidArgument (even where invalid_on takes ValueErrors for invalid inputs), not
    # blamed on the guide with a fallback to random generation (that hit it too, forever).
    def halves(g: Gen) -> int:
        return g.integer(0, 10 / 2, label="n")  # type: ignore[arg-type]

    def listed(g: Gen) -> int:
        return g.integer(0, 5, label=["n"])  # type: ignore[arg-type]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        with pytest.raises(InvalidArgument, match=r"integer\(0, 5.0\) at 'n' needs int bounds"):
            rlcheck.run(halves, bool, guide=RandomGuide(seed=0), trials=100, seconds=5,
                        invalid_on=invalid_on)  # fmt: skip
        with pytest.raises(InvalidArgument, match="not hashable"):  # the learner's lookup
            rlcheck.run(listed, bool, guide=RLGuide(seed=0), trials=100, seconds=5,
                        invalid_on=invalid_on)  # fmt: skip


def test_a_failed_guide_does_not_overwrite_its_policy_file(tmp_path: Path) -> None:
    with pytest.warns(rlcheck.RLCheckWarning):
        run_with_broken_update(seed=0, tmp_path=tmp_path)
    assert not (tmp_path / "p.json").exists()


def test_no_fallback_on_a_healthy_run() -> None:
    assert rlcheck.run(pair, Judge(), trials=100, seed=0).guide_fallback is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "budget"),
        ({"trials": -1}, "trials=-1"),
        ({"trials": 1.5}, "trials=1.5"),
        ({"seconds": 0}, "seconds=0"),
        ({"trials": 5, "max_failures": -2}, "max_failures=-2"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        rlcheck.run(pair, bool, **kwargs)
    with pytest.raises(InvalidArgument, match="not callable"):
        rlcheck.run(pair, 3, trials=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="not callable"):
        rlcheck.run(None, bool, trials=1)  # type: ignore[arg-type]


def test_q_tables_stay_bounded_on_long_campaigns() -> None:
    def digits(g: Gen) -> tuple[int, ...]:
        return tuple(g.integer(0, 9, label="d") for _ in range(6))

    guide = RLGuide("sequence", seed=0, max_states=50)
    rlcheck.run(digits, lambda d: True, guide=guide, trials=3000)
    assert len(guide.policy.table("d")) <= 50


def test_json_and_plot_outputs(tmp_path: Path) -> None:
    result = rlcheck.run(pair, Judge(), trials=300, seed=0)
    path = tmp_path / "r.json"
    result.write_json(path)
    data = json.loads(path.read_text())
    assert data["trials"] == 300 and data["unique_valid"] == result.unique_valid
    assert data["series"][-1]["trials"] == 300
    assert data["trials_per_second"] > 0
    pytest.importorskip("matplotlib")
    png = tmp_path / "r.png"
    result.plot(png, x="trials")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(InvalidArgument, match="x='time'"):
        result.plot(png, x="time")


def test_failures_are_written_without_the_input_object(tmp_path: Path) -> None:
    def check(p: tuple[int, int]) -> bool:
        raise ValueError("always")

    result = rlcheck.run(pair, check, trials=10, seed=0)
    path = tmp_path / "r.json"
    result.write_json(path)
    (failure,) = json.loads(path.read_text())["failures"]
    assert failure["exception"] == "ValueError" and "value" not in failure
    assert failure["choices"] == list(result.failures[0].choices)


@pytest.mark.parametrize(
    "module",
    [
        "rlcheck.gen",
        "rlcheck.state",
        "rlcheck.guides.base",
        "rlcheck.guides.random",
        "rlcheck.guides.replay",
        "rlcheck.guides.rl",
        "rlcheck.campaign",
        "rlcheck.policy_store",
        "rlcheck.plot",
        "rlcheck.learner",
        "rlcheck.ledger",
        "rlcheck.pytest_plugin",
        "rlcheck.mutation",
        "rlcheck.choice_tree",
    ],
)
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    if module == "rlcheck.plot":
        pytest.importorskip("matplotlib")
    outcome = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 0 and outcome.failed == 0


def test_memory_does_not_grow_with_the_inputs() -> None:
    """Uniqueness keeps 64-bit key hashes, not inputs (RELIABILITY rlcheck #4)."""
    import tracemalloc

    def bulky(g: Gen) -> tuple[tuple[int, ...], str]:
        digits = tuple(g.integer(0, 9, label="d") for _ in range(6))
        return digits, "x" * 4000 + repr(digits)  # ~4 KB each, almost all distinct

    tracemalloc.start()
    try:
        result = rlcheck.run(bulky, lambda v: True, guide=RLGuide(seed=0, max_states=500),
                             trials=5000)  # fmt: skip
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.unique_valid > 3000  # keeping them would take over 12 MB
    assert peak < 4 * 2**20


def test_a_generator_error_while_shrinking_rejects_that_candidate() -> None:
    def picky(g: Gen) -> int:
        n = g.integer(0, 20, label="n")
        if n == 3:  # the generator cannot build this one, with the check's exception type
            raise ValueError("cannot build n == 3")
        return n

    def check(n: int) -> None:
        if n >= 6:
            raise ValueError(f"bug: n={n}")

    result = rlcheck.run(picky, check, guide=RandomGuide(seed=0), trials=2000)
    (failure,) = result.failures
    assert failure.value == 6 and failure.message == "bug: n=6"
    assert failure.choices == (6,) and failure.found_choices != (6,)


def test_found_failures_are_shrunk_before_they_are_reported() -> None:
    def trio(g: Gen) -> list[int]:
        return [g.integer(0, 50, label="x") for _ in range(g.integer(0, 6, label="n"))]

    def check(xs: list[int]) -> bool:
        if sum(xs) > 30:
            raise AssertionError(f"sum {sum(xs)}")
        return True

    result = rlcheck.run(trio, check, guide=RandomGuide(seed=3), trials=500)
    (failure,) = result.failures
    # The simplest failing input: one element just over the bound.
    assert failure.value == [31], failure.value
    assert replay(trio, failure.choices) == [31]
    assert len(failure.found_choices) >= len(failure.choices)
    assert failure.exception_type == "AssertionError" and "sum 31" in failure.message
    unshrunk = rlcheck.run(trio, check, guide=RandomGuide(seed=3), trials=500, shrink=False)
    assert unshrunk.failures[0].choices == unshrunk.failures[0].found_choices


def test_a_hanging_check_is_interrupted_by_the_check_timeout() -> None:
    def check(p: tuple[int, int]) -> bool:
        if p[0] == 7:
            time.sleep(30)  # hangs
        return True

    start = time.perf_counter()
    result = rlcheck.run(
        pair, check, guide=RandomGuide(seed=0), trials=300, check_timeout=0.05, shrink=False
    )
    assert time.perf_counter() - start < 10
    (failure,) = result.failures
    assert failure.exception_type == "CheckTimeout" and failure.value[0] == 7
    with pytest.raises(InvalidArgument, match="check_timeout"):
        rlcheck.run(pair, check, trials=1, check_timeout=0)
