"""The public entry points: :func:`save`, :func:`load`, :func:`read_quantized` and :class:`Report`.

``save`` runs the pipeline forwards (structure → per-tensor codec → container → storage);
``load`` runs it backwards. No pickle is involved in either direction: a file holds JSON and
raw numeric bytes only, so loading an untrusted file can fail but never executes code.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import posixpath
import threading
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, BinaryIO, TypeAlias, TypeVar

import torch

import ckptzip
from ckptzip import _pages, chains, storage
from ckptzip._collector import collector_paused, spent
from ckptzip._compat import torch_save_size
from ckptzip._parallel import default_threads, encoding_pool
from ckptzip._types import QuantizedTensor
from ckptzip.codecs.base import (
    DecodeContext,
    Decoded,
    EncodeContext,
    Encoded,
    ParentView,
    SiblingView,
    get_codec,
)
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.container import Manifest, Reader, TensorEntry, chunk_digest, chunk_refs, write
from ckptzip.errors import (
    CheckpointNotFoundError,
    CkptzipError,
    ConfigError,
    CorruptCheckpointError,
    DecodeMemoryError,
    MissingParentError,
)
from ckptzip.plan import Planner, Prequantized, exact_reason, step_weights
from ckptzip.structure import (
    dtype_name,
    flatten,
    ndarray_entries,
    reference_paths,
    reference_views,
    unflatten,
)

__all__ = [
    "RATIO",
    "check_parent",
    "TENSOR_RATIO",
    "DecodedCache",
    "EncodedCheckpoint",
    "Report",
    "TensorReport",
    "decode_chain",
    "encode",
    "exact_reason",
    "load",
    "load_chain",
    "read_manifest",
    "read_quantized",
    "save",
    "verify",
]

RATIO = "ratio = bytes torch.save writes / bytes of the .ckz file"
"""What "ratio" means everywhere (:attr:`Report.ratio`, the benchmarks, the README): how much
smaller the file is than the one it replaces."""
TENSOR_RATIO = "tensor ratio = tensor bytes in memory / bytes of the .ckz file"
"""What "tensor ratio" means everywhere (:attr:`Report.tensor_ratio`, ``ckptzip inspect``,
``ChainEntry.tensor_ratio``): what a reader can compute from a ``.ckz`` file alone, without
``torch.save``'s container overhead (a few hundred bytes per tensor, so the two differ most
on small tensors)."""

Progress = Callable[[int, int], None]
Source: TypeAlias = "str | os.PathLike[str] | IO[bytes]"
"""Where a checkpoint is: a local path, a URL (``s3://…``, through fsspec) or a binary file
object (``io.BytesIO``, ``open(path, "rb")``), as ``torch.load`` / ``torch.save`` take."""
MapLocation: TypeAlias = "str | torch.device | Mapping[str, str] | Callable[[Any, str], Any] | None"
"""What ``torch.load``'s ``map_location`` takes (see :func:`load`)."""


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
        ``bytes_in / bytes_out`` (:data:`RATIO`); :attr:`tensor_ratio` is the other figure
        (:data:`TENSOR_RATIO`), the one ``ckptzip inspect`` shows.
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

    @property
    def tensor_ratio(self) -> float:
        """``tensor_nbytes / bytes_out`` (:data:`TENSOR_RATIO`)."""
        return self.tensor_nbytes / self.bytes_out if self.bytes_out else math.inf

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (``json.dumps(report.to_json())`` works)."""
        return {
            "path": self.path,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "ratio": self.ratio,
            "tensor_ratio": self.tensor_ratio,
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


def _torch_save_size(obj: Any, leaves: Sequence[tuple[str, torch.Tensor]]) -> int:
    """What ``torch.save(obj)`` would write, measured before anything is published.

    An object torch cannot pickle (a namedtuple class defined inside a function) is still
    saved by ckptzip: its ``bytes_in`` is then the tensors' in-memory bytes.
    """
    try:
        return torch_save_size(obj)
    except Exception:  # pickling is torch's business; the checkpoint does not depend on it
        return sum(x.numel() * x.element_size() for _, x in leaves)


DecodedCache = MutableMapping[str, Mapping[str, QuantizedTensor | torch.Tensor]]
"""Decoded checkpoints by the sha256 of their file (what a delta's parent resolves to): the
lossy entries of each, a :class:`QuantizedTensor` or, for a ``"residual"`` entry, its
reconstructed tensor (exact entries are left out: a child never codes against them).

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

    def reconstruction(self, path: str) -> torch.Tensor | None:
        # the table holds the lossy entries only (every filler of a DecodedCache keeps to
        # that), so a tensor here is a reconstruction, never an exact entry
        v = self.table.get(path)
        if isinstance(v, QuantizedTensor):
            from ckptzip.quantize import dequantize  # only lossy parents need it

            return dequantize(v)
        return v


def _parent_view(
    links: Sequence[chains.Link],
    cache: DecodedCache | None = None,
    max_bytes: int | None = None,
    *,
    vouched: bool = False,
    threads: int | None = None,
) -> _FileParent:
    """The decoded last link of a chain (keyframe first), decoded from the links' own bytes.

    Decoding starts after the newest link found in ``cache``, so consecutive steps of a
    chain decode one file each; it goes forwards in a loop, so any allowed chain length
    decodes in any process. Only the lossy entries of the last link are decoded, each path
    through the links in turn (the chain of one tensor is one task: its indices stay in
    the cache from one link to the next, and the threads take tensors without waiting for
    a link's last one); a child's delta refers to its parent's quantized tensors alone, so
    the exact ones (most of a state's entries: biases, norms, step counters) would be
    decoded for nothing. Their bytes are still checked: every link but the last was checked
    whole against the sha256 its child records (``chains.resolve_parents``), and so was the
    last one when ``vouched`` (the caller decodes its child); otherwise the last link's
    exact chunks are read and checked against their own digests, so a damaged parent is
    never delta-coded against. ``cache`` receives the last link's tensors.
    """
    start, view = 0, None
    if cache is not None:
        for i in range(len(links) - 1, -1, -1):
            cached = cache.get(links[i].sha256)
            if cached is not None:
                start, view = i + 1, _FileParent(links[i].sha256, cached)
                break
    todo = links[start:]
    if not todo:
        if view is None:
            raise ValueError("a chain has at least one link")
        return view
    # every link but the last was checked whole against its child's record, and the last
    # one too when vouched: their chunks are not hashed again
    readers = [link.reader(vouched=vouched or i + 1 < len(todo)) for i, link in enumerate(todo)]
    for reader in readers:
        _check_sizes(reader, max_bytes)
    lossy = [
        {e.path: e for e in reader.manifest.tensors if get_codec(e.codec).lossy}
        for reader in readers
    ]
    targets = list(lossy[-1].values())
    locks = [threading.Lock() for _ in readers]  # a reader is one file position
    workers = max(1, _threads(threads, len(targets)))
    share = sum(e.nbytes for e in targets) // workers
    first = view
    path = ""

    table: dict[str, QuantizedTensor | torch.Tensor] = {}
    top = len(readers) - 1

    def reads_siblings(entry: TensorEntry | None) -> bool:
        return entry is not None and _reads_siblings(entry.codec)

    def sibling(path: str, k: int) -> torch.Tensor | None:
        # the value at ``path`` of link k: decoded already when k is the last link
        if reads_siblings(lossy[k].get(path)):
            return None
        v = table.get(path) if k == top else walk(path, k, 1) if path in lossy[k] else None
        return v if v is None else _DecodedSiblings({path: v}).value(path)

    def walk(path: str, upto: int, inner: int) -> QuantizedTensor | torch.Tensor | None:
        # an entry that reads siblings ("step") never reads its parent: start at the last one
        start = max((k for k in range(upto + 1) if reads_siblings(lossy[k].get(path))), default=0)
        parent, value = first, None
        own = False  # whether parent's tensor at the path is this walk's to overwrite
        for k in range(start, upto + 1):
            entry = lossy[k].get(path)
            if entry is None:  # a delta at the next link finds no parent tensor: it says so
                parent, own = _FileParent(todo[k].sha256, {}), False
                continue
            view = _LinkSiblings(sibling, k) if reads_siblings(entry) else None
            chunks = readers[k].tensor_chunks(entry, lock=locks[k])
            # an intermediate whose child adds a residual to it is wanted as values only
            # (decoded straight into the tensor), one whose child is a bin-index delta against
            # it as indices only; the walk's last value is the caller's
            child = lossy[k + 1].get(path) if k < upto else None
            value = _decode_entry(
                readers[k],
                entry,
                parent,
                chunks,
                values=_residual_child(child),
                threads=inner,
                siblings=view,
                reuse_parent=own,
                indices_only=_index_delta_child(child),
            ).value()
            parent, own = _FileParent(todo[k].sha256, {path: value}), True
        return value

    def decode_path(target: TensorEntry) -> QuantizedTensor | torch.Tensor:
        # a tensor holding more than a thread's share of the work would finish last: its
        # codec may spread its independent parts (ANS blocks) over the threads too
        inner = workers if workers > 1 and target.nbytes > share else 1
        value = walk(target.path, top, inner)
        assert value is not None  # the last link holds the target
        return value

    def where() -> str:
        return f"{readers[-1].name}: tensor {path!r}"

    try:
        # the targets that read siblings in the last link are decoded after the others
        for phase in _sibling_phases(targets):
            with (
                _memory_guard(where),
                _ordered_map(decode_path, phase, threads, [e.nbytes for e in phase]) as results,
            ):
                for target, value in zip(phase, results, strict=True):
                    path = target.path
                    table[path] = value
    finally:
        # walk and sibling call each other through their closures' cells: a cycle that held
        # every link's reader (the file's bytes) and manifest until the cyclic collector ran
        # (_collector.spent)
        walk = sibling = spent
    if not vouched:
        last = readers[-1]
        for entry in last.manifest.tensors:
            if entry.path not in table:
                last.tensor_chunks(entry)
    if cache is not None:
        cache[todo[-1].sha256] = table
    return _FileParent(todo[-1].sha256, table)


def _residual_child(entry: TensorEntry | None) -> bool:
    """Whether ``entry`` adds a residual to its parent's reconstruction (needs no more of the
    parent than its values)."""
    return (
        entry is not None
        and entry.codec == "residual"
        and isinstance(entry.meta, dict)
        and entry.meta.get("mode") == "residual"
    )


def _index_delta_child(entry: TensorEntry | None) -> bool:
    """Whether ``entry`` is a bin-index delta against its parent (reads nothing of the
    parent's quantized tensor but its indices)."""
    return (
        entry is not None
        and entry.codec == "delta"
        and isinstance(entry.meta, dict)
        and entry.meta.get("mode") == "delta"
    )


def _sibling_reader(path: str) -> Callable[[str], bytes]:
    return lambda name: storage.read_bytes(storage.sibling(path, name))


def _where(path: str) -> str:
    return repr(posixpath.dirname(path) if storage.is_url(path) else os.path.dirname(path) or ".")


def _base_name(path: str) -> str:
    return posixpath.basename(path) if storage.is_url(path) else os.path.basename(path)


def _parent_links(child: str, parent: str | os.PathLike[str]) -> list[chains.Link]:
    """A parent file and its own parents, keyframe first, each read once."""
    parent = os.fspath(parent)
    if not storage.same_directory(parent, child):
        raise ConfigError(
            f"parent {parent!r} must be in the same directory as {child!r}: a delta names its "
            "parent by file name only"
        )
    try:
        top = chains.parse_link(_base_name(parent), storage.read_bytes(parent))
    except CheckpointNotFoundError:
        raise MissingParentError(f"parent checkpoint {parent!r} does not exist") from None
    parents = chains.resolve_parents(
        top.name, top.manifest, _sibling_reader(parent), _where(parent)
    )
    return [*parents, top]


def _threads(threads: int | None, n: int) -> int:
    """Encoding threads for ``n`` tensors: 0 means encode in the caller's thread.

    ``threads=1`` is one pool thread, not the caller's: the pool's threads run torch's ops
    on one core each, where the caller's would run each op on an OpenMP team (measured on
    an 88 MB state on a loaded 2-core machine: 6.3 s in the caller's thread against 3.7 s
    with two pool threads; see ``benchmarks/throughput.py``).
    """
    if threads is None:
        threads = default_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads={threads!r} must be None (one per core, at most 8) or >= 1")
    return 0 if n < 2 else min(threads, n)


_R = TypeVar("_R")

_INLINE_NUMEL = 4096
"""Entries with fewer elements are encoded by the caller's thread, not handed to the pool:
below the default ``min_numel``, so they are exact (a copy and a small zstd frame), and
torch runs no op on them on an OpenMP team (its grain is 32768 elements)."""


def _largest_first(
    pool: ThreadPoolExecutor, fn: Callable[[int], _R], sizes: Sequence[int]
) -> Iterator[_R]:
    """``map(fn, range(len(sizes)))`` on ``pool``, the largest items started first, results in
    index order: the long tensors do not end up alone at the tail while other threads idle.

    Items under :data:`_INLINE_NUMEL` run in the caller's thread as their turn comes: a
    future's hand-off (its lock, a thread's wake-up) costs more CPU than encoding such a
    tensor, and the caller's thread would otherwise wait idle (about 150 of the 212 entries
    of ``benchmarks/throughput.py --quick``'s state are biases, norms and step counts)."""
    order = sorted(
        (i for i in range(len(sizes)) if sizes[i] >= _INLINE_NUMEL), key=lambda i: -sizes[i]
    )
    futures: dict[int, Future[_R]] = {i: pool.submit(fn, i) for i in order}
    try:
        for i in range(len(sizes)):
            f = futures.get(i)
            yield fn(i) if f is None else f.result()
    finally:
        for f in futures.values():
            f.cancel()


def _map_indices(
    pool: ThreadPoolExecutor | None,
    fn: Callable[[int], _R],
    indices: Sequence[int],
    sizes: Sequence[int],
) -> dict[int, _R]:
    """``{i: fn(i)}`` for ``indices``, on ``pool`` (largest first) when there is one."""
    if pool is None:
        return {i: fn(i) for i in indices}
    done = _largest_first(pool, lambda k: fn(indices[k]), [sizes[i] for i in indices])
    return dict(zip(indices, done, strict=True))


class _EncodedSiblings:
    """A :class:`SiblingView` over the entries of a file being encoded: what a reader will
    decode at each path (an exact tensor as it is, a quantized one dequantized, a
    reconstruction), for the codecs that read siblings (encoded after the others)."""

    def __init__(
        self, leaves: Sequence[tuple[str, torch.Tensor]], encoded: Mapping[int, Encoded]
    ) -> None:
        self._index = {p: i for i, (p, _) in enumerate(leaves) if i in encoded}
        self._leaves = leaves
        self._encoded = encoded

    def value(self, path: str) -> torch.Tensor | None:
        i = self._index.get(path)
        if i is None:
            return None
        enc = self._encoded[i]
        if enc.reconstruction is not None:
            return enc.reconstruction
        if enc.quantized is not None:
            from ckptzip.quantize import dequantize  # only lossy entries need it

            return dequantize(enc.quantized)
        return self._leaves[i][1].detach().to("cpu")


def _json_safe(meta: Any, where: str) -> None:
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"codec metadata for {where!r} is not strict JSON: {exc}") from exc


def save(
    obj: Any,
    path: Source,
    *,
    config: CompressionConfig | None = None,
    scores: Mapping[str, torch.Tensor] | None = None,
    parent: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    metadata: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    cache: DecodedCache | None = None,
    prequantized: Mapping[str, Prequantized] | None = None,
    threads: int | None = None,
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
    threads:
        Tensors encoded in parallel by this many threads (default: one per core, at most
        8; ``1``: one thread). The file is the same whatever the number.

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
    target = None if _is_path(path) else _writable(path)
    path = _name(path) if target is not None else os.fspath(path)  # type: ignore[arg-type]
    if target is not None and parent is not None:
        raise ConfigError(
            "a delta checkpoint (parent=...) names its parent by file name, so it must be "
            "saved to a path, not to a file object"
        )
    if target is None:
        storage.check_target(path, overwrite=overwrite)
    links = None if parent is None else _parent_links(path, parent)
    enc = encode(
        obj,
        config=config,
        scores=scores,
        parent=links,
        metadata=metadata,
        progress=progress,
        cache=cache,
        prequantized=prequantized,
        threads=threads,
    )
    if target is None:
        bytes_out = storage.atomic_write(path, enc.write, overwrite=overwrite)
    else:  # the caller's stream: written in place, as torch.save does
        bytes_out = enc.write(target)
    return enc.report(path, bytes_out, cache=cache)


class EncodedCheckpoint:
    """A checkpoint encoded in memory, validated, not yet published.

    :func:`encode` makes one; the caller publishes it by passing :meth:`write` to an atomic
    writer (:func:`ckptzip.storage.atomic_write` or a :class:`~ckptzip.storage.Storage`),
    then calls :meth:`report`. Everything that can fail because of the object (encoding,
    metadata, the ``bytes_in`` measurement) has happened before, so nothing raises after a
    file is published.
    """

    def __init__(
        self,
        manifest: Manifest,
        chunks: list[bytes],
        quantized: dict[str, QuantizedTensor | torch.Tensor],
        reports: list[tuple[QuantConfig | None, str | None]],
        bytes_in: int,
        started: float,
    ) -> None:
        self.manifest = manifest
        self._chunks = chunks
        self._quantized = quantized
        self._reports = reports
        self.bytes_in = bytes_in
        self._started = started
        self.sha256 = ""

    def write(self, f: BinaryIO) -> int:
        """Write the file to ``f`` (called by the atomic writer; records the sha256)."""
        hashing = _HashingWriter(f)
        n = write(hashing, self.manifest, self._chunks)
        self.sha256 = hashing.hexdigest()
        return n

    def report(self, path: str, bytes_out: int, *, cache: DecodedCache | None = None) -> Report:
        """The :class:`Report` of the published file; adds it to ``cache`` for a child delta."""
        if cache is not None:
            # Only the lossy entries (quantized tensors, residuals' reconstructions): all a
            # child delta reads, and exact tensors would alias the caller's live tensors.
            cache[self.sha256] = self._quantized
        m = self.manifest
        reports = tuple(
            TensorReport(
                path=e.path,
                shape=e.shape,
                dtype=e.dtype,
                codec=e.codec,
                config=cfg,
                bytes=sum(m.chunks[e.chunks[0] + j].length for j in range(e.chunks[1])),
                nbytes=e.nbytes,
                rel_error=e.rel_error,
                reason=reason,
            )
            for e, (cfg, reason) in zip(m.tensors, self._reports, strict=True)
        )
        return Report(
            path=path,
            bytes_in=self.bytes_in,
            bytes_out=bytes_out,
            ratio=self.bytes_in / bytes_out if bytes_out else math.inf,
            seconds=time.perf_counter() - self._started,
            entries=reports,
            sha256=self.sha256,
        )


def _stored_config(cfg: QuantConfig) -> dict[str, Any]:
    """A tensor's config as its manifest entry stores it: without ``rounding``, which
    decoding never needs (the levels and indices are the same kind either way), so files of
    stochastically rounded weights stay readable by readers that predate the field."""
    out = cfg.to_json()
    out.pop("rounding", None)
    return out


def encode(
    obj: Any,
    *,
    config: CompressionConfig | None = None,
    scores: Mapping[str, torch.Tensor] | None = None,
    parent: Sequence[chains.Link] | None = None,
    metadata: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    cache: DecodedCache | None = None,
    prequantized: Mapping[str, Prequantized] | None = None,
    threads: int | None = None,
) -> EncodedCheckpoint:
    """Encode ``obj`` into an unpublished :class:`EncodedCheckpoint` (what :func:`save` does
    before writing).

    ``parent`` is the chain to delta against, keyframe first (its last link is the parent),
    as :meth:`ckptzip.chains.ChainStore.parent_chain` returns; its links are decoded from
    their own bytes (or taken from ``cache``). Other arguments as for :func:`save`.
    """
    config = CompressionConfig() if config is None else config
    if not isinstance(config, CompressionConfig):
        raise ConfigError(f"config={config!r} must be a CompressionConfig")
    meta_out = dict(metadata or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta_out.items()):
        raise ConfigError(f"metadata={meta_out!r} must map strings to strings")
    t0 = time.perf_counter()
    skeleton, leaves = flatten(obj)
    parent_view: ParentView | None = None
    parent_ref: dict[str, str] | None = None
    if parent:
        parent_view = _parent_view(parent, cache)
        parent_ref = {"hash": parent[-1].sha256, "name": parent[-1].name}
    planner = Planner(config, parent=parent_view is not None, prequantized=prequantized)
    # one decision per stored entry, whichever of its names (tied weights) came first
    names = reference_paths(skeleton)
    plan = planner.plan(
        leaves,
        aliases={i: [n for n in names[i] if n != p] for i, (p, _) in enumerate(leaves)},
        exact=dict.fromkeys(ndarray_entries(skeleton), "NumPy array"),
        views=reference_views(skeleton, leaves),
    )

    by_path = dict(leaves)
    # entries whose codec reads other entries of the file ("step") are encoded after the rest
    late = {i for i, t in enumerate(plan) if _reads_siblings(t.codec)}
    siblings: list[_EncodedSiblings] = []  # set once the entries they read are encoded

    def encode_one(i: int) -> tuple[Encoded, list[str]]:
        t, (p, x) = plan[i], leaves[i]
        score = None if scores is None or t.quant is None else scores.get(p)
        weights = step_weights(p, t.quant, by_path)
        if weights is not None and tuple(weights.shape) != tuple(x.shape):
            weights = None
        ctx = EncodeContext(
            path=p,
            config=config,
            quant=t.quant,
            scores=score,
            parent=parent_view,
            reason=t.reason,
            quantized=planner.prequantized_for(t, x, score),
            fit_weights=weights,
            siblings=siblings[0] if i in late else None,
        )
        enc = get_codec(t.codec).encode(x, ctx)
        _json_safe(enc.meta, p)
        # hashed here, on the encoding thread (hashlib releases the GIL), not serially after
        return enc, [chunk_digest(c) for c in enc.chunks]

    workers = _threads(threads, len(leaves))
    # Tensors are independent: quantizing (torch, NumPy) and zstd release the GIL, so threads
    # encode them in parallel.
    pool = encoding_pool(workers) if workers else None
    try:
        results: Iterator[tuple[Encoded, list[str]]]
        bytes_in_job: Future[int] | None = None
        sizes = [x.numel() for _, x in leaves]
        if pool is not None:
            # What torch.save would write is measured on a pool thread while the tensors
            # encode (pickling holds the GIL, the encoding mostly does not).
            bytes_in_job = pool.submit(_torch_save_size, obj, leaves)
        if late:
            early = [i for i in range(len(leaves)) if i not in late]
            first = _map_indices(pool, encode_one, early, sizes)
            siblings.append(_EncodedSiblings(leaves, {i: e for i, (e, _) in first.items()}))
            first.update(_map_indices(pool, encode_one, sorted(late), sizes))
            results = (first[i] for i in range(len(leaves)))
        elif pool is None:
            results = map(encode_one, range(len(leaves)))
        else:
            results = _largest_first(pool, encode_one, sizes)
        total = sum(x.numel() * x.element_size() for _, x in leaves)
        done = 0
        entries: list[TensorEntry] = []
        chunks: list[bytes] = []
        digests: list[str] = []
        quantized: dict[str, QuantizedTensor | torch.Tensor] = {}
        configs: list[QuantConfig | None] = []
        for t, (p, x), (enc, enc_digests) in zip(plan, leaves, results, strict=True):
            codec = get_codec(t.codec)
            if enc.reconstruction is not None:  # what a reader of this entry decodes
                quantized[p] = enc.reconstruction
            elif enc.quantized is not None:
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
                    config=None if cfg is None else _stored_config(cfg),
                    rel_error=enc.rel_error,
                    chunks=(len(chunks), len(enc.chunks)),
                )
            )
            chunks.extend(enc.chunks)
            digests.extend(enc_digests)
            done += x.numel() * x.element_size()
            if progress is not None:
                progress(done, total)
        manifest = Manifest(
            skeleton=skeleton,
            tensors=tuple(entries),
            chunks=chunk_refs(chunks, digests),
            parent=parent_ref,
            metadata=meta_out,
            created_by=f"ckptzip {ckptzip.__version__}",
        )
        t1 = time.perf_counter()
        bytes_in = _torch_save_size(obj, leaves) if bytes_in_job is None else bytes_in_job.result()
        t_size = time.perf_counter() - t1  # ``Report.seconds`` leaves out the measurement
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return EncodedCheckpoint(
        manifest,
        chunks,
        quantized,
        [(cfg, t.reason) for cfg, t in zip(configs, plan, strict=True)],
        bytes_in,
        t0 + t_size,
    )


