"""Package-level contracts: version, exception tree, console script."""

from __future__ import annotations

from click.testing import CliRunner

import ckptzip
from ckptzip.cli import main


def test_version_and_error_tree() -> None:
    assert ckptzip.__version__
    for name in ckptzip.errors.__all__:
        assert issubclass(getattr(ckptzip, name), ckptzip.CkptzipError)
    assert issubclass(ckptzip.CorruptCheckpointError, ValueError)


def test_cli_help_and_version() -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["--help"]).exit_code == 0
    out = runner.invoke(main, ["--version"])
    assert out.exit_code == 0 and ckptzip.__version__ in out.output
