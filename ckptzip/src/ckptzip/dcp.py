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

What is in the directory (no pickle from it reaches an unrestricted unpickler):

* ``__<rank>.ckz``: ckptzip files (no pickle). Tensor items are stored as tensors; DCP's
  *byte items* (non-tensor values such as optimizer ``param_groups``, which DCP pickles with
  ``torch.save`` itself) are stored as the uint8 bytes DCP gives us, bit-exact. Items that
  share storage on a rank (tied weights such as GPT-2's ``lm_head.weight is wte.weight``, a
  module under two names, views) are stored once, as :func:`ckptzip.save` stores them, and
  every name is restored from that one entry.
* ``.metadata``: DCP's ``Metadata`` (each tensor's global shape, dtype and chunks, the
  flattening map, and for each item the file and key that hold it) as versioned JSON
  (FORMAT.md, "DCP metadata"), capped at :data:`MAX_METADATA_BYTES` and checked field by field
  before anything is built from it. ckptzip before this form pickled ``Metadata``; such a file
  is refused with :class:`~ckptzip.UnsupportedFormatError` unless
  ``Reader(allow_pickled_metadata=True)``, which unpickles it through an exact list of DCP's
  metadata classes (no other name, dotted or not; only the opcodes such a pickle needs).
* Byte items are handed to DCP's load planner, which unpickles them with
  ``torch.load(weights_only=False)``; with ``Reader(strict_bytes=True)`` (the default) each is
  first loaded by ``torch.load(weights_only=True)`` (refused if it holds anything else) and
  what the planner unpickles is that value saved again, never the checkpoint's own bytes.

Delta chains: ``Writer(path, parent=previous_dir)`` delta-encodes each rank's file against the
same rank's file of ``previous_dir``: by default (``error_feedback=True``, as
:class:`~ckptzip.CheckpointManager`) each weight shard as its change against the parent's
reconstruction of that shard (the ``"residual"`` codec), the optimizer's moments as bin indices
against the parent's; with ``error_feedback=False`` every lossy shard by its bin indices.
Files of a chain must share a directory (a delta names its parent by file name), so the
parent's chain is hard-linked into the new directory (``__<rank>.<sha>.ckz``,
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
import json
import os
import pickle
import pickletools
import posixpath
import reprlib
from collections.abc import Mapping, MutableMapping
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
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from ckptzip import api, storage
from ckptzip._compat import dcp_memory_format_encoding
from ckptzip.chains import MAX_CHAIN_LENGTH
from ckptzip.config import CompressionConfig
from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    CkptzipError,
    ConfigError,
    CorruptCheckpointError,
    DecodeLimitError,
    DecodeMemoryError,
    MissingParentError,
    StorageError,
    UnsupportedFormatError,
    UnsupportedValueError,
)
from ckptzip.plan import RESIDUAL

__all__ = [
    "MAX_METADATA_BYTES",
    "METADATA_FORMAT",
    "METADATA_NAME",
    "METADATA_VERSION",
    "Reader",
    "Writer",
    "rank_file_name",
    "recent_files",
]

METADATA_NAME = ".metadata"
"""DCP's metadata file name (the same as ``FileSystemWriter``'s); written last."""

_DEPTH_KEY = "dcp.chain_depth"
"""File metadata: deltas since the last full file of this rank's chain (0 for a full file).
Written for people and tools; :class:`Writer` counts a parent's chain itself."""


def recent_files(size: int = 2) -> api.DecodedCache:
    """A :data:`ckptzip.api.DecodedCache` for :class:`Writer`'s ``cache`` holding the last
    ``size`` files saved or decoded, keyed by sha256 (so a file replaced on disk never hits),
    safe to share between threads. Two per rank suffice for a chain (the next save's parent
    and the file just written); more where several deltas share one parent.

    Examples
    --------
    >>> cache = recent_files(2)
    >>> len(cache)
    0
    """
    from ckptzip.manager import _RecentFiles  # the manager's own, imported when asked for

    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"size={size!r} must be an int >= 1")
    return _RecentFiles(size)


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


# --- .metadata: DCP's Metadata as bounded, versioned JSON (FORMAT.md, "DCP metadata") ---------

METADATA_FORMAT = "ckptzip.dcp.metadata"
"""The ``format`` field of ckptzip's JSON ``.metadata``."""

METADATA_VERSION = 1
"""The newest version of the JSON ``.metadata`` this release writes and reads."""

MAX_METADATA_BYTES = 256 << 20
"""Largest ``.metadata`` the writer writes and, by default, the reader reads (about two million
chunks); ``Reader(max_metadata_bytes=)`` reads larger ones."""

_MAX_NDIM = 64
_MAX_KEY_PATH = 256  # depth of a key path in planner_data
_MAX_MODULES = 1 << 16  # names in storage_meta.modules
_MAX_DIM = (1 << 63) - 1
_DTYPES: dict[str, torch.dtype] = {
    str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.dtype)
}
_LAYOUTS: dict[str, torch.layout] = {
    str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.layout)
}
_MEMORY_FORMATS: dict[str, torch.memory_format] = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "preserve_format": torch.preserve_format,
}
_TOP_KEYS = frozenset(
    {
        "format",
        "version",
        "dcp_version",
        "state_dict",
        "planner_data",
        "storage_data",
        "storage_meta",
    }
)
_TENSOR_KEYS = frozenset(
    {"type", "dtype", "size", "chunks", "layout", "memory_format", "requires_grad", "pin_memory"}
)
_STORAGE_META_KEYS = frozenset({"checkpoint_id", "save_id", "load_id", "modules"})


