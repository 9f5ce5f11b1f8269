"""The reinforcement-learning guide: Monte Carlo control over the generator's choice points."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from rlcheck.errors import InvalidArgument, PolicyMismatch, RLCheckWarning
from rlcheck.guides.base import Guide
from rlcheck.learner import Policy, Visit, reward_for
from rlcheck.policy_store import load_policy, save_policy
from rlcheck.state import StateAbstraction, make_state

__all__ = ["RLGuide"]


class RLGuide(Guide):
    """Learns, while generating, which choices lead to new valid inputs (RLCheck).

    One Q-table per kind of choice point, keyed by (abstract state, option index);
    ε-greedy choice; at the end of each episode every visited (state, action) is credited
    with the episode's reward (+20 valid and new, 0 valid duplicate, −1 invalid) as a
    running mean. The learning rule itself is :class:`rlcheck.learner.Policy`.

    Parameters
    ----------
    state:
        The state abstraction: a name (``"sequence"``, ``"ancestor"``, ``"labelled"``) or a
        :class:`~rlcheck.state.StateAbstraction` instance. ``"labelled"`` (the default) uses
        the ancestor path with scope labels, and equals ``"sequence"`` for a generator
        without scopes.
    k:
        Window length when ``state`` is a name.
    epsilon:
        Exploration probability.
    seed:
        Seed of the policy's random stream; same seed, same inputs.
    max_states:
        Cap on states per choice point's Q-table (bounds memory on long campaigns).
    policy_file:
        If given, the policy is loaded from this file when a campaign starts (a missing
        or corrupt file is ignored with a warning) and saved to it, atomically, when the
        campaign ends. A file learned for another generator or state abstraction is
        never overwritten: it is kept aside, renamed to ``<name>.foreign-<n>``
        (:meth:`load` warns where), before the new policy is saved.

    Attributes
    ----------
    abstraction:
        The :class:`~rlcheck.state.StateAbstraction` in use (read-only).
    policy:
        The :class:`~rlcheck.learner.Policy` being learned, its Q-tables (read-only).

    Examples
    --------
    >>> import rlcheck
    >>> def pair(g):
    ...     return g.integer(0, 9, label="a"), g.integer(0, 9, label="b")
    >>> result = rlcheck.run(pair, lambda p: p[0] < p[1], guide=RLGuide(seed=0), trials=500)
    >>> result.valid > 250       # random would find about 45 % valid
    True
    """

    name = "rl"

    def __init__(
        self,
        state: str | StateAbstraction = "labelled",
        *,
        k: int = 4,
        epsilon: float = 0.25,
        seed: int | None = None,
        max_states: int = 200_000,
        policy_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(state, StateAbstraction):
            self._abstraction = state
        elif isinstance(state, str):
            self._abstraction = make_state(state, k=k)
        else:
            raise InvalidArgument(
                f"state={state!r} must be a state abstraction name or a StateAbstraction"
            )
        self._policy = Policy(epsilon=epsilon, seed=seed, max_states=max_states)
        self.policy_file = policy_file
        self._seed = seed
        self._generator_name = ""
        self._foreign = False  # the policy file holds another generator's policy
        # One list for the guide's life, cleared in place: the driver (the hot path, see
        # Policy.window_driver) holds it.
        self._visits: list[Visit] = []
        self._driver = self._policy.window_driver(self._visits, self._abstraction)
        self._choose = self._driver.choose

    @property
    def abstraction(self) -> StateAbstraction:
        return self._abstraction

    @property
    def policy(self) -> Policy:
        return self._policy

    def chooser(self) -> Callable[[Hashable, Sequence[Any]], int]:
        # A subclass that overrides ``choose`` gets its own method called.
        return self._choose if type(self).choose is RLGuide.choose else self.choose

    def choose(self, point: Hashable, options: Sequence[Any]) -> int:
        return self._choose(point, options)

    def scope_hooks(self) -> tuple[Callable[[Hashable], None], Callable[[], None]]:
        # The driver's own functions unless the methods are replaced (by a subclass or on
        # the instance).
        enter: Callable[[Hashable], None] = self.enter_scope
        exit_: Callable[[], None] = self.exit_scope
        if getattr(enter, "__func__", None) is RLGuide.enter_scope:
            enter = self._driver.push
        if getattr(exit_, "__func__", None) is RLGuide.exit_scope:
            exit_ = self._driver.pop
        return enter, exit_

    def start_campaign(self, name: str) -> None:
        self._generator_name = name
        self._foreign = False
        if self.policy_file is not None:
            self.load(self.policy_file)

    def start_episode(self) -> None:
        self._driver.reset()
        self._visits.clear()

    def enter_scope(self, label: Hashable) -> None:
        self._driver.push(label)

    def exit_scope(self) -> None:
        self._driver.pop()

    def end_episode(self, *, valid: bool, new: bool) -> None:
        self._policy.learn_rows(self._visits, reward_for(valid=valid, new=new))
        self._visits.clear()

    def end_campaign(self) -> None:
        if self.policy_file is None:
            return
        try:
            self.save(self.policy_file)
        except (OSError, InvalidArgument) as exc:
            # The campaign's result matters more than the saved policy: warn, do not raise.
            warnings.warn(
                f"could not save the learned policy to {os.fspath(self.policy_file)!r}: {exc}",
                RLCheckWarning,
                stacklevel=2,
            )

    def reseed(self, seed: int | None) -> None:
        self._seed = seed
        self._policy.rng.seed(seed)

    def describe(self) -> dict[str, Any]:
        return {
            "guide": self.name,
            "seed": self._seed,
            "epsilon": self._policy.epsilon,
            **self._abstraction.describe(),
        }

    # -- persistence ------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        meta = self._abstraction.describe()
        if self._generator_name:
            meta["generator"] = self._generator_name
        return meta

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the learned policy to ``path`` atomically, tagged with the state
        abstraction and (inside a campaign) the generator's name.

        Examples
        --------
        >>> import os, tempfile
        >>> guide = RLGuide(seed=0)
        >>> path = os.path.join(tempfile.mkdtemp(), "bst-policy.json")
        >>> guide.save(path)
        >>> RLGuide(seed=1).load(path)
        True
        """
        if self._foreign and os.fspath(path) == os.fspath(self.policy_file or ""):
            _keep_aside(Path(path))
            self._foreign = False
        save_policy(path, self._policy, meta=self._meta())

    def load(self, path: str | os.PathLike[str]) -> bool:
        """Load a policy saved by :meth:`save`; ``False`` (with a warning, unless the file
        is missing) when it is unusable or was saved for another state abstraction or
        generator (that file is then kept aside when the campaign saves)."""
        try:
            return load_policy(path, self._policy, expect_meta=self._meta(), strict_meta=True)
        except PolicyMismatch as exc:
            self._foreign = True
            warnings.warn(
                f"policy file {os.fspath(path)!r}: {exc}; learning starts from scratch, and "
                f"the file will be kept aside as {str(_aside_name(Path(path)))!r} when the "
                "new policy is saved",
                RLCheckWarning,
                stacklevel=2,
            )
            return False

    def __repr__(self) -> str:
        return f"RLGuide(state={self._abstraction!r}, seed={self._seed!r})"


def _aside_name(path: Path) -> Path:
    """The first free ``<name>.foreign-<n>`` next to ``path``."""
    n = 1
    while (candidate := path.with_name(f"{path.name}.foreign-{n}")).exists():
        n += 1
    return candidate


def _keep_aside(path: Path) -> None:
    # os.rename, not replace: never clobber a file kept aside before (checked just above).
    with contextlib.suppress(FileNotFoundError):
        os.rename(path, _aside_name(path))
