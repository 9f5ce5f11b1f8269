"""Guides decide the choices of a generator: random, reinforcement learning, replay.

The protocol (and its call order) is :class:`Guide`; :class:`RandomGuide` is the uniform
baseline, :class:`RLGuide` the learner, :class:`ReplayGuide` re-runs a recorded sequence.
"""

from __future__ import annotations

from rlcheck.guides.base import Guide
from rlcheck.guides.random import RandomGuide
from rlcheck.guides.replay import ReplayGuide
from rlcheck.guides.rl import RLGuide

__all__ = ["Guide", "RLGuide", "RandomGuide", "ReplayGuide"]