class _SchemaError(Exception):
    """A value outside the JSON form's schema; the message says which and why."""


def _short(value: Any) -> str:
    return reprlib.repr(value)  # bounded: values may come from a hostile file


def _name_in(table: Mapping[str, Any], value: Any, where: str) -> str:
    for name, v in table.items():
        if v is value or (type(v) is type(value) and v == value):
            return name
    raise _SchemaError(f"{where} = {_short(value)} is not one this format stores")


def _encode_metadata(md: Any, *, untrusted: bool = False) -> dict[str, Any]:
    """DCP's ``Metadata`` as the JSON document (plain types, not yet checked).

    Written for untrusted input too (a pickled ``.metadata``): it reads only the known fields,
    never calls into the objects it is given beyond iteration of builtins, copies no sequence
    longer than the format allows, and leaves every other check to :func:`_check_document`.
    With ``untrusted``, a tensor entry, chunk list or chunk reached twice is refused: a pickle
    can name one object from many places, so its size alone would not bound this walk.
    """
    seen: set[int] = set()

    def once(obj: Any, where: str) -> Any:
        if untrusted:
            if id(obj) in seen:
                raise _SchemaError(f"{where} is an object another entry holds too (shared)")
            seen.add(id(obj))
        return obj

    def seq(value: Any, where: str, limit: int = _MAX_NDIM) -> list[Any]:
        if not isinstance(value, (tuple, list)):  # torch.Size is a tuple
            raise _SchemaError(f"{where} is a {type(value).__name__}, not a sequence")
        if len(value) > limit:
            raise _SchemaError(f"{where} has {len(value)} elements, over {limit}")
        return list(value)

    if not isinstance(md, Metadata):
        raise _SchemaError(f"it holds a {type(md).__name__}, not DCP's Metadata")
    known = {"state_dict_metadata", "planner_data", "storage_data", "storage_meta", "version"}
    for f in dataclasses.fields(Metadata):
        if f.name not in known and getattr(md, f.name, None) not in (None, f.default):
            raise _SchemaError(f"Metadata.{f.name} is set; this format has no place for it")
    items = md.state_dict_metadata
    if not isinstance(items, dict):
        raise _SchemaError("state_dict_metadata is not a dict")
    state_dict: dict[Any, Any] = {}
    for fqn, item in items.items():
        where = f"state_dict_metadata[{_short(fqn)}]"
        if isinstance(item, BytesStorageMetadata):
            state_dict[fqn] = {"type": "bytes"}
        elif isinstance(item, TensorStorageMetadata):
            p = once(item, where).properties
            if not isinstance(p, TensorProperties) or not isinstance(item.chunks, list):
                raise _SchemaError(f"{where} is not a well-formed TensorStorageMetadata")
            state_dict[fqn] = {
                "type": "tensor",
                "dtype": _name_in(_DTYPES, p.dtype, f"{where}.dtype"),
                "size": seq(item.size, f"{where}.size"),
                "chunks": [
                    [seq(c.offsets, f"{where}.chunks"), seq(c.sizes, f"{where}.chunks")]
                    if isinstance(once(c, f"{where}.chunks"), ChunkStorageMetadata)
                    else seq(None, f"{where}.chunks")
                    for c in once(item.chunks, f"{where}.chunks")
                ],
                "layout": _name_in(_LAYOUTS, p.layout, f"{where}.layout"),
                "memory_format": _name_in(
                    _MEMORY_FORMATS, p.memory_format, f"{where}.memory_format"
                ),
                "requires_grad": p.requires_grad,
                "pin_memory": p.pin_memory,
            }
        else:
            raise _SchemaError(f"{where} is a {type(item).__name__}")
    planner_data: Any = md.planner_data
    if planner_data is not None:
        if not isinstance(planner_data, dict):
            raise _SchemaError(
                f"planner_data is a {type(planner_data).__name__}; this format stores "
                "DefaultSavePlanner's flattening map (FQN -> key path) only"
            )
        planner_data = {
            k: seq(v, f"planner_data[{_short(k)}]", _MAX_KEY_PATH) for k, v in planner_data.items()
        }
    data = md.storage_data
    if not isinstance(data, dict):
        raise _SchemaError("storage_data is not a dict")
    storage_data = []
    for index, value in data.items():
        if not isinstance(index, MetadataIndex):
            raise _SchemaError(f"storage_data has a {type(index).__name__} key")
        if not (isinstance(value, tuple) and len(value) == 2):
            raise _SchemaError(
                f"storage_data[{_short(index.fqn)}] is not a (file, key) pair: not written by "
                "ckptzip.dcp.Writer"
            )
        offset = None if index.offset is None else seq(index.offset, "storage_data offset")
        storage_data.append([index.fqn, offset, index.index, value[0], value[1]])
    sm = md.storage_meta
    storage_meta: dict[str, Any] | None = None
    if sm is not None:
        if not isinstance(sm, StorageMeta):
            raise _SchemaError(f"storage_meta is a {type(sm).__name__}")
        cid = sm.checkpoint_id
        storage_meta = {
            "checkpoint_id": os.fspath(cid) if isinstance(cid, os.PathLike) else cid,
            "save_id": sm.save_id,
            "load_id": sm.load_id,
            "modules": seq(sm.modules, "storage_meta.modules", _MAX_MODULES),
        }
    return {
        "format": METADATA_FORMAT,
        "version": METADATA_VERSION,
        "dcp_version": md.version,
        "state_dict": state_dict,
        "planner_data": planner_data,
        "storage_data": storage_data,
        "storage_meta": storage_meta,
    }


