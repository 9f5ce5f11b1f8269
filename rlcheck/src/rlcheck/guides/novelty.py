"""The RL guide with novelty rewards: count-based exploration and structural novelty."""

from __future__ import annotations

import math
import os
from typing import Any

from rlcheck.errors import InvalidArgument
from rlcheck.guides.restart import RestartingRLGuide
from rlcheck.learner import REWARD_INVALID
from rlcheck.state import StateAbstraction

__all__ = ["NoveltyRLGuide"]

_MAX_SEEN = 1 << 20
"""Most (state, action) pairs remembered as taken by a valid input; past it the memory
starts over (bounds it on long campaigns: about 200 bytes a pair)."""


class NoveltyRLGuide(RestartingRLGuide):
    """:class:`RestartingRLGuide` with two black-box exploration rewards read from the
    choices made, never from coverage.

    * **Count-based bonus**: each visited (state, action) pair is credited the episode's
      reward plus ``bonus / sqrt(N)``, N that pair's visit count so far. A choice tried a
      few times and failed keeps some value, so it is tried again before the policy
      settles; the bonus fades as the pair is taken more.
    * **Structural novelty**: a valid input whose choices take a (state, action) pair that
      no earlier valid input took (with the default state, a new choice in a new context
      of up to ``k`` ancestors: a new structure, not a new spelling) earns ``novelty``
      on top of its reward, so the policy leans to inputs that differ in shape.

    Both are optional (``0`` turns one off) and combine with the parent's restarts
    (``patience``; ``None``, the default here, never restarts) and its punished
    repeats (``duplicate_reward``).

    Parameters
    ----------
    bonus:
        Scale of the count-based bonus (rewards: +20 new valid, −1 invalid).
    novelty:
        Extra reward of a valid input that takes a pair no valid input took before.
    patience, duplicate_reward:
        As for :class:`RestartingRLGuide`; a restart also forgets which pairs valid
        inputs took (the rows they name are dropped).
    state, k, epsilon, seed, max_states, policy_file:
        As for :class:`~rlcheck.RLGuide`.

    Examples
    --------
    >>> import rlcheck
    >>> def pair(g):
    ...     return g.integer(0, 9, label="a"), g.integer(0, 9, label="b")
    >>> guide = NoveltyRLGuide(seed=0)
    >>> result = rlcheck.run(pair, lambda p: p[0] < p[1], guide=guide, trials=2000)
    >>> result.unique_valid > 40      # of the 45 pairs with a < b
    True
    """

    name = "rl-novelty"

    def __init__(
        self,
        state: str | StateAbstraction = "labelled",
        *,
        bonus: float = 1.0,
        novelty: float = 10.0,
        patience: int | None = None,
        duplicate_reward: float = REWARD_INVALID,
        k: int = 4,
        epsilon: float = 0.25,
        seed: int | None = None,
        max_states: int = 200_000,
        policy_file: str | os.PathLike[str] | None = None,
    ) -> None:
        for name, value in (("bonus", bonus), ("novelty", novelty)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidArgument(f"{name}={value!r} must be a number")
            if not (math.isfinite(value) and value >= 0):
                raise InvalidArgument(f"{name}={value!r} must be finite and at least 0")
        super().__init__(
            state,
            patience=patience,
            duplicate_reward=duplicate_reward,
            k=k,
            epsilon=epsilon,
            seed=seed,
            max_states=max_states,
            policy_file=policy_file,
        )
        self.bonus = float(bonus)
        self.novelty = float(novelty)
        self.novel_inputs = 0
        """Valid inputs so far that took a (state, action) pair no valid input took before."""
        # Pairs by the identity of their row (a list) and slot; the value keeps the row
        # alive so its id is not reused while it is remembered.
        self._seen: dict[tuple[int, int], list[Any]] = {}

    def episode_return(self, *, valid: bool, new: bool) -> float:
        reward = super().episode_return(valid=valid, new=new)
        if valid and self.novelty and self._takes_new_pair():
            self.novel_inputs += 1
            reward += self.novelty
        return reward

    def _takes_new_pair(self) -> bool:
        seen = self._seen
        if len(seen) > _MAX_SEEN:
            seen.clear()
        fresh = False
        for row, at in self._visits:
            key = (id(row), at)
            if key not in seen:
                seen[key] = row
                fresh = True
        return fresh

    def learn(self, reward: float) -> None:
        self.policy.learn_rows(self._visits, reward, bonus=self.bonus)

    def restart(self) -> None:
        super().restart()
        self._seen.clear()

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "guide": self.name,
            "bonus": self.bonus,
            "novelty": self.novelty,
        }
