"""ckptzip: compress PyTorch training checkpoints with bounded, measured effect on training."""

from __future__ import annotations

from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    CkptzipError,
    ConfigError,
    CorruptCheckpointError,
    MissingParentError,
    StorageError,
    UnsupportedFormatError,
    UnsupportedValueError,
)

__version__ = "0.1.0"

__all__ = [
    "CheckpointExistsError",
    "CheckpointNotFoundError",
    "CkptzipError",
    "ConfigError",
    "CorruptCheckpointError",
    "MissingParentError",
    "StorageError",
    "UnsupportedFormatError",
    "UnsupportedValueError",
    "__version__",
]
