"""The one exception tree of rlcheck.

Every error the package raises on purpose derives from :class:`RLCheckError`; specific
subclasses also inherit the builtin that fits. Messages name the offending value and the fix.
"""

from __future__ import annotations

__all__ = ["InvalidArgument", "PolicyFileError", "RLCheckError", "RLCheckWarning"]


class RLCheckError(Exception):
    """Root of every error rlcheck raises on purpose."""


class InvalidArgument(RLCheckError, ValueError):
    """An argument to an rlcheck function is out of range or of the wrong kind."""


class PolicyFileError(RLCheckError, ValueError):
    """A saved policy file is corrupt or incompatible (callers usually warn and ignore it)."""


class RLCheckWarning(UserWarning):
    """Something was ignored so the run could go on (e.g. an unreadable policy file)."""
