"""``CheckpointManager``: the checkpoints of one training run, saved and restored.

Two layers, as Orbax's ``CheckpointManager`` over its handlers and step helpers, and
``torch.distributed.checkpoint``'s planner over its storage writer:

* :class:`ckptzip.chains.ChainStore` keeps the directory: step names, keyframes and delta
  parents, retention, the writer lock, cleanup after crashed saves; it moves bytes through a
  :class:`ckptzip.storage.Storage` (a local directory, or any fsspec URL such as
  ``s3://bucket/run``) and never decodes a tensor.
* :class:`CheckpointManager` (this module) turns training objects into checkpoints and back:
  the model/optimizer/``eval_fn`` integration, the configuration search, the sensitivity
  tracker, restoring into live objects, and asynchronous saves.

Call order of one save (blocking, or in the worker thread with ``blocking=False``)::

    snapshot (copy_tree, or ModelSnapshot for a model)    # caller's thread; then it returns
    search(model copy)                                    # only for model snapshots
    with store.writing():
        store.check_new(step); links = store.parent_chain(step)
        enc = api.encode(obj, parent=links)               # validated, nothing published
        store.publish(step, enc.write)                    # the only step after which ...
        store.retain(step)                                # ... nothing else can fail the save

Guarantees (see the package README):

* A file appears under its step name complete or not at all, locally and on object stores
  (a commit marker written last); readers list finished steps only and never lock.
* ``load()`` / ``restore()`` without a step take the latest *restorable* step, warning which
  newer steps were skipped and why (:attr:`CheckpointManager.skipped`).
* Retention deletes a file only when it proves no kept step needs it.
* At most one save is in flight; an error in the background is raised by the next call.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, overload

import torch

from ckptzip import api
from ckptzip._collector import collector_paused
from ckptzip._types import QuantizedTensor
from ckptzip.chains import (
    LAYOUTS,
    MAX_CHAIN_LENGTH,
    POSITION_KEY,
    ChainStore,
    step_file_name,
    step_of,
    unrestorable,
    warn_keyframe,
)
from ckptzip.config import CompressionConfig
from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    CkptzipError,
    CkptzipWarning,
    ConfigError,
    DecodeLimitError,
    DecodeMemoryError,
    SaveInProgressError,
)
from ckptzip.plan import FEEDBACK_MOMENTS, RESIDUAL, MomentPolicy, Prequantized
from ckptzip.search import (
    ProbeFn,
    SearchResult,
    check_options,
    for_residuals,
    save_scores,
    search,
)
from ckptzip.sensitivity import SensitivityTracker
from ckptzip.snapshot import Gate, ModelSnapshot, copy_tree
from ckptzip.storage import is_url, local_path, open_storage

__all__ = [
    "MAX_CHAIN_LENGTH",
    "ChainEntry",
    "CheckpointManager",
    "SaveReport",
    "describe_directory",
    "step_file_name",
]


class _RecentFiles(OrderedDict[str, Mapping[str, Any]]):
    """An :data:`ckptzip.api.DecodedCache` holding the last ``size`` files decoded or saved.

    Two suffice for a chain: the parent of the next save or load, and the file just written
    or read. Entries are keyed by content hash, so a file replaced on disk never hits. A lock
    makes it safe to share between the caller and the background save.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            return super().get(key, default)

    def __setitem__(self, key: str, value: Mapping[str, Any]) -> None:
        with self._lock:
            super().__setitem__(key, value)
            self.move_to_end(key)
            while len(self) > self._size:
                self.popitem(last=False)


@dataclass(frozen=True)
class ChainEntry:
    """One file of a manager's directory, as :func:`describe_directory` sees it.

    Attributes
    ----------
    step:
        The training step.
    kind:
        ``"full"`` (a keyframe) or ``"delta"``.
    bytes:
        Size of the file.
    tensor_bytes:
        In-memory size of the tensors it holds (``numel × itemsize`` summed).
    parent_step:
        Step of the parent file for a delta (``None`` for a keyframe or a parent that is not
        a step file).
    status:
        ``"ok"``, or why the step cannot be restored (missing or altered parent, damage).
    """

    step: int
    kind: str
    bytes: int
    tensor_bytes: int
    parent_step: int | None
    status: str

    @property
    def tensor_ratio(self) -> float:
        """``tensor_bytes / bytes`` (:data:`ckptzip.api.TENSOR_RATIO`)."""
        return self.tensor_bytes / self.bytes if self.bytes else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "kind": self.kind,
            "bytes": self.bytes,
            "tensor_bytes": self.tensor_bytes,
            "tensor_ratio": self.tensor_ratio,
            "parent_step": self.parent_step,
            "status": self.status,
        }


@dataclass(frozen=True)
class SaveReport(api.Report):
    """:class:`ckptzip.Report` plus the configuration search behind a model snapshot.

    Attributes
    ----------
    search:
        The :class:`~ckptzip.search.SearchResult` (``None`` when an explicit object was
        saved).
    stall:
        Seconds training was held up by this save: the whole save when blocking; for
        ``blocking=False`` the snapshot taken in :meth:`CheckpointManager.save` plus any
        wait of ``optimizer.step`` for the background copy.
    step:
        The step saved.
    """

    search: SearchResult | None = None
    stall: float | None = None
    step: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["search"] = None if self.search is None else self.search.to_json()
        out["stall"] = self.stall
        out["step"] = self.step
        return out


_REPORT_FIELDS = [f for f in api.Report.__dataclass_fields__]


@dataclass(frozen=True)
class _Request:
    """What one :meth:`CheckpointManager.save` call asks, whatever it saves."""

    step: int
    scores: Mapping[str, torch.Tensor] | None
    overwrite: bool
    blocking: bool
    #: Steps the manager's last restore found unrestorable: a save may replace them, and
    #: they never count as deltas that need a step being replaced.
    replaceable: frozenset[int] = frozenset()


