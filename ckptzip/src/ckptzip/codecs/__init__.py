"""Codecs: one module a codec, found by a stable string id (see :mod:`ckptzip.codecs.base`)."""

from __future__ import annotations

from ckptzip.codecs.base import (
    ENTRY_POINT_GROUP,
    Codec,
    DecodeContext,
    Decoded,
    Description,
    EncodeContext,
    Encoded,
    ParentView,
    available_codecs,
    get_codec,
    register_codec,
    register_lazy,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Codec",
    "DecodeContext",
    "Decoded",
    "Description",
    "EncodeContext",
    "Encoded",
    "ParentView",
    "available_codecs",
    "get_codec",
    "register_codec",
    "register_lazy",
]
