"""Guides decide the choices of a generator: random, reinforcement learning, replay.

The protocol (and its call order) is :class:`Guide`; :class:`RandomGuide` is the uniform
baseline, :class:`RLGuide` the learner, :class:`ReplayGuide` re-runs a recorded sequence.
:class:`GreyboxGuide` (coverage-guided mutation, the greybox baseline) and
:class:`RestartingRLGuide` (the learner with restarts) and :class:`NoveltyRLGuide` (with
count-based and structural novelty rewards) are for comparisons.
"""

from __future__ import annotations

from rlcheck.guides.base import Guide
from rlcheck.guides.greybox import GreyboxGuide
from rlcheck.guides.novelty import NoveltyRLGuide
from rlcheck.guides.random import RandomGuide
from rlcheck.guides.replay import ReplayGuide
from rlcheck.guides.restart import RestartingRLGuide
from rlcheck.guides.rl import RLGuide

__all__ = [
    "GreyboxGuide",
    "Guide",
    "NoveltyRLGuide",
    "RLGuide",
    "RandomGuide",
    "ReplayGuide",
    "RestartingRLGuide",
]
