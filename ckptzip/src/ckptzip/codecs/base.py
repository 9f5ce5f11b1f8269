"""The codec contract: how one tensor becomes manifest metadata plus raw chunks, and back.

A codec turns one tensor into an :class:`Encoded` (a JSON-able ``meta`` dict for the
manifest and a list of byte ``chunks``) and back into a :class:`Decoded`. Codecs are found by a
stable string ``id`` that is written into every manifest entry, so an id, once released, never
changes meaning: a new encoding gets a new id (or a new ``meta`` field that old files lack).

Call order on save (driven by :func:`ckptzip.save`, after :class:`ckptzip.plan.Planner` chose
each tensor's codec and config)::

    codec = get_codec(treatment.codec)     # "exact", "quant", "delta", "residual", ...
    enc = codec.encode(x, EncodeContext(...))
    # the container stores enc.meta in the tensor's manifest entry, next to the fields the
    # pipeline owns (shape, dtype, codec id, config and rel_error of enc.quantized), and
    # checksums enc.chunks

Call order on load (driven by :func:`ckptzip.load` / :func:`ckptzip.read_quantized`)::

    # first, for every entry of the file, before any chunk is read:
    bound = get_codec(entry.codec).max_numel(entry.meta, chunk_lengths, itemsize)
    # refused if entry.numel > bound (not None); then, entry by entry:
    chunks = ...                           # already checksum-verified by the container
    ctx = DecodeContext.from_entry(entry, parent)   # the pipeline's fields, validated
    out = get_codec(entry.codec).decode(entry.meta, chunks, ctx)
    tensor = out.materialize(device)       # the one way to get the tensor back

A codec whose ``reads_siblings`` is true (``"step"``) is encoded and decoded after every entry
of the file that is not: its ``EncodeContext.siblings`` / ``DecodeContext.siblings`` give
what a reader decodes at another path of the *same* file. The entries it reads must not read
siblings themselves, and nothing else of the file may depend on it.

and ``ckptzip inspect`` calls ``get_codec(entry.codec).describe(entry.meta)``, so the CLI never
reads a codec's private fields.

Rules every codec follows:

* ``decode`` never trusts sizes it has not checked: every lossless stage records its
  decompressed size in ``meta`` and decodes through :mod:`ckptzip.entropy`, which bounds the
  output by that size; element counts come from ``ctx.shape`` (the manifest's validated shape).
* ``decode`` raises :class:`~ckptzip.errors.CorruptCheckpointError` for anything inconsistent
  (missing meta keys, wrong chunk count, sizes that disagree with the shape) and never returns
  a tensor of the wrong shape or dtype.
* ``meta`` holds only JSON types (dict with str keys, list, str, int, finite float, bool,
  None); no pickle, no bytes. The tensor's shape, dtype, config and error are not in it: the
  pipeline records them and hands them to ``decode`` in the :class:`DecodeContext`.
* ``describe`` reads only ``meta`` and must not raise on hostile input (missing or mistyped
  fields give an empty description).
* Codecs are stateless; one instance serves every tensor.

Writing a codec::

    @register_codec
    class MyCodec(Codec):
        id = "mine"
        def encode(self, x, ctx): ...
        def decode(self, meta, chunks, ctx): ...

Run :func:`ckptzip.codecs.testing.check_round_trip` on it. A codec in another package is found
when a file names its id through the entry-point group :data:`ENTRY_POINT_GROUP`
(``ckptzip.codecs``), as numcodecs finds its codecs; in ``pyproject.toml``::

    [project.entry-points."ckptzip.codecs"]
    mine = "mypackage.codecs:MyCodec"

(the value may also name a module whose import registers the codec).
"""

from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, ClassVar, Protocol, TypeVar

import torch

from ckptzip._types import QuantizedTensor, StepWeights
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.errors import ConfigError, CorruptCheckpointError, UnsupportedFormatError
from ckptzip.structure import dtype_from_name

__all__ = [
    "ENTRY_POINT_GROUP",
    "Codec",
    "DecodeContext",
    "Decoded",
    "Description",
    "EncodeContext",
    "Encoded",
    "ParentView",
    "SiblingView",
    "available_codecs",
    "get_codec",
    "meta_get",
    "register_codec",
    "register_lazy",
]

