"""ckptzip: compress PyTorch training checkpoints with bounded, measured effect on training."""

from __future__ import annotations

from ckptzip.api import Report, TensorReport, load, read_quantized, save, verify
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    CkptzipError,
    CkptzipWarning,
    ConfigError,
    CorruptCheckpointError,
    DecodeLimitError,
    DecodeMemoryError,
    MissingParentError,
    NotRegularFileError,
    ParentUnusableWarning,
    ProbeError,
    SaveInProgressError,
    StepMismatchError,
    StorageError,
    UnsupportedFormatError,
    UnsupportedValueError,
)
from ckptzip.manager import CheckpointManager, SaveReport
from ckptzip.plan import MomentPolicy
from ckptzip.search import SearchResult
from ckptzip.sensitivity import SensitivityTracker

__version__ = "0.1.0"

__all__ = [
    "CheckpointManager",
    "CompressionConfig",
    "MomentPolicy",
    "SaveReport",
    "SearchResult",
    "SensitivityTracker",
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
    "MissingParentError",
    "NotRegularFileError",
    "ProbeError",
    "SaveInProgressError",
    "StepMismatchError",
    "StorageError",
    "UnsupportedFormatError",
    "UnsupportedValueError",
    "__version__",
]
