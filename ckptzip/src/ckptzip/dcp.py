"""ckptzip under ``torch.distributed.checkpoint`` (DCP): a storage writer and reader.

DCP plans a sharded save (which rank writes which shard, deduplicating replicated tensors) and
hands each rank its *write items*; :class:`Writer` compresses that rank's items on that rank,
in parallel with the others, into one ``.ckz`` file per rank (``__<rank>.ckz``), with the same
:class:`~ckptzip.CompressionConfig` (plan, codecs, exact rules, optimizer-moment rules) as a
single-process :func:`ckptzip.save`. Paths inside a rank's file are the state dict's own paths
(``model/fc.weight``, ``optim/state/fc.weight/exp_avg_sq``), so the rules and per-path
overrides written for ``ckptzip.save({"model": ..., "optim": ...})`` apply unchanged.
:class:`Reader` decodes what each rank's load plan asks for; DCP reshards (save on 4 ranks,
load on 2, or the reverse) by asking for pieces of other ranks' shards.

Call order (DCP drives it; see ``torch.distributed.checkpoint.StorageWriter``):
``reset(checkpoint_id)`` → ``set_up_storage_writer`` → ``prepare_local_plan`` (every rank) →
``prepare_global_plan`` (coordinator: names each rank's file) → ``write_data`` (every rank:
compress, write ``__<rank>.ckz`` atomically) → ``finish`` (coordinator: write ``.metadata``
last, atomically). A checkpoint directory without ``.metadata`` is unfinished and is never
read. Reading: ``reset`` → ``read_metadata`` → ``set_up_storage_reader`` → plans →
``read_data``.

What is in the directory, and what is pickled:

* ``__<rank>.ckz``: ckptzip files (no pickle). Tensor items are stored as tensors; DCP's
  *byte items* (non-tensor values such as optimizer ``param_groups``, which DCP pickles with
  ``torch.save`` itself) are stored as the uint8 bytes DCP gives us, bit-exact.
* ``.metadata``: DCP's own ``Metadata`` object, pickled, exactly as DCP's ``FileSystemWriter``
  writes it (the state dict's layout: each tensor's global shape, dtype and chunks, the
  flattening map, and for each item the file and key that hold it as a plain
  ``(file, key)`` tuple). :class:`Reader` unpickles it with an allow-list of DCP's metadata
  classes, ``torch.Size``, dtypes and paths, so a crafted ``.metadata`` cannot run code.
* Byte items are handed to DCP's load planner, which unpickles them with
  ``torch.load(weights_only=False)``; with ``Reader(strict_bytes=True)`` (the default) each is
  first checked by ``torch.load(weights_only=True)`` and refused if it holds anything else.

Delta chains: ``Writer(path, parent=previous_dir)`` delta-encodes each rank's file against the
same rank's file of ``previous_dir`` (bin indices of each shard against the same shard of the
previous step). Files of a chain must share a directory (a delta names its parent by file
name), so the parent's chain is hard-linked into the new directory (``__<rank>.<sha>.ckz``,
no bytes copied): every step directory restores on its own, and deleting an old step never
breaks a newer one. Where shards no longer line up (a different number of ranks, a tensor of
another shape), a tensor falls back to its full encoding; a rank with no parent file, a file
system without hard links, a remote URL, or a chain ``keyframe_every`` long writes a full file.

Examples
--------
>>> import torch.distributed.checkpoint as dcp                       # doctest: +SKIP
>>> dcp.save(state, storage_writer=ckptzip.dcp.Writer("ckpt/step_100",
...                                                    parent="ckpt/step_50"))  # doctest: +SKIP
>>> dcp.load(state, storage_reader=ckptzip.dcp.Reader("ckpt/step_100"))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import posixpath
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.checkpoint import (
    LoadPlan,
    LoadPlanner,
    Metadata,
    SavePlan,
    SavePlanner,
    StorageReader,
    StorageWriter,
)
from torch.distributed.checkpoint.metadata import MetadataIndex, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from ckptzip import api, storage
from ckptzip.config import CompressionConfig
from ckptzip.errors import CheckpointExistsError, ConfigError, CorruptCheckpointError

__all__ = ["METADATA_NAME", "Reader", "Writer", "rank_file_name"]

METADATA_NAME = ".metadata"
"""DCP's metadata file name (the same as ``FileSystemWriter``'s); written last."""

_DEPTH_KEY = "dcp.chain_depth"
"""File metadata: deltas since the last full file of this rank's chain (0 for a full file)."""


