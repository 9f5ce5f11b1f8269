"""The one exception tree of rlcheck.

Every error the package raises on purpose derives from :class:`RLCheckError`; specific
subclasses also inherit the builtin that fits. Messages name the offending value and the fix.
"""

from __future__ import annotations

__all__ = [
    "CheckTimeout",
    "Invalid",
    "InvalidArgument",
    "PolicyFileError",
    "PolicyMismatch",
    "RLCheckError",
    "RLCheckWarning",
    "ReplayError",
]


class RLCheckError(Exception):
    """Root of every error rlcheck raises on purpose."""


class InvalidArgument(RLCheckError, ValueError):
    """An argument to an rlcheck function is out of range or of the wrong kind."""


class PolicyFileError(RLCheckError, ValueError):
    """A saved policy file is corrupt or incompatible (callers usually warn and ignore it)."""


class PolicyMismatch(PolicyFileError):
    """A good policy file, saved for another generator, state abstraction or kind."""


class RLCheckWarning(UserWarning):
    """Something was ignored so the run could go on (e.g. an unreadable policy file)."""


class Invalid(RLCheckError):
    """Raise from a generator or a check to mark the current input invalid.

    A check may equally return ``False``; raising is handy deep inside a parser or
    validator. Raised from a generator, it rejects the input early (like ``assume``).
    """


class CheckTimeout(RLCheckError):
    """A check ran longer than ``run(check_timeout=...)``: recorded as a found bug."""


class ReplayError(RLCheckError, ValueError):
    """A recorded choice sequence does not fit the generator it is replayed on."""