def _expect(cond: bool, where: str, what: str, value: Any) -> None:
    if not cond:
        raise _SchemaError(f"{where} = {_short(value)} is not {what}")


def _is_int(x: Any, lo: int = 0, hi: int = _MAX_DIM) -> bool:
    return type(x) is int and lo <= x <= hi


def _is_ints(x: Any, n: int | None = None) -> bool:
    return (
        type(x) is list
        and len(x) <= _MAX_NDIM
        and (n is None or len(x) == n)
        and all(_is_int(i) for i in x)
    )


def _check_keys(obj: Any, keys: frozenset[str], where: str) -> None:
    _expect(type(obj) is dict, where, "an object", obj)
    if set(obj) != keys:
        missing, extra = sorted(keys - set(obj)), sorted(map(str, set(obj) - keys))
        raise _SchemaError(f"{where} has fields missing {missing} / unknown {_short(extra)}")


def _member(x: Any, table: Mapping[str, Any]) -> bool:
    return type(x) is str and x in table  # a list or dict is unhashable: never look it up


def _is_name(x: Any) -> bool:
    """A plain file name inside the checkpoint directory (no separator, not '.' or '..')."""
    return (
        type(x) is str
        and 0 < len(x) <= 255
        and x not in (".", "..")
        and not any(c in x for c in "/\\\0")
    )


def _check_document(doc: Any) -> None:
    """Check every field of a JSON ``.metadata`` document before anything is built from it.

    ``format`` and ``version`` are checked by the caller first. Raises :class:`_SchemaError`.
    """
    _check_keys(doc, _TOP_KEYS, "metadata")
    v = doc["dcp_version"]
    _expect(v is None or (type(v) is str and len(v) <= 64), "dcp_version", "a version", v)
    items = doc["state_dict"]
    _expect(type(items) is dict, "state_dict", "an object", items)
    chunk_offsets: dict[str, set[tuple[int, ...]]] = {}
    for fqn, item in items.items():
        where = f"state_dict[{_short(fqn)}]"
        _expect(type(fqn) is str, "a state_dict FQN", "a string", fqn)
        _expect(type(item) is dict and "type" in item, where, "an item", item)
        if item["type"] == "bytes":
            _check_keys(item, frozenset({"type"}), where)
            continue
        _expect(item["type"] == "tensor", f"{where}.type", "'tensor' or 'bytes'", item["type"])
        _check_keys(item, _TENSOR_KEYS, where)
        _expect(_member(item["dtype"], _DTYPES), f"{where}.dtype", "a torch dtype", item["dtype"])
        _expect(
            _member(item["layout"], _LAYOUTS), f"{where}.layout", "a torch layout", item["layout"]
        )
        mf = item["memory_format"]
        _expect(_member(mf, _MEMORY_FORMATS), f"{where}.memory_format", "a memory format", mf)
        for flag in ("requires_grad", "pin_memory"):
            _expect(type(item[flag]) is bool, f"{where}.{flag}", "true or false", item[flag])
        size = item["size"]
        _expect(_is_ints(size), f"{where}.size", f"at most {_MAX_NDIM} sizes >= 0", size)
        chunks = item["chunks"]
        _expect(type(chunks) is list, f"{where}.chunks", "a list", chunks)
        seen = chunk_offsets[fqn] = set()
        for i, chunk in enumerate(chunks):
            cw = f"{where}.chunks[{i}]"
            ok = type(chunk) is list and len(chunk) == 2
            ok = ok and _is_ints(chunk[0], len(size)) and _is_ints(chunk[1], len(size))
            _expect(ok, cw, f"[offsets, sizes] of {len(size)} dimensions", chunk)
            _expect(
                all(o + n <= d for o, n, d in zip(chunk[0], chunk[1], size, strict=True)),
                cw,
                f"inside the tensor's size {size}",
                chunk,
            )
            seen.add(tuple(chunk[0]))
    planner = doc["planner_data"]
    if planner is not None:
        _expect(type(planner) is dict, "planner_data", "an object", planner)
        for fqn, path in planner.items():
            ok = type(path) is list and 0 < len(path) <= _MAX_KEY_PATH
            ok = ok and all(type(p) is str or _is_int(p, -_MAX_DIM) for p in path)
            _expect(ok, f"planner_data[{_short(fqn)}]", "a key path of strings and ints", path)
    data = doc["storage_data"]
    _expect(type(data) is list, "storage_data", "a list", data)
    indices: set[tuple[str, tuple[int, ...] | None]] = set()
    for i, entry in enumerate(data):
        where = f"storage_data[{i}]"
        _expect(
            type(entry) is list and len(entry) == 5, where, "[fqn, offset, index, file, key]", entry
        )
        fqn, offset, index, file, key = entry
        _expect(type(fqn) is str and fqn in items, f"{where} FQN", "in state_dict", fqn)
        if fqn in chunk_offsets:
            ok = _is_ints(offset) and tuple(offset) in chunk_offsets[fqn]
            _expect(ok, f"{where} offset", f"the offsets of a chunk of {_short(fqn)}", offset)
        else:
            _expect(offset is None, f"{where} offset", "null (a bytes item)", offset)
        _expect(index is None or _is_int(index), f"{where} index", "null or an int >= 0", index)
        _expect(_is_name(file), f"{where} file", "a file name in the directory", file)
        _expect(type(key) is str, f"{where} key", "a string", key)
        ident = (fqn, None if offset is None else tuple(offset))
        _expect(ident not in indices, where, "the only entry of its item", entry)
        indices.add(ident)
    sm = doc["storage_meta"]
    if sm is not None:
        _check_keys(sm, _STORAGE_META_KEYS, "storage_meta")
        for k in ("checkpoint_id", "save_id", "load_id"):
            _expect(sm[k] is None or type(sm[k]) is str, f"storage_meta.{k}", "a string", sm[k])
        modules = sm["modules"]
        ok = type(modules) is list and len(modules) <= _MAX_MODULES
        ok = ok and all(type(m) is str for m in modules)
        _expect(ok, "storage_meta.modules", "a list of strings", modules)