def rank_file_name(rank: int) -> str:
    """The ``.ckz`` file that holds one rank's items.

    Examples
    --------
    >>> rank_file_name(3)
    '__3.ckz'
    """
    return f"__{rank}.ckz"


def _join(directory: str, name: str) -> str:
    return (
        posixpath.join(directory, name)
        if storage.is_url(directory)
        else os.path.join(directory, name)
    )


def _item_key(index: MetadataIndex, mappings: Mapping[str, Any] | None) -> str:
    """The path of an item inside its rank's file.

    DCP flattens the state dict into dotted FQNs (``model.fc.weight``); its default planners keep
    the original key path (``("model", "fc.weight")``), which gives the same ``/``-joined path a
    single-process save uses, so moment rules and per-path overrides match. Other planners fall
    back to the FQN.
    """
    obj_path = None if mappings is None else mappings.get(index.fqn)
    return index.fqn if obj_path is None else "/".join(str(p) for p in obj_path)


class Writer(StorageWriter):
    """A DCP ``StorageWriter`` that compresses each rank's shards with ckptzip.

    Parameters
    ----------
    path:
        The checkpoint directory (``checkpoint_id`` passed to ``dcp.save`` replaces it).
    config:
        How to compress (default :class:`~ckptzip.CompressionConfig`), as for
        :func:`ckptzip.save`.
    parent:
        A previous checkpoint directory written by this writer: each rank's file becomes a delta
        against the same rank's file there (see the module docstring for when it falls back).
    keyframe_every:
        At most ``keyframe_every - 1`` deltas follow a full file in a rank's chain.
    overwrite:
        Replace an existing checkpoint in ``path``; otherwise a finished one there is refused.
    threads:
        Encoding threads per rank (:func:`ckptzip.save`'s ``threads``; default one per core,
        at most 8). With several ranks on one machine, about ``cores // ranks_per_machine``.

    The call order is DCP's (module docstring). One instance may serve several saves; each
    ``dcp.save`` calls :meth:`reset` first.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        config: CompressionConfig | None = None,
        parent: str | os.PathLike[str] | None = None,
        keyframe_every: int = 10,
        overwrite: bool = False,
        threads: int | None = None,
    ) -> None:
        super().__init__()
        if config is not None and not isinstance(config, CompressionConfig):
            raise ConfigError(f"config={config!r} must be a CompressionConfig")
        if isinstance(keyframe_every, bool) or not isinstance(keyframe_every, int):
            raise ConfigError(f"keyframe_every={keyframe_every!r} must be an int >= 1")
        if keyframe_every < 1:
            raise ConfigError(f"keyframe_every={keyframe_every!r} must be >= 1")
        self.path = os.fspath(path)
        self.config = CompressionConfig() if config is None else config
        self.parent = None if parent is None else os.fspath(parent)
        self.keyframe_every = keyframe_every
        self.overwrite = overwrite
        self.threads = threads
        self.rank: int | None = None
        self.use_collectives = True
        self.reports: list[api.Report] = []
        """This rank's :class:`~ckptzip.Report` of the last save (one file per rank)."""

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.reports = []

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.rank = kwargs.get("rank")
        self.use_collectives = bool(kwargs.get("use_collectives", True))

    def _metadata_path(self) -> str:
        if self.use_collectives or self.rank is None:
            return _join(self.path, METADATA_NAME)
        return _join(self.path, f"__{self.rank}{METADATA_NAME}")

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        if not storage.is_url(self.path):
            os.makedirs(self.path, exist_ok=True)
        if not self.overwrite and storage.is_file(self._metadata_path()):
            raise CheckpointExistsError(
                f"a finished checkpoint exists in {self.path!r}; pass Writer(overwrite=True) "
                "or save to a new directory"
            )
        if self.rank is not None and not self.use_collectives:
            plan = dataclasses.replace(plan, storage_data=rank_file_name(self.rank))
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        return [
            p
            if p.storage_data is not None
            else dataclasses.replace(p, storage_data=rank_file_name(i))
            for i, p in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        name: str = plan.storage_data
        # DefaultSavePlanner's flattening map (an attribute, not part of SavePlanner's
        # interface): with another planner the paths are DCP's FQNs
        mappings = getattr(planner, "mappings", None)
        state: dict[str, torch.Tensor] = {}
        keys: list[tuple[Any, str]] = []
        for item in plan.items:
            key = _item_key(item.index, mappings)
            if key in state:  # another chunk of the same tensor on this rank (rare)
                key = f"{key}@{len(state)}"
            data = planner.resolve_data(item)
            if item.type == WriteItemType.BYTE_IO:
                assert isinstance(data, io.BytesIO)
                raw = data.getvalue()
                state[key] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
            else:
                assert isinstance(data, torch.Tensor)
                state[key] = data.detach().contiguous()
            keys.append((item, key))
        target = _join(self.path, name)
        parent, depth = self._link_parent(name)
        report = api.save(
            state,
            target,
            config=self.config,
            parent=parent,
            # prepare_local_plan refused a finished checkpoint here: a file left by an
            # unfinished save (no .metadata) is replaced
            overwrite=True,
            metadata={_DEPTH_KEY: str(depth)},
            threads=self.threads,
        )
        self.reports = [report]
        nbytes = {e.path: e.bytes for e in report.entries}
        results = [
            WriteResult(index=item.index, size_in_bytes=nbytes[key], storage_data=(name, key))
            for item, key in keys
        ]
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def _link_parent(self, name: str) -> tuple[str | None, int]:
        """Hard-link the parent's chain of this rank next to the new file.

        Returns the parent to pass to :func:`ckptzip.save` (or ``None`` for a full file) and
        the new file's depth in its chain.
        """
        if self.parent is None or storage.is_url(self.parent) or storage.is_url(self.path):
            return None, 0
        src = os.path.join(self.parent, name)
        if not os.path.isfile(src) or not os.path.isfile(
            os.path.join(self.parent, METADATA_NAME)
        ):  # no such rank there, or the parent's save never finished
            return None, 0
        manifest = api.read_manifest(src)
        depth = int(manifest.metadata.get(_DEPTH_KEY, "0")) + 1
        if depth >= self.keyframe_every:
            return None, 0
        stem = name.removesuffix(".ckz")
        links = [(src, f"{stem}.{storage.sha256_file(src)[:16]}.ckz")]
        while manifest.parent is not None:
            ancestor = manifest.parent["name"]
            links.append((os.path.join(self.parent, ancestor), ancestor))
            manifest = api.read_manifest(links[-1][0])
        try:
            for from_path, link_name in links:
                dst = os.path.join(self.path, link_name)
                if not os.path.exists(dst):
                    os.link(from_path, dst)
        except OSError:  # no hard links here (or across these two directories)
            return None, 0
        return os.path.join(self.path, links[0][1]), depth

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        metadata.storage_data = {r.index: r.storage_data for rs in results for r in rs}
        metadata.storage_meta = self.storage_meta()
        storage.atomic_write(
            self._metadata_path(), lambda f: pickle.dump(metadata, f), overwrite=True
        )

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=self.path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))