ENTRY_POINT_GROUP = "ckptzip.codecs"
"""The entry-point group third-party codecs register under (name: codec id)."""


class ParentView(Protocol):
    """Read access to the previous checkpoint of a delta chain.

    ``content_hash`` is the sha256 hex digest of the parent file's bytes (what the child's
    manifest records); ``quantized(path)`` returns the parent's decoded
    :class:`QuantizedTensor` at that tensor path, or ``None`` when the parent stored that path
    exactly, as a reconstruction (``"residual"``) or does not have it.
    ``reconstruction(path)`` returns what a restore of the parent gives at that path for a
    lossy entry (a :class:`QuantizedTensor` dequantized, a ``"residual"`` entry's tensor as it
    decoded), on the CPU, or ``None`` when the parent stored the path exactly or does not have
    it: what the ``"residual"`` codec stores its change against. (A view written before this
    method existed lacks it; the ``"residual"`` codec then treats every path as absent.)
    """

    @property
    def content_hash(self) -> str: ...

    def quantized(self, path: str) -> QuantizedTensor | None: ...

    def reconstruction(self, path: str) -> torch.Tensor | None: ...


class SiblingView(Protocol):
    """Read access to the other entries of the file being written or read.

    ``value(path)`` returns what a reader decodes at ``path`` in this same file (an exact
    tensor, a quantized one dequantized, a reconstruction), on the CPU, or ``None`` when the
    file has no tensor there or it is itself an entry that reads siblings. Only codecs whose
    ``reads_siblings`` is true are given one.
    """

    def value(self, path: str) -> torch.Tensor | None: ...


@dataclass(frozen=True)
class Encoded:
    """What a codec produced for one tensor.

    Attributes
    ----------
    meta:
        JSON-able codec metadata stored in the tensor's manifest entry.
    chunks:
        Raw payloads; the container stores each one with its own checksum, in order.
    quantized:
        The :class:`QuantizedTensor` the codec stored, if lossy (the pipeline records its
        config and error, and a later delta uses its indices without decoding the file
        again); ``None`` for exact codecs.
    reconstruction:
        What a reader decodes, when that is not ``quantized`` dequantized (a ``"residual"``
        entry: the parent's reconstruction plus the stored change): a child's residual is
        coded against it, so the writer's cache holds it instead of ``quantized``.
    """

    meta: dict[str, Any]
    chunks: list[bytes]
    quantized: QuantizedTensor | None = None
    reconstruction: torch.Tensor | None = None

    @property
    def config(self) -> QuantConfig | None:
        """The entry's config as the pipeline records it (``None``: exact)."""
        return None if self.quantized is None else self.quantized.config

    @property
    def rel_error(self) -> float | None:
        """The entry's error as the pipeline records it: 0 when exact, ``None`` when the
        quantizer could not measure it (non-finite)."""
        if self.quantized is None:
            return 0.0
        rel = float(self.quantized.rel_error)
        return rel if math.isfinite(rel) else None


@dataclass(frozen=True)
class EncodeContext:
    """Everything a codec may use besides the tensor itself (the plan's decision included).

    Attributes
    ----------
    path:
        The tensor's path in the structure, e.g. ``"model/fc.weight"``.
    config:
        The whole checkpoint's :class:`CompressionConfig`.
    quant:
        The plan's :class:`QuantConfig`; ``None`` means the tensor must be stored exactly.
    scores:
        Sensitivity scores ``|g·w|`` for this tensor (same shape), if known.
    parent:
        The previous checkpoint of a delta chain, if any.
    reason:
        Why the plan stores the tensor exactly (an exact codec records it for ``inspect``).
    quantized:
        The tensor already quantized with ``quant`` (by the search): a lossy codec stores it
        instead of quantizing again.
    fit_weights:
        Per-element weights of the level fit (``quant.fit == "update"``: an Adam first
        moment's, :func:`ckptzip.plan.fit_weights`, or as :func:`ckptzip.plan.step_weights`
        gives them), if any.
    siblings:
        The file's other entries as a reader will decode them (only for a codec whose
        ``reads_siblings`` is true).
    """

    path: str
    config: CompressionConfig
    quant: QuantConfig | None = None
    scores: torch.Tensor | None = None
    parent: ParentView | None = None
    reason: str | None = None
    quantized: QuantizedTensor | None = None
    fit_weights: torch.Tensor | StepWeights | None = None
    siblings: SiblingView | None = None