def _decode_entry(
    reader: Reader,
    entry: TensorEntry,
    parent: ParentView | None,
    chunks: list[bytes] | None = None,
    *,
    values: bool = False,
    threads: int = 1,
    siblings: SiblingView | None = None,
    reuse_parent: bool = False,
    indices_only: bool = False,
) -> Decoded:
    codec = get_codec(entry.codec)
    ctx = DecodeContext.from_entry(
        entry,
        parent,
        values=values,
        threads=threads,
        siblings=siblings,
        reuse_parent=reuse_parent,
        indices_only=indices_only,
    )
    if chunks is None:
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


def _is_path(src: Any) -> bool:
    return isinstance(src, (str, os.PathLike))


def _name(f: Any) -> str:
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else f"<{type(f).__name__}>"


def _writable(f: Any) -> BinaryIO:
    if not callable(getattr(f, "write", None)):
        raise ConfigError(
            f"cannot save to {f!r}: expected a path, a URL or a binary file object with write()"
        )
    return f


def _readable(f: Any) -> BinaryIO:
    """``f`` itself when it can be read by offset from its start, else its rest in memory."""
    if not callable(getattr(f, "read", None)):
        raise ConfigError(
            f"cannot load {f!r}: expected a path, a URL or a binary file object with read()"
        )
    position = None
    try:
        if f.seekable():
            position = f.tell()
            if position == 0:
                return f
    except (AttributeError, OSError, ValueError):
        pass
    # a pipe, a socket, or a stream positioned past its start (torch.load reads from there)
    rest = f.read()
    if not rest and position:
        raise CorruptCheckpointError(
            f"{_name(f)}: nothing to read after position {position}: a file object is read "
            "from where it stands, as torch.load reads it; seek(0) after saving into it"
        )
    return io.BytesIO(rest)


