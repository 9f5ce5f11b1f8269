"""rlcheck demo: RL-guided vs random generation of binary search trees, same time budget.

Run: ``.venv/bin/python rlcheck/examples/demo.py`` (about 45 seconds). The generator and
check are those of the case study in ``rlcheck/benchmarks/bst.py``: trees of values 0..10
built by choices (value, has-left, has-right), valid when the BST invariant holds.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import rlcheck

SECONDS_PER_GUIDE = 8.0


def _load_case_study() -> object:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bst.py"
    spec = importlib.util.spec_from_file_location("rlcheck_bst_case_study", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    bst = _load_case_study()
    print(
        f"rlcheck {rlcheck.__version__}: binary search trees, {SECONDS_PER_GUIDE:.0f} s per guide"
    )
    guides = {
        "random": rlcheck.RandomGuide(seed=0),
        "RL, ancestor-path state": rlcheck.RLGuide("ancestor", seed=0),
        "RL, + LEFT/RIGHT labels": rlcheck.RLGuide("labelled", seed=0),
    }
    rows = []
    for name, guide in guides.items():
        check = bst.SizeTrackingCheck()  # type: ignore[attr-defined]
        result = rlcheck.run(bst.bst, check, guide=guide, seconds=SECONDS_PER_GUIDE)  # type: ignore[attr-defined]
        rows.append((name, result, check.max_size))
        print(f"  {name}: done", flush=True)

    print(f"\n{'guide':<25} {'trials':>8} {'valid':>8} {'unique valid':>13} {'largest':>8}")
    for name, result, largest in rows:
        print(
            f"{name:<25} {result.trials:>8,} {result.valid:>8,} {result.unique_valid:>13,} "
            f"{largest:>8}"
        )
    base = rows[0][1].unique_valid
    best_name, best, _ = max(rows[1:], key=lambda r: r[1].unique_valid)
    print(
        f"\n{best_name} made {best.unique_valid / max(base, 1):.1f}x as many distinct valid "
        "trees as random generation in the same time."
    )
    print("Full benchmark (100 000 trials x 3 seeds): python rlcheck/benchmarks/bst.py")
    _hypothesis_part()


def _hypothesis_part() -> None:
    """The same guidance under an unchanged Hypothesis test, through the pytest plugin."""
    here = Path(__file__).resolve().parent
    print(
        "\nA Hypothesis test with a strict assume(), on Hypothesis's own backend and on "
        'backend="rlcheck"\n(pytest examples/hypothesis_assume.py --rlcheck-compare):',
        flush=True,
    )
    cmd = [sys.executable, "-m", "pytest", str(here / "hypothesis_assume.py")]
    cmd += ["-q", "-p", "no:randomly", "-p", "no:cacheprovider", "--rlcheck-compare"]
    out = subprocess.run(cmd, cwd=here.parent, capture_output=True, text=True, check=False)
    lines = out.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if "rlcheck: Hypothesis backend" in line), 0)
    print("\n".join(lines[start:]))
    print(
        "cases: test cases generated; valid: those the assume() accepted (a run stops at\n"
        "max_examples=300 valid ones); valid/case: the share accepted; to max: seconds to\n"
        "reach max_examples ('-': never reached; Hypothesis's backend gave up). rlcheck:\n"
        "'guided N' means N cases came from the learned policy (the first 20 are Hypothesis's\n"
        "own, to judge whether guidance can pay here)."
    )
    if out.returncode != 0:
        print(out.stderr[-2000:])
        raise SystemExit(f"the Hypothesis example failed (exit {out.returncode})")


if __name__ == "__main__":
    main()
