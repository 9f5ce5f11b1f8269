"""Shared test setup, and the ``attack`` marker of the attack suite (see ``_attack.py``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from _attack import SCALE, area_of

_OUTCOMES: Counter[tuple[str, str]] = Counter()


@pytest.fixture(autouse=True)
def _no_inherited_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-xdist sets ``COLUMNS`` (80) in its workers, which the CLI honours as a user's
    width: its tables then squeezed the tensor paths away under ``-n 2`` only."""
    monkeypatch.delenv("COLUMNS", raising=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = getattr(item, "originalname", item.name)
        area = area_of(item.path.name, name)
        if area is not None:
            item.add_marker(pytest.mark.attack)
            item.user_properties.append(("attack_area", area))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    area = dict(report.user_properties).get("attack_area")
    if area is not None and (report.when == "call" or report.outcome != "passed"):
        _OUTCOMES[(str(area), report.outcome)] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _OUTCOMES:
        return
    terminalreporter.section(f"attack suite (CKPTZIP_ATTACK_SCALE={SCALE:g})")
    for area in sorted({a for a, _ in _OUTCOMES}):
        counts = ", ".join(f"{n} {o}" for (a, o), n in sorted(_OUTCOMES.items()) if a == area)
        terminalreporter.write_line(f"{area}: {counts}")
