"""The public entry points: :func:`save`, :func:`load`, :func:`read_quantized` and :class:`Report`.

``save`` runs the pipeline forwards (structure → per-tensor codec → container → storage);
``load`` runs it backwards. No pickle is involved in either direction: a file holds JSON and
raw numeric bytes only, so loading an untrusted file can fail but never executes code.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import torch

import ckptzip
from ckptzip import storage
from ckptzip._types import QuantizedTensor
from ckptzip.codecs.base import (
    DecodeContext,
    Decoded,
    EncodeContext,
    Encoded,
    ParentView,
    get_codec,
)
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.container import Manifest, Reader, TensorEntry, chunk_refs, write
from ckptzip.errors import (
    CkptzipError,
    ConfigError,
    CorruptCheckpointError,
    MissingParentError,
)
from ckptzip.plan import Planner, Prequantized, exact_reason
from ckptzip.structure import dtype_name, flatten, ndarray_entries, reference_paths, unflatten

__all__ = [
    "DecodedCache",
    "Report",
    "TensorReport",
    "exact_reason",
    "load",
    "read_manifest",
    "read_quantized",
    "save",
    "verify",
]

Progress = Callable[[int, int], None]
# Parent chains are bounded by the manager's keyframes; this only stops a hostile loop.
_MAX_CHAIN = 1000


@dataclass(frozen=True)
class TensorReport:
    """What :func:`save` did with one tensor.

    Attributes
    ----------
    path, shape, dtype:
        Where the tensor sits in the structure and what it was (dtype by name).
    codec:
        Codec id (``"exact"``, ``"quant"``, ``"delta"`` ...).
    config:
        The :class:`QuantConfig` of a lossy tensor, ``None`` when stored exactly.
    bytes:
        Bytes of its chunks in the file.
    nbytes:
        Bytes of the tensor in memory (``numel × itemsize``).
    rel_error:
        Measured relative L2 error (0 for exact tensors, ``None`` if not measurable).
    reason:
        Why the plan stored the tensor exactly (``None`` when lossy).
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    codec: str
    config: QuantConfig | None
    bytes: int
    nbytes: int
    rel_error: float | None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "codec": self.codec,
            "config": None if self.config is None else self.config.to_json(),
            "bytes": self.bytes,
            "nbytes": self.nbytes,
            "rel_error": self.rel_error,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Report:
    """The outcome of one :func:`save`.

    Attributes
    ----------
    path:
        The file written.
    bytes_in:
        Size in bytes of what ``torch.save(obj)`` writes to a stream (measured by serialising
        into a byte-counting sink, no file written; a file on disk differs by a few bytes
        because torch names the archive's inner folder after the file).
    bytes_out:
        Size of the ``.ckz`` file.
    ratio:
        ``bytes_in / bytes_out``.
    seconds:
        Wall time of flattening, encoding and writing (the ``bytes_in`` measurement excluded).
    entries:
        One :class:`TensorReport` per tensor, in structure order.
    sha256:
        Hex sha256 of the written file (what a delta child records as its parent's hash).
    """

    path: str
    bytes_in: int
    bytes_out: int
    ratio: float
    seconds: float
    entries: tuple[TensorReport, ...]
    sha256: str = ""

    @property
    def tensor_nbytes(self) -> int:
        """Sum of the tensors' in-memory sizes (the input without torch.save's overhead)."""
        return sum(e.nbytes for e in self.entries)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (``json.dumps(report.to_json())`` works)."""
        return {
            "path": self.path,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "ratio": self.ratio,
            "seconds": self.seconds,
            "entries": [e.to_json() for e in self.entries],
            "sha256": self.sha256,
        }


class _HashingWriter:
    """Passes writes through and hashes them: the file's sha256 without reading it back."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self._digest.update(data)
        return self._f.write(data)

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


class _CountingSink:
    """A write-only file object that counts bytes, so torch.save's size costs no disk."""

    def __init__(self) -> None:
        self.n = 0

    def write(self, data: bytes) -> int:
        n = len(memoryview(data).cast("B"))
        self.n += n
        return n

    def flush(self) -> None:
        pass


