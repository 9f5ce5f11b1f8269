"""The root Makefile's set-up refuses a Python older than 3.10 before making anything, with a
message that says what to run (pip's own message was a torch dependency conflict)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


@pytest.mark.parametrize("python", ["py39", "missing"])
def test_setup_refuses_an_old_or_missing_python(tmp_path: Path, python: str) -> None:
    fake = tmp_path / "py39"
    fake.write_text('#!/bin/sh\necho "Python 3.9.18" >&2; exit 1\n')
    fake.chmod(0o755)
    interpreter = str(fake) if python == "py39" else str(tmp_path / "no-such-python")
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["make", "-C", str(ROOT), "demo", f"PYTHON={interpreter}", f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "is not Python 3.10 or newer" in done.stderr, done.stderr
    assert "run: make demo PYTHON=python3.11" in done.stderr
    if python == "py39":
        assert "(Python 3.9.18)" in done.stderr
    assert not venv.exists()  # nothing made, so a rerun with the right PYTHON starts clean