@contextlib.contextmanager
def _opened(src: Source) -> Iterator[Reader]:
    """A :class:`Reader` over ``src``; a path is opened and closed here, a file object is the
    caller's and stays open."""
    if _is_path(src):
        f = storage.open_read(src)  # type: ignore[arg-type]
        name = repr(os.fspath(src))  # type: ignore[arg-type]
    else:
        f, name = _readable(src), _name(src)
    try:
        yield Reader(f, name=name)
    finally:
        if _is_path(src):
            f.close()


def read_manifest(path: Source) -> Manifest:
    """The validated manifest of a file (reads no chunk).

    Examples
    --------
    >>> import tempfile, torch, ckptzip
    >>> p = os.path.join(tempfile.mkdtemp(), "c.ckz")
    >>> _ = ckptzip.save({"w": torch.ones(3)}, p, metadata={"step": "7"})
    >>> read_manifest(p).metadata
    {'step': '7'}
    """
    with _opened(path) as reader:
        return reader.manifest


def _check_sizes(reader: Reader, max_bytes: int | None, *, limit: bool = True) -> None:
    """Every size rule that needs no chunk: the read limit (unless ``limit`` is false), then
    each entry's declared elements against what its codec says its chunk lengths can hold."""
    if limit:
        reader.check_limit(max_bytes)
    m = reader.manifest
    for entry in m.tensors:
        first, count = entry.chunks
        lengths = [m.chunks[first + j].length for j in range(count)]
        itemsize = entry.nbytes // entry.numel if entry.numel else 1
        bound = get_codec(entry.codec).max_numel(entry.meta, lengths, itemsize)
        if bound is not None and entry.numel > bound:
            raise CorruptCheckpointError(
                f"{reader.name}: tensor {entry.path!r} declares {entry.numel} elements but its "
                f"{sum(lengths)} bytes of {entry.codec!r} chunks can hold at most {bound}"
            )


