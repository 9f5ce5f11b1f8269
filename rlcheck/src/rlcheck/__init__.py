"""rlcheck: reinforcement-learning guidance for property-based test generators."""

from __future__ import annotations

from rlcheck.errors import InvalidArgument, PolicyFileError, RLCheckError

__version__ = "0.1.0"

__all__ = ["InvalidArgument", "PolicyFileError", "RLCheckError", "__version__"]
