"""The codec contract: how one tensor becomes manifest metadata plus raw chunks, and back.

A codec turns one tensor into an :class:`Encoded` (a JSON-able ``meta`` dict for the
manifest and a list of byte ``chunks``) and back. Codecs are found by a stable string
``id`` that is written into every manifest entry, so an id, once released, never changes
meaning: a new encoding gets a new id (or a new ``meta`` field that old files lack).

Call order on save (driven by :func:`ckptzip.save`)::

    codec = get_codec(id)                  # "exact", "quant", "delta", ...
    enc = codec.encode(x, EncodeContext(...))
    # the container stores enc.meta in the tensor's manifest entry (next to the shape,
    # dtype, codec id, config and rel_error the pipeline adds) and checksums enc.chunks

Call order on load (driven by :func:`ckptzip.load` / :func:`ckptzip.read_quantized`)::

    chunks = ...                           # already checksum-verified by the container
    out = get_codec(entry.codec).decode(entry.meta, chunks, DecodeContext(...))
    # out is a torch.Tensor (exact) or a QuantizedTensor, which load() dequantizes

Rules every codec follows:

* ``decode`` never trusts sizes it has not checked: every lossless stage records its
  decompressed size in ``meta`` and decodes through :mod:`ckptzip.entropy`, which bounds the
  output by that size; element counts come from the manifest's validated shape.
* ``decode`` raises :class:`~ckptzip.errors.CorruptCheckpointError` for anything inconsistent
  (missing meta keys, wrong chunk count, sizes that disagree with the shape) and never returns
  a tensor of the wrong shape or dtype.
* ``meta`` holds only JSON types (dict with str keys, list, str, int, finite float, bool,
  None); no pickle, no bytes. The keys in :data:`RESERVED_META_KEYS` belong to the
  pipeline: a codec never writes them, and on decode the pipeline adds them to ``meta``
  already validated (``shape``: list of int, ``dtype``: a name in
  :data:`ckptzip.structure.DTYPES`, ``config``: a QuantConfig JSON object or ``None``,
  ``rel_error``: float), so a codec can size its output from the manifest.
* Codecs are stateless; one instance serves every tensor.

Writing a codec::

    @register_codec
    class MyCodec(Codec):
        id = "mine"
        def encode(self, x, ctx): ...
        def decode(self, meta, chunks, ctx): ...

and add ``"mine": "package.module"`` with :func:`register_lazy` (or import the module
before use) so :func:`get_codec` finds it by id when reading a file.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import torch

from ckptzip._types import QuantizedTensor
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.errors import CorruptCheckpointError, UnsupportedFormatError

__all__ = [
    "Codec",
    "DecodeContext",
    "EncodeContext",
    "Encoded",
    "ParentView",
    "RESERVED_META_KEYS",
    "available_codecs",
    "get_codec",
    "meta_get",
    "register_codec",
    "register_lazy",
]


class ParentView(Protocol):
    """Read access to the previous checkpoint of a delta chain.

    ``content_hash`` is the sha256 hex digest of the parent file's bytes (what the child's
    manifest records); ``quantized(path)`` returns the parent's decoded
    :class:`QuantizedTensor` at that tensor path, or ``None`` when the parent stored that path
    exactly or does not have it.
    """

    @property
    def content_hash(self) -> str: ...

    def quantized(self, path: str) -> QuantizedTensor | None: ...


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
        The :class:`QuantizedTensor` the codec produced, if it quantized (so a later delta
        can use its indices without decoding the file again); ``None`` for exact codecs.
    """

    meta: dict[str, Any]
    chunks: list[bytes]
    quantized: QuantizedTensor | None = None


@dataclass(frozen=True)
class EncodeContext:
    """Everything a codec may use besides the tensor itself.

    Attributes
    ----------
    path:
        The tensor's path in the structure, e.g. ``"model/fc.weight"``.
    config:
        The whole checkpoint's :class:`CompressionConfig`.
    quant:
        ``config.quant_for(path)`` after the exact/min_numel rules; ``None`` means the
        tensor must be stored exactly.
    scores:
        Sensitivity scores ``|g·w|`` for this tensor (same shape), if known.
    parent:
        The previous checkpoint of a delta chain, if any.
    """

    path: str
    config: CompressionConfig
    quant: QuantConfig | None = None
    scores: torch.Tensor | None = None
    parent: ParentView | None = None


@dataclass(frozen=True)
class DecodeContext:
    """Everything a codec may use to decode besides its meta and chunks."""

    path: str
    parent: ParentView | None = None


class Codec(ABC):
    """Base class of every codec; see the module docstring for the contract.

    Attributes
    ----------
    id:
        Stable string id written into manifests (``"exact"``, ``"quant"``, ...).
    lossy:
        Whether decoding may differ from the input (``False`` means bit-exact).
    """

    id: ClassVar[str]
    lossy: ClassVar[bool] = True

    @abstractmethod
    def encode(self, x: torch.Tensor, ctx: EncodeContext) -> Encoded:
        """Encode ``x`` (any device, dense) into metadata and chunks."""

    @abstractmethod
    def decode(
        self, meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext
    ) -> torch.Tensor | QuantizedTensor:
        """Rebuild the tensor (or its :class:`QuantizedTensor`) from ``meta`` and ``chunks``."""


RESERVED_META_KEYS = ("shape", "dtype", "config", "rel_error")

_REGISTRY: dict[str, Codec] = {}
# Codecs that live in modules which may not be imported yet: importing the module registers
# them. Lazy, so reading a file never imports more than the codecs it names.
_LAZY: dict[str, str] = {
    "exact": "ckptzip.codecs.exact",
    "quant": "ckptzip.codecs.quantized",
    "delta": "ckptzip.codecs.delta",
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


def get_codec(codec_id: str) -> Codec:
    """The registered codec with this id.

    Raises
    ------
    UnsupportedFormatError
        No codec of that id exists in this release (the file needs a newer ckptzip).

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
        raise UnsupportedFormatError(
            f"unknown codec id {codec_id!r} (known: {', '.join(available_codecs())}); "
            "the file was written by a newer ckptzip, upgrade to read it"
        )
    return codec


def available_codecs() -> list[str]:
    """Ids of every codec that is registered or can be imported on demand."""
    return sorted(set(_REGISTRY) | set(_LAZY))


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