class EntryFields(Protocol):
    """The pipeline's fields of a manifest entry (what :meth:`DecodeContext.from_entry` reads)."""

    @property
    def path(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def config(self) -> dict[str, Any] | None: ...
    @property
    def rel_error(self) -> float | None: ...


@dataclass(frozen=True)
class DecodeContext:
    """Everything a codec may use to decode besides its meta and chunks.

    Attributes
    ----------
    path, shape, dtype:
        The tensor's path, shape and dtype as the manifest records them (validated).
    config:
        The :class:`QuantConfig` of a lossy entry, ``None`` for an exact one.
    rel_error:
        The error recorded at save time (``None`` when it was not measurable).
    parent:
        The parent checkpoint of a delta file, if any.
    values:
        The caller wants only the tensor's values on the CPU (``ckptzip.load``), never the
        :class:`QuantizedTensor`: a lossy codec may then decode straight into the output
        tensor and return ``Decoded(tensor=...)`` (the same values :meth:`Decoded.materialize`
        would give), with every check it makes otherwise. Codecs may ignore it.
    threads:
        Threads the codec may use for this one tensor's independent parts (the blocks of an
        ``"ans-lanes"`` stream); the reader gives more than 1 only to a tensor larger than a
        thread's share of the file. Codecs may ignore it.
    siblings:
        The file's other entries, decoded (given to a codec whose ``reads_siblings`` is
        true).
    reuse_parent:
        The parent's tensors at this path (what ``parent.reconstruction(path)`` and
        ``parent.quantized(path)`` return) are the reader's own intermediates, used for
        nothing after this decode: a codec may write its result over them (a ``"residual"``
        entry adds its change in place, a ``"delta"`` entry decodes its indices over the
        parent's). Codecs may ignore it.
    indices_only:
        The caller reads nothing of a quantized result but its indices (a link inside a
        delta chain whose next link is a bin-index delta against it): a quantized codec may
        return an :class:`~ckptzip._types.IndicesOnly`, its levels and indices decoded and
        checked, its protected positions and values not decoded. Codecs may ignore it.
    """

    path: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    config: QuantConfig | None = None
    rel_error: float | None = None
    parent: ParentView | None = None
    values: bool = False
    threads: int = 1
    siblings: SiblingView | None = None
    reuse_parent: bool = False
    indices_only: bool = False

    @classmethod
    def of_encoded(
        cls,
        path: str,
        x: torch.Tensor,
        enc: Encoded,
        parent: ParentView | None = None,
        siblings: SiblingView | None = None,
    ) -> DecodeContext:
        """The context a reader will build for ``x`` encoded as ``enc`` (for codec tests)."""
        return cls(
            path, tuple(x.shape), x.dtype, enc.config, enc.rel_error, parent, siblings=siblings
        )

    @classmethod
    def from_entry(
        cls,
        entry: EntryFields,
        parent: ParentView | None = None,
        *,
        values: bool = False,
        threads: int = 1,
        siblings: SiblingView | None = None,
        reuse_parent: bool = False,
        indices_only: bool = False,
    ) -> DecodeContext:
        """The context of a manifest entry: the one place the pipeline's fields are parsed."""
        try:
            config = None if entry.config is None else QuantConfig.from_json(entry.config)
        except ConfigError as exc:
            raise CorruptCheckpointError(f"{entry.path!r}: {exc}") from None
        return cls(
            path=entry.path,
            shape=tuple(entry.shape),
            dtype=dtype_from_name(entry.dtype),
            config=config,
            rel_error=entry.rel_error,
            parent=parent,
            values=values,
            threads=threads,
            siblings=siblings,
            reuse_parent=reuse_parent,
            indices_only=indices_only,
        )


@dataclass(frozen=True, eq=False)
class Decoded:
    """What ``decode`` returns: the stored tensor, exact or quantized.

    Exactly one of ``tensor`` and ``quantized`` is set; :meth:`materialize` is the one way to
    get the tensor back either way.
    """

    tensor: torch.Tensor | None = None
    quantized: QuantizedTensor | None = None

    def __post_init__(self) -> None:
        if (self.tensor is None) == (self.quantized is None):
            raise TypeError("Decoded holds exactly one of tensor and quantized")

    @property
    def shape(self) -> tuple[int, ...]:
        src = self.tensor if self.tensor is not None else self.quantized
        assert src is not None
        return tuple(src.shape)

    @property
    def dtype(self) -> torch.dtype:
        src = self.tensor if self.tensor is not None else self.quantized
        assert src is not None
        return src.dtype

    def value(self) -> torch.Tensor | QuantizedTensor:
        """The exact tensor, or the :class:`QuantizedTensor` (what ``read_quantized`` gives)."""
        out = self.tensor if self.tensor is not None else self.quantized
        assert out is not None
        return out

    def materialize(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The tensor in its original dtype and shape, on ``device`` (default: CPU)."""
        if self.tensor is not None:
            return self.tensor if device is None else self.tensor.to(device)
        from ckptzip.quantize import dequantize  # only files with lossy tensors need it

        assert self.quantized is not None
        return dequantize(self.quantized, device="cpu" if device is None else device)


@dataclass(frozen=True)
class Description:
    """What a codec says about one of its entries, for ``ckptzip inspect``.

    Attributes
    ----------
    protected:
        Entries stored exactly inside a lossy tensor (``None``: not applicable).
    note:
        One line: why an exact tensor is exact, how a delta entry was stored, ...
    """

    protected: int | None = None
    note: str = ""


class Codec(ABC):
    """Base class of every codec; see the module docstring for the contract.

    Attributes
    ----------
    id:
        Stable string id written into manifests (``"exact"``, ``"quant"``, ...).
    lossy:
        Whether decoding may differ from the input (``False`` means bit-exact).
    reads_siblings:
        Whether the codec reads other entries of the same file (``ctx.siblings``); see the
        module docstring for the order this imposes.
    """

    id: ClassVar[str]
    lossy: ClassVar[bool] = True
    reads_siblings: ClassVar[bool] = False

    @abstractmethod
    def encode(self, x: torch.Tensor, ctx: EncodeContext) -> Encoded:
        """Encode ``x`` (any device, dense) into metadata and chunks."""

    @abstractmethod
    def decode(self, meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext) -> Decoded:
        """Rebuild the tensor (exact or quantized) from ``meta`` and ``chunks``."""

    def describe(self, meta: dict[str, Any]) -> Description:
        """A description of an entry this codec wrote (never raises; see the contract)."""
        return Description()

    def max_numel(
        self, meta: dict[str, Any], chunk_lengths: Sequence[int], itemsize: int
    ) -> int | None:
        """The most elements an entry with this meta and these chunk lengths can decode to.

        Called for every entry of a file before any chunk is read, so a manifest that declares
        more than its chunks can hold is refused before anything is allocated (the read limit
        bounds the rest). Never raises: ``None`` means no bound (malformed meta is ``decode``'s
        to reject, and a codec that can reach any size from few bytes states none).
        """
        return None


_REGISTRY: dict[str, Codec] = {}
# Codecs that live in modules which may not be imported yet: importing the module registers
# them. Lazy, so reading a file never imports more than the codecs it names.
_LAZY: dict[str, str] = {
    "exact": "ckptzip.codecs.exact",
    "quant": "ckptzip.codecs.quantized",
    "delta": "ckptzip.codecs.delta",
    "residual": "ckptzip.codecs.residual",
    "step": "ckptzip.codecs.step",
}

C = TypeVar("C", bound=type[Codec])


def register_codec(cls: C) -> C:
    """Class decorator: register one instance of ``cls`` under ``cls.id``.

    Examples
    --------
    >>> from ckptzip.codecs.base import Codec, register_codec, get_codec
    >>> @register_codec
    ... class Null(Codec):
    ...     id = "doc-null"
    ...     def encode(self, x, ctx): raise NotImplementedError
    ...     def decode(self, meta, chunks, ctx): raise NotImplementedError
    >>> type(get_codec("doc-null")).__name__
    'Null'
    """
    codec_id = getattr(cls, "id", None)
    if not isinstance(codec_id, str) or not codec_id:
        raise TypeError(f"codec class {cls.__name__} needs a non-empty string `id`")
    existing = _REGISTRY.get(codec_id)
    if existing is not None and type(existing).__qualname__ != cls.__qualname__:
        raise ValueError(
            f"codec id {codec_id!r} is already taken by {type(existing).__qualname__}; "
            "ids are stable file-format names, pick a new one"
        )
    _REGISTRY[codec_id] = cls()
    return cls


def register_lazy(codec_id: str, module: str) -> None:
    """Make :func:`get_codec` import ``module`` the first time ``codec_id`` is asked for."""
    _LAZY[codec_id] = module


def _entry_point(codec_id: str) -> Any:
    """The entry point of ``codec_id`` in :data:`ENTRY_POINT_GROUP`, or ``None``."""
    found = entry_points(group=ENTRY_POINT_GROUP, name=codec_id)
    return next(iter(found), None)


def _load_plugin(codec_id: str, ep: Any) -> None:
    """Load a third-party codec: a Codec subclass is registered, a module registers itself."""
    try:
        obj = ep.load()
    except Exception as exc:  # a broken plugin must name itself, not crash the reader
        raise UnsupportedFormatError(
            f"codec {codec_id!r} comes from the entry point {ep.value!r} "
            f"({ENTRY_POINT_GROUP}), which failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(obj, type) and issubclass(obj, Codec) and codec_id not in _REGISTRY:
        if getattr(obj, "id", None) != codec_id:
            raise UnsupportedFormatError(
                f"entry point {codec_id!r} = {ep.value!r} names a codec whose id is "
                f"{getattr(obj, 'id', None)!r}; the entry-point name must be the codec id"
            )
        register_codec(obj)


def get_codec(codec_id: str) -> Codec:
    """The registered codec with this id: built in, or from a ``ckptzip.codecs`` entry point.

    Raises
    ------
    UnsupportedFormatError
        No codec of that id is installed (it names the id: install the package that
        provides it, or upgrade ckptzip).

    Examples
    --------
    >>> get_codec("exact").id
    'exact'
    """
    codec = _REGISTRY.get(codec_id)
    if codec is None and codec_id in _LAZY:
        try:
            importlib.import_module(_LAZY[codec_id])
        except ImportError as exc:
            raise UnsupportedFormatError(
                f"codec {codec_id!r} is not available in this installation ({exc}); "
                "upgrade ckptzip to read this file"
            ) from exc
        codec = _REGISTRY.get(codec_id)
    if codec is None:
        ep = _entry_point(codec_id)
        if ep is not None:
            _load_plugin(codec_id, ep)
            codec = _REGISTRY.get(codec_id)
            if codec is None:
                raise UnsupportedFormatError(
                    f"the entry point {ep.value!r} for codec {codec_id!r} registered no codec "
                    f"of that id"
                )
    if codec is None:
        raise UnsupportedFormatError(
            f"unknown codec id {codec_id!r} (known: {', '.join(available_codecs())}): install "
            f"the package that provides it (entry-point group {ENTRY_POINT_GROUP!r}) or "
            "upgrade ckptzip"
        )
    return codec


def available_codecs() -> list[str]:
    """Ids of every codec that is registered, built in, or installed as an entry point."""
    plugins = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(set(_REGISTRY) | set(_LAZY) | plugins)


T = TypeVar("T")


def meta_get(meta: dict[str, Any], key: str, kind: type[T] | tuple[type, ...]) -> Any:
    """``meta[key]`` checked to be of ``kind``; :class:`CorruptCheckpointError` otherwise.

    ``bool`` is not accepted where ``int`` is asked for (JSON ``true`` is not a count).

    Examples
    --------
    >>> meta_get({"n": 3}, "n", int)
    3
    """
    if not isinstance(meta, dict) or key not in meta:
        raise CorruptCheckpointError(f"codec metadata lacks the field {key!r}")
    value = meta[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise CorruptCheckpointError(f"codec metadata field {key!r}={value!r} has the wrong type")
    if not isinstance(value, kinds):
        raise CorruptCheckpointError(
            f"codec metadata field {key!r}={value!r} should be "
            f"{' or '.join(k.__name__ for k in kinds)}"
        )
    return value