def verify(
    path: Source,
    *,
    decode: bool = False,
    progress: Progress | None = None,
    max_bytes: int | None = None,
) -> Manifest:
    """Check a file's integrity: header, manifest, the read limit, and every chunk's digest.

    With ``decode`` also decode every tensor (and a delta's parents), which checks the codec
    metadata and sizes as :func:`load` would, under :func:`load`'s read limit. Without it
    nothing is decoded, so only an explicit ``max_bytes`` is checked.
    Returns the manifest; raises :class:`CorruptCheckpointError` (or a subclass) at the first
    problem.

    Examples
    --------
    >>> import tempfile, torch, ckptzip
    >>> p = os.path.join(tempfile.mkdtemp(), "c.ckz")
    >>> _ = ckptzip.save({"w": torch.ones(3)}, p)
    >>> len(ckptzip.verify(p, decode=True).tensors)
    1
    """
    if decode:
        return _decode_file(path, progress=progress, max_bytes=max_bytes)[0]
    with _opened(path) as reader:
        # nothing is decoded: only a limit the caller set applies
        _check_sizes(reader, max_bytes, limit=max_bytes is not None)
        total, done = reader.manifest.data_bytes, 0
        for i, _ in reader.iter_chunks():
            done += reader.manifest.chunks[i].length
            if progress is not None:
                progress(done, total)
        return reader.manifest


