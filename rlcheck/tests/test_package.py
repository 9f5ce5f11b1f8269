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


def test_importing_rlcheck_loads_no_submodule_until_a_name_is_used() -> None:
    # pytest loads the plugin (and so the package) in every run of an environment where
    # rlcheck is installed, and in each xdist worker: it must not pay for the rest.
    code = (
        "import sys, rlcheck, rlcheck.pytest_plugin\n"
        "print(sorted(m for m in sys.modules if m.startswith('rlcheck')))\n"
        "rlcheck.RLGuide\n"
        "print('rlcheck.guides.rl' in sys.modules, 'rlcheck.campaign' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, used = out.stdout.splitlines()
    assert loaded == "['rlcheck', 'rlcheck.pytest_plugin']"
    assert used == "True False"  # a name loads its own module only


def test_every_public_name_resolves_from_its_module() -> None:
    import importlib

    for name in rlcheck.__all__:
        value = getattr(rlcheck, name)
        if name != "__version__":
            assert getattr(importlib.import_module(value.__module__), name) is value
    assert set(rlcheck.__all__) <= set(dir(rlcheck))
    namespace: dict[str, object] = {}
    exec("from rlcheck import *", namespace)
    assert set(rlcheck.__all__) <= set(namespace)
    try:
        rlcheck.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")
