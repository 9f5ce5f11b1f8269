"""The documented import path of the Hypothesis backend; the code is in
:mod:`rlcheck.hypothesis` (``provider``, ``buckets``, ``compat``)."""

from __future__ import annotations

from rlcheck import hypothesis as _package
from rlcheck.hypothesis import *  # noqa: F403  (the same names, by their old path)

__all__ = list(_package.__all__)