_METADATA_GLOBALS: dict[str, frozenset[str] | None] = {
    "torch.distributed.checkpoint.metadata": None,  # every class there: DCP's plain records
    "torch": frozenset({"Size"}),
    "torch.serialization": frozenset({"_get_layout"}),
    "pathlib": frozenset({"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"}),
    "collections": frozenset({"OrderedDict"}),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's ``Metadata`` and nothing that could run code."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = _METADATA_GLOBALS.get(module, frozenset())
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if allowed is None or name in allowed:
            return super().find_class(module, name)
        raise CorruptCheckpointError(
            f"DCP metadata refers to {module}.{name}, which is not part of DCP's metadata; "
            "refusing to unpickle it"
        )


class Reader(StorageReader):
    """A DCP ``StorageReader`` for checkpoints written by :class:`Writer`.

    Parameters
    ----------
    path:
        The checkpoint directory (``checkpoint_id`` passed to ``dcp.load`` replaces it).
    strict_bytes:
        Check each byte item with ``torch.load(weights_only=True)`` before DCP's planner
        unpickles it; refuse items holding anything else.

    Each rank decodes only the files its load plan reads from, each once per ``read_data``.
    """

    def __init__(self, path: str | os.PathLike[str], *, strict_bytes: bool = True) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.strict_bytes = strict_bytes
        self.storage_data: dict[MetadataIndex, tuple[str, str]] = {}

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        self.storage_data = {}
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = METADATA_NAME if rank is None else f"__{rank}{METADATA_NAME}"
        with storage.open_read(_join(self.path, name)) as f:
            try:
                metadata = _MetadataUnpickler(f).load()
            except (pickle.UnpicklingError, EOFError, AttributeError, ValueError) as exc:
                raise CorruptCheckpointError(f"{self.path!r}: unreadable {name}: {exc}") from exc
        if not isinstance(metadata, Metadata):
            raise CorruptCheckpointError(f"{self.path!r}: {name} does not hold DCP metadata")
        if metadata.storage_meta is None:
            metadata.storage_meta = StorageMeta()
        return metadata

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        data = metadata.storage_data
        if not isinstance(data, dict) or not all(
            isinstance(v, tuple) and len(v) == 2 and all(isinstance(s, str) for s in v)
            for v in data.values()
        ):
            raise CorruptCheckpointError(
                f"{self.path!r} was not written by ckptzip.dcp.Writer (its items are not "
                "(file, key) pairs); read it with DCP's FileSystemReader"
            )
        self.storage_data = data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        by_file: dict[str, list[Any]] = {}
        for item in plan.items:
            by_file.setdefault(self.storage_data[item.storage_index][0], []).append(item)
        for name, items in by_file.items():
            if os.path.basename(name) != name or name in ("", ".", ".."):
                raise CorruptCheckpointError(f"{self.path!r}: item file {name!r} is not a name")
            decoded = api.load(_join(self.path, name), map_location="cpu")
            for item in items:
                key = self.storage_data[item.storage_index][1]
                value = decoded.get(key) if isinstance(decoded, dict) else None
                if not isinstance(value, torch.Tensor):
                    raise CorruptCheckpointError(f"{name!r} has no item {key!r}")
                if item.type == LoadItemType.BYTE_IO:
                    raw = value.numpy().tobytes()
                    if self.strict_bytes:
                        _check_weights_only(raw, key)
                    planner.load_bytes(item, io.BytesIO(raw))
                    continue
                src = value
                for dim, (start, length) in enumerate(
                    zip(item.storage_offsets, item.lengths, strict=True)
                ):
                    src = src.narrow(dim, start, length)  # the piece this rank asked for
                dst = planner.resolve_tensor(item).detach()
                if dst.size() != src.size():
                    raise CorruptCheckpointError(
                        f"{name!r} item {key!r}: stored piece {list(src.size())} does not fit "
                        f"the destination {list(dst.size())}"
                    )
                dst.copy_(src)
                planner.commit_tensor(item, dst)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))


def _check_weights_only(raw: bytes, key: str) -> None:
    try:
        torch.load(io.BytesIO(raw), weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CorruptCheckpointError(
            f"byte item {key!r} holds objects outside torch's weights_only allow-list; "
            f"load with Reader(strict_bytes=False) only if you trust the checkpoint ({exc})"
        ) from exc