# Messages of the CPU allocator when it cannot allocate (torch raises RuntimeError; CUDA's
# torch.OutOfMemoryError is a RuntimeError subclass too).
_OOM_MESSAGES = ("can't allocate memory", "out of memory", "not enough memory")


@contextlib.contextmanager
def _memory_guard(where: Callable[[], str]) -> Iterator[None]:
    """Turn an allocation failure while decoding into :class:`DecodeMemoryError`.

    ``where()`` names what was being decoded; it is called only on failure, so one guard can
    cover a loop (entering a guard per tensor measurably slowed loads of many small ones)."""
    try:
        yield
    except MemoryError as exc:
        raise DecodeMemoryError(f"{where()}: out of memory while decoding ({exc})") from exc
    except RuntimeError as exc:
        if not any(m in str(exc).lower() for m in _OOM_MESSAGES):
            raise
        raise DecodeMemoryError(f"{where()}: out of memory while decoding ({exc})") from exc


def _decode_file(
    path: Source,
    *,
    progress: Progress | None = None,
    cache: DecodedCache | None = None,
    max_bytes: int | None = None,
    values: bool = False,
    threads: int | None = None,
) -> tuple[Manifest, dict[str, Decoded]]:
    """The file's manifest and decoded entries; ``values``: only their values on the CPU are
    wanted (see :attr:`DecodeContext.values`), which a cache never takes."""
    if cache is not None and _is_path(path):  # the cache key is the file's hash: read it once
        p = os.fspath(path)  # type: ignore[arg-type]
        top = chains.parse_link(_base_name(p), storage.read_bytes(p))
        links = [*_chain_above(p, top.manifest), top]
        return decode_chain(
            links, progress=progress, cache=cache, max_bytes=max_bytes, threads=threads
        )
    with _opened(path) as reader:
        m = reader.manifest
        parent = None
        if m.parent is not None:
            if not _is_path(path):
                raise MissingParentError(
                    f"{reader.name} is a delta against {m.parent['name']!r}, which is found "
                    "next to the file: load it by its path, not from a file object"
                )
            links = _chain_above(os.fspath(path), m)  # type: ignore[arg-type]
            parent = _parent_view(links, max_bytes=max_bytes, vouched=True)
        return m, _decode_entries(
            reader, parent, progress, max_bytes, values=values, threads=threads
        )


