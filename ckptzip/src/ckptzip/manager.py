"""``CheckpointManager``: a directory of checkpoints of one run, as keyframes and delta chains.

Layout: one file per step, ``step-00000042.ckz``. Every ``keyframe_every``-th file of a chain
is a full checkpoint (a keyframe); the files between are deltas, each against the step saved
just before it (its *parent*), named in its manifest by file name and sha256 of its bytes.
Every file is still quantized in full, so error never accumulates along a chain; only the
bin indices are stored as differences (:mod:`ckptzip.delta`).

Guarantees (see ``RELIABILITY.md``, ckptzip rows 5, 6, 8, 10):

* A file appears under its step name complete or not at all (temp name in the directory,
  fsync, atomic publish, fsync of the directory: :mod:`ckptzip.storage`). Listings only ever
  show finished files; temp files left by a crashed save are removed when a manager opens
  the directory.
* Saves and retention hold an exclusive lock on ``<directory>/.ckptzip.lock``
  (:func:`fcntl.flock`), loads a shared one, so two writers of one directory, or a writer
  and a reader, never see each other's half-done work.
* Loading a delta checks that its parent exists and has the recorded sha256
  (:class:`~ckptzip.errors.MissingParentError` otherwise). Retention (``keep=N``) keeps the
  ``N`` most recent steps restorable and deletes only files no kept step needs, children
  before parents, so even an interrupted retention leaves every listed step restorable.

Call order::

    mgr = CheckpointManager("ckpts", keyframe_every=10, keep=5)
    for step in ...:
        train ...
        mgr.save(step, {"model": model.state_dict(), "optimizer": opt.state_dict()})
    state = mgr.load()             # latest step; mgr.load(step) for another
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ckptzip import api, storage
from ckptzip._types import QuantizedTensor
from ckptzip.config import CompressionConfig
from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    CkptzipError,
    ConfigError,
    MissingParentError,
    StorageError,
)
from ckptzip.search import SearchResult, save_scores, search
from ckptzip.sensitivity import SensitivityTracker

try:  # POSIX; on other platforms the lock is a no-op (documented on CheckpointManager)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "ChainEntry",
    "CheckpointManager",
    "SaveReport",
    "describe_directory",
    "step_file_name",
]

_NAME = re.compile(r"step-(\d{8,})\.ckz")
_LOCK_NAME = ".ckptzip.lock"


def step_file_name(step: int) -> str:
    """The file name of ``step`` in a manager's directory.

    Examples
    --------
    >>> step_file_name(42)
    'step-00000042.ckz'
    """
    return f"step-{step:08d}.ckz"


def _step_of(name: str) -> int | None:
    m = _NAME.fullmatch(name)
    return int(m.group(1)) if m else None


def _list_steps(directory: Path) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot list {str(directory)!r}: {exc.strerror or exc}") from exc
    # Only exact step names count: temp files (".step-….ckz.tmp-…") never match.
    return sorted(s for s in map(_step_of, names) if s is not None)


@contextlib.contextmanager
def _locked(directory: Path, *, exclusive: bool) -> Iterator[None]:
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    try:
        fd = os.open(directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        if not exclusive and exc.errno in (errno.EACCES, errno.EROFS):  # read-only directory
            yield
            return
        raise StorageError(
            f"cannot open the lock file in {str(directory)!r}: {exc.strerror or exc}"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


class _RecentFiles(OrderedDict[str, Mapping[str, Any]]):
    """An :data:`ckptzip.api.DecodedCache` holding the last ``size`` files decoded or saved.

    Two suffice for a chain: the parent of the next save or load, and the file just written
    or read. Entries are keyed by content hash, so a file replaced on disk never hits.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self._size = size

    def __setitem__(self, key: str, value: Mapping[str, Any]) -> None:
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
    def ratio(self) -> float:
        """``tensor_bytes / bytes``: how much smaller the file is than its raw tensors."""
        return self.tensor_bytes / self.bytes if self.bytes else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "kind": self.kind,
            "bytes": self.bytes,
            "tensor_bytes": self.tensor_bytes,
            "ratio": self.ratio,
            "parent_step": self.parent_step,
            "status": self.status,
        }


