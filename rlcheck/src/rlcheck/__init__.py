"""rlcheck: reinforcement-learning guidance for property-based test generators."""

from __future__ import annotations

from rlcheck.campaign import Failure, Result, Sample, run
from rlcheck.errors import (
    Invalid,
    InvalidArgument,
    PolicyFileError,
    ReplayError,
    RLCheckError,
    RLCheckWarning,
)
from rlcheck.gen import Gen, Overrun, replay
from rlcheck.guides import Guide, RandomGuide, ReplayGuide, RLGuide
from rlcheck.policy_store import load_policy, save_policy
from rlcheck.state import (
    AncestorState,
    LabelledAncestorState,
    SequenceState,
    StateAbstraction,
    make_state,
)

__version__ = "0.1.0"

__all__ = [
    "AncestorState",
    "Failure",
    "Gen",
    "Guide",
    "Invalid",
    "InvalidArgument",
    "LabelledAncestorState",
    "Overrun",
    "PolicyFileError",
    "RLCheckError",
    "RLCheckWarning",
    "RLGuide",
    "RandomGuide",
    "ReplayError",
    "ReplayGuide",
    "Result",
    "Sample",
    "SequenceState",
    "StateAbstraction",
    "__version__",
    "load_policy",
    "make_state",
    "replay",
    "run",
    "save_policy",
]