def _chain_above(path: str, manifest: Manifest) -> list[chains.Link]:
    if manifest.parent is None:
        return []
    return chains.resolve_parents(_base_name(path), manifest, _sibling_reader(path), _where(path))


def _decode_entries(
    reader: Reader,
    parent: _FileParent | None,
    progress: Progress | None,
    max_bytes: int | None,
    *,
    values: bool = False,
    threads: int | None = None,
    lossy_only: bool = False,
) -> dict[str, Decoded]:
    """Decode the reader's entries (``lossy_only``: those of lossy codecs, what a parent
    is needed for)."""
    _check_sizes(reader, max_bytes)
    out: dict[str, Decoded] = {}
    total, done = reader.decoded_bytes, 0
    path = ""
    entries = reader.manifest.tensors
    if lossy_only:
        entries = tuple(e for e in entries if get_codec(e.codec).lossy)
    lock = threading.Lock()  # the reader is one file position: chunks are read in turn

    workers = max(1, _threads(threads, len(entries)))
    # a tensor holding more than a thread's share of the work would finish last: its codec
    # may spread its independent parts (ANS blocks) over the threads too
    share = total // workers

    siblings: list[_DecodedSiblings] = []  # set once the entries they read are decoded

    def decode_one(entry: TensorEntry) -> Decoded:
        chunks = reader.tensor_chunks(entry, lock=lock)
        inner = workers if workers > 1 and entry.nbytes > share else 1
        view = siblings[0] if siblings and _reads_siblings(entry.codec) else None
        return _decode_entry(
            reader, entry, parent, chunks, values=values, threads=inner, siblings=view
        )

    # entries whose codec reads other entries of the file ("step") are decoded after the rest
    def where() -> str:
        return f"{reader.name}: tensor {path!r}"

    phases = _sibling_phases(entries)
    for k, phase in enumerate(phases):
        if k:
            siblings.append(_DecodedSiblings(dict(out)))
        with (
            _memory_guard(where),
            _ordered_map(decode_one, phase, threads, [e.nbytes for e in phase]) as results,
        ):
            for entry, decoded in zip(phase, results, strict=True):
                path = entry.path
                out[path] = decoded
                done += entry.nbytes
                if progress is not None:
                    progress(done, total)
    if len(phases) > 1:  # the file's order
        out = {e.path: out[e.path] for e in entries}
    return out


def _sibling_phases(entries: Sequence[TensorEntry]) -> list[list[TensorEntry]]:
    """``entries`` in the order they can be decoded: those whose codec reads no siblings,
    then (when there are any) those whose codec does."""
    late = [e for e in entries if _reads_siblings(e.codec)]
    if not late:
        return [list(entries)]
    return [[e for e in entries if not _reads_siblings(e.codec)], late]


def _reads_siblings(codec_id: str) -> bool:
    """Whether the codec ``codec_id`` reads other entries of its file (a codec class written
    before the attribute existed reads none)."""
    return bool(getattr(get_codec(codec_id), "reads_siblings", False))


@dataclass(frozen=True)
class _LinkSiblings:
    """A :class:`SiblingView` of link ``k`` of a chain being decoded."""

    get: Callable[[str, int], torch.Tensor | None]
    k: int

    def value(self, path: str) -> torch.Tensor | None:
        return self.get(path, self.k)


class _DecodedSiblings:
    """A :class:`SiblingView` over a file's entries decoded so far (the codecs that read
    siblings are decoded after every other entry, and never read one another)."""

    def __init__(self, decoded: Mapping[str, Decoded | QuantizedTensor | torch.Tensor]) -> None:
        self._decoded = decoded

    def value(self, path: str) -> torch.Tensor | None:
        d = self._decoded.get(path)
        if d is None:
            return None
        if isinstance(d, Decoded):
            return d.materialize()
        if isinstance(d, QuantizedTensor):
            from ckptzip.quantize import dequantize  # only lossy entries need it

            return dequantize(d)
        return d


def check_parent(links: Sequence[chains.Link], *, cache: DecodedCache | None = None) -> None:
    """Decode the chain a delta would be encoded against (keyframe first), into ``cache``.

    What :func:`encode` does first with ``parent=links``; a caller that can start a keyframe
    instead (:class:`CheckpointManager`) calls it to learn whether the parent is usable.

    Raises
    ------
    CorruptCheckpointError
        A file of the chain is damaged (a chunk fails its checksum or does not decode).
    """
    _parent_view(links, cache)


# Items below this many output bytes are computed by the caller's thread, not the pool: their
# work is mostly Python, which a pool thread can only do holding the GIL the other threads
# need to get back from their compiled kernels (measured on the --quick throughput state's
# 212 entries, 155 of them small exact tensors, load 12 on two cores: two pool threads for
# every entry were 2.5x slower than one).
_POOL_MIN_BYTES = 1 << 18


