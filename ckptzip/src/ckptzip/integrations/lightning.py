"""PyTorch Lightning: a ``CheckpointIO`` plugin that writes every checkpoint through ckptzip.

Works with both of Lightning's packages, ``pytorch_lightning`` and the unified ``lightning``
(``lightning.pytorch``), whichever are installed: the two ship separate copies of the
``CheckpointIO`` base class, and :class:`CkptzipCheckpointIO` derives from each installed copy,
so either package's ``Trainer`` (and its ``AsyncCheckpointIO``) takes it as its own.

>>> trainer = pl.Trainer(plugins=[CkptzipCheckpointIO()])              # doctest: +SKIP
>>> trainer = pl.Trainer(plugins=[AsyncCheckpointIO(CkptzipCheckpointIO())])  # doctest: +SKIP
>>> trainer.fit(model, ckpt_path="ckpts/last.ckpt")                    # doctest: +SKIP
>>> model = load_from_checkpoint(MyModule, "ckpts/last.ckpt")          # doctest: +SKIP
>>> class MyModule(CkptzipLoading, pl.LightningModule): ...           # doctest: +SKIP
>>> model = MyModule.load_from_checkpoint("ckpts/last.ckpt")          # doctest: +SKIP

``ModelCheckpoint`` (top-k, ``last.ckpt``, removal of old files), resuming with ``ckpt_path=``,
``trainer.test(ckpt_path="best")`` and Lightning's ``AsyncCheckpointIO`` all go through the
plugin. ``LightningModule.load_from_checkpoint`` does not: it calls ``torch.load`` on the path
itself, which fails on a ckptzip file with torch's ``UnpicklingError`` ("Weights only load
failed ... Unsupported operand 67": 67 is ``C``, the first byte of ckptzip's magic
``CKPTZIP``). Two ways that work:

* mix :class:`CkptzipLoading` into the module (``class MyModule(CkptzipLoading,
  pl.LightningModule)``): ``MyModule.load_from_checkpoint(path)`` then reads ckptzip files
  and Lightning's own alike;
* or call :func:`load_from_checkpoint` here: ``load_from_checkpoint(MyModule, path)``.

Both decode the file and hand Lightning the same dict through an in-memory
``torch.load(weights_only=True)``.

What a Lightning checkpoint must hold: the model's ``state_dict`` and optimizer and scheduler
states are tensors and plain values; loops' and callbacks' states (``ModelCheckpoint``'s best
paths and scores, your callbacks' ``state_dict()``) and hyper-parameters are stored in the
file's JSON manifest, which takes numbers, strings, ``None``, bools, lists, tuples, dicts with
str/int keys and tensors, and never pickle. Anything else (an ``nn.Module`` or a dataset passed
to ``__init__``, a ``Path``, an ``Enum``) is refused at save time with the key that holds it:
leave it out of the hyper-parameters (``self.save_hyperparameters(ignore=["backbone"])``) or
pass a plain value instead. Dict subclasses (Lightning's ``AttributeDict``) come back as
``dict``, which Lightning wraps again when it rebuilds the module.
"""

from __future__ import annotations

import importlib
import io
import os
import threading
from typing import Any, TypeVar

import fsspec
import torch

import ckptzip
from ckptzip import storage
from ckptzip.config import CompressionConfig
from ckptzip.container import MAGIC

__all__ = [
    "PACKAGES",
    "CkptzipCheckpointIO",
    "CkptzipLoading",
    "is_ckptzip_file",
    "load_from_checkpoint",
]

_T = TypeVar("_T")


def _checkpoint_io_bases() -> dict[str, type]:
    found = {}
    for package in ("pytorch_lightning", "lightning.pytorch"):
        try:
            found[package] = importlib.import_module(f"{package}.plugins.io").CheckpointIO
        except ImportError:
            continue
    if not found:
        raise ImportError(
            "ckptzip.integrations.lightning needs PyTorch Lightning: pip install "
            "'ckptzip[lightning]' (pytorch_lightning or lightning)"
        )
    return found


_BASES = _checkpoint_io_bases()
PACKAGES: tuple[str, ...] = tuple(_BASES)
"""The installed Lightning packages (``pytorch_lightning``, ``lightning.pytorch``) whose
``Trainer`` takes :class:`CkptzipCheckpointIO`."""


def _device(map_location: Any) -> str | torch.device:
    # Lightning may pass a function or a dict (torch.load's forms); ckptzip places tensors on
    # one device, so those load on the CPU and Lightning moves the state where it belongs.
    if isinstance(map_location, (str, torch.device)):
        return map_location
    return "cpu"


