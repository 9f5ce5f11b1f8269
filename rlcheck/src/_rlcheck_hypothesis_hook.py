"""Registers rlcheck's Hypothesis backend; run by Hypothesis's entry point at import.

Hypothesis calls :func:`_hypothesis_setup_hook` while it is being imported (the
``[project.entry-points.hypothesis]`` table of rlcheck's ``pyproject.toml``). The backend is
registered by dotted path from this top-level module (outside the ``rlcheck`` package, as
Hypothesis recommends), so importing Hypothesis never imports rlcheck: the backend loads
when a test first asks for ``backend="rlcheck"``.

Besides ``@settings(backend="rlcheck")`` on one test, a whole suite can switch with the
``rlcheck`` settings profile (``settings.load_profile("rlcheck")``, or
``pytest --hypothesis-profile=rlcheck``), with ``pytest --rlcheck``, or by setting the
environment variable ``RLCHECK_HYPOTHESIS_BACKEND=1`` (loads that profile at import).
``backend="rlcheck-fast"`` (``pytest --rlcheck-fast``) is the variant without the default
backend's tail (bounded time on very strict tests).
"""

from __future__ import annotations

import os

__all__ = ["ENV_VAR"]

ENV_VAR = "RLCHECK_HYPOTHESIS_BACKEND"
_PROVIDER_PATH = "rlcheck.hypothesis.provider.RLCheckProvider"
_FAST_PROVIDER_PATH = "rlcheck.hypothesis.provider.FastRLCheckProvider"


def _hypothesis_setup_hook() -> None:
    from hypothesis import settings
    from hypothesis.internal.conjecture.providers import AVAILABLE_PROVIDERS

    AVAILABLE_PROVIDERS.setdefault("rlcheck", _PROVIDER_PATH)
    AVAILABLE_PROVIDERS.setdefault("rlcheck-fast", _FAST_PROVIDER_PATH)
    # Built on whatever profile is active now, so only the backend changes.
    settings.register_profile("rlcheck", backend="rlcheck")
    if os.environ.get(ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on"):
        settings.load_profile("rlcheck")
