"""The ``rlcheck`` command line."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import click

from rlcheck import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rlcheck")
def main() -> None:
    """Run RL-guided generation campaigns against a validity check."""


def _load_object(spec: str, what: str) -> Any:
    """``package.module:attr`` or ``path/to/file.py:attr`` -> the object."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(
            f"{spec!r} is not MODULE:NAME (e.g. mypkg.gens:bst or tests/gens.py:bst)",
            param_hint=what,
        )
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise click.BadParameter(f"file {module_name!r} does not exist", param_hint=what)
            # Named after the file (results and saved policies show it), unless taken.
            name = path.stem if path.stem not in sys.modules else f"_rlcheck_cli_{path.stem}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise click.BadParameter(f"cannot import {module_name!r}", param_hint=what)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        else:
            # Like ``python -m``: modules in the current directory are importable.
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            if not all(part.isidentifier() for part in module_name.split(".")):
                raise click.BadParameter(
                    f"{module_name!r} is neither a dotted module name nor a .py file",
                    param_hint=what,
                )
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint=what) from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise click.BadParameter(
            f"module {module_name!r} has no attribute {attr!r}", param_hint=what
        ) from None
    if not callable(obj):
        raise click.BadParameter(f"{spec!r} is not callable", param_hint=what)
    return obj


@main.command("run")
@click.argument("generator", metavar="MODULE:GENERATOR")
@click.option(
    "--check",
    "check_spec",
    required=True,
    metavar="MODULE:FUNC",
    help="Validity check: returns True for a valid input.",
)
@click.option("--guide", type=click.Choice(["rl", "random"]), default="rl", show_default=True)
@click.option(
    "--state",
    type=click.Choice(["sequence", "ancestor", "labelled"]),
    default="labelled",
    show_default=True,
    help="RL state abstraction.",
)
@click.option(
    "--k", type=click.IntRange(min=1), default=4, show_default=True, help="RL state window length."
)
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), help="Time budget.")
@click.option("--trials", type=click.IntRange(min=0), help="Budget in generated inputs.")
@click.option("--seed", type=int, help="Seed (same seed, same inputs).")
@click.option(
    "--key",
    "key_spec",
    metavar="MODULE:FUNC",
    help="Identity of an input for uniqueness (default: the input).",
)
@click.option(
    "--policy",
    type=click.Path(dir_okay=False, path_type=Path),
    help="RL: load the learned policy from this file and save it back.",
)
@click.option(
    "--max-failures",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Stop after this many found bugs (0: never).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the result as JSON.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a PNG of unique valid inputs over time (needs matplotlib).",
)
@click.option(
    "--check-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds one check may take; a longer one is a found bug (CheckTimeout).",
)
@click.option("--quiet", "-q", is_flag=True, help="No live progress line.")
def run_command(
    generator: str,
    check_spec: str,
    guide: str,
    state: str,
    k: int,
    seconds: float | None,
    trials: int | None,
    seed: int | None,
    key_spec: str | None,
    policy: Path | None,
    max_failures: int,
    json_path: Path | None,
    plot_path: Path | None,
    check_timeout: float | None,
    quiet: bool,
) -> None:
    """Run a campaign: generate with MODULE:GENERATOR, check, count distinct valid inputs.

    Exits with status 1 when the check raised (a found bug; its input and choice
    sequence are printed), 0 otherwise.

    \b
    Example:
        rlcheck run rlcheck/benchmarks/bst.py:bst --check rlcheck/benchmarks/bst.py:is_bst \\
            --trials 20000 --guide rl --json bst.json
    """
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table
    from rich.text import Text

    from rlcheck.campaign import Sample, run
    from rlcheck.guides import Guide, RandomGuide, RLGuide

    if seconds is None and trials is None:
        raise click.UsageError("give a budget: --seconds N or --trials N (or both)")
    if policy is not None and guide != "rl":
        raise click.UsageError("--policy needs --guide rl (the random guide learns nothing)")
    if plot_path is not None and importlib.util.find_spec("matplotlib") is None:
        # Checked before the campaign, not after it has run for minutes.
        raise click.UsageError(
            "--plot needs matplotlib, which is not installed: pip install 'rlcheck[plot]'"
        )
    gen_fn = _load_object(generator, "MODULE:GENERATOR")
    check_fn = _load_object(check_spec, "--check")
    key_fn = _load_object(key_spec, "--key") if key_spec else None
    chosen: Guide = (
        RLGuide(state, k=k, seed=seed, policy_file=policy)
        if guide == "rl"
        else RandomGuide(seed=seed)
    )

    err = Console(stderr=True)
    out = Console()
    line = Text()

    def show(sample: Sample) -> None:
        rate = sample.trials / sample.seconds if sample.seconds > 0 else 0.0
        line.plain = (
            f"{sample.seconds:7.1f}s  trials {sample.trials:,}  valid {sample.valid:,}  "
            f"unique valid {sample.unique_valid:,}  {rate:,.0f} trials/s"
        )
        live.update(line)

    # transient: the progress line disappears once the summary table is printed.
    live = Live(line, console=err, refresh_per_second=4, transient=True)
    with contextlib.nullcontext() if quiet else live:
        result = run(
            gen_fn,
            check_fn,
            guide=chosen,
            seconds=seconds,
            trials=trials,
            seed=seed,
            key=key_fn,
            max_failures=max_failures,
            progress=None if quiet else show,
            check_timeout=check_timeout,
            catch_interrupt=True,  # Ctrl-C ends the run: its table and --json still come
        )

    table = Table(title=f"rlcheck run {result.generator}", show_header=False)
    rows = [
        ("guide", ", ".join(f"{k}={v}" for k, v in result.guide.items())),
        ("trials", f"{result.trials:,}"),
        ("valid", f"{result.valid:,}"),
        ("unique valid", f"{result.unique_valid:,}"),
        ("found bugs", f"{len(result.failures)}"),
        ("seconds", f"{result.seconds:.2f}"),
        ("trials/s", f"{result.trials_per_second:,.0f}"),
        ("stopped by", result.stop_reason),
    ]
    if result.guide_fallback is not None:
        # the campaign finished on random generation: the figures are not the guide's alone
        rows.append(("guide fallback", result.guide_fallback))
    for name, value in rows:
        table.add_row(name, value)
    out.print(table)
    for failure in result.failures:
        out.print(
            f"[bold red]bug[/] at trial {failure.trial}: "
            f"{failure.exception_type}: {failure.message}",
            highlight=False,
        )
        out.print(f"  input:   {failure.value_repr}", highlight=False, markup=False)
        out.print(f"  choices: {list(failure.choices)}", highlight=False, markup=False)
        out.print(
            "  replay:  rlcheck.replay(generator, failure.choices)", highlight=False, markup=False
        )
    if json_path is not None:
        result.write_json(json_path)
        out.print(f"wrote {json_path}", highlight=False)
    if plot_path is not None:
        result.plot(plot_path)
        out.print(f"wrote {plot_path}", highlight=False)
    if result.failures:
        sys.exit(1)


