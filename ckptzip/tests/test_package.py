"""Package-level contracts: version, exception tree, console script."""

from __future__ import annotations

import os
import subprocess
import sys

from click.testing import CliRunner

import ckptzip
from ckptzip.cli import main


def test_version_and_error_tree() -> None:
    assert ckptzip.__version__
    for name in ckptzip.errors.__all__:
        cls = getattr(ckptzip, name)
        assert issubclass(cls, (ckptzip.CkptzipError, ckptzip.CkptzipWarning))
    assert issubclass(ckptzip.CorruptCheckpointError, ValueError)


def test_cli_help_and_version() -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["--help"]).exit_code == 0
    out = runner.invoke(main, ["--version"])
    assert out.exit_code == 0 and ckptzip.__version__ in out.output


def test_core_never_imports_optional_frameworks() -> None:
    """``import ckptzip`` (and its CLI) pull in neither Lightning, transformers nor DCP."""
    code = (
        "import sys, ckptzip, ckptzip.cli, ckptzip.integrations\n"
        "bad = [m for m in ('pytorch_lightning', 'lightning', 'transformers', 'accelerate',"
        " 'torch.distributed.checkpoint') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))