@contextlib.contextmanager
def _ordered_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    threads: int | None = None,
    sizes: Sequence[int] | None = None,
) -> Iterator[Iterator[Any]]:
    """``map(fn, items)``, computed by ``threads`` encoding threads (see :func:`_threads`)
    when there are several items (the kernels release the GIL, so tensors decode in
    parallel); results come in order. With ``sizes`` (output bytes per item), items under
    :data:`_POOL_MIN_BYTES` run in the caller's thread while the pool works on the others,
    which it starts largest first: a state's largest tensors (the embedding, the head and
    their moments) come last in its order, and started last they finish alone (the chain
    walks of the --quick throughput state's chain end, their measured CPU times laid out on
    two threads: done after 247 ms in the file's order, 235 ms largest first).

    One worker is the caller's thread, not a pool's (unlike an encoding's: see
    :func:`_threads`): decoding runs compiled kernels, not torch's OpenMP ops, and one pool
    thread beside a caller decoding the small items made a keyframe's ``threads=1`` load
    10-20 % slower than the caller decoding every item (``benchmarks/load_phases.py``)."""
    heavy = [i for i in range(len(items)) if sizes is None or sizes[i] >= _POOL_MIN_BYTES]
    workers = _threads(threads, len(heavy))
    if workers <= 1:
        yield map(fn, items)
        return
    if sizes is not None:
        heavy.sort(key=lambda i: -sizes[i])  # stable: equal sizes keep their order
    pool = encoding_pool(workers, "ckptzip-decode")
    try:
        futures = {i: pool.submit(fn, items[i]) for i in heavy}
        yield (futures[i].result() if i in futures else fn(x) for i, x in enumerate(items))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def decode_chain(
    links: Sequence[chains.Link],
    *,
    progress: Progress | None = None,
    cache: DecodedCache | None = None,
    max_bytes: int | None = None,
    threads: int | None = None,
) -> tuple[Manifest, dict[str, Decoded]]:
    """Decode the last file of a chain (keyframe first) from the links' own bytes.

    The parents come from ``cache`` when there, and are added to it; so is the last file.
    ``max_bytes`` is :func:`load`'s read limit, applied to every file.
    """
    top = links[-1]
    parent = None
    if len(links) > 1:
        parent = _parent_view(links[:-1], cache, max_bytes, vouched=True, threads=threads)
    reader = top.reader()
    out = _decode_entries(reader, parent, progress, max_bytes, threads=threads)
    if cache is not None:
        cache[top.sha256] = _lossy_values(reader.manifest, out, threads)
    return top.manifest, out


def _lossy_values(
    manifest: Manifest, decoded: Mapping[str, Decoded], threads: int | None = None
) -> dict[str, QuantizedTensor | torch.Tensor]:
    """What a :data:`DecodedCache` keeps of a decoded file: its lossy entries, a tensor (a
    residual's reconstruction) as a copy, since the caller gets the decoded one to modify.
    The copies are made by ``threads`` threads (the --quick throughput chain end's 19
    weights, 30 MB, were a serial step of its restore)."""
    values = {
        e.path: decoded[e.path].value()
        for e in manifest.tensors
        if e.path in decoded and get_codec(e.codec).lossy
    }

    def own(v: QuantizedTensor | torch.Tensor) -> QuantizedTensor | torch.Tensor:
        if not isinstance(v, torch.Tensor):
            return v
        return _pages.copy(v) if v.device.type == "cpu" else v.clone()

    items = list(values.values())
    sizes = [v.numel() * v.element_size() if isinstance(v, torch.Tensor) else 0 for v in items]
    with _ordered_map(own, items, threads, sizes) as copies:
        return dict(zip(values, copies, strict=True))


def _read_quantized(
    path: Source, *, cache: DecodedCache | None = None, max_bytes: int | None = None
) -> dict[str, QuantizedTensor | torch.Tensor]:
    decoded = _decode_file(path, cache=cache, max_bytes=max_bytes)[1]
    return {p: d.value() for p, d in decoded.items()}


def read_quantized(
    path: Source, *, cache: DecodedCache | None = None, max_bytes: int | None = None
) -> dict[str, QuantizedTensor | torch.Tensor]:
    """Every tensor of a file by path: a :class:`QuantizedTensor` if lossy, else the tensor.

    ``cache`` (a :data:`DecodedCache`) resolves a delta's parents without decoding them again
    and receives this file's tensors; ``max_bytes`` is :func:`load`'s read limit.

    Examples
    --------
    >>> import tempfile, torch, ckptzip
    >>> p = os.path.join(tempfile.mkdtemp(), "c.ckz")
    >>> _ = ckptzip.save({"step": torch.tensor(4)}, p)
    >>> read_quantized(p)
    {'step': tensor(4)}
    """
    return _read_quantized(path, cache=cache, max_bytes=max_bytes)


def _device(map_location: Any, shown: Any = None) -> torch.device:
    try:
        device = torch.device("cpu" if map_location is None else map_location)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(
            f"map_location={shown or map_location!r} is not a device: {exc}"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"map_location={shown or map_location!r} but CUDA is not available here")
    return device


# ckptzip records no device: every tensor is saved from, and first restored to, the CPU; this
# is the location a dict or callable map_location is asked about (torch.load's name for it).
_SAVED_LOCATION = "cpu"


def _placement(map_location: MapLocation) -> tuple[torch.device, Callable[[Any, str], Any] | None]:
    """The device to decode onto and, for a callable ``map_location``, the callable."""
    if callable(map_location) and not isinstance(map_location, (str, torch.device)):
        return torch.device("cpu"), map_location
    if isinstance(map_location, Mapping):
        target = map_location.get(_SAVED_LOCATION, _SAVED_LOCATION)
        return _device(target, map_location), None
    return _device(map_location), None


def _relocate(x: torch.Tensor, fn: Callable[[Any, str], Any]) -> torch.Tensor:
    """Apply a torch.load-style ``fn(storage, location)`` to one restored tensor."""
    got = fn(x.untyped_storage(), _SAVED_LOCATION)
    if got is None:
        return x  # torch.load's rule: None keeps the default restore location
    if isinstance(got, torch.TypedStorage):
        got = got.untyped()
    if isinstance(got, torch.UntypedStorage):
        if got.nbytes() < x.untyped_storage().nbytes():
            raise ConfigError(
                f"map_location returned a storage of {got.nbytes()} bytes for one of "
                f"{x.untyped_storage().nbytes()}"
            )
        out = torch.empty(0, dtype=x.dtype, device=got.device)
        return out.set_(got, x.storage_offset(), x.shape, x.stride())
    if isinstance(got, torch.Tensor):
        return got
    raise ConfigError(
        f"map_location returned {type(got).__name__}; it must return a storage (as "
        "torch.load expects), a tensor or None"
    )