def _torch_save_size(obj: Any) -> int:
    sink = _CountingSink()
    torch.save(obj, sink)  # type: ignore[arg-type]
    return sink.n


DecodedCache = MutableMapping[str, Mapping[str, QuantizedTensor | torch.Tensor]]
"""Decoded checkpoints by the sha256 of their file (what a delta's parent resolves to).

Callers that save or load consecutive steps of a delta chain (:class:`CheckpointManager`) pass
one to :func:`save`, :func:`load` and :func:`read_quantized`, which read it and fill it, so each
file of a chain is decoded once (parents are still checked on disk: present, same sha256). The
caller bounds its size.
"""


@dataclass(frozen=True)
class _FileParent:
    """A :class:`ParentView` over a decoded parent file."""

    content_hash: str
    table: Mapping[str, QuantizedTensor | torch.Tensor]

    def quantized(self, path: str) -> QuantizedTensor | None:
        q = self.table.get(path)
        return q if isinstance(q, QuantizedTensor) else None


def _parent_of(
    child: str, parent: str | os.PathLike[str], cache: DecodedCache | None = None
) -> tuple[_FileParent, dict[str, str]]:
    parent = os.fspath(parent)
    if not storage.is_file(parent):
        raise MissingParentError(f"parent checkpoint {parent!r} does not exist")
    if not storage.same_directory(parent, child):
        raise ConfigError(
            f"parent {parent!r} must be in the same directory as {child!r}: a delta names its "
            "parent by file name only"
        )
    digest = storage.sha256_file(parent)
    table = None if cache is None else cache.get(digest)
    if table is None:
        table = _read_quantized(parent, depth=1, cache=cache)
    view = _FileParent(digest, table)
    name = parent.rstrip("/").rsplit("/", 1)[-1] if storage.is_url(parent) else parent
    return view, {"hash": digest, "name": os.path.basename(name)}


def _resolve_parent(
    path: str, ref: Mapping[str, str], depth: int, cache: DecodedCache | None = None
) -> _FileParent:
    if depth > _MAX_CHAIN:
        raise CorruptCheckpointError(f"{path!r}: delta chain longer than {_MAX_CHAIN}")
    parent_path = storage.sibling(path, ref["name"])
    if not storage.is_file(parent_path):
        raise MissingParentError(
            f"{path!r} is a delta against {ref['name']!r}, which is missing from its "
            "directory; restore that file to read this one"
        )
    digest = storage.sha256_file(parent_path)
    if digest != ref["hash"]:
        raise MissingParentError(
            f"{path!r} is a delta against {ref['name']!r} with sha256 {ref['hash'][:12]}..., "
            f"but that file now has sha256 {digest[:12]}...: it was altered or replaced"
        )
    # Checked even when cached: a parent gone or replaced on disk must fail here as it would
    # in a fresh process. Hashing costs far less than decoding.
    table = None if cache is None else cache.get(digest)
    if table is None:
        table = _read_quantized(parent_path, depth=depth + 1, cache=cache)
    return _FileParent(digest, table)


def _json_safe(meta: Any, where: str) -> None:
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"codec metadata for {where!r} is not strict JSON: {exc}") from exc


