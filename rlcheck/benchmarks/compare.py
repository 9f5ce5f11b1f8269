"""Every guide side by side on the real-world benchmarks (RLCheck's evaluation, in Python).

For each benchmark of ``realworld`` and each guide, ``--reps`` runs of the same wall-clock
budget. A run records each new valid input (distinct by its text or value) with the time
it was found. Afterwards, outside the budget, each run's valid inputs are replayed in
order through the benchmark's ``measure`` (the check under branch tracing, see
``rlcheck.coverage``), so the black-box guides run uninstrumented and every guide is
measured the same way. Metrics over time, as in the paper:

* unique valid inputs;
* diverse valid inputs: distinct branch sets among the valid inputs;
* branches covered by valid inputs (the union of those sets).

Guides (``--guides``):

* ``random``: :class:`rlcheck.RandomGuide`, the core API.
* ``rl``: :class:`rlcheck.RLGuide` (ancestor path with labels, k = 4), the core API.
* ``rl-restart``: :class:`rlcheck.guides.RestartingRLGuide`, the improved RL row.
* ``rl-novelty``: :class:`rlcheck.guides.NoveltyRLGuide` (count-based bonus, structural
  novelty reward, punished repeats), not a default row. A core-API guide takes options
  after a colon, for ablations: ``rl-novelty:bonus=0,patience=500`` (the row keeps that
  name).
* ``greybox``: :class:`rlcheck.guides.GreyboxGuide`, fed the branches of every run (its
  tracing cost is inside its budget, as it would be for a real greybox fuzzer).
* ``hypothesis``: the generator as a Hypothesis strategy on Hypothesis's own backend,
  invalid inputs rejected with ``assume``.
* ``rl-hypothesis``: the same test on ``backend="rlcheck"`` with every case from the
  learned policy (``RLCheckProvider.default_share`` 0, the RL method alone); the policy is
  kept in a temporary example database for the whole run, so a restart after
  ``Unsatisfiable`` keeps what was learned.
* ``rl-hypothesis-fast`` (not a default row): ``backend="rlcheck-fast"``, half of the valid
  cases from Hypothesis's own provider (for bounded time on very strict tests, not for
  diversity).
* ``rl-hypothesis-novelty`` (not a default row): ``rl-hypothesis`` with the count-based
  bonus of ``rl-novelty`` (``RLCheckProvider.count_bonus`` 1.0).
* ``hypofuzz``: HypoFuzz's coverage-guided fuzzer on the same test, when ``hypofuzz`` is
  installed (``pip install "rlcheck[hypofuzz]"``; a default row only then). Its documented
  interface is ``hypothesis fuzz`` (pytest collection, worker processes, a dashboard); a
  budgeted run from a script drives its per-test fuzzer, ``hypofuzz.hypofuzz.FuzzTarget``
  (``run_one()`` until the budget is spent), which is internal and may change between
  releases. Its tracing (``sys.settrace`` before Python 3.12) is inside its budget.

Usage (from the repository root)::

    python rlcheck/benchmarks/compare.py --quick              # 10 s a run, 5 runs
    python rlcheck/benchmarks/compare.py                      # 60 s a run, 5 runs
    python rlcheck/benchmarks/compare.py --benchmarks sql --guides random rl --seconds 2 --reps 1
    python rlcheck/benchmarks/compare.py --seconds 30 --plot-only   # table and PNGs again

It prints a table (median and interquartile range over the runs, and each guide over
random), and writes ``benchmarks/results/compare[_quick].json``, ``.md`` and one PNG per
benchmark (``compare[_quick]_<benchmark>.png``: the three metrics over time).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase, InMemoryExampleDatabase
from hypothesis.errors import Flaky, Unsatisfiable
from realworld import BENCHMARKS, Benchmark, load, strategy

import rlcheck
from rlcheck.guides import GreyboxGuide, NoveltyRLGuide, RestartingRLGuide
from rlcheck.hypothesis.provider import RLCheckProvider

GUIDES = (
    "random", "rl", "rl-restart", "greybox", "hypothesis", "rl-hypothesis", "hypofuzz",
    "rl-hypothesis-fast", "rl-novelty", "rl-hypothesis-novelty",
)  # fmt: skip
HYPOTHESIS_GUIDES = ("hypothesis", "rl-hypothesis", "rl-hypothesis-fast", "rl-hypothesis-novelty")
HAVE_HYPOFUZZ = importlib.util.find_spec("hypofuzz") is not None
DEFAULT_GUIDES = tuple(
    g for g in GUIDES[:-3] if g != "hypofuzz" or HAVE_HYPOFUZZ
)  # fmt: skip
CORE_GUIDES: dict[str, Callable[..., rlcheck.Guide]] = {
    "random": rlcheck.RandomGuide,
    "rl": rlcheck.RLGuide,
    "rl-restart": RestartingRLGuide,
    "rl-novelty": NoveltyRLGuide,
    "greybox": GreyboxGuide,
}


def guide_spec(text: str) -> str:
    """``--guides`` item: a guide's name, for a core-API guide optionally with keyword
    options (``rl-novelty:bonus=0,patience=500``; values are Python literals)."""
    name, _, options = text.partition(":")
    if name not in GUIDES or (options and name not in CORE_GUIDES):
        raise argparse.ArgumentTypeError(f"{text!r}: not one of {GUIDES} (options: core API only)")
    try:
        _options(options)
    except (ValueError, SyntaxError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: options {options!r}: {exc}") from exc
    return text


def _options(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key.isidentifier():
            raise ValueError(f"{item!r} is not key=value")
        out[key] = ast.literal_eval(value)
    return out


METRICS = ("unique_valid", "diverse_valid", "branches")
GRID = 20
"""Points of the time series (plus t = 0)."""
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Run:
    """One budgeted run: the new valid inputs in the order found, with their times."""

    guide: str
    seed: int
    seconds: float
    trials: int
    found: Found
    note: str = ""


Found = list[tuple[float, Any]]
"""New valid inputs in the order found, each with its time since the run began."""


class _TimeUp(Exception):
    """Raised from a Hypothesis test body once the budget is spent."""


def _recorder(
    check: Callable[[Any], bool],
) -> tuple[Callable[[Any], bool], Callable[[], None], list[int], Callable[[], Found]]:
    """``check`` that also logs each new valid input with its time since ``begin()``.

    Returns ``(recorded, begin, calls, found)``: ``found()`` lists the new valid inputs in
    the order found. ``recorded`` takes the same Python path for a new input as for a
    repeat (``dict.setdefault`` keeps the first time), so a coverage-guided fuzzer that
    traces the whole test (HypoFuzz) sees the same branches when it re-runs an input.
    """
    first: dict[Hashable, float] = {}
    start = [0.0]
    calls = [0]

    def recorded(value: Any) -> bool:
        calls[0] += 1
        ok = check(value)
        first.setdefault(value, time.perf_counter() - start[0]) if ok else None
        return ok

    def begin() -> None:
        start[0] = time.perf_counter()

    def found() -> Found:
        return [(t, value) for value, t in first.items()]

    return recorded, begin, calls, found


def run_core(bench: Benchmark, guide_name: str, seconds: float, seed: int) -> Run:
    """A run through :func:`rlcheck.run`."""
    name, _, options = guide_name.partition(":")
    guide = CORE_GUIDES[name](seed=seed, **_options(options))
    check: Callable[[Any], bool] = bench.check
    if isinstance(guide, GreyboxGuide):
        check = guide.observe(bench.measure)
    recorded, begin, _, found = _recorder(check)
    begin()
    result = rlcheck.run(bench.generator, recorded, guide=guide, seconds=seconds, max_failures=0)
    note = f"restarts {guide.restarts}" if isinstance(guide, RestartingRLGuide) else ""
    if isinstance(guide, NoveltyRLGuide):
        note += f", novel {guide.novel_inputs}"
    if isinstance(guide, GreyboxGuide):
        note = f"corpus {len(guide.corpus)}"
    return Run(guide_name, seed, result.seconds, result.trials, found(), note)


def run_hypothesis(bench: Benchmark, guide: str, seconds: float, seed: int) -> Run:
    """A run of a ``@given`` test over the benchmark's strategy: on Hypothesis's own
    backend (``guide="hypothesis"``) or on ``backend="rlcheck"``, learned cases only
    (``"rl-hypothesis"``; with ``RLCheckProvider.count_bonus`` 1.0:
    ``"rl-hypothesis-novelty"``), or on ``backend="rlcheck-fast"`` (``"rl-hypothesis-fast"``).
    """
    backend = {"hypothesis": "hypothesis", "rl-hypothesis-fast": "rlcheck-fast"}.get(
        guide, "rlcheck"
    )
    recorded, begin, calls, found = _recorder(bench.check)
    deadline = 0.0

    def body(value: Any) -> None:
        if time.perf_counter() > deadline:
            raise _TimeUp
        assume(recorded(value))

    runs = gave_up = 0
    # Hypothesis builds the provider itself, without arguments: the class option is the
    # only way in, restored when the run ends.
    with (
        tempfile.TemporaryDirectory() as tmp,
        # "rlcheck" keeps every case learned whatever its shipped default share
        # (FastRLCheckProvider sets its own).
        mock.patch.object(RLCheckProvider, "default_share", 0.0),
        mock.patch.object(
            RLCheckProvider, "count_bonus", 1.0 if guide == "rl-hypothesis-novelty" else 0.0
        ),
    ):
        test = settings(
            backend=backend,
            max_examples=10**9,
            database=DirectoryBasedExampleDatabase(tmp),
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )(given(strategy(bench.generator))(body))
        test._hypothesis_internal_database_key = f"compare-{bench.name}".encode()  # type: ignore[attr-defined]
        begin()
        start = time.perf_counter()
        deadline = start + seconds
        # A run Hypothesis ends early (Unsatisfiable: too many invalid inputs) is followed
        # by a fresh one, as a user re-running the test would.
        while time.perf_counter() < deadline:
            runs += 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    test()
            except _TimeUp:
                break
            except Unsatisfiable:
                gave_up += 1
            except Flaky:  # the body depends on the clock by design
                pass
        elapsed = min(time.perf_counter(), deadline) - start
    note = f"hypothesis runs {runs}, unsatisfiable {gave_up}"
    return Run(guide, seed, elapsed, calls[0], found(), note)


def run_hypofuzz(bench: Benchmark, seconds: float, seed: int) -> Run:
    """A run of HypoFuzz's fuzzer on the ``@given`` test, ``run_one()`` until time is up."""
    try:
        from hypofuzz.database import HypofuzzDatabase
        from hypofuzz.hypofuzz import FuzzTarget
    except ImportError as exc:
        raise SystemExit(f"the hypofuzz row needs HypoFuzz: pip install hypofuzz ({exc})") from exc
    recorded, begin, calls, found = _recorder(bench.check)

    def body(value: Any) -> None:
        assume(recorded(value))

    test = given(strategy(bench.generator))(body)
    target = FuzzTarget.from_hypothesis_test(
        test, database=HypofuzzDatabase(InMemoryExampleDatabase())
    )
    target.random.seed(seed)
    target._enter_fixtures()  # no pytest item: builds the test's execution state only
    begin()
    start = time.perf_counter()
    deadline = start + seconds
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while time.perf_counter() < deadline:
            target.run_one()
    elapsed = time.perf_counter() - start
    corpus = target.provider.corpus
    note = f"corpus {len(corpus.corpus)}" if corpus is not None else ""
    return Run("hypofuzz", seed, elapsed, calls[0], found(), note)


