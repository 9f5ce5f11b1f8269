"""Branch coverage per call: arcs of the traced code only, tracer put back, exceptions."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rlcheck.coverage import BranchCoverage
from rlcheck.errors import InvalidArgument

SOURCE = """
def classify(x):
    if x > 0:
        return "positive"
    elif x < 0:
        return "negative"
    return "zero"


def boom(x):
    raise ValueError(x)
"""


@pytest.fixture
def subject(tmp_path: Path) -> ModuleType:
    path = tmp_path / "cov_subject.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("cov_subject", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arcs_tell_paths_apart(subject: ModuleType) -> None:
    cov = BranchCoverage([subject.__file__])
    result, positive = cov.run(subject.classify, 5)
    assert result == "positive"
    _, negative = cov.run(subject.classify, -5)
    _, negative_again = cov.run(subject.classify, -7)
    assert positive != negative
    assert negative == negative_again
    assert {arc[0] for arc in positive} == {subject.__file__}
    # Entry and exit arcs (negative lines) are there, as in coverage.py.
    assert any(arc[1] < 0 for arc in positive) and any(arc[2] < 0 for arc in positive)


def test_only_included_code_is_traced(subject: ModuleType) -> None:
    cov = BranchCoverage([json])
    _, arcs = cov.run(lambda: (subject.classify(1), json.dumps([1]))[1])
    assert arcs and all(arc[0].startswith(str(Path(json.__file__).parent)) for arc in arcs)


def test_previous_tracer_is_restored(subject: ModuleType) -> None:
    cov = BranchCoverage([subject])
    before = sys.gettrace()
    with pytest.raises(ValueError):
        cov.run(subject.boom, 1)
    assert sys.gettrace() is before
    cov.run(subject.classify, 0)
    assert sys.gettrace() is before


def test_measure_turns_exceptions_into_rejections(subject: ModuleType) -> None:
    cov = BranchCoverage(["json"])
    measure = cov.measure(json.loads)
    ok, arcs = measure("[1, 2]")
    assert ok and arcs
    bad, bad_arcs = measure("[1,")
    assert not bad and bad_arcs and bad_arcs != arcs


def test_bad_include_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        BranchCoverage([])
    with pytest.raises(InvalidArgument):
        BranchCoverage(["no_such_module_rlcheck_test"])