def save(
    obj: Any,
    path: str | os.PathLike[str],
    *,
    config: CompressionConfig | None = None,
    scores: Mapping[str, torch.Tensor] | None = None,
    parent: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    metadata: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    cache: DecodedCache | None = None,
    prequantized: Mapping[str, Prequantized] | None = None,
) -> Report:
    """Compress a checkpoint object into one ``.ckz`` file, atomically.

    Parameters
    ----------
    obj:
        What you would pass to ``torch.save``: nested dicts/lists/tuples of tensors, Python
        scalars, strings and None.
    path:
        The file to write (its directory must exist).
    config:
        How to compress (default :class:`CompressionConfig`): lossy by default. Floating-point
        tensors with at least ``config.min_numel`` elements are quantized; integer/bool
        tensors, float8, 0-d tensors, optimizer step counters and paths in ``config.exact``
        stay bit-exact (the rules are :class:`ckptzip.plan.Planner`'s). For a bit-exact file
        pass ``CompressionConfig(exact=("*",))``.
    scores:
        Sensitivity scores ``|g·w|`` by tensor path (same shape as the tensor).
    parent:
        A previous ``.ckz`` file in the same directory to delta-encode against.
    overwrite:
        Replace an existing file at ``path``.
    metadata:
        Free-form string key/value pairs stored in the manifest.
    progress:
        Called as ``progress(done, total)`` in input bytes after each tensor.
    cache:
        A :data:`DecodedCache`: the parent is taken from it when present, and the new file's
        quantized tensors are added to it (for the next delta of a chain).
    prequantized:
        Tensors the search already quantized (:attr:`SearchResult.prequantized`): stored as
        they are, not quantized again, where the plan chose the same config, the tensor was
        not modified since and ``scores`` gives it the scores the search used.

    Returns
    -------
    Report
        Sizes, ratio, time and per-tensor choices.

    Raises
    ------
    UnsupportedValueError
        ``obj`` holds something that cannot be stored (its path is named).
    CheckpointExistsError
        ``path`` exists and ``overwrite`` is false.
    StorageError
        The write failed (disk full, I/O); nothing was left behind.

    Examples
    --------
    >>> import tempfile, torch, ckptzip
    >>> p = os.path.join(tempfile.mkdtemp(), "ckpt.ckz")
    >>> r = ckptzip.save({"w": torch.arange(10.0), "epoch": 3}, p)
    >>> ckptzip.load(p)["epoch"], r.entries[0].codec
    (3, 'exact')
    """
    path = os.fspath(path)
    config = CompressionConfig() if config is None else config
    if not isinstance(config, CompressionConfig):
        raise ConfigError(f"config={config!r} must be a CompressionConfig")
    meta_out = dict(metadata or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta_out.items()):
        raise ConfigError(f"metadata={meta_out!r} must map strings to strings")
    storage.check_target(path, overwrite=overwrite)
    t0 = time.perf_counter()
    skeleton, leaves = flatten(obj)
    parent_view: ParentView | None = None
    parent_ref: dict[str, str] | None = None
    if parent is not None:
        parent_view, parent_ref = _parent_of(path, parent, cache)
    planner = Planner(config, parent=parent_view is not None, prequantized=prequantized)
    # one decision per stored entry, whichever of its names (tied weights) came first
    names = reference_paths(skeleton)
    plan = planner.plan(
        leaves,
        aliases={i: [n for n in names[i] if n != p] for i, (p, _) in enumerate(leaves)},
        exact=dict.fromkeys(ndarray_entries(skeleton), "NumPy array"),
    )

    total = sum(x.numel() * x.element_size() for _, x in leaves)
    done = 0
    entries: list[TensorEntry] = []
    chunks: list[bytes] = []
    quantized: dict[str, QuantizedTensor] = {}
    configs: list[QuantConfig | None] = []
    for t, (p, x) in zip(plan, leaves, strict=True):
        codec = get_codec(t.codec)
        score = None if scores is None or t.quant is None else scores.get(p)
        ctx = EncodeContext(
            path=p,
            config=config,
            quant=t.quant,
            scores=score,
            parent=parent_view,
            reason=t.reason,
            quantized=planner.prequantized_for(t, x, score),
        )
        enc: Encoded = codec.encode(x, ctx)
        _json_safe(enc.meta, p)
        if enc.quantized is not None:
            quantized[p] = enc.quantized
        cfg = enc.config
        configs.append(cfg)
        entries.append(
            TensorEntry(
                path=p,
                shape=tuple(x.shape),
                dtype=dtype_name(x.dtype),
                codec=codec.id,
                meta=enc.meta,
                config=None if cfg is None else cfg.to_json(),
                rel_error=enc.rel_error,
                chunks=(len(chunks), len(enc.chunks)),
            )
        )
        chunks.extend(enc.chunks)
        done += x.numel() * x.element_size()
        if progress is not None:
            progress(done, total)

    manifest = Manifest(
        skeleton=skeleton,
        tensors=tuple(entries),
        chunks=chunk_refs(chunks),
        parent=parent_ref,
        metadata=meta_out,
        created_by=f"ckptzip {ckptzip.__version__}",
    )

    hashes: list[str] = []

    def _write(f: BinaryIO) -> None:
        hashing = _HashingWriter(f)
        write(hashing, manifest, chunks)
        hashes.append(hashing.hexdigest())

    bytes_out = storage.atomic_write(path, _write, overwrite=overwrite)
    file_hash = hashes[-1]
    if cache is not None:
        # Only the quantized tensors: all a child delta reads, and exact tensors would alias
        # the caller's live (still training) tensors.
        cache[file_hash] = quantized
    seconds = time.perf_counter() - t0
    bytes_in = _torch_save_size(obj)
    reports = tuple(
        TensorReport(
            path=e.path,
            shape=e.shape,
            dtype=e.dtype,
            codec=e.codec,
            config=cfg,
            bytes=sum(manifest.chunks[e.chunks[0] + j].length for j in range(e.chunks[1])),
            nbytes=e.nbytes,
            rel_error=e.rel_error,
            reason=t.reason,
        )
        for e, cfg, t in zip(entries, configs, plan, strict=True)
    )
    return Report(
        path=path,
        bytes_in=bytes_in,
        bytes_out=bytes_out,
        ratio=bytes_in / bytes_out if bytes_out else math.inf,
        seconds=seconds,
        entries=reports,
        sha256=file_hash,
    )


