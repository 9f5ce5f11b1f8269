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


def test_reliability_md_names_only_tests_that_exist() -> None:
    """Every ``tests/<file>::<test>`` RELIABILITY.md cites is a test function of that file,
    and every guarantee row cites at least one."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    text = (root / "RELIABILITY.md").read_text()
    cited = re.findall(r"`tests/(test_\w+\.py)::(\w+)`", text)
    assert len(cited) > 50
    missing = []
    for file, name in cited:
        source = (root / "tests" / file).read_text() if (root / "tests" / file).exists() else ""
        if not re.search(rf"^(async )?def {name}\(", source, re.M):
            missing.append(f"tests/{file}::{name}")
    assert not missing, missing
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    assert rows and all("`tests/" in row for row in rows), [
        r[:60] for r in rows if "`tests/" not in r
    ]
    assert "](http" not in text and "shared/" not in text  # the project's own words only