@main.command(
    "fuzz",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
)
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Processes."
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Budget (wall clock); Ctrl-C or SIGTERM stops earlier.",
)
@click.option(
    "--backend",
    type=click.Choice(["rlcheck", "rlcheck-fast"]),
    default="rlcheck-fast",
    show_default=True,
    help="The Hypothesis backend the tests run on (rlcheck-fast: fewer cases on strict "
    "tests, Hypothesis's provider one case at a time, so each run stays near its slice).",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write per-test figures over time as JSON.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a PNG of unique valid inputs over time per test (needs matplotlib).",
)
def fuzz_command(
    pytest_args: tuple[str, ...],
    workers: int,
    seconds: float,
    backend: str,
    report_path: Path | None,
    plot_path: Path | None,
) -> None:
    """Fuzz a suite's Hypothesis tests on the RL backend: PYTEST_ARGS select them.

    Collects the tests with pytest, runs them again and again in --workers processes, with
    more time for the tests still making progress (new unique valid inputs, new failures),
    sharing learned policies and failures through the tests' example database. Live table
    on a terminal, plain lines when piped. Exits with status 1 when a test failed (its
    failure is in the example database: a plain `pytest` replays it), 2 on errors.

    \b
    Example:
        rlcheck fuzz tests/ -k parser --workers 2 --seconds 300 --report fuzz.json
    """
    from rich.console import Console
    from rich.live import Live

    from rlcheck.errors import InvalidArgument
    from rlcheck.fuzz import FuzzReport, check_writable, fuzz

    if plot_path is not None and importlib.util.find_spec("matplotlib") is None:
        raise click.UsageError(
            "--plot needs matplotlib, which is not installed: pip install 'rlcheck[plot]'"
        )
    # Now, not after a session of hours that then could not keep what it found.
    for option, path in (("--report", report_path), ("--plot", plot_path)):
        if path is not None:
            try:
                check_writable(path)
            except InvalidArgument as exc:
                raise click.BadParameter(str(exc), param_hint=f"'{option}'") from None
    out = Console()
    terminal = out.is_terminal
    last_lines = [0.0]
    warned: set[str] = set()

    def plain(report: FuzzReport) -> None:
        for warning in report.warnings:  # at once: the session may run for hours
            if warning not in warned:
                warned.add(warning)
                click.echo(f"warning: {warning}", err=True)
        # Piped: one block of lines every 5 s (a log, not an animation).
        if report.elapsed - last_lines[0] < 5.0:
            return
        last_lines[0] = report.elapsed
        for name, t in report.tests.items():
            click.echo(
                f"{report.elapsed:7.1f}s  {name}  cases {t.cases}  valid {t.valid}  "
                f"unique valid {t.unique_valid}  failures {t.failures}",
            )
        sys.stdout.flush()

    if terminal:
        live = Live(_fuzz_table(None), console=out, refresh_per_second=2, transient=True)
        with live:
            report = fuzz(
                pytest_args,
                workers=workers,
                seconds=seconds,
                backend=backend,
                on_update=lambda r: live.update(_fuzz_table(r, caption=True)),
            )
    else:
        report = fuzz(
            pytest_args, workers=workers, seconds=seconds, backend=backend, on_update=plain
        )
    out.print(_fuzz_table(report))
    for warning in report.warnings:
        if warning in warned:
            continue
        if terminal:
            out.print(f"[bold yellow]warning[/] {warning}", highlight=False, markup=True)
        else:  # where the session's other warnings went, whenever the last one came
            click.echo(f"warning: {warning}", err=True)
    for error in report.errors:
        out.print(f"[bold red]error[/] {error}", highlight=False, markup=True)
    for name in report.failed:
        t = report.tests[name]
        out.print(f"[bold red]failed[/] {name}: {t.message}", highlight=False)
    if report.failed:
        out.print(
            "the failures are saved in the tests' example database: a plain `pytest` replays them",
            highlight=False,
        )
    if report_path is not None:
        report.write_json(report_path)
        out.print(f"wrote {report_path}", highlight=False)
    if plot_path is not None and any(t.series for t in report.tests.values()):
        report.plot(plot_path)
        out.print(f"wrote {plot_path}", highlight=False)
    if report.failed:
        sys.exit(1)
    if report.errors or not report.tests:
        sys.exit(2)


def _fuzz_table(report: Any, *, caption: bool = False) -> Any:
    from rich.table import Table

    title = "rlcheck fuzz"
    if report is not None:
        title += f"  {report.elapsed:.0f}s / {report.seconds:.0f}s, {report.workers} worker(s)"
        if report.stopped_by and report.stopped_by != "budget":
            title += f", stopped: {report.stopped_by}"
    warnings = report.warnings if caption and report is not None else []
    table = Table(title=title, caption="\n".join(f"warning: {w}" for w in warnings) or None)
    # A long node id wraps instead of ending in "…": cut, the ids of one parametrized test
    # (test_x[2], test_x[4], ...) were the same on an 80-column terminal or a pipe.
    table.add_column("test", justify="left", overflow="fold")
    for column in ("cases", "valid", "unique valid", "failures"):
        table.add_column(column, justify="right", no_wrap=True)
    if report is None:
        return table
    for name, t in report.tests.items():
        table.add_row(
            name,
            f"{t.cases:,}",
            f"{t.valid:,}",
            f"{t.unique_valid:,}",
            f"[bold red]{t.failures}[/]" if t.failed else str(t.failures),
        )
    return table


if __name__ == "__main__":
    main()