def load(
    path: Source,
    *,
    map_location: MapLocation = "cpu",
    weights_only: bool | None = None,
    max_bytes: int | None = None,
    progress: Progress | None = None,
    cache: DecodedCache | None = None,
    threads: int | None = None,
) -> Any:
    """Read a ``.ckz`` checkpoint back into the structure that was saved.

    Lossy tensors come back dequantized in their original dtype and shape; everything else
    is bit-exact. Dicts come back as plain ``dict`` (``OrderedDict`` state dicts load fine
    with ``load_state_dict``). Tensors that shared storage when saved (tied weights, views)
    share it again; NumPy arrays come back as NumPy arrays.

    Parameters
    ----------
    path:
        A path, a URL, or a binary file object (``io.BytesIO``, an open file) read from its
        current position, as ``torch.load`` takes. A delta checkpoint needs its path (its
        parent is found next to it).
    map_location:
        Where tensors go, as ``torch.load`` takes it: ``"cpu"``, ``"cuda:1"``, a
        ``torch.device``, a dict remapping locations (``{"cpu": "cuda:0"}``) or a callable
        ``fn(storage, location)`` returning a storage (or ``None`` to keep it). ckptzip
        does not record where a tensor lived, so the location it reports is always
        ``"cpu"`` and ``None`` means the CPU. NumPy arrays stay NumPy arrays.
    weights_only:
        Accepted for ``torch.load`` compatibility and ignored: loading never unpickles, so
        every load is as safe as ``weights_only=True``.
    max_bytes:
        Refuse (:class:`DecodeLimitError`, before reading any tensor) a file that declares
        more decoded bytes than this: its tensors', and its views' as the copies they would
        take (an ``expand()``-ed view counts all its elements). Default: what the memory
        available to this process can decode (a quarter of it:
        :data:`ckptzip.container.DECODE_OVERHEAD`), never a multiple of the file's size:
        whatever :func:`save` writes, ``load`` reads, however well it compressed. Pass a
        smaller limit for files you do not trust.
    progress:
        Called as ``progress(done, total)`` in output bytes after each tensor.
    cache:
        A :data:`DecodedCache` for the parents of a delta (see :func:`read_quantized`).
    threads:
        Tensors decoded in parallel by this many threads (default: one per core, at most
        8). The result is the same whatever the number.

    Raises
    ------
    CorruptCheckpointError
        The file is damaged or not a ckptzip file (:class:`UnsupportedFormatError` for a
        newer format, :class:`MissingParentError` for a delta whose parent is gone,
        :class:`DecodeLimitError` over the read limit).
    DecodeMemoryError
        Memory ran out while decoding.
    CheckpointNotFoundError
        No such file.

    Examples
    --------
    >>> import io, torch, ckptzip
    >>> buf = io.BytesIO()
    >>> _ = ckptzip.save({"w": torch.ones(2), "lr": 0.1}, buf)
    >>> _ = buf.seek(0)
    >>> ckptzip.load(buf, map_location={"cpu": "cpu"}, weights_only=True)
    {'w': tensor([1., 1.]), 'lr': 0.1}
    """
    del weights_only  # nothing to restrict: no pickle is ever read
    # onto the CPU, lossy tensors decode straight into their output (no index array between)
    on_cpu = _placement(map_location)[0].type == "cpu"
    _threads(threads, 0)  # a bad value is refused before anything is read
    with collector_paused():  # a load's throwaway objects: see ckptzip._collector
        manifest, decoded = _decode_file(
            path,
            progress=progress,
            cache=cache,
            max_bytes=max_bytes,
            values=on_cpu,
            threads=threads,
        )
        return _materialize(manifest, decoded, map_location, threads)


def load_chain(
    links: Sequence[chains.Link],
    *,
    map_location: MapLocation = "cpu",
    cache: DecodedCache | None = None,
    max_bytes: int | None = None,
) -> Any:
    """What :func:`load` returns, for a chain already read (keyframe first, as
    :meth:`ckptzip.chains.ChainStore.chain` gives it): decoded from the links' own bytes."""
    manifest, decoded = decode_chain(links, cache=cache, max_bytes=max_bytes)
    return _materialize(manifest, decoded, map_location)


def _materialize(
    manifest: Manifest,
    decoded: Mapping[str, Decoded],
    map_location: MapLocation,
    threads: int | None = None,
) -> Any:
    device, relocate = _placement(map_location)
    arrays = ndarray_entries(manifest.skeleton)
    leaves = []
    path = ""
    items = list(enumerate(decoded.values()))

    def one(item: tuple[int, Decoded]) -> torch.Tensor:
        i, d = item
        # NumPy lives on the CPU whatever the tensors' placement
        return d.materialize("cpu" if i in arrays else device)

    # only quantized entries have work left (a gather); the threads' hand-offs would cost
    # more than the others' no-op or copy
    work = [item for item in items if item[1].tensor is None]
    sizes = [math.prod(d.shape) * d.dtype.itemsize for _, d in work]
    with (
        _memory_guard(lambda: f"tensor {path!r}"),
        _ordered_map(one, work, threads, sizes) as results,
    ):
        done = dict(zip((i for i, _ in work), results, strict=True))
        for (i, d), path in zip(items, decoded, strict=True):  # noqa: B007
            x = done[i] if i in done else one((i, d))
            leaves.append(x if relocate is None or i in arrays else _relocate(x, relocate))
    try:
        return unflatten(manifest.skeleton, leaves, version=manifest.version)
    except CkptzipError:
        raise
    except (RuntimeError, ValueError, TypeError, OverflowError) as exc:
        # the skeleton was checked against the entries' declared shapes (Manifest.from_json):
        # what torch still refuses is a file no writer makes, never the caller's error
        raise CorruptCheckpointError(
            f"the structure does not fit its decoded tensors: {type(exc).__name__}: {exc}"
        ) from exc
