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


if __name__ == "__main__":
    main()
