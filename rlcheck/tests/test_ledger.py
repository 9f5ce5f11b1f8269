"""The episode ledger: one definition of outcomes, rewards and unique valid inputs."""

from __future__ import annotations

import pytest

from rlcheck.errors import InvalidArgument
from rlcheck.learner import REWARD_DUPLICATE, REWARD_INVALID, REWARD_NEW
from rlcheck.ledger import Counts, Ledger, fingerprint


def test_outcomes_rewards_and_counts() -> None:
    ledger = Ledger()
    assert ledger.record("valid", (1, 2)) is True
    assert ledger.record("valid", (1, 2)) is False
    assert ledger.record("invalid", (1, 2)) is False
    # A failure is new among failures, whatever valid inputs were seen.
    assert ledger.record("failure", (1, 2)) is True
    assert ledger.record("failure", (1, 2)) is False
    assert ledger.counts() == Counts(cases=5, valid=2, unique_valid=1, invalid=1, failures=2)
    assert Ledger.reward("valid", True) == REWARD_NEW
    assert Ledger.reward("failure", False) == REWARD_DUPLICATE
    assert Ledger.reward("invalid", False) == REWARD_INVALID


def test_unhashable_identities_and_bad_outcomes() -> None:
    ledger = Ledger()
    assert ledger.record("valid", [1, 2]) and not ledger.record("valid", [1, 2])
    assert fingerprint({"a": 1}) == fingerprint({"a": 1})
    with pytest.raises(InvalidArgument, match="outcome='odd'"):
        ledger.record("odd", 1)  # type: ignore[arg-type]


def test_memory_bound_keeps_counting() -> None:
    ledger = Ledger(max_seen=3)
    for i in range(10):
        ledger.record("valid", i)
    assert ledger.unique_valid == 10 and len(ledger._seen) == 3
