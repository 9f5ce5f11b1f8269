"""Package-level contracts: version, exception tree, console script, no torch."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

import rlcheck
from rlcheck.cli import main


def test_version_and_error_tree() -> None:
    assert rlcheck.__version__
    assert issubclass(rlcheck.InvalidArgument, rlcheck.RLCheckError)
    assert issubclass(rlcheck.InvalidArgument, ValueError)


def test_cli_help_and_version() -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["--help"]).exit_code == 0
    out = runner.invoke(main, ["--version"])
    assert out.exit_code == 0 and rlcheck.__version__ in out.output


def test_importing_rlcheck_does_not_import_torch() -> None:
    code = "import sys, rlcheck, rlcheck.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
