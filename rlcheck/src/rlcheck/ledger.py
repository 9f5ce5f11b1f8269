"""The episode ledger: outcome → reward, and the one definition of a unique valid input.

Both front ends (``rlcheck.run`` and the Hypothesis backend), the pytest plugin and the
reports count through a :class:`Ledger`. One episode ends in one of three outcomes:

* ``"invalid"``: the input was rejected (the check returned false or raised
  :class:`rlcheck.Invalid`; in Hypothesis, ``assume()``, ``.filter()`` or an overrun).
  Reward −1.
* ``"valid"``: the input passed. Reward +20 when it is *new*, 0 when it repeats one.
* ``"failure"``: the check (the test) raised: a found bug. Rewarded like a valid input,
  new or repeat among the failures (finding it was the point; a second identical one
  earns nothing). Failures are counted apart from ``valid``.

**Unique valid input** (the one definition): a valid outcome whose *identity* has not
been recorded as valid before in the same ledger. The identity is what determines the
input, as the front end sees it:

* ``rlcheck.run``: ``key(value)``, by default the input value itself;
* a Hypothesis test case: its choice sequence (the primitive values drawn), from which
  Hypothesis rebuilds the same input; the backend and the pytest plugin both use it.

The ledger stores :func:`fingerprint` (a 64-bit hash) of each identity, not the inputs:
about 80 bytes per distinct input whatever its size; two distinct identities collide
with probability about n²/2⁶⁵. Unhashable identities are fingerprinted by their
``repr``. With ``max_seen``, at most that many fingerprints are kept (memory bound for
endless runs); past it, new identities still count as unique but are not remembered.

Examples
--------
>>> ledger = Ledger()
>>> ledger.record("valid", (1, 2)), ledger.record("valid", (1, 2)), ledger.record("invalid")
(True, False, False)
>>> Ledger.reward("valid", True), Ledger.reward("valid", False), Ledger.reward("invalid", False)
(20.0, 0.0, -1.0)
>>> ledger.counts()
Counts(cases=3, valid=2, unique_valid=1, invalid=1, failures=0)
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, fields
from typing import Literal, TypeVar

from rlcheck.errors import InvalidArgument
from rlcheck.learner import reward_for

__all__ = ["OUTCOMES", "Counts", "Ledger", "Outcome", "fingerprint"]

Outcome = Literal["invalid", "valid", "failure"]
OUTCOMES: tuple[Outcome, ...] = ("invalid", "valid", "failure")
_C = TypeVar("_C", bound="Counts")


def fingerprint(identity: object) -> int:
    """The 64-bit fingerprint a ledger keeps of an input's identity.

    >>> fingerprint((1, "a")) == fingerprint((1, "a"))
    True
    >>> fingerprint([1, 2]) == fingerprint([1, 2])   # unhashable: by repr
    True
    """
    try:
        return hash(identity)
    except TypeError:  # lists, dicts, ...: their repr is a faithful enough identity
        return hash(repr(identity))


@dataclass(frozen=True)
class Counts:
    """A ledger's counts: ``cases = valid + invalid + failures``."""

    cases: int = 0
    valid: int = 0
    unique_valid: int = 0
    invalid: int = 0
    failures: int = 0

    def __add__(self: _C, other: _C) -> _C:
        """Field by field: counts add up, flags (in subclasses) are or-ed.

        >>> Counts(1, 1, 1, 0, 0) + Counts(2, 0, 0, 2, 0)
        Counts(cases=3, valid=1, unique_valid=1, invalid=2, failures=0)
        """
        return type(self)(*(_combine(getattr(self, f), getattr(other, f)) for f in _names(self)))  # type: ignore[arg-type]


def _names(counts: Counts) -> tuple[str, ...]:
    return tuple(f.name for f in fields(counts))


def _combine(a: int | bool | str, b: int | bool | str) -> int | bool | str:
    # flags and notes (subclasses' bool and str fields) are or-ed: the first one set stays
    return (a or b) if isinstance(a, (bool, str)) else a + b  # type: ignore[operator]


class Ledger:
    """Counts episodes by outcome and tells new valid inputs from repeats.

    Parameters
    ----------
    max_seen:
        Most fingerprints kept (``None``: no bound).
    """

    __slots__ = ("_failed", "_seen", "_unique", "failures", "invalid", "max_seen", "valid")

    def __init__(self, *, max_seen: int | None = None) -> None:
        if max_seen is not None and max_seen < 0:
            raise InvalidArgument(f"max_seen={max_seen!r} must be non-negative or None")
        self.max_seen = max_seen
        self.valid = 0
        self.invalid = 0
        self.failures = 0
        self._seen: set[int] = set()
        self._failed: set[int] = set()
        self._unique = 0

    @property
    def cases(self) -> int:
        return self.valid + self.invalid + self.failures

    @property
    def unique_valid(self) -> int:
        """Distinct valid inputs recorded (see the module docstring)."""
        return self._unique

    def record(self, outcome: Outcome, identity: Hashable = None) -> bool:
        """Count one episode; whether it is new (always ``False`` when invalid, and
        ``identity`` is then unused). Its reward is :meth:`reward` of both."""
        if outcome == "invalid":
            self.invalid += 1
            return False
        if outcome == "valid":
            self.valid += 1
            new = self._add(self._seen, identity)
            self._unique += new
            return new
        if outcome == "failure":
            self.failures += 1
            return self._add(self._failed, identity)
        raise InvalidArgument(f"outcome={outcome!r} must be one of {OUTCOMES}")

    @staticmethod
    def reward(outcome: Outcome, new: bool) -> float:
        """The episode's reward (RLCheck's scheme, :func:`rlcheck.learner.reward_for`)."""
        return reward_for(valid=outcome != "invalid", new=new)

    def _add(self, seen: set[int], identity: Hashable) -> bool:
        h = fingerprint(identity)
        if h in seen:
            return False
        if self.max_seen is None or len(seen) < self.max_seen:
            seen.add(h)
        return True

    def counts(self) -> Counts:
        """The counts so far."""
        return Counts(self.cases, self.valid, self._unique, self.invalid, self.failures)

    def __repr__(self) -> str:
        return f"Ledger({self.counts()})"