def _build_metadata(doc: dict[str, Any]) -> Metadata:
    """DCP's ``Metadata`` from a document :func:`_check_document` accepted."""
    items: dict[str, Any] = {}
    for fqn, item in doc["state_dict"].items():
        if item["type"] == "bytes":
            items[fqn] = BytesStorageMetadata()
            continue
        properties = TensorProperties(
            dtype=_DTYPES[item["dtype"]],
            layout=_LAYOUTS[item["layout"]],
            requires_grad=item["requires_grad"],
            memory_format=_MEMORY_FORMATS[item["memory_format"]],
            pin_memory=item["pin_memory"],
        )
        chunks = [
            ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(n))
            for o, n in item["chunks"]
        ]
        items[fqn] = TensorStorageMetadata(properties, torch.Size(item["size"]), chunks)
    planner = doc["planner_data"]
    sm = doc["storage_meta"]
    return Metadata(
        state_dict_metadata=items,
        planner_data=None if planner is None else {k: tuple(v) for k, v in planner.items()},
        storage_data={
            MetadataIndex(fqn, offset, index): (file, key)
            for fqn, offset, index, file, key in doc["storage_data"]
        },
        storage_meta=None if sm is None else StorageMeta(**sm),
        version=doc["dcp_version"],
    )


def _metadata_bytes(metadata: Metadata) -> bytes:
    """The ``.metadata`` :class:`Writer` writes: the checked JSON document, UTF-8."""
    try:
        doc = _encode_metadata(metadata)
        _check_document(doc)
    except _SchemaError as exc:
        raise UnsupportedValueError(
            f"DCP metadata cannot be stored as ckptzip's JSON .metadata: {exc}"
        ) from None
    raw = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    if len(raw) > MAX_METADATA_BYTES:
        raise UnsupportedValueError(
            f"the DCP metadata is {len(raw)} bytes, over MAX_METADATA_BYTES="
            f"{MAX_METADATA_BYTES}; save fewer, larger chunks (fewer ranks or tensors)"
        )
    return raw


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _SchemaError("an object repeats a field name")
    return out


def _reject_constant(name: str) -> Any:
    raise _SchemaError(f"{name} is not a JSON number")


def _parse_metadata(raw: bytes, where: str, *, allow_pickle: bool) -> Metadata:
    """DCP's ``Metadata`` from the bytes of a ``.metadata`` file (``where`` names it).

    ckptzip's JSON form is read by default; a pickle (ckptzip before the JSON form, or DCP's
    own ``FileSystemWriter``) only with ``allow_pickle``, through :class:`_MetadataUnpickler`.
    Raises only ckptzip's errors.
    """
    if not raw.strip():
        raise CorruptCheckpointError(f"{where} is empty")
    if raw.lstrip()[:1] != b"{":
        if not allow_pickle:
            raise UnsupportedFormatError(
                f"{where} is not ckptzip's JSON metadata: {_pickle_hint(raw)}"
            )
        return _unpickle_metadata(raw, where)
    try:
        doc = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_unique_pairs, parse_constant=_reject_constant
        )
    except _SchemaError as exc:
        raise CorruptCheckpointError(f"{where}: invalid ckptzip DCP metadata: {exc}") from None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError too
        raise CorruptCheckpointError(f"{where}: not valid JSON: {_short(str(exc))}") from None
    except MemoryError:
        raise DecodeMemoryError(f"{where}: out of memory parsing DCP metadata") from None
    if type(doc) is not dict or doc.get("format") != METADATA_FORMAT:
        raise CorruptCheckpointError(f"{where} is JSON but not ckptzip DCP metadata (no format)")
    version = doc.get("version")
    if not isinstance(version, int) or not _is_int(version, 1):
        raise CorruptCheckpointError(
            f"{where}: metadata version {_short(version)} is not an int >= 1"
        )
    if version > METADATA_VERSION:
        raise UnsupportedFormatError(
            f"{where} is DCP metadata version {version}; this ckptzip reads up to "
            f"{METADATA_VERSION}: upgrade ckptzip to read it"
        )
    try:
        _check_document(doc)
    except _SchemaError as exc:
        raise CorruptCheckpointError(f"{where}: invalid ckptzip DCP metadata: {exc}") from None
    return _build_metadata(doc)


