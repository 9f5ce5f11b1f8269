"""Shared test setup."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_inherited_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-xdist sets ``COLUMNS`` (80) in its workers, which the CLI honours as a user's
    width: its tables then squeezed the tensor paths away under ``-n 2`` only."""
    monkeypatch.delenv("COLUMNS", raising=False)
