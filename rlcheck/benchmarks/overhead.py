"""Benchmark: what ``pytest --rlcheck`` costs on a suite where guidance cannot help.

Runs one pytest suite in each mode, the modes interleaved round by round (so a change of
machine load hits every mode alike), and reports wall-clock and CPU time (user + system
of the pytest process and its children) per mode, best of the rounds and median, and the
ratio to the plain run. Modes: ``default`` (no flag), ``rlcheck`` (``--rlcheck``),
``rlcheck-fast`` (``--rlcheck-fast``), ``compare`` (``--rlcheck-compare``, which runs
every test on both backends: its ratio should stay at or under ``1 + rlcheck``'s).

The default suite is ``benchmarks/overhead_suite/`` (ordinary property tests: round-trips,
invariants, mild ``assume``/``.filter``, ``st.data()``, a composite with string labels,
``st.recursive``, a stateful machine), where the target is ``--rlcheck`` at most 1.2x the
plain run. Any other suite can be measured in its own directory::

    python benchmarks/overhead.py                              # the bundled suite, 3 rounds
    python benchmarks/overhead.py --rounds 5 --json out.json
    python benchmarks/overhead.py --suite /path/to/project/tests --cwd /path/to/project \\
        --modes default rlcheck -- -k "not slow"

Every run gets ``-p no:cacheprovider -p no:randomly -q``, and fails the benchmark if pytest
does (exit status other than 0 or 5: no tests).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODES: dict[str, list[str]] = {
    "default": [],
    "rlcheck": ["--rlcheck"],
    "rlcheck-fast": ["--rlcheck-fast"],
    "compare": ["--rlcheck-compare"],
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(suite: str, cwd: Path, flags: list[str], extra: list[str]) -> dict[str, float]:
    """One pytest run: its wall-clock and CPU seconds."""
    cmd = [sys.executable, "-m", "pytest", suite, "-q", "-p", "no:cacheprovider"]
    cmd += ["-p", "no:randomly", *flags, *extra]
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - wall0, _children_cpu() - cpu0
    if done.returncode not in (0, 5):
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-2000:])
        raise SystemExit(f"pytest {' '.join(flags) or '(plain)'} failed: exit {done.returncode}")
    return {"wall_s": wall, "cpu_s": cpu}


def measure(
    suite: str, cwd: Path, modes: list[str], rounds: int, extra: list[str]
) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for r in range(rounds):
        for mode in modes:
            runs[mode].append(run_once(suite, cwd, MODES[mode], extra))
            last = runs[mode][-1]
            print(
                f"  round {r + 1}/{rounds} {mode:<13} wall {last['wall_s']:7.2f} s"
                f"  cpu {last['cpu_s']:7.2f} s",
                flush=True,
            )
    summary: dict[str, dict[str, float]] = {}
    for mode, samples in runs.items():
        summary[mode] = {
            f"{what}_{stat}": fn(s[what] for s in samples)
            for what in ("wall_s", "cpu_s")
            for stat, fn in (("best", min), ("median", statistics.median))
        }
    base = summary.get("default")
    if base is not None:
        for row in summary.values():
            for what in ("wall_s", "cpu_s"):
                for stat in ("best", "median"):
                    row[f"{what}_{stat}_ratio"] = row[f"{what}_{stat}"] / base[f"{what}_{stat}"]
    return {"runs": runs, "summary": summary}


def format_table(summary: dict[str, dict[str, float]]) -> str:
    header = f"{'mode':<13} {'wall best':>10} {'ratio':>6} {'cpu best':>9} {'ratio':>6}"
    header += f" {'wall med':>9} {'ratio':>6} {'cpu med':>8} {'ratio':>6}"
    lines = [header, "-" * len(header)]
    for mode, row in summary.items():
        cells = [f"{mode:<13}"]
        for what, width in (("wall_s_best", 10), ("cpu_s_best", 9), ("wall_s_median", 9)):
            cells += [f"{row[what]:>{width}.2f}", f"{row.get(what + '_ratio', 1.0):>5.2f}x"]
        cells += [f"{row['cpu_s_median']:>8.2f}", f"{row.get('cpu_s_median_ratio', 1.0):>5.2f}x"]
        lines.append(" ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default=str(HERE / "overhead_suite"))
    parser.add_argument("--cwd", type=Path, default=None, help="run pytest here")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=HERE / "results" / "overhead.json")
    parser.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    cwd = args.cwd or Path(args.suite).resolve().parent
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - platforms without it
        load = float("nan")
    print(f"suite {args.suite}: {args.rounds} rounds of {', '.join(args.modes)}", flush=True)
    result = measure(args.suite, cwd, args.modes, args.rounds, args.extra)
    print()
    print(format_table(result["summary"]))
    result.update(
        suite=args.suite,
        extra=args.extra,
        rounds=args.rounds,
        load_before=load,
        load_after=os.getloadavg()[0],
        python=sys.version.split()[0],
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
