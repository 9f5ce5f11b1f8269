"""Hugging Face ``transformers``: the ``Trainer``'s checkpoints written through ckptzip.

>>> trainer = CkptzipTrainer(model=model, args=args, train_dataset=ds)   # doctest: +SKIP
>>> trainer.train()                    # checkpoint-N/ directories, compressed  # doctest: +SKIP
>>> trainer.train(resume_from_checkpoint=True)       # or a checkpoint-N path   # doctest: +SKIP

:class:`CkptzipCallback` (added by :class:`CkptzipTrainer`, or to any ``Trainer`` by hand)
runs after the ``Trainer`` wrote ``checkpoint-N/`` and converts it in place:

=====================  =========================  =========================================
``Trainer`` file       becomes                    how
=====================  =========================  =========================================
``*.safetensors``      ``*.safetensors.ckz``      weights quantized (the ``CompressionConfig``)
``optimizer.pt``       ``optimizer.pt.ckz``       moments quantized, step counters exact
``scheduler.pt``       ``scheduler.pt.ckz``       exact
``rng_state*.pth``     ``rng_state*.pth.ckz``     exact (Python's state tuple, NumPy's
                                                  array: ckptzip stores both natively)
``training_args.bin``  ``training_args.json``     ``TrainingArguments.to_dict()``
=====================  =========================  =========================================

A plain ``Trainer`` cannot resume from a converted directory by itself: it looks for
``model.safetensors`` and says "Can't find a valid checkpoint at ...". Resume it through
:func:`resumable`, which decodes the directory into a temporary ``Trainer`` checkpoint::

    with resumable("out/checkpoint-500") as path:      # or resumable(True, args.output_dir)
        trainer.train(resume_from_checkpoint=path)

or use :class:`CkptzipTrainer`, whose ``train(resume_from_checkpoint=...)`` does the same.

JSON files (``config.json``, ``trainer_state.json``, ...) stay as they are. ``.pt``/``.pth``
files are read with ``torch.load(weights_only=True)`` (NumPy's RNG arrays allow-listed as the
``Trainer`` itself does); loading a ``.ckz`` never unpickles anything. :meth:`CkptzipTrainer.train`
with ``resume_from_checkpoint`` decodes the directory into a temporary ``Trainer`` checkpoint
(standard file names, rebuilt from the typed values) and resumes from it. The model stays
readable by ``from_pretrained``: ``ckptzip decompress checkpoint-N/model.safetensors.ckz -o
checkpoint-N/model.safetensors``. ``load_best_model_at_end=True`` works: :class:`CkptzipTrainer`
decodes the best checkpoint's model files into a temporary directory and lets the ``Trainer``
load them from there; with a plain ``Trainer``, whose own loader finds no ``model.safetensors``
(it logs "Could not locate the best model" and keeps the last weights), the callback loads the
best checkpoint's weights into the model at ``on_train_end``.

Several processes (DDP, ``torchrun``): each process converts only the files it wrote itself,
so no process waits for another: the main process the model, optimizer, scheduler and
arguments, process ``k`` its ``rng_state_k.pth``. On resume every process rebuilds the whole
checkpoint in its own temporary directory. Files are converted where the world's main process
writes them (one shared directory): ``save_on_each_node=True`` and sharded trainers (FSDP,
DeepSpeed: every rank writes model and optimizer shards) are not supported.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_pt_utils import safe_globals
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

import ckptzip
from ckptzip.config import CompressionConfig
from ckptzip.errors import ConfigError, CorruptCheckpointError, NotRegularFileError
from ckptzip.storage import atomic_write

__all__ = [
    "SUFFIX",
    "CkptzipCallback",
    "CkptzipTrainer",
    "compress_checkpoint",
    "is_converted",
    "load_model",
    "materialize",
    "resumable",
]

SUFFIX = ".ckz"
_ARGS_BIN, _ARGS_JSON = "training_args.bin", "training_args.json"
_TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "scaler.pt")  # not needed to load the model


def _is_rng(name: str) -> bool:
    return name.startswith("rng_state") and name.endswith(".pth")


def _writer(name: str) -> int:
    """The process that writes ``name`` into a checkpoint: ``rng_state_<k>.pth`` is process
    ``k``'s, everything else (and a single process's ``rng_state.pth``) the main process's."""
    stem = name.removesuffix(SUFFIX)
    if _is_rng(stem):
        rank = stem.removeprefix("rng_state").removesuffix(".pth").removeprefix("_")
        if rank.isdigit():
            return int(rank)
    return 0


def _torch_load(path: str) -> Any:
    with safe_globals():  # NumPy arrays in rng_state.pth, nothing that runs code
        return torch.load(path, map_location="cpu", weights_only=True)


