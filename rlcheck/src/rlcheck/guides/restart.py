"""The RL guide with restarts: a policy that stops finding new valid inputs starts over."""

from __future__ import annotations

import os
from typing import Any

from rlcheck.errors import InvalidArgument
from rlcheck.guides.rl import RLGuide
from rlcheck.learner import REWARD_INVALID, Policy, reward_for
from rlcheck.state import StateAbstraction

__all__ = ["RestartingRLGuide"]


class RestartingRLGuide(RLGuide):
    """:class:`RLGuide` that punishes repeats and forgets its policy after ``patience``
    episodes without a new valid input.

    RLCheck's policy can collapse: once the actions leading to a few valid inputs are
    greedy, repeating them (reward 0) beats exploring (mostly −1), so it keeps making the
    same inputs, or, before any valid input, settles on an invalid region. A restart
    clears the Q-tables (keeping the random stream), so the guide explores afresh with
    what the campaign's uniqueness set already holds counting as duplicates. Black-box:
    it reads only the episode outcomes. Each restart doubles the patience (up to 64x), so a
    slowly improving policy is not thrown away again and again.

    Parameters
    ----------
    patience:
        Episodes without a new valid input before the first restart; ``None``: never
        restart (repeats are still rewarded ``duplicate_reward``).
    duplicate_reward:
        Reward for a valid input already made (RLCheck: 0). At the invalid reward (−1,
        the default here) a repeat no longer outranks an action never tried (value 0), so
        a policy settled on a few inputs moves on without waiting for a restart.
    state, k, epsilon, seed, max_states, policy_file:
        As for :class:`RLGuide`.

    Examples
    --------
    >>> import rlcheck
    >>> def pair(g):
    ...     return g.integer(0, 9, label="a"), g.integer(0, 9, label="b")
    >>> guide = RestartingRLGuide(patience=50, seed=0)
    >>> result = rlcheck.run(pair, lambda p: p[0] < p[1], guide=guide, trials=2000)
    >>> result.unique_valid
    45
    """

    name = "rl-restart"

    def __init__(
        self,
        state: str | StateAbstraction = "labelled",
        *,
        patience: int | None = 500,
        duplicate_reward: float = REWARD_INVALID,
        k: int = 4,
        epsilon: float = 0.25,
        seed: int | None = None,
        max_states: int = 200_000,
        policy_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if patience is not None and (
            not isinstance(patience, int) or isinstance(patience, bool) or patience < 1
        ):
            raise InvalidArgument(f"patience={patience!r} must be a positive int or None")
        super().__init__(
            state, k=k, epsilon=epsilon, seed=seed, max_states=max_states, policy_file=policy_file
        )
        self.patience = patience
        self.duplicate_reward = duplicate_reward
        self.restarts = 0
        """Restarts so far in this guide's life."""
        self._stale = 0
        self._limit = patience
        self._limit_cap = 64 * (patience or 0)
        self._empty = Policy().to_dict()

    def episode_return(self, *, valid: bool, new: bool) -> float:
        """The reward credited to the episode's choices (subclasses add to it)."""
        return self.duplicate_reward if valid and not new else reward_for(valid=valid, new=new)

    def end_episode(self, *, valid: bool, new: bool) -> None:
        self.learn(self.episode_return(valid=valid, new=new))
        self._visits.clear()
        if valid and new:
            self._stale = 0
            return
        self._stale += 1
        if self._limit is not None and self._stale >= self._limit:
            self.restart()
            self._stale = 0
            self._limit = min(self._limit * 2, self._limit_cap)

    def learn(self, reward: float) -> None:
        """Credit ``reward`` to the episode's visits (subclasses may shape it per visit)."""
        self.policy.learn_rows(self._visits, reward)

    def restart(self) -> None:
        """Forget the learned policy (the random stream goes on)."""
        # In place: the generation context holds the policy's chooser.
        self.policy.load_dict(self._empty)
        self.restarts += 1

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "guide": self.name,
            "patience": self.patience,
            "duplicate_reward": self.duplicate_reward,
        }
