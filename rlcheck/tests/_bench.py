"""Loading a benchmark script as a module, for the tests of what it computes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(filename: str) -> ModuleType:
    """``benchmarks/<filename>``, executed afresh as the module ``rlcheck_bench_<stem>``: by
    path and under a name of its own (a script's name, such as ``compare``, may clash with
    another module's), and registered in ``sys.modules`` as an import would (dataclasses
    look their module up there)."""
    name = f"rlcheck_bench_{Path(filename).stem}"
    spec = importlib.util.spec_from_file_location(name, BENCH / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