def compress_checkpoint(
    directory: str | os.PathLike[str],
    *,
    config: CompressionConfig | None = None,
    process_index: int | None = None,
) -> list[ckptzip.Report]:
    """Convert one ``Trainer`` checkpoint directory in place (table in the module docstring).

    Each original file is removed only after its ``.ckz`` is written; a directory already
    converted is left as it is. With ``process_index`` only the files that process wrote are
    converted (see the module docstring). Returns one :class:`~ckptzip.Report` per ``.ckz``
    written.
    """
    directory = os.fspath(directory)
    reports = []
    for name in sorted(os.listdir(directory)):
        if process_index is not None and _writer(name) != process_index:
            continue
        src = os.path.join(directory, name)
        if name.endswith(".safetensors"):
            obj: Any = load_file(src)
        elif name in ("optimizer.pt", "scheduler.pt") or _is_rng(name):
            obj = _torch_load(src)
        else:
            continue  # JSON files stay; training_args.bin is replaced by the callback
        reports.append(ckptzip.save(obj, src + SUFFIX, config=config, overwrite=True))
        os.unlink(src)
    return reports


def materialize(
    directory: str | os.PathLike[str], into: str | os.PathLike[str], *, model_only: bool = False
) -> None:
    """Write a ``Trainer`` checkpoint (standard names) into ``into`` from a converted one.

    ``model_only`` leaves out the optimizer, scheduler, scaler and RNG states (what loading
    the model alone, as ``load_best_model_at_end`` does, never reads).

    Other files (``config.json``, ``trainer_state.json``, ...) are copied as they are; only
    regular files, never through a symbolic link (a checkpoint from elsewhere with
    ``config.json -> ~/.ssh/id_rsa`` would copy the key out), and never a directory or FIFO.

    Raises
    ------
    NotRegularFileError
        A file of ``directory`` to copy is a symbolic link (copy its target in its place).
    """
    directory, into = os.fspath(directory), os.fspath(into)
    os.makedirs(into, exist_ok=True)
    for name in os.listdir(directory):
        plain = name.removesuffix(SUFFIX)
        if model_only and (plain in _TRAINING_STATE or _is_rng(plain)):
            continue
        src, dst = os.path.join(directory, name), os.path.join(into, plain)
        if not name.endswith(SUFFIX):
            _copy_regular(src, dst)
            continue
        obj = ckptzip.load(src)
        if dst.endswith(".safetensors"):
            save_file(obj, dst, metadata={"format": "pt"})
        else:
            torch.save(obj, dst)


