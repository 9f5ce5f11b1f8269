"""The ``rlcheck run`` command."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from rlcheck.cli import _load_object, main

GENS = """
    import rlcheck

    def pair(g):
        return g.integer(0, 9, label="a"), g.integer(0, 9, label="b")

    def ordered(p):
        return p[0] < p[1]

    def crashes_on_three(p):
        if p[0] == 3:
            raise RuntimeError("planted")
        return True

    NOT_CALLABLE = 3
"""


@pytest.fixture
def gens(tmp_path: Path) -> Path:
    path = tmp_path / "cli_gens.py"
    path.write_text(textwrap.dedent(GENS))
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["run", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("guide", ["rl", "random"])
def test_run_from_a_file_writes_json(gens: Path, tmp_path: Path, guide: str) -> None:
    out = tmp_path / "r.json"
    code, text = invoke(
        f"{gens}:pair", "--check", f"{gens}:ordered", "--trials", "500", "--seed", "1",
        "--guide", guide, "--json", str(out), "--quiet",
    )  # fmt: skip
    assert code == 0, text
    data = json.loads(out.read_text())
    assert data["trials"] == 500 and data["guide"]["guide"] == guide
    assert 0 < data["unique_valid"] <= 45
    assert "unique valid" in text and f"{data['unique_valid']:,}" in text


def test_run_from_an_importable_module(
    gens: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    code, text = invoke(
        "cli_gens:pair", "--check", "cli_gens:ordered", "--seconds", "0.3",
        "--state", "sequence", "--k", "2",
    )  # fmt: skip
    assert code == 0, text
    assert "state=sequence" in text and "seconds" in text


def test_found_bug_exits_1_with_replay_information(gens: Path) -> None:
    code, text = invoke(f"{gens}:pair", "--check", f"{gens}:crashes_on_three", "--trials", "5000")
    assert code == 1
    assert "RuntimeError: planted" in text
    assert "choices: [3," in text and "input:   (3," in text


def test_policy_file_round_trip(gens: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    args = [f"{gens}:pair", "--check", f"{gens}:ordered", "--trials", "200", "--policy"]
    assert invoke(*args, str(policy))[0] == 0
    assert json.loads(policy.read_text())["format"] == "rlcheck-policy-file"
    code, text = invoke(*args, str(policy))
    assert code == 0 and "ignoring" not in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{g}:pair", "--check", "{g}:ordered"], "give a budget"),
        (["{g}:pair", "--check", "{g}:ordered", "--trials", "5", "--guide", "random",
          "--policy", "p.json"], "--policy needs --guide rl"),
        (["{g}", "--check", "{g}:ordered", "--trials", "5"], "not MODULE:NAME"),
        (["{g}:nope", "--check", "{g}:ordered", "--trials", "5"], "no attribute 'nope'"),
        (["{g}:pair", "--check", "{g}:NOT_CALLABLE", "--trials", "5"], "is not callable"),
        (["missing.py:pair", "--check", "{g}:ordered", "--trials", "5"], "does not exist"),
        (["no_such_module_xyz:pair", "--check", "{g}:ordered", "--trials", "5"],
         "cannot import 'no_such_module_xyz'"),
        (["{g}:pair", "--check", "{g}:ordered", "--trials", "-3"], "-3"),
    ],
)  # fmt: skip
def test_usage_errors_are_clear(gens: Path, args: list[str], message: str) -> None:
    code, text = invoke(*(a.replace("{g}", str(gens)) for a in args))
    assert code == 2
    assert message in " ".join(text.split())


@given(st.text(alphabet="ab-.:/ ", max_size=14))
def test_any_spec_is_loaded_or_refused_cleanly(spec: str) -> None:
    # No real module can be named with this alphabet ('-', ' ', leading dots), so every
    # spec must end in a clear usage error, never in an uncaught exception.
    with pytest.raises(click.BadParameter):
        _load_object(spec, "MODULE:GENERATOR")


def test_a_guide_fallback_is_shown(gens: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlcheck.learner

    def broken(*args: object) -> object:
        raise RuntimeError("injected learner bug")

    monkeypatch.setattr(rlcheck.learner, "_greedy", broken)
    with pytest.warns(rlcheck.RLCheckWarning, match="injected learner bug"):
        code, text = invoke(
            f"{gens}:pair", "--check", f"{gens}:ordered", "--trials", "300", "--seed", "1",
            "--guide", "rl", "--quiet",
        )  # fmt: skip
    assert code == 0, text
    assert "guide fallback" in text and "RandomGuide" in text


def test_missing_matplotlib_is_detected_before_the_campaign(
    gens: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    import rlcheck.campaign

    real = importlib.util.find_spec

    def no_matplotlib(name: str, *args: Any) -> Any:
        return None if name == "matplotlib" else real(name, *args)

    def must_not_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the campaign ran before the missing dependency was reported")

    monkeypatch.setattr(importlib.util, "find_spec", no_matplotlib)
    monkeypatch.setattr(rlcheck.campaign, "run", must_not_run)
    code, out = invoke(
        f"{gens}:pair", "--check", f"{gens}:ordered", "--trials", "10",
        "--plot", str(tmp_path / "p.png"),
    )  # fmt: skip
    assert code == 2 and "pip install 'rlcheck[plot]'" in out


def test_fuzz_table_keeps_parametrized_ids_apart_when_narrow() -> None:
    # Piped or on an 80-column terminal, rich cut long node ids to "test_user.py::test_bal…",
    # so the rows of test_balanced_parens[2], [4] and [8] could not be told apart.
    from rich.console import Console

    from rlcheck.cli import _fuzz_table
    from rlcheck.fuzz import FuzzReport, TestProgress

    report = FuzzReport(workers=2, seconds=15.0, pytest_args=[])
    names = [f"tests/test_user_suite.py::test_balanced_parentheses[{w}]" for w in (2, 4, 8)]
    for name in names:
        report.tests[name] = TestProgress(cases=20_780, valid=1_283, unique_valid=667)
    console = Console(width=80, record=True, color_system=None)
    console.print(_fuzz_table(report))
    text = console.export_text()
    assert "…" not in text
    cells = "".join(line.split("│")[1].strip() for line in text.splitlines() if "│" in line)
    for name in names:
        assert name in cells, text
    assert "20,780" in text
