"""ckptzip: compress PyTorch training checkpoints with bounded, measured effect on training."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ckptzip.config import CompressionConfig, QuantConfig, StandaloneConfig
from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    CkptzipError,
    CkptzipWarning,
    ConfigError,
    CorruptCheckpointError,
    DecodeLimitError,
    DecodeMemoryError,
    KernelsFallbackWarning,
    MissingParentError,
    NotRegularFileError,
    ParentUnusableWarning,
    ProbeError,
    SaveInProgressError,
    SearchGaveUpWarning,
    StaleKernelsError,
    StepMismatchError,
    StorageError,
    UnsupportedFormatError,
    UnsupportedValueError,
)

if TYPE_CHECKING:
    from ckptzip.api import Report, TensorReport, load, read_quantized, save, verify
    from ckptzip.manager import CheckpointManager, SaveReport
    from ckptzip.plan import MomentPolicy
    from ckptzip.search import SearchResult
    from ckptzip.sensitivity import SensitivityTracker

# What needs torch is imported on first use (PEP 562), so `import ckptzip` and the CLI's
# `--help` cost milliseconds, not the seconds torch takes on a loaded machine; the errors and
# configs above are plain Python and load at once.
_LAZY = {
    **dict.fromkeys(
        ("Report", "TensorReport", "load", "read_quantized", "save", "verify"), "ckptzip.api"
    ),
    "CheckpointManager": "ckptzip.manager",
    "SaveReport": "ckptzip.manager",
    "MomentPolicy": "ckptzip.plan",
    "SearchResult": "ckptzip.search",
    "SensitivityTracker": "ckptzip.sensitivity",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif not name.startswith("__"):  # a submodule: ckptzip.storage, ckptzip.manager ...
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "CheckpointManager",
    "CompressionConfig",
    "MomentPolicy",
    "SaveReport",
    "SearchResult",
    "SensitivityTracker",
    "StandaloneConfig",
    "QuantConfig",
    "Report",
    "TensorReport",
    "load",
    "read_quantized",
    "save",
    "verify",
    "CheckpointExistsError",
    "CheckpointNotFoundError",
    "CkptzipError",
    "CkptzipWarning",
    "ParentUnusableWarning",
    "ConfigError",
    "CorruptCheckpointError",
    "DecodeLimitError",
    "DecodeMemoryError",
    "KernelsFallbackWarning",
    "MissingParentError",
    "NotRegularFileError",
    "ProbeError",
    "SearchGaveUpWarning",
    "SaveInProgressError",
    "StaleKernelsError",
    "StepMismatchError",
    "StorageError",
    "UnsupportedFormatError",
    "UnsupportedValueError",
    "__version__",
]
