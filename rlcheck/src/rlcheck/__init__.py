"""rlcheck: reinforcement-learning guidance for property-based test generators.

The public names below are imported on first use (PEP 562): ``import rlcheck`` loads no
submodule, so the pytest plugin (``rlcheck.pytest_plugin``, loaded by every pytest run in
an environment where rlcheck is installed, and by each xdist worker) costs nothing more
than itself until a name is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_WHERE = {
    **dict.fromkeys(("Failure", "Result", "Sample", "run"), "rlcheck.campaign"),
    **dict.fromkeys(
        (
            "Invalid",
            "InvalidArgument",
            "PolicyFileError",
            "ReplayError",
            "RLCheckError",
            "RLCheckWarning",
        ),
        "rlcheck.errors",
    ),
    **dict.fromkeys(("Gen", "Overrun", "replay"), "rlcheck.gen"),
    **dict.fromkeys(("Guide", "RandomGuide", "ReplayGuide", "RLGuide"), "rlcheck.guides"),
    **dict.fromkeys(("load_policy", "save_policy"), "rlcheck.policy_store"),
    **dict.fromkeys(
        (
            "AncestorState",
            "LabelledAncestorState",
            "SequenceState",
            "StateAbstraction",
            "make_state",
        ),
        "rlcheck.state",
    ),
}
"""Each public name's module."""

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rlcheck' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups are plain
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
