"""rlcheck as a Hypothesis backend (``@settings(backend="rlcheck")``).

``provider`` holds the adapter (:class:`RLCheckProvider`) and its per-test statistics,
``buckets`` the domain bucketing of wide draws, ``compat`` every access to Hypothesis
internals. See :mod:`rlcheck.hypothesis.provider` for how draws map to the learner.
"""

from __future__ import annotations

from rlcheck.hypothesis import provider as _provider
from rlcheck.hypothesis.provider import *  # noqa: F403  (the public names of the adapter)

__all__ = list(_provider.__all__)