def _copy_regular(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` if it is a regular file; refuse a link, skip anything else."""
    mode = os.lstat(src).st_mode
    if stat.S_ISLNK(mode):
        raise NotRegularFileError(
            f"{src!r} is a symbolic link (to {os.readlink(src)!r}); a checkpoint's files are "
            "copied only as regular files, never through a link, which could point anywhere. "
            "Replace the link with a copy of the file it points to and try again"
        )
    if stat.S_ISREG(mode):
        # follow_symlinks=False: a link swapped in after the lstat is copied as a link
        shutil.copyfile(src, dst, follow_symlinks=False)


def is_converted(directory: str | os.PathLike[str]) -> bool:
    """Whether a checkpoint directory holds ckptzip files."""
    return any(n.endswith(SUFFIX) for n in os.listdir(directory))


class CkptzipCallback(TrainerCallback):
    """Converts each checkpoint the ``Trainer`` saves (see the module docstring).

    ``reports`` maps each converted directory to its :class:`~ckptzip.Report` list.
    """

    def __init__(self, config: CompressionConfig | None = None) -> None:
        self.config = config
        self.reports: dict[str, list[ckptzip.Report]] = {}
        self.loads_best_model = True
        """Whether ``on_train_end`` loads the best checkpoint's weights under
        ``load_best_model_at_end`` (:class:`CkptzipTrainer` turns it off: it loads them
        through the ``Trainer`` itself)."""

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        directory = os.path.join(
            str(args.output_dir), f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        )
        if not os.path.isdir(directory):
            return
        self.reports[directory] = compress_checkpoint(
            directory, config=self.config, process_index=args.process_index
        )
        if not state.is_world_process_zero:
            return
        # the pickled arguments become JSON from the live object (never unpickled here)
        text = json.dumps(args.to_dict(), indent=1, default=str)
        # atomically, and never through a link already at that name (it would be written
        # through to its target)
        atomic_write(
            os.path.join(directory, _ARGS_JSON), lambda f: f.write(text.encode()), overwrite=True
        )
        args_bin = os.path.join(directory, _ARGS_BIN)
        if os.path.exists(args_bin):
            os.unlink(args_bin)

    def on_train_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: torch.nn.Module | None = None,
        **kwargs: Any,
    ) -> None:
        # A plain Trainer's own _load_best_model looked for model.safetensors, found none and
        # kept the last weights (it only logs a warning): load the best ones here.
        best = state.best_model_checkpoint
        if not (args.load_best_model_at_end and self.loads_best_model) or model is None:
            return
        if best is not None and os.path.isdir(best) and is_converted(best):
            load_model(model, best)


def load_model(model: torch.nn.Module, directory: str | os.PathLike[str]) -> None:
    """Load the weights of a converted checkpoint directory into ``model`` (in place).

    Every ``*.safetensors.ckz`` of the directory (one file or the shards of a sharded save)
    is decoded; weights the ``Trainer`` left out of the file because they are tied to another
    one (GPT-2's ``lm_head.weight``) come back through the tie. A weight the model lacks, or a
    missing one that is not tied, raises :class:`~ckptzip.CorruptCheckpointError`.
    """
    directory = os.fspath(directory)
    weights: dict[str, Any] = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors" + SUFFIX) and not name.startswith("adapter_"):
            weights.update(ckptzip.load(os.path.join(directory, name)))
    if not weights:
        raise CorruptCheckpointError(f"no model weights (*.safetensors{SUFFIX}) in {directory!r}")
    result = model.load_state_dict(weights, strict=False)
    own = model.state_dict()
    loaded = {own[k].data_ptr() for k in weights if k in own}
    untied = [k for k in result.missing_keys if own[k].data_ptr() not in loaded]
    if result.unexpected_keys or untied:
        raise CorruptCheckpointError(
            f"{directory!r} does not hold this model's weights: unexpected "
            f"{result.unexpected_keys[:5]}, missing {untied[:5]}"
        )


class CkptzipTrainer(Trainer):
    """A ``Trainer`` whose checkpoints are ckptzip files and that resumes from them.

    ``ckptzip_config`` (keyword) is the :class:`~ckptzip.CompressionConfig`; everything else
    goes to ``Trainer``.
    """

    def __init__(self, *args: Any, ckptzip_config: CompressionConfig | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.ckptzip_callback = CkptzipCallback(ckptzip_config)
        self.ckptzip_callback.loads_best_model = False  # _load_best_model below does it
        self.add_callback(self.ckptzip_callback)

    def _load_best_model(self) -> None:
        # load_best_model_at_end: the Trainer's loader reads the best checkpoint's model files
        # from a temporary directory they are decoded into (sharded saves, adapters and the
        # Trainer's own checks and warnings as they are)
        best = self.state.best_model_checkpoint
        if best is None or not os.path.isdir(best) or not is_converted(best):
            super()._load_best_model()
            return
        with tempfile.TemporaryDirectory(prefix="ckptzip-best-") as tmp:
            materialize(best, tmp, model_only=True)
            self.state.best_model_checkpoint = tmp
            try:
                super()._load_best_model()
            finally:
                self.state.best_model_checkpoint = best

    def train(  # type: ignore[override]
        self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any
    ) -> Any:
        with resumable(resume_from_checkpoint, str(self.args.output_dir)) as path:
            return super().train(resume_from_checkpoint=path, **kwargs)


@contextlib.contextmanager
def resumable(
    checkpoint: str | os.PathLike[str] | bool | None, output_dir: str | None = None
) -> Iterator[str | None]:
    """What to pass a ``Trainer`` as ``resume_from_checkpoint`` for ``checkpoint``.

    A directory converted by :class:`CkptzipCallback` is decoded into a temporary ``Trainer``
    checkpoint (standard file names, :func:`materialize`), removed when the block ends;
    any other value is passed on as it is. ``True`` means the last checkpoint in
    ``output_dir``, as it does for the ``Trainer``.

    >>> with resumable("out/checkpoint-500") as path:       # doctest: +SKIP
    ...     trainer.train(resume_from_checkpoint=path)
    """
    if checkpoint is None or checkpoint is False:
        yield None
        return
    if checkpoint is True:
        if output_dir is None:
            raise ConfigError("resumable(True) needs output_dir (the Trainer's args.output_dir)")
        last = get_last_checkpoint(output_dir)
        if last is None:
            raise ValueError(f"no checkpoint found in {output_dir!r}")
        path = str(last)
    else:
        path = os.fspath(checkpoint)
    if not os.path.isdir(path) or not is_converted(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="ckptzip-resume-") as tmp:
        materialize(path, tmp)
        yield tmp
