"""The one exception tree of ckptzip.

Every error the package raises on purpose derives from :class:`CkptzipError`, and each
specific subclass also inherits the builtin exception that fits, so callers can catch
either. Messages name the offending value and say what to do about it.
"""

from __future__ import annotations

__all__ = [
    "CkptzipError",
    "ConfigError",
    "CorruptCheckpointError",
    "UnsupportedFormatError",
    "UnsupportedValueError",
    "CheckpointExistsError",
    "CheckpointNotFoundError",
    "MissingParentError",
    "StorageError",
    "DecodeLimitError",
    "DecodeMemoryError",
    "NotRegularFileError",
    "StepMismatchError",
    "SaveInProgressError",
    "ProbeError",
    "StaleKernelsError",
    "CkptzipWarning",
    "KernelsFallbackWarning",
    "ParentUnusableWarning",
    "SearchGaveUpWarning",
]


class CkptzipError(Exception):
    """Root of every error ckptzip raises on purpose."""


class ConfigError(CkptzipError, ValueError):
    """A configuration value is out of range or inconsistent."""


class CorruptCheckpointError(CkptzipError, ValueError):
    """A checkpoint file is damaged, truncated, or not what it claims to be."""


class UnsupportedFormatError(CorruptCheckpointError):
    """The file is a ckptzip file of a format version this release cannot read."""


class UnsupportedValueError(CkptzipError, TypeError):
    """A value in the object to save cannot be stored (its path in the structure is named)."""


class CheckpointExistsError(CkptzipError, FileExistsError):
    """Saving would overwrite an existing checkpoint and overwrite was not asked for."""


class CheckpointNotFoundError(CkptzipError, FileNotFoundError):
    """The requested checkpoint (path or step) does not exist or is not finished."""


class MissingParentError(CorruptCheckpointError):
    """A delta checkpoint's parent is missing or differs from the one it was encoded against."""


class StorageError(CkptzipError, OSError):
    """Writing or reading the storage failed (disk full, permission, I/O error)."""


class DecodeLimitError(CorruptCheckpointError):
    """Refused before decoding: the file declares more decoded bytes than the read limit.

    The limit is the caller's ``max_bytes`` (of :func:`ckptzip.load`, :func:`ckptzip.verify`
    and the manager) or, by default, what the memory available to the process can decode;
    never a multiple of the file's size, which a legitimate file of constant tensors exceeds.
    """


class DecodeMemoryError(CkptzipError, MemoryError):
    """Memory ran out while decoding a checkpoint (the allocator's error is the cause)."""


class NotRegularFileError(StorageError):
    """A checkpoint name holds a FIFO, device, socket or directory, not a regular file.

    Raised before any open that could block (a FIFO's ``open`` waits for a writer).
    """


class StepMismatchError(CorruptCheckpointError):
    """A step's file records another step in its manifest (renamed or swapped files)."""


class SaveInProgressError(CkptzipError, RuntimeError):
    """An asynchronous save is still running and the manager was asked not to wait for it."""


class ProbeError(CkptzipError, RuntimeError):
    """The search's ``probe_fn`` raised; the live model and optimizer were put back as they were."""


class StaleKernelsError(CkptzipError, ImportError):
    """The compiled kernels next to this code were built from other sources (another ABI, or
    a kernel missing): the package must be rebuilt (``pip install -e ckptzip`` for a checkout)."""


class CkptzipWarning(UserWarning):
    """Something was skipped or kept to be safe (a step not restorable, retention held back)."""


class KernelsFallbackWarning(CkptzipWarning):
    """The compiled kernels are a stale build, so this process runs the reference kernels:
    the same results at a fraction of the speed. Rebuild the package, or set
    ``CKPTZIP_KERNELS=reference`` to choose the reference without this warning."""


class ParentUnusableWarning(CkptzipWarning):
    """A save started a new keyframe because the previous step cannot be its parent.

    The previous step is damaged (a chunk fails its checksum or does not decode), missing,
    or its own chain is broken; the message names it and why. Training keeps checkpointing:
    the new step restores without it.
    """


class SearchGaveUpWarning(CkptzipWarning):
    """The configuration search found no feasible configuration: the searched weights of that
    checkpoint are stored exactly (the message names the save, the mildest configuration tried
    and what it did to ``eval_fn``)."""