def run_once(bench: Benchmark, guide: str, seconds: float, seed: int) -> Run:
    if guide == "hypofuzz":
        return run_hypofuzz(bench, seconds, seed)
    if guide in HYPOTHESIS_GUIDES:
        return run_hypothesis(bench, guide, seconds, seed)
    return run_core(bench, guide, seconds, seed)


def series(bench: Benchmark, run: Run, budget: float) -> dict[str, list[int]]:
    """The three metrics at ``GRID + 1`` evenly spaced times, by replaying the valid inputs."""
    times = [budget * i / GRID for i in range(GRID + 1)]
    out: dict[str, list[int]] = {m: [] for m in METRICS}
    sets: set[frozenset[Hashable]] = set()
    covered: set[Hashable] = set()
    i = 0
    found = run.found
    for t in times:
        while i < len(found) and found[i][0] <= t:
            _, branches = bench.measure(found[i][1])
            sets.add(branches)
            covered.update(branches)
            i += 1
        out["unique_valid"].append(i)
        out["diverse_valid"].append(len(sets))
        out["branches"].append(len(covered))
    # Inputs found in the last instant of the budget (timer granularity) count at the end.
    while i < len(found):
        _, branches = bench.measure(found[i][1])
        sets.add(branches)
        covered.update(branches)
        i += 1
    out["unique_valid"][-1] = i
    out["diverse_valid"][-1] = len(sets)
    out["branches"][-1] = len(covered)
    return out


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def summarize(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per benchmark and guide: median and quartiles of each final metric, and zero-valid runs."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for rec in records:
        row = table.setdefault(rec["benchmark"], {}).setdefault(
            rec["guide"], {"finals": {m: [] for m in METRICS}, "zero_valid_runs": 0, "trials": []}
        )
        for m in METRICS:
            row["finals"][m].append(rec["series"][m][-1])
        row["zero_valid_runs"] += rec["series"]["unique_valid"][-1] == 0
        row["trials"].append(rec["trials"])
    for by_guide in table.values():
        for row in by_guide.values():
            for m in METRICS:
                q1, med, q3 = _quartiles([float(v) for v in row["finals"][m]])
                row[m] = {"median": med, "q1": q1, "q3": q3}
            row["median_trials"] = statistics.median(row["trials"])
    return table


def _ratio(value: float, base: float) -> str:
    if base <= 0:
        return "∞" if value > 0 else "–"
    return f"{value / base:.1f}x"


def markdown(table: dict[str, dict[str, dict[str, Any]]], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "| benchmark | guide | unique valid | × random | × hypothesis | diverse valid | "
        "× random | × greybox | branches by valid | × greybox | runs with 0 valid | trials |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for bench, by_guide in table.items():
        base = by_guide.get("random")
        grey = by_guide.get("greybox")
        hyp = by_guide.get("hypothesis")  # the same engine as the Hypothesis-based rows
        for guide, row in by_guide.items():

            def cell(m: str, row: dict[str, Any] = row) -> str:
                s = row[m]
                return f"{s['median']:.0f} [{s['q1']:.0f}–{s['q3']:.0f}]"

            def vs(m: str, other: dict[str, Any] | None, row: dict[str, Any] = row) -> str:
                return _ratio(row[m]["median"], other[m]["median"]) if other else "–"

            lines.append(
                f"| {bench} | {guide} | {cell('unique_valid')} | {vs('unique_valid', base)} | "
                f"{vs('unique_valid', hyp)} | {cell('diverse_valid')} | "
                f"{vs('diverse_valid', base)} | {vs('diverse_valid', grey)} | {cell('branches')} | "
                f"{vs('branches', grey)} | {row['zero_valid_runs']}/{len(row['trials'])} | "
                f"{row['median_trials']:.0f} |"
            )
    lines.append("")
    lines.append("Median [interquartile range] over the runs, at the end of the budget.")
    return "\n".join(lines) + "\n"


def plot(records: list[dict[str, Any]], budget: float, path_for: Callable[[str], Path]) -> None:
    """One PNG per benchmark: each metric over time, median line and interquartile band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [budget * i / GRID for i in range(GRID + 1)]
    for bench in dict.fromkeys(r["benchmark"] for r in records):
        fig, axes = plt.subplots(1, len(METRICS), figsize=(5 * len(METRICS), 4))
        for ax, metric in zip(axes, METRICS, strict=True):
            for guide in dict.fromkeys(r["guide"] for r in records if r["benchmark"] == bench):
                runs = [
                    r["series"][metric]
                    for r in records
                    if r["benchmark"] == bench and r["guide"] == guide
                ]
                stats = [_quartiles([float(run[i]) for run in runs]) for i in range(GRID + 1)]
                line = ax.plot(times, [s[1] for s in stats], label=guide)[0]
                ax.fill_between(
                    times, [s[0] for s in stats], [s[2] for s in stats],
                    alpha=0.2, color=line.get_color(),
                )  # fmt: skip
            ax.set_title(f"{bench}: {metric.replace('_', ' ')}")
            ax.set_xlabel("seconds")
            ax.set_yscale("symlog")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path_for(bench), dpi=80)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 s a run")
    parser.add_argument("--seconds", type=float, default=None, help="budget per run (60)")
    parser.add_argument("--reps", type=int, default=5, help="runs per guide and benchmark")
    parser.add_argument("--benchmarks", nargs="*", default=list(BENCHMARKS), choices=BENCHMARKS)
    parser.add_argument(
        "--guides", nargs="*", default=list(DEFAULT_GUIDES), type=guide_spec,
        help=f"of {GUIDES}; core-API guides take options: rl-novelty:bonus=0",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="output prefix")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--plot-only",
        action="store_true",
        help="print the table and draw the PNGs from <out>.json, which a run writes after "
        "each benchmark (for a run cut short)",
    )
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (10.0 if args.quick else 60.0)
    prefix = args.out or RESULTS / ("compare_quick" if args.quick else "compare")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    command = "python rlcheck/benchmarks/compare.py " + " ".join(argv or sys.argv[1:])
    if args.plot_only:
        data = json.loads(Path(f"{prefix}.json").read_text())
        print(markdown(summarize(data["runs"]), data["command"]))
        plot(data["runs"], data["seconds"], lambda bench: Path(f"{prefix}_{bench}.png"))
        return 0

    meta = {
        "command": command,
        "seconds": seconds,
        "reps": args.reps,
        "grid": [seconds * i / GRID for i in range(GRID + 1)],
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_average_start": os.getloadavg(),
    }
    records: list[dict[str, Any]] = []
    for name in args.benchmarks:
        bench = load(name)
        bench.measure(bench.generator(rlcheck.Gen(rlcheck.RandomGuide(seed=0))))  # warm up
        meta.setdefault("coverage", {})[name] = bench.coverage
        for guide in args.guides:
            for rep in range(args.reps):
                run = run_once(bench, guide, seconds, seed=rep)
                started = time.perf_counter()
                s = series(bench, run, seconds)
                replay = time.perf_counter() - started
                records.append(
                    {
                        "benchmark": name,
                        "guide": run.guide,
                        "seed": rep,
                        "seconds": round(run.seconds, 3),
                        "trials": run.trials,
                        "series": s,
                        "note": run.note,
                        "replay_seconds": round(replay, 2),
                        "load_average_1min": round(os.getloadavg()[0], 2),
                    }
                )
                print(
                    f"{name:<9} {run.guide:<14} rep {rep} trials {run.trials:>7} "
                    f"unique valid {s['unique_valid'][-1]:>6} diverse {s['diverse_valid'][-1]:>5} "
                    f"branches {s['branches'][-1]:>5}  {run.note} (replay {replay:.1f} s)",
                    flush=True,
                )
        # After each benchmark, so a long run cut short keeps what it measured.
        text = write(prefix, meta, records, command)
    print()
    print(text)
    if not args.no_plot:
        plot(records, seconds, lambda bench: Path(f"{prefix}_{bench}.png"))
    return 0


def write(prefix: Path, meta: dict[str, Any], records: list[dict[str, Any]], command: str) -> str:
    """Write ``<prefix>.json`` (settings, summary, every run) and ``<prefix>.md`` (the
    table); returns the table."""
    table = summarize(records)
    text = markdown(table, command)
    summary = {
        b: {
            g: {k: v for k, v in row.items() if k not in ("finals", "trials")}
            for g, row in t.items()
        }
        for b, t in table.items()
    }
    meta = {**meta, "load_average_end": os.getloadavg()}
    Path(f"{prefix}.json").write_text(
        json.dumps({**meta, "summary": summary, "runs": records}, indent=1) + "\n"
    )
    Path(f"{prefix}.md").write_text(text)
    return text


if __name__ == "__main__":
    raise SystemExit(main())