def _pickle_hint(raw: bytes) -> str:
    """What to do with a ``.metadata`` that is not JSON (a hint only: nothing is unpickled)."""
    if b"_StorageInfo" in raw:
        return (
            "it is a pickle, as DCP's FileSystemWriter writes; read that checkpoint with "
            "torch.distributed.checkpoint.FileSystemReader"
        )
    kind = "it is a pickle" if raw[:1] == b"\x80" else "if it is a pickle"
    return (
        f"{kind}, as ckptzip.dcp.Writer wrote before its JSON metadata, and you trust the "
        "checkpoint, read it with ckptzip.dcp.Reader(path, allow_pickled_metadata=True) (which "
        "admits DCP's metadata classes only), and save it again to get the JSON form"
    )


# Everything a pickled ckptzip .metadata names, by exact (module, name): DCP's metadata
# records, torch.Size, dtypes and layouts (by value, never by import or attribute lookup).
_PICKLE_GLOBALS: dict[tuple[str, str], Any] = {
    ("torch.distributed.checkpoint.metadata", cls.__name__): cls
    for cls in (
        Metadata,
        TensorStorageMetadata,
        BytesStorageMetadata,
        ChunkStorageMetadata,
        TensorProperties,
        MetadataIndex,
        StorageMeta,
    )
}
_PICKLE_GLOBALS[("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING")] = (
    dcp_memory_format_encoding()
)
_PICKLE_GLOBALS[("torch", "Size")] = torch.Size
_PICKLE_GLOBALS[("torch.serialization", "_get_layout")] = lambda name: _LAYOUTS[
    str(name).removeprefix("torch.")
]
_PICKLE_GLOBALS.update(
    {("torch", n): v for n, v in vars(torch).items() if isinstance(v, torch.dtype)}
)

# The opcodes a pickled Metadata needs (protocols 2-5): no persistent ids, extension codes,
# out-of-band buffers, bytes, sets or old-style instances.
_PICKLE_OPCODES = frozenset(
    [
        "PROTO",
        "FRAME",
        "STOP",
        "MARK",
        "POP",
        "POP_MARK",
        "DUP",
        "NONE",
        "NEWTRUE",
        "NEWFALSE",
        "BININT",
        "BININT1",
        "BININT2",
        "LONG1",
        "UNICODE",
        "BINUNICODE",
        "SHORT_BINUNICODE",
        "BINUNICODE8",
        "EMPTY_TUPLE",
        "TUPLE",
        "TUPLE1",
        "TUPLE2",
        "TUPLE3",
        "EMPTY_LIST",
        "LIST",
        "APPEND",
        "APPENDS",
        "EMPTY_DICT",
        "DICT",
        "SETITEM",
        "SETITEMS",
        "GLOBAL",
        "STACK_GLOBAL",
        "REDUCE",
        "NEWOBJ",
        "BUILD",
        "PUT",
        "BINPUT",
        "LONG_BINPUT",
        "MEMOIZE",
        "GET",
        "BINGET",
        "LONG_BINGET",
    ]
)