@dataclass(frozen=True)
class SaveReport(api.Report):
    """:class:`ckptzip.Report` plus the configuration search behind a model snapshot.

    ``search`` is ``None`` when an explicit object was saved.
    """

    search: SearchResult | None = None

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["search"] = None if self.search is None else self.search.to_json()
        return out


_REPORT_FIELDS = [f for f in api.Report.__dataclass_fields__]


class CheckpointManager:
    """Save and restore the checkpoints of one training run in ``directory``.

    Parameters
    ----------
    directory:
        Where the ``step-XXXXXXXX.ckz`` files live; created if missing.
    keyframe_every:
        A full checkpoint every this many saves of a chain; the others are deltas against
        the previous step. ``1`` disables deltas. Restoring a step decodes at most this many
        files.
    keep:
        Keep only the ``keep`` most recent steps restorable (``None``: keep everything).
        Files still needed by a kept step (its keyframe and the deltas in between) are kept
        too.
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
        search's data-free rule applies (the report says so).
    tolerance:
        Allowed relative worsening of ``eval_fn`` per checkpoint.
    window:
        Steps before each save during which a :class:`~ckptzip.SensitivityTracker` keeps
        ``|g·w|`` for the search (the next save is expected one save interval after the last,
        or every ``checkpoint_every`` steps when given); ``None`` disables the tracking.
    checkpoint_every:
        The save interval in optimizer steps, when fixed (sharpens the tracking window).

    Notes
    -----
    On platforms without :mod:`fcntl` (Windows) there is no directory lock: use one writer.

    With a model::

        mgr = CheckpointManager("ckpts", model=model, optimizer=opt, eval_fn=heldout_loss)
        step = mgr.restore() if mgr.latest_step() is not None else 0
        for step in range(step, total):
            train_step(step)
            if (step + 1) % 500 == 0:
                print(mgr.save(step + 1, extra={"epoch": epoch}).search.to_json())

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
    ) -> None:
        if isinstance(keyframe_every, bool) or not isinstance(keyframe_every, int):
            raise ConfigError(f"keyframe_every={keyframe_every!r} must be an integer >= 1")
        if keyframe_every < 1:
            raise ConfigError(
                f"keyframe_every={keyframe_every!r} must be >= 1 (1 stores every step in full)"
            )
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ConfigError(f"keep={keep!r} must be None (keep all) or an integer >= 1")
        if config is not None and not isinstance(config, CompressionConfig):
            raise ConfigError(f"config={config!r} must be a CompressionConfig")
        self.directory = Path(directory)
        self.keyframe_every = keyframe_every
        self.keep = keep
        self.config = config if config is not None else CompressionConfig()
        # The decoded quantized tensors of the last files saved or loaded: the next delta's
        # parent, so a chain is decoded once rather than from its keyframe at every call.
        self._cache = _RecentFiles(2)
        if model is None and (optimizer is not None or eval_fn is not None):
            raise ConfigError("optimizer= and eval_fn= need model= too (they go with a model)")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise ConfigError(f"model={model!r} must be a torch.nn.Module")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigError(f"optimizer={optimizer!r} must be a torch.optim.Optimizer")
        if not 0 <= tolerance < float("inf"):
            raise ConfigError(f"tolerance={tolerance!r} must be a finite number >= 0")
        self.model, self.optimizer, self.eval_fn = model, optimizer, eval_fn
        self.tolerance = tolerance
        self.last_search: SearchResult | None = None
        self.extra: Any = None  # the ``extra`` of the step last restored
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
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create the checkpoint directory {str(self.directory)!r}: "
                f"{exc.strerror or exc}"
            ) from exc
        with _locked(self.directory, exclusive=True):
            self._remove_stale_temps()

    def __repr__(self) -> str:
        return (
            f"CheckpointManager({str(self.directory)!r}, keyframe_every={self.keyframe_every}, "
            f"keep={self.keep})"
        )

    # -- listing ---------------------------------------------------------------------------

    def path(self, step: int) -> Path:
        """The file of ``step`` (whether or not it exists)."""
        return self.directory / step_file_name(_check_step(step))

    def steps(self) -> list[int]:
        """The finished steps in the directory, ascending."""
        return _list_steps(self.directory)

    def latest_step(self) -> int | None:
        """The highest finished step, or ``None`` when there is none."""
        steps = self.steps()
        return steps[-1] if steps else None

    def chain(self, step: int) -> list[int]:
        """The steps whose files restoring ``step`` reads, keyframe first, ``step`` last.

        Raises
        ------
        CheckpointNotFoundError
            ``step`` does not exist.
        MissingParentError
            A parent on the way is missing (the step cannot be restored).
        """
        out = [step]
        ref = self._parent_ref(step)
        while ref is not None:
            parent = _step_of(ref["name"])
            if parent is None or not self.path(parent).is_file():
                raise MissingParentError(
                    f"{step_file_name(out[-1])} is a delta against {ref['name']!r}, which is "
                    f"missing from {str(self.directory)!r}; step {step} cannot be restored"
                )
            if parent in out or parent >= out[-1]:
                raise MissingParentError(
                    f"{step_file_name(out[-1])} names {ref['name']!r} as its parent, which "
                    "would make a cycle: the directory is damaged"
                )
            out.append(parent)
            ref = self._parent_ref(parent)
        return out[::-1]

    def _parent_ref(self, step: int) -> dict[str, str] | None:
        path = self.path(step)
        if not path.is_file():
            raise CheckpointNotFoundError(
                f"no finished checkpoint for step {step} in {str(self.directory)!r}; "
                f"available steps: {_short(self.steps())}"
            )
        return api.read_manifest(path).parent

    # -- saving ----------------------------------------------------------------------------

    def save(
        self,
        step: int,
        obj: Any = None,
        *,
        extra: Any = None,
        scores: Mapping[str, torch.Tensor] | None = None,
        overwrite: bool = False,
    ) -> SaveReport:
        """Save ``obj`` as ``step``: a keyframe or a delta against the previous step.

        Parameters
        ----------
        step:
            The training step (an integer >= 0); names the file.
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
            Replace an existing step. Refused when later deltas depend on that step.

        Returns
        -------
        SaveReport
            What :func:`ckptzip.save` reports for the file written, plus ``search`` (the
            :class:`~ckptzip.search.SearchResult`: configuration per layer type, trials and
            search time) when the manager snapshotted a model.

        Raises
        ------
        CheckpointExistsError
            ``step`` exists and ``overwrite`` is false, or deltas depend on it.
        StorageError
            The write failed (disk full, I/O); nothing was left behind and every earlier
            step is untouched.
        """
        step = _check_step(step)
        path = self.path(step)
        if not overwrite and path.exists():  # fail before any search or quantization
            raise _exists(step, path)
        config, metadata, result = self.config, {"step": str(step)}, None
        prequantized = None
        if obj is None:
            obj, config, scores, result = self._snapshot(extra, scores)
            metadata["search"] = json.dumps(result.to_json())
            # the quantized weights go into the file; neither the report nor the next search
            # needs them, so they are released once written
            prequantized, result = result.prequantized, replace(result, prequantized={})
        elif extra is not None:
            raise ConfigError("extra= goes with a model snapshot: pass obj=None, or put it in obj")
        with _locked(self.directory, exclusive=True):
            steps = self.steps()
            if step in steps:
                if not overwrite:
                    raise _exists(step, path)
                dependents = [s for s in steps if s > step and step in self._chain_or_none(s)]
                if dependents:
                    raise CheckpointExistsError(
                        f"step {step} cannot be overwritten: steps {_short(dependents)} are "
                        "deltas that need it; save under another step"
                    )
            parent = self._parent_for(step, steps)
            report = api.save(
                obj,
                path,
                config=config,
                scores=scores,
                parent=None if parent is None else self.path(parent),
                overwrite=overwrite,
                metadata=metadata,
                cache=self._cache,
                prequantized=prequantized,
            )
            if self.keep is not None:
                self._retain(self.keep)
        if result is not None:
            self._arm_tracker(step)
        return SaveReport(**{f: getattr(report, f) for f in _REPORT_FIELDS}, search=result)

    def _snapshot(
        self, extra: Any, scores: Mapping[str, torch.Tensor] | None
    ) -> tuple[dict[str, Any], CompressionConfig, dict[str, torch.Tensor], SearchResult]:
        """The object to save for a model snapshot, its searched config and scores."""
        if self.model is None:
            raise ConfigError(
                "save(step) without obj needs a manager given model= (and optimizer=); "
                "otherwise pass the object to save"
            )
        if scores is None and self._tracker is not None and self._tracker.has_scores():
            scores = self._tracker.scores()
        result = search(
            self.model,
            eval_fn=self.eval_fn,
            tolerance=self.tolerance,
            scores=scores,
            previous=self.last_search,
            optimizer=self.optimizer,
            base=self.config,
        )
        self.last_search = replace(result, prequantized={})
        obj: dict[str, Any] = {"model": self.model.state_dict()}
        if self.optimizer is not None:
            obj["optimizer"] = self.optimizer.state_dict()
        if extra is not None:
            obj["extra"] = extra
        full_scores = save_scores(self.model, result, scores=scores, optimizer=self.optimizer)
        return obj, result.config, full_scores, result

    def _arm_tracker(self, step: int) -> None:
        # Without a fixed interval, expect the next save as many optimizer steps ahead as the
        # last gap (counted by the tracker, so it holds whatever the step numbers mean).
        tracker = self._tracker
        if tracker is not None and tracker.every is None and tracker.step > self._mark:
            tracker.arm(tracker.step - self._mark)
        self._mark = tracker.step if tracker is not None else 0
        self._last_saved = step

    def restore(self, step: int | None = None) -> int:
        """Load ``step`` (default: the latest) into the manager's model and optimizer.

        The snapshot's ``extra`` becomes ``self.extra``. Returns the step restored.

        Raises
        ------
        ConfigError
            The manager has no model, or the file is not a model snapshot.
        CheckpointNotFoundError
            No such step.
        """
        if self.model is None:
            raise ConfigError("restore() needs a manager given model=; use load() otherwise")
        step = self._resolve(step)
        state = self.load(step)
        if not isinstance(state, dict) or "model" not in state:
            raise ConfigError(
                f"step {step} is not a model snapshot (saved with an explicit obj); use load()"
            )
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None:
            if "optimizer" not in state:
                raise ConfigError(f"step {step} holds no optimizer state to restore")
            self.optimizer.load_state_dict(state["optimizer"])
        self.extra = state.get("extra")
        self._last_saved = step
        if self._tracker is not None:
            self._mark = self._tracker.step
        return step

    def close(self) -> None:
        """Remove the sensitivity hooks from the model (the directory needs no closing)."""
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None

    def _parent_for(self, step: int, steps: list[int]) -> int | None:
        """The step to delta against, or ``None`` for a keyframe."""
        if self.keyframe_every == 1:
            return None
        earlier = [s for s in steps if s < step]
        if not earlier:
            return None
        parent = earlier[-1]
        chain = self._chain_or_none(parent)
        # A damaged or too long chain ends here: the new file starts a fresh one.
        if not chain or len(chain) >= self.keyframe_every:
            return None
        return parent

    def _chain_or_none(self, step: int) -> list[int]:
        try:
            return self.chain(step)
        except CkptzipError:
            return []

    def _retain(self, keep: int) -> None:
        steps = self.steps()
        kept = steps[-keep:]
        needed: set[int] = set()
        for s in kept:
            needed.update(self._chain_or_none(s) or [s])
        # Newest first: a child goes before its parent, so an interruption leaves every
        # remaining file with its parent still present.
        for s in sorted(set(steps) - needed, reverse=True):
            try:
                self.path(s).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(
                    f"retention could not delete {str(self.path(s))!r}: {exc.strerror or exc}"
                ) from exc

    def _remove_stale_temps(self) -> None:
        # Called under the exclusive lock: no save of a manager is in flight, so every temp
        # file of a step name is the leftover of a crashed save.
        for name in os.listdir(self.directory):
            if storage.is_temp_name(name) and _NAME.fullmatch(
                name[1:].split(storage.TEMP_MARKER)[0]
            ):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.directory / name)

    # -- loading ---------------------------------------------------------------------------

    def load(self, step: int | None = None, *, map_location: str | torch.device = "cpu") -> Any:
        """Restore ``step`` (default: the latest), decoding its chain from the keyframe.

        Raises
        ------
        CheckpointNotFoundError
            No such step (or the directory holds none).
        MissingParentError
            A file of its chain is missing or was altered.

        Examples
        --------
        >>> import tempfile, torch
        >>> mgr = CheckpointManager(tempfile.mkdtemp())
        >>> _ = mgr.save(1, {"w": torch.ones(3)})
        >>> mgr.load(1)
        {'w': tensor([1., 1., 1.])}
        """
        with _locked(self.directory, exclusive=False):
            step = self._resolve(step)
            self.chain(step)  # a clear error naming the missing link before any decoding
            return api.load(self.path(step), map_location=map_location, cache=self._cache)

    def read_quantized(self, step: int | None = None) -> dict[str, QuantizedTensor | torch.Tensor]:
        """The decoded tensors of ``step`` by path, as :func:`ckptzip.read_quantized` gives."""
        with _locked(self.directory, exclusive=False):
            step = self._resolve(step)
            self.chain(step)
            return api.read_quantized(self.path(step), cache=self._cache)

    def _resolve(self, step: int | None) -> int:
        if step is None:
            latest = self.latest_step()
            if latest is None:
                raise CheckpointNotFoundError(
                    f"no finished checkpoint in {str(self.directory)!r} yet"
                )
            return latest
        return _check_step(step)

    # -- inspection ------------------------------------------------------------------------

    def describe(self) -> list[ChainEntry]:
        """One :class:`ChainEntry` per step (see :func:`describe_directory`)."""
        return describe_directory(self.directory)


def _exists(step: int, path: Path) -> CheckpointExistsError:
    return CheckpointExistsError(
        f"step {step} already exists ({str(path)!r}); pass overwrite=True to replace it, "
        "or save under another step"
    )


def _check_step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ConfigError(f"step={step!r} must be an integer >= 0")
    if step >= 10**12:
        raise ConfigError(f"step={step!r} is too large (at most 10**12 - 1)")
    return step


def _short(steps: list[int]) -> str:
    if len(steps) <= 8:
        return str(steps)
    return f"[{steps[0]}, {steps[1]}, ..., {steps[-1]}] ({len(steps)} steps)"


def describe_directory(directory: str | os.PathLike[str]) -> list[ChainEntry]:
    """The chain view of a manager's directory: kind, size, ratio, parent and health per step.

    Every parent link is checked (the parent exists and has the recorded sha256), so the
    ``status`` column says which steps can be restored.

    Examples
    --------
    >>> import tempfile, torch
    >>> d = tempfile.mkdtemp()
    >>> mgr = CheckpointManager(d)
    >>> _ = mgr.save(0, {"w": torch.zeros(10)})
    >>> [(e.step, e.kind, e.status) for e in describe_directory(d)]
    [(0, 'full', 'ok')]
    """
    root = Path(directory)
    if not root.is_dir():
        raise CheckpointNotFoundError(f"{str(root)!r} is not a directory")
    out: list[ChainEntry] = []
    hashes: dict[int, str] = {}
    status: dict[int, str] = {}
    for step in _list_steps(root):
        path = root / step_file_name(step)
        try:
            manifest = api.read_manifest(path)
            size = path.stat().st_size
            hashes[step] = storage.sha256_file(path)
        except (CkptzipError, OSError) as exc:
            status[step] = f"unreadable: {exc}"
            out.append(ChainEntry(step, "?", 0, 0, None, status[step]))
            continue
        ref = manifest.parent
        parent = None if ref is None else _step_of(ref["name"])
        if ref is None:
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
                bytes=size,
                tensor_bytes=sum(t.nbytes for t in manifest.tensors),
                parent_step=parent,
                status=state,
            )
        )
    return out
