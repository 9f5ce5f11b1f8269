"""Every example in ckptzip's docstrings runs and prints what it says (``doctest``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ckptzip

# modules whose import needs an optional dependency this environment may lack
_OPTIONAL = {
    "ckptzip.integrations.lightning": ("pytorch_lightning", "lightning"),
    "ckptzip.integrations.transformers": ("transformers",),
}


def _modules() -> list[str]:
    names = [ckptzip.__name__]
    for info in pkgutil.walk_packages(ckptzip.__path__, prefix="ckptzip."):
        names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_the_docstring_examples_hold(name: str) -> None:
    needs = _OPTIONAL.get(name)
    if needs is not None and not any(importlib.util.find_spec(m) for m in needs):
        pytest.skip(f"{name} needs one of {needs}")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