def _scan_pickle(raw: bytes) -> None:
    """Refuse, without running anything, opcodes outside :data:`_PICKLE_OPCODES` and memo
    slots out of order (CPython's unpickler grows its memo to whatever slot a PUT names)."""
    memo = 0
    last: tuple[str, int | None] = ("", -1)
    for op, arg, pos in pickletools.genops(raw):
        if op.name not in _PICKLE_OPCODES:
            raise _SchemaError(f"pickle opcode {op.name} at byte {pos} is not allowed")
        if op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
            if arg != memo:
                raise _SchemaError(f"pickle memo slot {arg} at byte {pos} is out of order")
            memo += 1
        elif op.name == "MEMOIZE":
            memo += 1
        elif op.name in ("GET", "BINGET", "LONG_BINGET") and not (
            isinstance(arg, int) and 0 <= arg < memo
        ):
            raise _SchemaError(f"pickle memo slot {arg} at byte {pos} was never set")
        last = (op.name, pos)
    if last != ("STOP", len(raw) - 1):
        raise _SchemaError("the pickle does not end at its STOP")


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves exactly the names of :data:`_PICKLE_GLOBALS`; any other name, dotted or not,
    is refused before anything is imported or looked up."""

    def __init__(self, raw: bytes, where: str) -> None:
        super().__init__(io.BytesIO(raw))
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        found = _PICKLE_GLOBALS.get((module, name))
        if found is not None:
            return found
        if (module, name) == ("torch.distributed.checkpoint.filesystem", "_StorageInfo"):
            raise UnsupportedFormatError(
                f"{self.where} was written by DCP's FileSystemWriter, not ckptzip.dcp.Writer; "
                "read that checkpoint with torch.distributed.checkpoint.FileSystemReader"
            )
        raise CorruptCheckpointError(
            f"{self.where} names {_short(module)}.{_short(name)}, which is not one of DCP's "
            "metadata classes; refusing to unpickle it"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise CorruptCheckpointError(f"{self.where} holds a persistent id; refusing it")


def _unpickle_metadata(raw: bytes, where: str) -> Metadata:
    try:
        _scan_pickle(raw)
        obj = _MetadataUnpickler(raw, where).load()
        doc = _encode_metadata(obj, untrusted=True)
        _check_document(doc)
    except CkptzipError:
        raise
    except _SchemaError as exc:
        raise CorruptCheckpointError(f"{where}: refused pickled DCP metadata: {exc}") from None
    except MemoryError:
        raise DecodeMemoryError(f"{where}: out of memory reading DCP metadata") from None
    except Exception as exc:  # what a malformed pickle raises (nothing in it has run)
        raise CorruptCheckpointError(
            f"{where}: unreadable pickled DCP metadata ({type(exc).__name__}: {_short(str(exc))})"
        ) from None
    return _build_metadata(doc)


class Writer(StorageWriter):
    """A DCP ``StorageWriter`` that compresses each rank's shards with ckptzip.

    Parameters
    ----------
    path:
        The checkpoint directory (``checkpoint_id`` passed to ``dcp.save`` replaces it).
    config:
        How to compress (default :class:`~ckptzip.CompressionConfig`), as for
        :func:`ckptzip.save`, with ``standalone=None``: every file of a chain at ``quant``'s
        levels, keyframes included.
    parent:
        A previous checkpoint directory written by this writer: each rank's file becomes a delta
        against the same rank's file there (see the module docstring for when it falls back).
        A parent whose chain names a file twice is refused with
        :class:`~ckptzip.errors.MissingParentError`, as one whose files were altered is.
    keyframe_every:
        At most ``keyframe_every - 1`` deltas follow a full file in a rank's chain (and at
        most :data:`ckptzip.chains.MAX_CHAIN_LENGTH` ``- 1``, the longest chain a reader
        follows).
    overwrite:
        Replace an existing checkpoint in ``path``; otherwise a finished one there is refused.
    threads:
        Encoding threads per rank (:func:`ckptzip.save`'s ``threads``; default one per core,
        at most 8). With several ranks on one machine, about ``cores // ranks_per_machine``.
    error_feedback:
        In a delta (``parent=``), store each weight shard as its change against the parent's
        reconstruction, quantized (``CompressionConfig.residual``, by default
        :data:`ckptzip.plan.RESIDUAL`), so what one checkpoint's quantization left is
        corrected by the next and the errors of successive restores do not add up: the
        manager's default, chosen on its fault-tolerant benchmark (ckptzip's README, "Error
        feedback along the chain"). ``False``: bin-index deltas of every lossy shard, and
        every file's weights rounded to nearest (``CompressionConfig.rounding``), which keeps
        those deltas small. A ``config`` with ``residual`` set keeps its own residual config.
        A full file (no ``parent``) rounds its weights as ``config.rounding`` says
        (stochastically by default, as a file standing alone).
    cache:
        A :data:`ckptzip.api.DecodedCache` (opt-in; :func:`recent_files` makes a bounded
        one): a delta takes its parent's decoded tensors from it when the parent file's
        sha256 is there, instead of decoding the parent's chain from disk, and each save adds
        its own file's. Pass the same one to the ``Writer`` of every save of a process (one
        per rank), as :class:`~ckptzip.CheckpointManager` keeps its own: the files are the
        same with it or without; it holds each kept file's lossy tensors (about a rank's
        weights in float32 and its moments' bin indices).

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
        error_feedback: bool = True,
        cache: api.DecodedCache | None = None,
    ) -> None:
        super().__init__()
        if cache is not None and not isinstance(cache, MutableMapping):
            raise ConfigError(f"cache={cache!r} must be a mutable mapping (see recent_files)")
        if config is not None and not isinstance(config, CompressionConfig):
            raise ConfigError(f"config={config!r} must be a CompressionConfig")
        if not isinstance(error_feedback, bool):
            raise ConfigError(f"error_feedback={error_feedback!r} must be True or False")
        if isinstance(keyframe_every, bool) or not isinstance(keyframe_every, int):
            raise ConfigError(f"keyframe_every={keyframe_every!r} must be an int >= 1")
        if keyframe_every < 1:
            raise ConfigError(f"keyframe_every={keyframe_every!r} must be >= 1")
        self.path = os.fspath(path)
        # a chain's files: quant's levels in keyframes and deltas alike (a keyframe at a
        # standalone file's levels would make its deltas' bin-index deltas larger)
        self.config = dataclasses.replace(
            CompressionConfig() if config is None else config, standalone=None
        )
        if error_feedback and self.config.residual is None:
            self.config = dataclasses.replace(self.config, residual=RESIDUAL)
        if not error_feedback:
            # bin-index deltas of the weights against this file: a stochastically rounded
            # keyframe would change a quarter of their indices at the first delta
            self.config = dataclasses.replace(self.config, rounding="nearest")
        self.parent = None if parent is None else os.fspath(parent)
        self.keyframe_every = keyframe_every
        self.overwrite = overwrite
        self.threads = threads
        self.cache = cache
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
            cache=self.cache,
        )
        self.reports = [report]
        # Items sharing storage on this rank (tied weights, a module used twice, views) are
        # one entry of the file, under the first of their paths; the file restores every
        # path, tied as saved. The others cost no bytes of their own.
        nbytes = {e.path: e.bytes for e in report.entries}
        results = [
            WriteResult(
                index=item.index, size_in_bytes=nbytes.get(key, 0), storage_data=(name, key)
            )
            for item, key in keys
        ]
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def _link_parent(self, name: str) -> tuple[str | None, int]:
        """Hard-link the parent's chain of this rank next to the new file.

        Returns the parent to pass to :func:`ckptzip.save` (or ``None`` for a full file) and
        the new file's depth in its chain.

        Raises
        ------
        MissingParentError
            The parent's chain names a file twice (a cycle).
        """
        if self.parent is None or storage.is_url(self.parent) or storage.is_url(self.path):
            return None, 0
        src = os.path.join(self.parent, name)
        if not os.path.isfile(src) or not os.path.isfile(
            os.path.join(self.parent, METADATA_NAME)
        ):  # no such rank there, or the parent's save never finished
            return None, 0
        # The depth is counted here, not read from the parent's _DEPTH_KEY: a file's chain is
        # what it names. At most keyframe_every files are read (a longer chain keyframes),
        # never past what a reader follows; each file's sha256 is checked by ckptzip.save.
        limit = min(self.keyframe_every, MAX_CHAIN_LENGTH)
        depth = 1  # the new file's: one more than the deltas of the parent's chain
        if depth >= limit:
            return None, 0
        ancestors: list[str] = []
        manifest = api.read_manifest(src)
        while manifest.parent is not None:
            depth += 1
            if depth >= limit:
                return None, 0
            ancestor = manifest.parent["name"]
            if ancestor == name or ancestor in ancestors:
                raise MissingParentError(
                    f"{os.path.join(self.parent, (ancestors or [name])[-1])!r} names "
                    f"{ancestor!r} as its parent, which makes a cycle: {self.parent!r} is "
                    "damaged; save a full file (no parent=) or delta against another checkpoint"
                )
            ancestors.append(ancestor)
            manifest = api.read_manifest(os.path.join(self.parent, ancestor))
        stem = name.removesuffix(".ckz")
        links = [(src, f"{stem}.{storage.sha256_file(src)[:16]}.ckz")]
        links += [(os.path.join(self.parent, a), a) for a in ancestors]
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
        raw = _metadata_bytes(metadata)
        storage.atomic_write(self._metadata_path(), lambda f: f.write(raw), overwrite=True)

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=self.path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))