def _decode_entry(reader: Reader, entry: TensorEntry, parent: ParentView | None) -> Decoded:
    codec = get_codec(entry.codec)
    ctx = DecodeContext.from_entry(entry, parent)
    chunks = reader.tensor_chunks(entry)
    try:
        out = codec.decode(entry.meta, chunks, ctx)
    except CkptzipError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # a codec tripping on hostile bytes is still a corrupt file
        raise CorruptCheckpointError(
            f"{reader.name}: tensor {entry.path!r} ({entry.codec}) cannot be decoded: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    # a codec's output must match the manifest's shape and dtype exactly
    if not isinstance(out, Decoded):
        raise CorruptCheckpointError(f"{entry.path!r}: codec returned {type(out).__name__}")
    if out.shape != entry.shape or out.dtype != ctx.dtype:
        raise CorruptCheckpointError(
            f"{entry.path!r}: decoded {dtype_name(out.dtype)}{list(out.shape)} but the "
            f"manifest records {entry.dtype}{list(entry.shape)}"
        )
    return out


def _open(path: str | os.PathLike[str]) -> tuple[BinaryIO, Reader]:
    f = storage.open_read(path)
    try:
        return f, Reader(f, name=repr(os.fspath(path)))
    except BaseException:
        f.close()
        raise


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """The validated manifest of a file (reads no chunk).

    Examples
    --------
    >>> import tempfile, torch, ckptzip
    >>> p = os.path.join(tempfile.mkdtemp(), "c.ckz")
    >>> _ = ckptzip.save({"w": torch.ones(3)}, p, metadata={"step": "7"})
    >>> read_manifest(p).metadata
    {'step': '7'}
    """
    f, reader = _open(path)
    with f:
        return reader.manifest


def verify(
    path: str | os.PathLike[str], *, decode: bool = False, progress: Progress | None = None
) -> Manifest:
    """Check a file's integrity: header, manifest, and every chunk's sha256.

    With ``decode`` also decode every tensor (and a delta's parents), which checks the codec
    metadata and sizes as :func:`load` would. Returns the manifest; raises
    :class:`CorruptCheckpointError` (or a subclass) at the first problem.

    Examples
    --------
    >>> import tempfile, torch, ckptzip
    >>> p = os.path.join(tempfile.mkdtemp(), "c.ckz")
    >>> _ = ckptzip.save({"w": torch.ones(3)}, p)
    >>> len(verify(p, decode=True).tensors)
    1
    """
    if decode:
        return _decode_file(path, progress=progress)[0]
    f, reader = _open(path)
    with f:
        total, done = reader.manifest.data_bytes, 0
        for i, _ in reader.iter_chunks():
            done += reader.manifest.chunks[i].length
            if progress is not None:
                progress(done, total)
        return reader.manifest


def _decode_file(
    path: str | os.PathLike[str],
    *,
    depth: int = 0,
    progress: Progress | None = None,
    cache: DecodedCache | None = None,
) -> tuple[Manifest, dict[str, Decoded]]:
    f, reader = _open(path)
    with f:
        m = reader.manifest
        parent = (
            None if m.parent is None else _resolve_parent(os.fspath(path), m.parent, depth, cache)
        )
        out: dict[str, Decoded] = {}
        total, done = sum(e.nbytes for e in m.tensors), 0
        for entry in m.tensors:
            out[entry.path] = _decode_entry(reader, entry, parent)
            done += entry.nbytes
            if progress is not None:
                progress(done, total)
    if cache is not None:
        cache[storage.sha256_file(path)] = {p: d.value() for p, d in out.items()}
    return m, out


def _read_quantized(
    path: str | os.PathLike[str], *, depth: int = 0, cache: DecodedCache | None = None
) -> dict[str, QuantizedTensor | torch.Tensor]:
    return {p: d.value() for p, d in _decode_file(path, depth=depth, cache=cache)[1].items()}


def read_quantized(
    path: str | os.PathLike[str], *, cache: DecodedCache | None = None
) -> dict[str, QuantizedTensor | torch.Tensor]:
    """Every tensor of a file by path: a :class:`QuantizedTensor` if lossy, else the tensor.

    ``cache`` (a :data:`DecodedCache`) resolves a delta's parents without decoding them again
    and receives this file's tensors.

    Examples
    --------
    >>> import tempfile, torch, ckptzip
    >>> p = os.path.join(tempfile.mkdtemp(), "c.ckz")
    >>> _ = ckptzip.save({"step": torch.tensor(4)}, p)
    >>> read_quantized(p)
    {'step': tensor(4)}
    """
    return _read_quantized(path, cache=cache)


def _device(map_location: str | torch.device | None) -> torch.device:
    try:
        device = torch.device("cpu" if map_location is None else map_location)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"map_location={map_location!r} is not a device: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"map_location={map_location!r} but CUDA is not available here")
    return device


def load(
    path: str | os.PathLike[str],
    *,
    map_location: str | torch.device | None = "cpu",
    progress: Progress | None = None,
    cache: DecodedCache | None = None,
) -> Any:
    """Read a ``.ckz`` file back into the structure that was saved.

    Lossy tensors come back dequantized in their original dtype and shape; everything else
    is bit-exact. Dicts come back as plain ``dict`` (``OrderedDict`` state dicts load fine
    with ``load_state_dict``).

    Parameters
    ----------
    path:
        The file.
    map_location:
        Device for every tensor: ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a ``torch.device``.
    progress:
        Called as ``progress(done, total)`` in output bytes after each tensor.
    cache:
        A :data:`DecodedCache` for the parents of a delta (see :func:`read_quantized`).

    Raises
    ------
    CorruptCheckpointError
        The file is damaged or not a ckptzip file (:class:`UnsupportedFormatError` for a
        newer format, :class:`MissingParentError` for a delta whose parent is gone).
    CheckpointNotFoundError
        No such file.

    Examples
    --------
    >>> import tempfile, torch, ckptzip
    >>> p = os.path.join(tempfile.mkdtemp(), "c.ckz")
    >>> _ = ckptzip.save({"w": torch.ones(2), "lr": 0.1}, p)
    >>> ckptzip.load(p)
    {'w': tensor([1., 1.]), 'lr': 0.1}
    """
    device = _device(map_location)
    manifest, decoded = _decode_file(path, progress=progress, cache=cache)
    leaves = [d.materialize(device) for d in decoded.values()]
    return unflatten(manifest.skeleton, leaves)
