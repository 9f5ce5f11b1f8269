"""Which kernels a process runs when the compiled library is missing or stale.

A package installed without a compiler runs the reference kernels silently (that is what it
can do); a build that is present but from other sources (a checkout pulled without
rebuilding) falls back with a :class:`~ckptzip.errors.KernelsFallbackWarning`, since its user
expects the fast kernels. Each case runs in a fresh interpreter whose import of
``ckptzip.kernels._native`` is replaced: by a tiny library reporting an older ABI, or by an
import error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_PROBE = textwrap.dedent(
    """
    import importlib.abc, importlib.machinery, json, sys, types, warnings

    so, mode = sys.argv[1], sys.argv[2]

    class Native(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name != "ckptzip.kernels._native":
                return None
            if mode == "missing":
                raise ModuleNotFoundError(name)
            return importlib.machinery.ModuleSpec(name, self)

        def create_module(self, spec):
            module = types.ModuleType(spec.name)
            module.__file__ = so
            return module

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, Native())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import ckptzip.kernels as k
        except ImportError as exc:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
            raise SystemExit(0)
    print(json.dumps({
        "implementation": k.IMPLEMENTATION,
        "warnings": [[w.category.__name__, str(w.message)] for w in caught],
    }))
    """
)


@pytest.fixture(scope="module")
def stale_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared library whose ``ckz_abi_version`` is 4, an ABI older than the code's."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build a stale library")
    d = tmp_path_factory.mktemp("stale")
    (d / "stale.c").write_text("int ckz_abi_version(void) { return 4; }\n")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(d / "stale.so"), str(d / "stale.c")], check=True
    )
    return d / "stale.so"


def _probe(so: Path, mode: str, choice: str) -> dict[str, object]:
    env = {**os.environ, "CKPTZIP_KERNELS": choice}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(so), mode], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_stale_build_falls_back_to_the_reference_with_a_warning(stale_library: Path) -> None:
    got = _probe(stale_library, "stale", "auto")
    assert got["implementation"] == "reference"
    warned = [m for c, m in got["warnings"] if c == "KernelsFallbackWarning"]  # type: ignore[union-attr]
    assert len(warned) == 1
    assert "ABI 4" in warned[0] and "rebuild" in warned[0]


def test_a_stale_build_fails_where_the_fast_kernels_are_demanded(stale_library: Path) -> None:
    got = _probe(stale_library, "stale", "fast")
    assert got["error"] == "StaleKernelsError"
    assert "ABI 4" in str(got["message"])


def test_choosing_the_reference_does_not_warn_about_a_stale_build(stale_library: Path) -> None:
    got = _probe(stale_library, "stale", "reference")
    assert got["implementation"] == "reference"
    assert got["warnings"] == []


def test_a_missing_build_falls_back_silently(stale_library: Path) -> None:
    got = _probe(stale_library, "missing", "auto")
    assert got["implementation"] == "reference"
    assert got["warnings"] == []