class Reader(StorageReader):
    """A DCP ``StorageReader`` for checkpoints written by :class:`Writer`.

    Parameters
    ----------
    path:
        The checkpoint directory (``checkpoint_id`` passed to ``dcp.load`` replaces it).
    strict_bytes:
        Check each byte item with ``torch.load(weights_only=True)`` before DCP's planner
        unpickles it; refuse items holding anything else.
    allow_pickled_metadata:
        Also read a pickled ``.metadata``, as ckptzip wrote before its JSON form, through an
        unpickler that resolves an exact list of DCP's metadata classes and nothing else (no
        other name, no dotted name, no persistent id, only the opcodes such a pickle needs).
        Off by default: no pickle is read from a checkpoint unless asked.
    max_metadata_bytes:
        Refuse a larger ``.metadata`` before parsing it (default :data:`MAX_METADATA_BYTES`,
        the most the writer writes).
    threads:
        Decoding threads per rank (default: one per core, at most 8), as
        :func:`ckptzip.load`'s ``threads``; with several ranks on one machine, about
        ``cores // ranks_per_machine``.

    Each rank decodes only the files its load plan reads from, each once per ``read_data``,
    and checks each stored tensor against ``.metadata`` before using it (its chunk's shape and
    dtype; a byte item's, a contiguous 1-D uint8 tensor), so a crafted file is refused with
    :class:`~ckptzip.errors.CorruptCheckpointError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        strict_bytes: bool = True,
        allow_pickled_metadata: bool = False,
        max_metadata_bytes: int = MAX_METADATA_BYTES,
        threads: int | None = None,
    ) -> None:
        super().__init__()
        api._threads(threads, 0)  # a bad value is refused here, not inside dcp.load
        if isinstance(max_metadata_bytes, bool) or not isinstance(max_metadata_bytes, int):
            raise ConfigError(f"max_metadata_bytes={max_metadata_bytes!r} must be an int >= 1")
        if max_metadata_bytes < 1:
            raise ConfigError(f"max_metadata_bytes={max_metadata_bytes!r} must be >= 1")
        self.path = os.fspath(path)
        self.strict_bytes = strict_bytes
        self.allow_pickled_metadata = allow_pickled_metadata
        self.max_metadata_bytes = max_metadata_bytes
        self.threads = threads
        self.storage_data: dict[MetadataIndex, tuple[str, str]] = {}
        self.chunks: dict[MetadataIndex, tuple[torch.Size, torch.dtype]] = {}
        """Each tensor chunk's sizes and dtype, as ``.metadata`` records them."""

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        self.storage_data = {}
        self.chunks = {}
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The checkpoint's DCP ``Metadata``, from its JSON ``.metadata``.

        Raises
        ------
        CheckpointNotFoundError
            No ``.metadata``: the save never finished.
        DecodeLimitError
            It is larger than ``max_metadata_bytes``.
        UnsupportedFormatError
            It is a pickle (an older ckptzip's, or DCP's ``FileSystemWriter``'s; the message
            says what to do) or a newer version of the JSON form.
        CorruptCheckpointError
            Anything else that is not valid metadata.
        """
        rank = kwargs.get("rank")
        name = METADATA_NAME if rank is None else f"__{rank}{METADATA_NAME}"
        path = _join(self.path, name)
        try:
            opened = storage.open_read(path)
        except CheckpointNotFoundError:
            if rank is not None:  # DCP also asks for per-rank metadata, which we never write
                raise
            raise CheckpointNotFoundError(
                f"{os.fspath(self.path)!r} has no {METADATA_NAME}: its save did not finish "
                f"(DCP writes {METADATA_NAME} last), or it is not a DCP checkpoint directory"
            ) from None
        with opened as f:
            try:
                raw = f.read(self.max_metadata_bytes + 1)
            except OSError as exc:
                raise StorageError(f"cannot read {path!r}: {exc}") from exc
        if len(raw) > self.max_metadata_bytes:
            raise DecodeLimitError(
                f"{path!r} is over max_metadata_bytes={self.max_metadata_bytes}; pass a larger "
                "Reader(max_metadata_bytes=) if you trust its size"
            )
        metadata = _parse_metadata(raw, repr(path), allow_pickle=self.allow_pickled_metadata)
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
        self.chunks = {
            MetadataIndex(fqn, c.offsets): (c.sizes, item.properties.dtype)
            for fqn, item in metadata.state_dict_metadata.items()
            if isinstance(item, TensorStorageMetadata)
            for c in item.chunks
        }

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        by_file: dict[str, list[Any]] = {}
        for item in plan.items:
            entry = self.storage_data.get(item.storage_index)
            if entry is None:
                raise CorruptCheckpointError(
                    f"{self.path!r}: {METADATA_NAME} lists {item.storage_index.fqn!r} at "
                    f"offsets {_short(item.storage_index.offset)} but no file that holds it"
                )
            by_file.setdefault(entry[0], []).append(item)
        for name, items in by_file.items():
            if os.path.basename(name) != name or name in ("", ".", ".."):
                raise CorruptCheckpointError(f"{self.path!r}: item file {name!r} is not a name")
            decoded = api.load(_join(self.path, name), map_location="cpu", threads=self.threads)
            for item in items:
                key = self.storage_data[item.storage_index][1]
                value = decoded.get(key) if isinstance(decoded, dict) else None
                if not isinstance(value, torch.Tensor):
                    raise CorruptCheckpointError(f"{name!r} has no item {key!r}")
                where = f"{name!r} item {key!r}"
                if item.type == LoadItemType.BYTE_IO:
                    raw = _stored_bytes(value, where)
                    if self.strict_bytes:
                        raw = _weights_only_bytes(raw, key)
                    planner.load_bytes(item, io.BytesIO(raw))
                    continue
                _check_chunk(value, self.chunks.get(item.storage_index), where)
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


def _stored_bytes(value: torch.Tensor, where: str) -> bytes:
    """A byte item's bytes, which :class:`Writer` stores as a contiguous 1-D uint8 tensor.

    Checked before anything is built: a crafted file can make the item a view that repeats
    its entry's bytes (stride 0) as many times as its shape says, which ``max_bytes`` (the
    entries' size) does not count.
    """
    if value.dtype != torch.uint8 or value.dim() != 1 or not value.is_contiguous():
        raise CorruptCheckpointError(
            f"{where} is a byte item, which ckptzip.dcp.Writer stores as a contiguous 1-D "
            f"uint8 tensor, but the file holds a {value.dtype} tensor of shape "
            f"{list(value.shape)} and strides {list(value.stride())}: it is damaged or crafted"
        )
    return value.numpy().tobytes()


def _check_chunk(
    value: torch.Tensor, chunk: tuple[torch.Size, torch.dtype] | None, where: str
) -> None:
    """Refuse a stored tensor whose shape or dtype is not those ``.metadata`` records for its
    chunk, before DCP's read item (offsets and lengths inside that chunk) is cut from it."""
    if chunk is None:
        raise CorruptCheckpointError(f"{where}: {METADATA_NAME} records no such tensor chunk")
    sizes, dtype = chunk
    if value.dtype != dtype or value.shape != sizes:
        raise CorruptCheckpointError(
            f"{where} holds a {value.dtype} tensor of shape {list(value.shape)}, but "
            f"{METADATA_NAME} records a {dtype} chunk of shape {list(sizes)}: the file is "
            "damaged or is not the one this checkpoint wrote"
        )


def _weights_only_bytes(raw: bytes, key: str) -> bytes:
    """A byte item's value loaded with ``weights_only=True`` and saved again: DCP's planner
    then unpickles bytes ckptzip made from allow-listed values, not the checkpoint's."""
    try:
        value = torch.load(io.BytesIO(raw), weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CorruptCheckpointError(
            f"byte item {key!r} holds objects outside torch's weights_only allow-list; "
            f"load with Reader(strict_bytes=False) only if you trust the checkpoint ({exc})"
        ) from exc
    except Exception as exc:  # a damaged archive: torch raises RuntimeError and others
        raise CorruptCheckpointError(
            f"byte item {key!r} is not a torch.save archive: {exc}"
        ) from exc
    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()