def _add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` (Python 3.11+; on 3.10 the note is kept in ``__notes__``, which
    the traceback does not show)."""
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(note)
        return
    with contextlib.suppress(AttributeError, TypeError):
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]  # type: ignore[attr-defined]


_IN_FLIGHT: weakref.WeakSet[CheckpointManager] = weakref.WeakSet()
"""Managers that started a ``blocking=False`` save (see :func:`_report_at_exit`)."""


@atexit.register
def _report_at_exit() -> None:
    """At interpreter exit, print the error of a background save nobody was told of.

    The save itself has finished by then: its thread is not a daemon, and the interpreter
    joins such threads before it runs exit handlers (the join here waits only if one did not).
    """
    for manager in list(_IN_FLIGHT):
        pending = manager._pending
        if pending is None or pending.thread is None:
            continue
        pending.thread.join()
        if pending.error is not None:
            error = pending.error
            sys.stderr.write(
                f"ckptzip: the background save of step {pending.step} in "
                f"{str(manager.directory)!r} failed, and no later call raised it: "
                f"{type(error).__name__}: {error}\n"
            )


class _Pending:
    """One save running in the worker thread."""

    def __init__(self, step: int, gate: Gate | None, stall: float) -> None:
        self.step = step
        self.thread: threading.Thread | None = None
        self.report: SaveReport | None = None
        self.error: BaseException | None = None
        self.gate = gate
        self.gate_waited0 = 0.0 if gate is None else gate.waited
        self.stall = stall


class CheckpointManager:
    """Save and restore the checkpoints of one training run in ``directory``.

    Parameters
    ----------
    directory:
        Where the ``step-XXXXXXXX.ckz`` files live: a local directory (created by the first
        save) or an fsspec URL (``s3://bucket/run``, ``gs://...``, ``memory://...``; needs
        the ``remote`` extra and the store's driver, e.g. ``s3fs``).
    keyframe_every:
        A full checkpoint every this many saves of a chain (default 10); the others are
        deltas (against which earlier file: ``layout``). ``1`` disables deltas. Restoring a
        step decodes at most this many files; at most
        :data:`~ckptzip.chains.MAX_CHAIN_LENGTH` (1000). Measured (README, "Longer chains"):
        20 against 10 gave 5-12 % larger ratios on eight models over 10 restores with the
        final loss unchanged within noise (3 seeds each), but restoring the last file of a
        chain then decodes 19 deltas instead of 9 (``llm``: 0.72 against 0.44-0.46 s of CPU):
        a restore is on the critical path of every failure, so 10 stays the default.
    layout:
        Which earlier file each delta is coded against. ``"chain"`` (default): the previous
        step, so restoring the ``n``-th file after a keyframe decodes ``n + 1`` files.
        ``"skip"``: the ``n``-th file after the keyframe against the ``n - lowbit(n)``-th
        (1→0, 2→0, 3→2, 4→0, 5→4, 6→4, 7→6, 8→0, 9→8), so a restore decodes at most
        ``log2(keyframe_every) + 2`` files, for more bytes (the deltas against files further
        back hold more change): measured in the README ("The layout is the lever"). Any
        manager reads either layout; a directory may mix them. With ``error_feedback`` a
        delta stores 4 levels of its change against a parent up to ``keyframe_every / 2``
        files back, so it restores with a larger error than the chain's, where every delta
        corrects the one before: measured on the README's fault-tolerant benchmark (``gru``,
        3 seeds), ``"skip"`` ended +1.10 % against exact checkpoints with jumps of +11 % right
        after restores, ``"chain"`` −0.90 % and +0.56 %.
    keep:
        Keep only the ``keep`` most recent steps restorable (``None``: keep everything),
        and always the step just saved. Files still needed by a kept step (its keyframe and
        the deltas in between) are kept too; when that cannot be proven (a file unreadable),
        nothing is deleted and a :class:`~ckptzip.errors.CkptzipWarning` says why.
    config:
        The :class:`CompressionConfig` for every save (default: ``CompressionConfig()``).
        With a ``model``, the search's per-path choices are added on top of it.
    model, optimizer:
        When given, ``save(step)`` snapshots them (``{"model": ..., "optimizer": ...,
        "extra": ...}``), choosing the configuration with :func:`ckptzip.search.search`
        (full search first, then the neighbourhood of the previous choice), and
        :meth:`restore` loads a step back into these same objects.
    eval_fn:
        ``eval_fn(model) -> float``, lower is better (a held-out loss on a few batches): the
        search keeps it within ``tolerance`` of the exact weights' value. Without it the
        search's data-free rule applies (the report says so). With ``blocking=False`` it is
        called in the worker thread, on a copy of the model.
    tolerance:
        Allowed relative worsening of ``eval_fn`` per checkpoint, at most: the search also
        holds it to what ``eval_fn`` of the exact weights improved per save over the last three
        saves (after :meth:`restore`, since the restored step), so that a restore costs less
        than the training between two checkpoints (``earlier=`` of
        :func:`ckptzip.search.search`; ``report.search.limit`` is the value applied).
    error_budget:
        The largest relative L2 error ``||ŵ − w|| / ||w||`` of any searched weight, with or
        without ``eval_fn`` (see :func:`ckptzip.search.search`): a restore's perturbation
        costs training more than ``eval_fn`` right after quantizing shows. Raise it for
        smaller files at that risk.
    window:
        Steps before each save during which a :class:`~ckptzip.SensitivityTracker` keeps
        ``|g·w|`` for the search (the next save is expected one save interval after the last,
        or every ``checkpoint_every`` steps when given); ``None`` disables the tracking.
    checkpoint_every:
        The save interval in optimizer steps, when fixed (sharpens the tracking window).
    if_busy:
        What ``save`` does while an asynchronous save is still running: ``"wait"`` for it
        (default) or ``"raise"`` :class:`~ckptzip.errors.SaveInProgressError`.
    probe_fn:
        ``probe_fn(model, optimizer) -> None``: a few training steps on fixed batches of your
        data (needs ``optimizer`` and ``eval_fn``). The optimizer's moments are then stored
        as coarsely as training after a restore allows: see :func:`ckptzip.search.search`.
        The probe search runs at the first save of the manager and again every
        ``keyframe_every`` saves (so a later, calmer phase of training can go coarser again);
        the saves in between keep its choice. Training goes on bit for bit as without a probe
        (the live state and RNG states are put back). Blocking saves only.
    moments:
        How the moments of searched weights are stored (:class:`~ckptzip.MomentPolicy`);
        with ``probe_fn``, the least aggressive policy the probe search considers. ``None``:
        ``MomentPolicy()``, or with error feedback :data:`ckptzip.plan.FEEDBACK_MOMENTS`.
    research_every:
        A full search (not the previous choice's neighbourhood, which is never more
        aggressive) once this many saves of the manager have passed since the last full one,
        so a configuration can become more aggressive again later in training; with
        ``probe_fn`` the moments are probed again too. Under error feedback only keyframes
        search, so the full search comes at the first keyframe due. ``None`` (default): only
        the first save searches in full.
    max_bytes:
        The read limit of every load and restore (see :func:`ckptzip.load`): a step whose
        files declare more decoded bytes is refused with
        :class:`~ckptzip.errors.DecodeLimitError` (never skipped for an older step).
        ``None`` (default): what the memory available to the process can decode.
    error_feedback:
        Store the weights of every delta checkpoint as their change against the parent's
        *reconstruction*, quantized (``CompressionConfig.residual``, by default
        :data:`ckptzip.plan.RESIDUAL`: 4 levels): ``ŵ_k = ŵ_{k−1} + Q(w_k − ŵ_{k−1})``, so
        what one checkpoint's quantization left is corrected by the next and the errors of
        successive restores do not add up. Keyframes and the optimizer moments are stored as
        without it, except the first moment's default (``moments`` not given):
        :data:`ckptzip.plan.FEEDBACK_MOMENTS`, 4 levels fitted to Adam's step. At a delta save
        no weight config is searched (the residual replaces it;
        :func:`ckptzip.search.for_residuals`): the moments follow the last search's choice and
        ``eval_fn`` is called once, on the exact weights. On by default: without it (``False``:
        every delta's weights stored as bin indices against the parent's, the first moment at
        8 levels on its values) the errors of successive restores add up, and training after
        restores ended outside its seed noise on two of the benchmark's six models (README,
        "Error feedback along the chain"); with it, within the noise on all six, for larger
        files (``gru`` 20.8x against 27.3x). A ``config`` with ``residual`` set turns it on
        whatever this flag says.

    Notes
    -----
    Asynchronous saves (``save(step, blocking=False)``): the state is snapshotted before
    ``save`` returns (host copies; for a model with an optimizer, the copy is taken in the
    background and the optimizer's next ``step`` waits for it, so parameters must change
    only through ``optimizer.step`` until then). Compression, the search and the write run
    in one worker thread; :meth:`wait` joins it and returns its report; an error there is
    raised by the next call of any method. :meth:`close` and ``with`` wait too.

    On platforms without :mod:`fcntl` (Windows) there is no directory lock: use one writer.
    Object stores use a lease object instead (see :class:`ckptzip.storage.FsspecStorage`).

    With a model::

        with CheckpointManager("ckpts", model=model, optimizer=opt, eval_fn=heldout) as mgr:
            step = mgr.restore() if mgr.latest_step() is not None else 0
            for step in range(step, total):
                train_step(step)
                if (step + 1) % 500 == 0:
                    mgr.save(step + 1, extra={"epoch": epoch}, blocking=False)

    Examples
    --------
    >>> import tempfile, torch
    >>> mgr = CheckpointManager(tempfile.mkdtemp(), keyframe_every=3, keep=2)
    >>> for step in (10, 20, 30, 40, 50):
    ...     _ = mgr.save(step, {"w": torch.full((8,), float(step)), "step": step})
    >>> mgr.steps(), mgr.latest_step(), mgr.load()["step"]  # 40 is a keyframe, 50 its delta
    ([40, 50], 50, 50)
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keyframe_every: int = 10,
        keep: int | None = None,
        config: CompressionConfig | None = None,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        eval_fn: Callable[[torch.nn.Module], float] | None = None,
        tolerance: float = 0.05,
        window: int | None = 50,
        checkpoint_every: int | None = None,
        if_busy: Literal["wait", "raise"] = "wait",
        probe_fn: ProbeFn | None = None,
        moments: MomentPolicy | None = None,
        research_every: int | None = None,
        max_bytes: int | None = None,
        error_budget: float = 0.1,
        error_feedback: bool = True,
        layout: Literal["chain", "skip"] = "chain",
    ) -> None:
        if not isinstance(error_feedback, bool):
            raise ConfigError(f"error_feedback={error_feedback!r} must be True or False")
        if config is not None and not isinstance(config, CompressionConfig):
            raise ConfigError(f"config={config!r} must be a CompressionConfig")
        if model is None and (optimizer is not None or eval_fn is not None):
            raise ConfigError("optimizer= and eval_fn= need model= too (they go with a model)")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise ConfigError(f"model={model!r} must be a torch.nn.Module")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigError(f"optimizer={optimizer!r} must be a torch.optim.Optimizer")
        check_options(
            tolerance=tolerance,
            moments=moments,
            eval_fn=eval_fn,
            optimizer=optimizer,
            probe_fn=probe_fn,
        )
        if isinstance(error_budget, bool) or not 0 < error_budget < 1:
            raise ConfigError(f"error_budget={error_budget!r} must lie in (0, 1)")
        if if_busy not in ("wait", "raise"):
            raise ConfigError(f"if_busy={if_busy!r} must be 'wait' or 'raise'")
        if research_every is not None and (
            isinstance(research_every, bool)
            or not isinstance(research_every, int)
            or research_every < 1
        ):
            raise ConfigError(f"research_every={research_every!r} must be a positive integer")
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0
        ):
            raise ConfigError(f"max_bytes={max_bytes!r} must be None or an integer >= 0")
        self.max_bytes = max_bytes
        # A URL stays a string: Path("s3://b/r") would become the local path "s3:/b/r".
        self.directory: Path | str = (
            os.fspath(directory) if is_url(directory) else Path(local_path(directory))
        )
        if layout not in LAYOUTS:
            raise ConfigError(f"layout={layout!r} must be one of {', '.join(map(repr, LAYOUTS))}")
        self.store = ChainStore(
            open_storage(directory), keyframe_every=keyframe_every, keep=keep, layout=layout
        )
        # nearest rounding throughout: a chain corrects its rounding (error feedback) or
        # delta-codes its indices, which stochastic draws would scramble at every save; the
        # levels are searched (weights) or the moment policy's, not a standalone file's
        self.config = replace(
            config if config is not None else CompressionConfig(),
            rounding="nearest",
            standalone=None,
        )
        if error_feedback and self.config.residual is None:
            self.config = replace(self.config, residual=RESIDUAL)
        # The decoded quantized tensors of the last files saved or loaded: the next delta's
        # parent, so a chain is decoded once rather than from its keyframe at every call.
        self._cache = _RecentFiles(2)
        self.model, self.optimizer, self.eval_fn = model, optimizer, eval_fn
        self.tolerance = tolerance
        self.error_budget = error_budget
        self.if_busy = if_busy
        self.probe_fn = probe_fn
        if moments is None:  # error feedback has its own (plan.FEEDBACK_MOMENTS)
            moments = FEEDBACK_MOMENTS if self.config.residual is not None else MomentPolicy()
        self.moments = moments
        self._since_probe = 0  # saves since the last probe search (0: none yet)
        self.research_every = research_every
        self._saves = 0  # model snapshots saved by this manager
        self._since_full = 0  # saves since the last full search (research_every counts them)
        self.last_search: SearchResult | None = None
        # eval_fn of the exact weights at the last saves (or at the restored step): the search
        # keeps a checkpoint's cost below what training gains per interval
        self._baselines: list[float] = []
        self._loaded_metadata: Mapping[str, str] = {}
        self.extra: Any = None  # the ``extra`` of the step last restored
        #: Newer steps the last ``load()``/``restore()`` without a step skipped, with why.
        self.skipped: tuple[tuple[int, str], ...] = ()
        self._last_saved: int | None = None
        self._tracker: SensitivityTracker | None = None
        if (
            model is not None
            and window is not None
            and any(p.requires_grad for p in model.parameters())
        ):
            self._tracker = SensitivityTracker(
                model, window=window, every=checkpoint_every, optimizer=optimizer
            )
        self._mark = 0  # the tracker's step count at the last save
        self._gate: Gate | None = None
        if optimizer is not None:
            self._gate = Gate()
            self._gate.install(optimizer)
        self._pending: _Pending | None = None
        self._failed: BaseException | None = None

    @property
    def keyframe_every(self) -> int:
        return self.store.keyframe_every

    @property
    def keep(self) -> int | None:
        return self.store.keep

    @property
    def layout(self) -> str:
        return self.store.layout

    def __repr__(self) -> str:
        return (
            f"CheckpointManager({str(self.directory)!r}, keyframe_every={self.keyframe_every}, "
            f"keep={self.keep})"
        )

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        try:  # the body's error is the one to see; a background one is reported, not lost
            self.close()
        except BaseException as background:
            warnings.warn(
                f"the asynchronous save failed too: {type(background).__name__}: {background}",
                CkptzipWarning,
                stacklevel=2,
            )

    # -- listing ---------------------------------------------------------------------------

    def path(self, step: int) -> Path | str:
        """The file of ``step`` (whether or not it exists): a ``Path``, or a URL string."""
        p = self.store.path(_check_step(step))
        return p if isinstance(self.directory, str) else Path(p)

    def steps(self) -> list[int]:
        """The finished steps in the directory, ascending (restorable or not)."""
        self._raise_failed()
        return self.store.steps()

    def latest_step(self) -> int | None:
        """The latest step that can be restored, or ``None`` when none can.

        Reads that step's chain (the files a restore reads) and checks their chunks'
        checksums, as :meth:`load` without a step would find them; :meth:`steps` lists every
        finished step without reading any.
        """
        self._raise_failed()
        newest: int | None = None
        while True:
            try:
                links, _ = self.store.latest(newest)
            except CheckpointNotFoundError:
                return None
            found = step_of(links[-1].name)
            assert found is not None
            # a file damaged inside a chunk is no step a restore gives back (load() skips it)
            if all(_damage(link) is None for link in links):
                return found
            newest = found - 1

    def chain(self, step: int) -> list[int]:
        """The steps whose files restoring ``step`` reads, keyframe first, ``step`` last.

        Raises
        ------
        CheckpointNotFoundError
            ``step`` does not exist.
        MissingParentError
            A parent on the way is missing or altered (the step cannot be restored).
        """
        return [s for s in (step_of(link.name) for link in self.store.chain(step)) if s is not None]

    # -- saving ----------------------------------------------------------------------------

    @overload
    def save(
        self,
        step: int,
        obj: Any = ...,
        *,
        extra: Any = ...,
        scores: Mapping[str, torch.Tensor] | None = ...,
        overwrite: bool = ...,
        blocking: Literal[True] = ...,
    ) -> SaveReport: ...

    @overload
    def save(
        self,
        step: int,
        obj: Any = ...,
        *,
        extra: Any = ...,
        scores: Mapping[str, torch.Tensor] | None = ...,
        overwrite: bool = ...,
        blocking: Literal[False],
    ) -> None: ...

    def save(
        self,
        step: int,
        obj: Any = None,
        *,
        extra: Any = None,
        scores: Mapping[str, torch.Tensor] | None = None,
        overwrite: bool = False,
        blocking: bool = True,
    ) -> SaveReport | None:
        """Save ``obj`` as ``step``: a keyframe or a delta against an earlier step (the
        previous one in the default ``layout``).

        Parameters
        ----------
        step:
            The training step (an integer >= 0); names the file. A step older than the
            latest is saved and kept (a delta against a step before it).
        obj:
            What you would pass to ``torch.save`` (see :func:`ckptzip.save`). ``None`` with a
            manager given a ``model``: snapshot the model, optimizer and ``extra``, with the
            configuration searched for this checkpoint.
        extra:
            Anything else to snapshot with the model (epoch, RNG states, scheduler and
            data-loader state dicts); stored losslessly unless it holds large float tensors.
        scores:
            Sensitivity scores by tensor path, passed to :func:`ckptzip.save`.
        overwrite:
            Replace an existing step. Refused when later deltas may depend on that step.
        blocking:
            ``False``: snapshot the state, return ``None`` at once, and compress, search and
            write in the background (:meth:`wait` returns the report).

        Returns
        -------
        SaveReport
            What :func:`ckptzip.save` reports for the file written, plus ``search`` (the
            :class:`~ckptzip.search.SearchResult`) when the manager snapshotted a model.

        Raises
        ------
        CheckpointExistsError
            ``step`` exists and ``overwrite`` is false, or deltas depend on it.
        SaveInProgressError
            ``if_busy="raise"`` and an asynchronous save is still running.
        StorageError
            The write failed (disk full, I/O); nothing was left behind and every earlier
            step is untouched.
        Exception
            An earlier ``blocking=False`` save failed (its own error, raised once). This
            step is still saved first (or started, when not blocking): a training loop that
            logs the error and carries on loses only the failed step. The error's note says
            which step failed and what became of this one.

        A ``blocking=False`` save still running when the interpreter exits is finished
        first (its thread is not a daemon); if it fails and no later call raised its error,
        the error is printed to stderr at exit.
        """
        t0 = time.perf_counter()
        step = _check_step(step)
        if self._pending is not None and self.if_busy == "raise" and self._running():
            raise SaveInProgressError(
                f"the save of step {self._pending.step} is still running; call wait() first "
                "or make the manager with if_busy='wait'"
            )
        failed_step = None if self._pending is None else self._pending.step
        earlier: Exception | None = None
        try:
            self.wait()  # at most one save in flight
        except Exception as exc:  # a failed background save: raised after this step's save
            earlier = exc
        try:
            result = self._save(step, obj, extra, scores, overwrite, blocking, t0)
        except BaseException as exc:
            if earlier is not None:
                _add_note(
                    exc,
                    f"before it, the background save of step {failed_step} failed: "
                    f"{type(earlier).__name__}: {earlier}",
                )
            raise
        if earlier is not None:
            done = "was saved" if blocking else "is being saved in the background"
            _add_note(
                earlier,
                f"this is the error of the background save of step {failed_step}; "
                f"step {step} {done} after it",
            )
            raise earlier
        return result

    def _save(
        self,
        step: int,
        obj: Any,
        extra: Any,
        scores: Mapping[str, torch.Tensor] | None,
        overwrite: bool,
        blocking: bool,
        t0: float,
    ) -> SaveReport | None:
        # A step the last restore skipped as unrestorable (damaged, or a delta of a damaged
        # one) is replaced by a save under its number: a resumed run saves the steps after the
        # one it restored, and a damaged file must not stop it (nor need overwrite=True).
        unrestorable = dict(self.skipped)
        exists = step in self.store.steps()
        if exists and step in unrestorable:
            warnings.warn(
                f"step {step} of {str(self.directory)!r} could not be restored "
                f"({unrestorable[step]}); this save replaces it",
                CkptzipWarning,
                stacklevel=3,
            )
            overwrite = True
        elif exists and not overwrite:  # fail before any work
            raise CheckpointExistsError(
                f"step {step} already exists ({self.store.path(step)!r}); pass overwrite=True "
                "to replace it, or save under another step"
            )
        req = _Request(step, scores, overwrite, blocking, frozenset(unrestorable))
        if obj is None:
            work = self._model_job(req, extra)
        elif extra is not None:
            raise ConfigError("extra= goes with a model snapshot: pass obj=None, or put it in obj")
        else:
            work = self._object_job(req, obj)
        if blocking:
            report = work()
            return _with(report, stall=time.perf_counter() - t0)
        gate = self._gate if obj is None else None
        pending = _Pending(step, gate, 0.0)

        def run() -> None:
            try:
                pending.report = work()
            except BaseException as exc:  # handed to the caller's next call
                pending.error = exc
            finally:
                if gate is not None:
                    gate.release()

        # Not a daemon: the interpreter finishes the save before it exits (a daemon thread
        # was dropped mid-write, or killed inside torch, when a script ended without close()).
        pending.thread = threading.Thread(target=run, name=f"ckptzip-save-{step}", daemon=False)
        self._pending = pending
        _IN_FLIGHT.add(self)
        if gate is not None:
            gate.shut()
        pending.thread.start()
        pending.stall = time.perf_counter() - t0
        return None

    def _object_job(self, req: _Request, obj: Any) -> Callable[[], SaveReport]:
        snap = None if req.blocking else copy_tree((obj, req.scores))

        def job() -> SaveReport:
            if snap is not None:
                _yield_to_training()  # the worker thread: the copy is taken already
            o, sc = (obj, req.scores) if snap is None else snap.ready()
            return self._write(req, o, self.config, sc, {"step": str(req.step)}, None, None)

        return job

    def _model_job(self, req: _Request, extra: Any) -> Callable[[], SaveReport]:
        step, scores, blocking = req.step, req.scores, req.blocking
        model, optimizer = self.model, self.optimizer
        if model is None:
            raise ConfigError(
                "save(step) without obj needs a manager given model= (and optimizer=); "
                "otherwise pass the object to save"
            )
        probe = self.probe_fn
        if probe is not None and not blocking:
            raise ConfigError(
                "a manager with probe_fn saves blocking only: the probe trains the live model "
                "and draws from the global RNG, which a background thread cannot do without "
                "changing the run; pass blocking=True"
            )
        if scores is None and self._tracker is not None and self._tracker.has_scores():
            scores = self._tracker.scores()
        self._arm_tracker(step)
        taken = None
        if blocking:
            snapshot = None
            fixed = (extra, scores)
        else:
            snapshot = ModelSnapshot(model, optimizer)
            fixed = copy_tree((extra, scores)).ready()
            if self._gate is None:
                # No optimizer to gate: nothing would hold training back while a worker
                # copied the weights, so they are copied here, before save() returns.
                taken = snapshot.take()
        gate = None if blocking else self._gate
        previous = self.last_search
        if self.research_every is not None and self._since_full >= self.research_every:
            # a full search, which may be more aggressive than the last one (under error
            # feedback a delta save searches nothing: the next keyframe does it)
            previous = None
        # The probe search runs with every full search and every keyframe_every saves; in
        # between, the moments keep its choice.
        moments = self.moments
        recent = 0 < self._since_probe < self.keyframe_every
        if probe is not None and previous is not None and recent:
            probe, moments = None, previous.moments
        tracker = self._tracker
        last = self.last_search

        def job() -> SaveReport:
            ex, sc = fixed
            if snapshot is None:
                m, opt = model, optimizer
                obj: dict[str, Any] = {"model": model.state_dict()}
                if optimizer is not None:
                    obj["optimizer"] = optimizer.state_dict()
            elif taken is not None:
                m, opt, obj = taken
            else:
                m, opt, obj = snapshot.take()  # at full priority: the next step waits for it
                if gate is not None:
                    gate.release()  # the copy is taken: training may step again
                _yield_to_training()
            residual = self.config.residual is not None and self._delta_expected(step)
            if residual:
                # error feedback: the weights will be residuals, so none is searched
                result = for_residuals(
                    m,
                    last,
                    eval_fn=self.eval_fn,
                    optimizer=opt,
                    base=self.config,
                    moments=last.moments if last is not None else self.moments,
                )
            else:
                # the probe's training steps are not the run's: the tracker neither counts
                # nor records them
                paused = (
                    tracker.paused() if probe is not None and tracker else contextlib.nullcontext()
                )
                with paused:
                    result = search(
                        m,
                        eval_fn=self.eval_fn,
                        tolerance=self.tolerance,
                        scores=sc,
                        previous=previous,
                        optimizer=opt,
                        base=self.config,
                        moments=moments,
                        probe_fn=probe,
                        earlier=tuple(self._baselines),
                        context=f"checkpoint step {step}",
                        error_budget=self.error_budget,
                    )
            if ex is not None:
                obj["extra"] = ex
            full_scores = save_scores(m, result, scores=sc, optimizer=opt)
            metadata = {"step": str(step), "search": json.dumps(result.to_json())}
            # The search's quantized weights go into the file; neither the report nor the
            # next search needs them, so they are released once written.
            prequantized, result = result.prequantized, replace(result, prequantized={})
            report = self._write(
                req, obj, result.config, full_scores, metadata, result, prequantized
            )
            self.last_search = result
            if result.baseline is not None:
                self._baselines = [*self._baselines, result.baseline][-_EARLIER:]
            self._saves += 1
            self._since_full = 1 if previous is None and not residual else self._since_full + 1
            if result.probe is not None:
                self._since_probe = 1
            elif self._since_probe:
                self._since_probe += 1
            return report

        return job

    def _write(
        self,
        req: _Request,
        obj: Any,
        config: CompressionConfig,
        scores: Mapping[str, torch.Tensor] | None,
        metadata: dict[str, str],
        result: SearchResult | None,
        prequantized: Mapping[str, Prequantized] | None,
    ) -> SaveReport:
        """Encode and publish under the writer lock; nothing after the publish can fail."""
        step, overwrite = req.step, req.overwrite
        store = self.store
        with store.writing():
            steps = store.steps()
            store.check_new(step, overwrite=overwrite, steps=steps, replaceable=req.replaceable)
            known = self._cache.__contains__
            links, position = store.plan(step, steps, known)
            if links:
                # a parent that does not decode must not stop training from checkpointing
                try:
                    api.check_parent(links, cache=self._cache)
                except (CkptzipError, OSError) as exc:
                    parent = step_of(links[-1].name)
                    warn_keyframe(step, -1 if parent is None else parent, exc)
                    links = None
            if links and store.layout == "skip":
                metadata = {**metadata, POSITION_KEY: str(position)}
            enc = api.encode(
                obj,
                config=config,
                scores=scores,
                parent=links,
                metadata=metadata,
                cache=self._cache,
                prequantized=prequantized,
            )
            bytes_out = store.publish(step, enc.write, overwrite=overwrite)
            self.skipped = tuple((s, why) for s, why in self.skipped if s != step)
            store.note(step_file_name(step), enc.sha256, links[-1].sha256 if links else None)
            report = enc.report(str(self.path(step)), bytes_out, cache=self._cache)
            try:
                store.retain(step)
            except (CkptzipError, OSError) as exc:  # the step is saved: say so, do not fail
                warnings.warn(
                    f"step {step} is saved, but retention stopped: {exc}", CkptzipWarning, 2
                )
        self._last_saved = step
        fields = {f: getattr(report, f) for f in _REPORT_FIELDS}
        return SaveReport(**fields, search=result, step=step)

    def _delta_expected(self, step: int) -> bool:
        """Whether the save of ``step`` will be a delta (what :meth:`_write` will find, unless
        the parent turns out not to decode or another writer saves in between: then the
        save is a keyframe with the configs given)."""
        store = self.store
        return store.parent_chain(step, store.steps(), self._cache.__contains__) is not None

    def _arm_tracker(self, step: int) -> None:
        # Without a fixed interval, expect the next save as many optimizer steps ahead as the
        # last gap (counted by the tracker, so it holds whatever the step numbers mean).
        tracker = self._tracker
        if tracker is not None and tracker.every is None and tracker.step > self._mark:
            tracker.arm(tracker.step - self._mark)
        self._mark = tracker.step if tracker is not None else 0

    def _running(self) -> bool:
        p = self._pending
        return p is not None and p.thread is not None and p.thread.is_alive()

    def _raise_failed(self) -> None:
        """Raise the error of a finished background save (once), if it failed."""
        p = self._pending
        if p is not None and not self._running():
            self.wait()

    def wait(self) -> SaveReport | None:
        """Wait for the asynchronous save in flight; returns its report (``None`` if none).

        Raises
        ------
        Exception
            Whatever the background save raised (once; the manager stays usable).
        """
        p = self._pending
        if p is None:
            return None
        assert p.thread is not None
        p.thread.join()
        self._pending = None
        if p.error is not None:
            raise p.error
        assert p.report is not None
        waited = 0.0 if p.gate is None else p.gate.waited - p.gate_waited0
        return _with(p.report, stall=p.stall + waited)

    def restore(self, step: int | None = None, *, max_bytes: int | None = None) -> int:
        """Load ``step`` (default: the latest restorable) into the manager's model and optimizer.

        The snapshot's ``extra`` becomes ``self.extra``. Returns the step restored.
        ``max_bytes`` overrides the manager's read limit for this call.

        Raises
        ------
        ConfigError
            The manager has no model, the file is not a model snapshot, or what it holds does
            not fit the manager's model or optimizer. The file's parts are checked first
            (the optimizer's groups against the optimizer's, before the model is touched);
            where ``load_state_dict`` itself refuses the model's weights (keys or shapes of
            another model), the message says that the model may be partly overwritten.
        CheckpointNotFoundError
            No such step.
        """
        if self.model is None:
            raise ConfigError("restore() needs a manager given model=; use load() otherwise")
        self.wait()
        step, state = self._load(step, "cpu", max_bytes)
        if not isinstance(state, dict) or not isinstance(state.get("model"), Mapping):
            raise ConfigError(
                f"step {step} is not a model snapshot (saved with an explicit obj); use load()"
            )
        if self.optimizer is not None:
            _check_optimizer_state(step, state.get("optimizer"), self.optimizer)
        baselines = _baseline_of(self._loaded_metadata)
        _load_into(step, "model", self.model, state["model"])
        if self.optimizer is not None:
            _load_into(step, "optimizer", self.optimizer, state["optimizer"])
        self.extra = state.get("extra")
        self._last_saved = step
        self._baselines = baselines
        if self._tracker is not None:
            self._mark = self._tracker.step
        return step

    def close(self) -> None:
        """Wait for a save in flight (raising its error), then remove the training hooks."""
        try:
            self.wait()
        finally:
            if self._tracker is not None:
                self._tracker.close()
                self._tracker = None
            if self._gate is not None:
                self._gate.close()
                self._gate = None

    # -- loading ---------------------------------------------------------------------------

    def load(
        self,
        step: int | None = None,
        *,
        map_location: str | torch.device = "cpu",
        max_bytes: int | None = None,
    ) -> Any:
        """Restore ``step`` (default: the latest restorable), decoding its chain.

        ``max_bytes`` overrides the manager's read limit (see :func:`ckptzip.load`) for this
        call; a step over it raises :class:`~ckptzip.errors.DecodeLimitError` rather than
        falling back to an older one.

        Without a step, newer steps that cannot be restored are skipped with a
        :class:`~ckptzip.errors.CkptzipWarning` naming each and why (also in
        :attr:`skipped`). Takes no lock: works on read-only media and during a save.

        Raises
        ------
        CheckpointNotFoundError
            No such step (or no restorable step).
        MissingParentError
            A file of its chain is missing or was altered.
        StepMismatchError
            A file records another step than its name says.

        Examples
        --------
        >>> import tempfile, torch
        >>> mgr = CheckpointManager(tempfile.mkdtemp())
        >>> _ = mgr.save(1, {"w": torch.ones(3)})
        >>> mgr.load(1)
        {'w': tensor([1., 1., 1.])}
        """
        self._raise_failed()
        return self._load(step, map_location, max_bytes)[1]

    def _load(
        self, step: int | None, map_location: str | torch.device, max_bytes: int | None
    ) -> tuple[int, Any]:
        with collector_paused():  # a restore's throwaway objects: see ckptzip._collector
            return self._load_paused(step, map_location, max_bytes)

    def _load_paused(
        self, step: int | None, map_location: str | torch.device, max_bytes: int | None
    ) -> tuple[int, Any]:
        limit = self.max_bytes if max_bytes is None else max_bytes

        def decode(links: list[Any]) -> Any:
            return api.load_chain(
                links, map_location=map_location, cache=self._cache, max_bytes=limit
            )

        if step is not None:
            links = self.store.chain(_check_step(step), self._cache.__contains__)
            state = decode(links)
            self._loaded_metadata = links[-1].manifest.metadata
            return step, state
        skipped: list[tuple[int, str]] = []
        newest: int | None = None
        while True:
            try:
                links, more = self.store.latest(newest, self._cache.__contains__)
            except CheckpointNotFoundError as exc:
                # every step was skipped, some here (damaged inside a chunk), some by the
                # store: say which and why, not "no finished checkpoint yet"
                skipped += getattr(exc, "skipped", [])
                self.skipped = tuple(skipped)
                if not skipped:
                    raise
                raise unrestorable(str(self.directory), sorted(skipped, reverse=True)) from None
            skipped += more
            found = step_of(links[-1].name)
            assert found is not None
            try:
                state = decode(links)
            except CkptzipError as exc:  # damaged inside a chunk: try an older step
                # the caller's limit or memory is no damage: an older step is not what was
                # asked for, so say so rather than restore it
                if isinstance(exc, (ConfigError, DecodeLimitError, DecodeMemoryError)):
                    raise
                skipped.append((found, f"{type(exc).__name__}: {exc}"))
                newest = found - 1
                continue
            self._note_skipped(skipped)
            self._loaded_metadata = links[-1].manifest.metadata
            return found, state

    def _note_skipped(self, skipped: list[tuple[int, str]]) -> None:
        self.skipped = tuple(skipped)
        if skipped:
            lines = "".join(f"\n  step {s}: {why}" for s, why in skipped)
            warnings.warn(
                f"skipped newer steps of {str(self.directory)!r} that cannot be restored:{lines}",
                CkptzipWarning,
                stacklevel=4,
            )

    def read_quantized(
        self, step: int | None = None, *, max_bytes: int | None = None
    ) -> dict[str, QuantizedTensor | torch.Tensor]:
        """The decoded tensors of ``step`` by path, as :func:`ckptzip.read_quantized` gives."""
        self._raise_failed()
        links = self.store.chain(_check_step(step)) if step is not None else self.store.latest()[0]
        limit = self.max_bytes if max_bytes is None else max_bytes
        decoded = api.decode_chain(links, cache=self._cache, max_bytes=limit)[1]
        return {p: d.value() for p, d in decoded.items()}

    # -- inspection ------------------------------------------------------------------------

    def describe(self) -> list[ChainEntry]:
        """One :class:`ChainEntry` per step (see :func:`describe_directory`)."""
        return describe_directory(self.directory)


#: The nice value of the worker thread of an asynchronous save once its snapshot is taken
#: (Linux: per thread, inherited by the threads it starts): the search and compression take
#: the CPU training leaves idle.
BACKGROUND_NICE = 10


_EARLIER = 3  # saves whose baselines the search's gain per interval is measured over


def _check_optimizer_state(step: int, saved: Any, optimizer: torch.optim.Optimizer) -> None:
    """Refuse (:class:`ConfigError`) a saved optimizer state that ``optimizer`` cannot take:
    not a state dict, or groups that differ from the optimizer's in number or size (what
    ``Optimizer.load_state_dict`` would refuse, checked before the model is touched)."""
    if saved is None:
        raise ConfigError(f"step {step} holds no optimizer state to restore")
    groups = saved.get("param_groups") if isinstance(saved, Mapping) else None
    if not isinstance(groups, list) or not isinstance(saved.get("state"), Mapping):
        raise ConfigError(f"step {step}'s optimizer state is not an optimizer's state dict")
    sizes = [len(g["params"]) if isinstance(g, Mapping) and isinstance(g.get("params"), list)
             else None for g in groups]  # fmt: skip
    want = [len(g["params"]) for g in optimizer.param_groups]
    if sizes != want:
        raise ConfigError(
            f"step {step}'s optimizer state has parameter groups of sizes {sizes}, the "
            f"manager's optimizer {want}: it was saved from another model or optimizer; "
            "nothing was restored"
        )


def _load_into(step: int, what: str, target: Any, saved: Any) -> None:
    """``target.load_state_dict(saved)``, its refusal a :class:`ConfigError`."""
    try:
        target.load_state_dict(saved)
    except (RuntimeError, ValueError, TypeError, KeyError, AttributeError) as exc:
        partly = " (the model may be partly overwritten: restore again or rebuild it)"
        raise ConfigError(
            f"step {step}'s {what} state does not fit the manager's {what}"
            f"{partly if what == 'model' else ''}: {exc}"
        ) from exc


def _baseline_of(metadata: Mapping[str, str]) -> list[float]:
    """The exact weights' ``eval_fn`` recorded by the search of a loaded step, if any."""
    try:
        baseline = json.loads(metadata["search"])["baseline"]
    except (KeyError, TypeError, ValueError, RecursionError):
        return []
    return [float(baseline)] if isinstance(baseline, (int, float)) else []


def _yield_to_training() -> None:
    if not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return  # pragma: no cover - not Linux/BSD
    tid = threading.get_native_id()
    # not allowed everywhere (some containers): then it runs at normal priority
    with contextlib.suppress(OSError):
        nice = max(os.getpriority(os.PRIO_PROCESS, tid), BACKGROUND_NICE)
        os.setpriority(os.PRIO_PROCESS, tid, nice)


def _with(report: SaveReport, *, stall: float) -> SaveReport:
    fields = {f: getattr(report, f) for f in _REPORT_FIELDS}
    return SaveReport(**fields, search=report.search, step=report.step, stall=stall)


def _check_step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ConfigError(f"step={step!r} must be an integer >= 0")
    if step >= 10**12:
        raise ConfigError(f"step={step!r} is too large (at most 10**12 - 1)")
    return step


def _damage(link: Any) -> str | None:
    """What is wrong with a file's chunks (checksums), or ``None`` when every one is intact."""
    try:
        for _ in link.reader().iter_chunks():
            pass
    except CkptzipError as exc:
        return str(exc)
    return None


def describe_directory(
    directory: str | os.PathLike[str], *, checksums: bool = True
) -> list[ChainEntry]:
    """The chain view of a manager's directory: kind, size, ratio, parent and health per step.

    Every parent link is checked (the parent exists and has the recorded sha256) and, with
    ``checksums`` (the default), every chunk against its checksum, so the ``status`` column
    says which steps can be restored: ``"damaged: ..."`` for a file whose data is. Each file
    is read once either way (the parent check needs its sha256); the chunk checksums add a
    pass over bytes already in memory (CRC-32, or sha256 in files before version 5), no
    decoding. Reads only; takes no lock.

    Examples
    --------
    >>> import tempfile, torch
    >>> d = tempfile.mkdtemp()
    >>> mgr = CheckpointManager(d)
    >>> _ = mgr.save(0, {"w": torch.zeros(10)})
    >>> [(e.step, e.kind, e.status) for e in describe_directory(d)]
    [(0, 'full', 'ok')]
    """
    if not is_url(directory) and not Path(local_path(directory)).is_dir():
        raise CheckpointNotFoundError(f"{os.fspath(directory)!r} is not a directory")
    store = ChainStore(open_storage(directory), keyframe_every=1, keep=None)
    out: list[ChainEntry] = []
    hashes: dict[int, str] = {}  # not the bytes: a directory can be larger than memory
    status: dict[int, str] = {}
    for step in store.steps():
        try:
            link = store.read(step)
        except (CkptzipError, OSError) as exc:
            status[step] = f"unreadable: {exc}"
            out.append(ChainEntry(step, "?", 0, 0, None, status[step]))
            continue
        hashes[step] = link.sha256
        ref = link.manifest.parent
        parent = None if ref is None else step_of(ref["name"])
        damage = _damage(link) if checksums else None
        if damage is not None:
            state = f"damaged: {damage}"
        elif ref is None:
            state = "ok"
        elif parent in status and parent not in hashes:
            state = f"parent {ref['name']} cannot be restored"  # present but unreadable
        elif parent is None or parent not in hashes:
            state = f"missing parent {ref['name']}"
        elif hashes[parent] != ref["hash"]:
            state = f"parent {ref['name']} was altered"
        elif status.get(parent, "ok") != "ok":
            state = f"parent {ref['name']} cannot be restored"
        else:
            state = "ok"
        status[step] = state
        out.append(
            ChainEntry(
                step=step,
                kind="full" if ref is None else "delta",
                bytes=len(link.data),
                tensor_bytes=sum(t.nbytes for t in link.manifest.tensors),
                parent_step=parent,
                status=state,
            )
        )
    return out