class CkptzipCheckpointIO(*_BASES.values()):  # type: ignore[misc]  # bases found at import
    """Save and load Lightning checkpoints as ckptzip files (under Lightning's file names).

    Parameters
    ----------
    config:
        How to compress (default :class:`~ckptzip.CompressionConfig`): model weights and
        optimizer moments quantized, step counters, loop and callback state exact.
    """

    def __init__(self, config: CompressionConfig | None = None) -> None:
        super().__init__()
        self.config = config
        self.last_report: ckptzip.Report | None = None
        """The :class:`~ckptzip.Report` of the latest save (sizes, ratio, time)."""
        # Paths removed before their file existed, with the removing thread: see
        # remove_checkpoint. The lock makes "publish, then check" and "check, then mark" atomic.
        self._lock = threading.Lock()
        self._removed: dict[str, int] = {}

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(
                f"CkptzipCheckpointIO takes no storage_options, got {storage_options!r}; "
                "configure it with CkptzipCheckpointIO(config=...)"
            )
        path = os.fspath(path)
        if not storage.is_url(path):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        # ModelCheckpoint rewrites last.ckpt on purpose; the write stays atomic
        self.last_report = ckptzip.save(checkpoint, path, config=self.config, overwrite=True)
        with self._lock:
            remover = self._removed.pop(path, None)
            if remover is not None and remover != threading.get_ident():
                # a save queued on another thread (Lightning's AsyncCheckpointIO) before the
                # caller removed its file: the removal stands
                self._rm(path)

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        # weights_only is torch.load's switch; ckptzip never unpickles, so every load is safe
        out = ckptzip.load(os.fspath(path), map_location=_device(map_location))
        if not isinstance(out, dict):
            raise ckptzip.CorruptCheckpointError(f"{path!r} does not hold a Lightning checkpoint")
        return out

    def remove_checkpoint(self, path: Any) -> None:
        """Remove ``path``; under Lightning's ``AsyncCheckpointIO`` also a file not written yet.

        ``AsyncCheckpointIO`` runs saves on its own thread but removals on the caller's, so
        ``ModelCheckpoint`` may remove a worse checkpoint whose save is still queued or
        running; ckptzip publishes a file only when it is complete, so it does not exist yet
        and the removal alone would leave it behind once written. Such a path is marked, and
        the first save of it that completes on another thread deletes what it wrote. A save
        on the removing thread itself (a plain, synchronous plugin) is a new checkpoint and
        is kept.
        """
        path = os.fspath(path)
        with self._lock:
            if not self._rm(path):
                self._removed[path] = threading.get_ident()

    @staticmethod
    def _rm(path: str) -> bool:
        fs, p = fsspec.core.url_to_fs(path)  # as Lightning's own CheckpointIO does
        if not fs.exists(p):
            return False
        fs.rm(p, recursive=True)
        return True


def load_from_checkpoint(
    cls: type[_T], path: str | os.PathLike[str], *, map_location: Any = None, **kwargs: Any
) -> _T:
    """``cls.load_from_checkpoint`` for a checkpoint written by :class:`CkptzipCheckpointIO`.

    ``kwargs`` go to Lightning's ``load_from_checkpoint`` (``strict=``, hyper-parameter
    overrides). The decoded checkpoint reaches Lightning through an in-memory
    ``torch.save`` read back with ``weights_only=True``: plain values and tensors only.
    """
    checkpoint = CkptzipCheckpointIO().load_checkpoint(path, map_location=map_location)
    buf = io.BytesIO()
    torch.save(checkpoint, buf)
    buf.seek(0)
    loader: Any = cls  # a LightningModule or LightningDataModule of either package
    module: _T = loader.load_from_checkpoint(
        buf, map_location=map_location, weights_only=True, **kwargs
    )
    return module


def is_ckptzip_file(checkpoint: Any) -> bool:
    """Whether ``checkpoint`` (a path, URL or seekable binary file) begins with ckptzip's magic.

    A file object is read from its current position and put back there.
    """
    if isinstance(checkpoint, (str, os.PathLike)):
        try:
            with storage.open_read(checkpoint) as f:
                return f.read(len(MAGIC)) == MAGIC
        except ckptzip.CkptzipError:
            return False  # missing or unreadable: Lightning's own loader says what is wrong
    try:
        where = checkpoint.tell()
        head = checkpoint.read(len(MAGIC))
        checkpoint.seek(where)
    except (AttributeError, OSError, ValueError):
        return False
    return bool(head == MAGIC)


class CkptzipLoading:
    """Mixin for a ``LightningModule`` (or ``LightningDataModule``) of either Lightning package:
    its ``load_from_checkpoint`` also reads checkpoints written by :class:`CkptzipCheckpointIO`.

    Put it first among the bases: ``class MyModule(CkptzipLoading, pl.LightningModule)``.
    A ckptzip file goes through :func:`load_from_checkpoint`; any other file straight to
    Lightning's own ``load_from_checkpoint``, unchanged.
    """

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path: Any, map_location: Any = None, **kwargs: Any
    ) -> Any:
        if is_ckptzip_file(checkpoint_path):
            return load_from_checkpoint(cls, checkpoint_path, map_location=map_location, **kwargs)
        parent: Any = super()
        return parent.load_from_checkpoint(checkpoint_path, map_location=map_location, **kwargs)
