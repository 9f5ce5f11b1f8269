"""Flatten a checkpoint object into tensor entries plus a JSON skeleton, and back.

A checkpoint is what people pass to ``torch.save``: nested ``dict`` / ``list`` / ``tuple`` of
tensors, Python scalars (``int``, ``float`` including NaN and ±inf, ``bool``), ``str`` and
``None``. :func:`flatten` turns it into a JSON-able *skeleton* in which every tensor is replaced
by a reference ``{"$": "tensor", "i": n}``, plus the list of ``(path, tensor)`` entries in the
order the references number them. Paths join dict keys and list positions with ``/``
(``"model/fc.weight"``, ``"optimizer/state/3/exp_avg"``).

Skeleton nodes (format version 1)::

    null, true, false, "text", 12, 0.5          plain JSON (finite floats keep a ".0")
    {"$": "float", "v": "nan" | "inf" | "-inf"}
    {"$": "list",  "v": [node, ...]}
    {"$": "tuple", "v": [node, ...]}
    {"$": "dict",  "k": [key, ...], "v": [node, ...]}   keys: str or int, order kept
    {"$": "tensor", "i": n}

Subclasses come back as their plain type: ``OrderedDict`` (every ``state_dict``) and
``defaultdict`` as ``dict``, ``namedtuple`` and ``torch.Size`` as ``tuple``, ``IntEnum`` as
``int``; NumPy scalars (``np.int64``, ``np.float32``, ``np.bool_``) as the Python scalar of the
same value. Anything else raises :class:`~ckptzip.errors.UnsupportedValueError` naming its path
and type, because storing it would need pickle, which ckptzip never uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ckptzip.errors import CorruptCheckpointError, UnsupportedValueError

__all__ = [
    "DTYPES",
    "MAX_DEPTH",
    "dtype_from_name",
    "dtype_name",
    "flatten",
    "join_path",
    "unflatten",
]

# Nesting deeper than this is refused on save and on load: real checkpoints nest a handful of
# levels, and a bound keeps recursion (ours and json's) far from Python's limit.
MAX_DEPTH = 100

# Every dtype a file may name; the names are part of the format and never change.
DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
for _name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):  # newer torch releases only
        DTYPES[_name] = getattr(torch, _name)
_NAMES = {v: k for k, v in DTYPES.items()}
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def dtype_name(dtype: torch.dtype) -> str:
    """The format's name of a supported dtype.

    Examples
    --------
    >>> dtype_name(torch.bfloat16)
    'bfloat16'
    """
    try:
        return _NAMES[dtype]
    except KeyError:
        raise UnsupportedValueError(
            f"dtype {dtype} is not supported (supported: {', '.join(DTYPES)})"
        ) from None


def dtype_from_name(name: Any) -> torch.dtype:
    """The dtype a file names; :class:`CorruptCheckpointError` for an unknown name."""
    if not isinstance(name, str) or name not in DTYPES:
        raise CorruptCheckpointError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})")
    return DTYPES[name]


def join_path(prefix: str, key: str | int) -> str:
    """``prefix/key``, or ``key`` at the root."""
    return f"{prefix}/{key}" if prefix else str(key)


def flatten(obj: Any) -> tuple[Any, list[tuple[str, torch.Tensor]]]:
    """Split ``obj`` into a JSON-able skeleton and its ``(path, tensor)`` entries.

    Raises
    ------
    UnsupportedValueError
        A value, dict key or dtype cannot be stored (its path is named), the structure is
        cyclic or deeper than :data:`MAX_DEPTH`, or two entries would share a path.

    Examples
    --------
    >>> skel, tensors = flatten({"w": torch.zeros(2), "epoch": 3})
    >>> [p for p, _ in tensors], skel["k"]
    (['w'], ['w', 'epoch'])
    >>> unflatten(skel, [t for _, t in tensors])["epoch"]
    3
    """
    tensors: list[tuple[str, torch.Tensor]] = []
    seen_paths: set[str] = set()
    active: set[int] = set()  # ids of containers on the current path, to catch cycles

    def walk(x: Any, path: str, depth: int) -> Any:
        where = repr(path) if path else "the root"
        if depth > MAX_DEPTH:
            raise UnsupportedValueError(f"value at {where} is nested deeper than {MAX_DEPTH}")
        if isinstance(x, (np.bool_, np.integer, np.floating)):
            x = x.item()  # then stored as the Python scalar below
        if x is None or isinstance(x, (bool, str)):
            return bool(x) if isinstance(x, bool) else (x if x is None else str(x))
        if isinstance(x, int):
            return int(x)  # IntEnum and friends become plain ints
        if isinstance(x, float):
            if math.isfinite(x):
                return float(x)
            return {"$": "float", "v": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
        if isinstance(x, torch.Tensor):
            if x.layout != torch.strided:
                raise UnsupportedValueError(
                    f"tensor at {where} has layout {x.layout}; convert it with .to_dense() first"
                )
            if x.is_quantized or x.is_meta:
                raise UnsupportedValueError(
                    f"tensor at {where} is a {'quantized' if x.is_quantized else 'meta'} "
                    "tensor, which ckptzip cannot store; dequantize or materialise it first"
                )
            try:
                dtype_name(x.dtype)
            except UnsupportedValueError as exc:
                raise UnsupportedValueError(f"tensor at {where}: {exc}") from None
            if path in seen_paths:
                raise UnsupportedValueError(
                    f"two tensors would share the path {path!r} (a dict key contains '/'); "
                    "rename the key"
                )
            seen_paths.add(path)
            tensors.append((path, x.detach()))
            return {"$": "tensor", "i": len(tensors) - 1}
        if isinstance(x, (dict, list, tuple)):
            if id(x) in active:
                raise UnsupportedValueError(f"value at {where} contains itself (a cycle)")
            active.add(id(x))
            try:
                if isinstance(x, dict):
                    keys: list[str | int] = []
                    values = []
                    for k, v in x.items():
                        if isinstance(k, bool) or not isinstance(k, (str, int)):
                            raise UnsupportedValueError(
                                f"dict at {where} has key {k!r} of type {type(k).__name__}; "
                                "only str and int keys can be stored"
                            )
                        keys.append(k if isinstance(k, str) else int(k))
                        values.append(walk(v, join_path(path, k), depth + 1))
                    return {"$": "dict", "k": keys, "v": values}
                items = [walk(v, join_path(path, i), depth + 1) for i, v in enumerate(x)]
                return {"$": "tuple" if isinstance(x, tuple) else "list", "v": items}
            finally:
                active.discard(id(x))
        if isinstance(x, np.ndarray):
            raise UnsupportedValueError(
                f"value at {where} is a NumPy array; store it as a tensor "
                "(torch.from_numpy(array)) and convert back after loading"
            )
        raise UnsupportedValueError(
            f"value at {where} has type {type(x).__module__}.{type(x).__qualname__}, which "
            "ckptzip cannot store without pickle; convert it to tensors, numbers, strings, "
            "lists or dicts first"
        )

    skeleton = walk(obj, "", 0)
    return skeleton, tensors


def unflatten(skeleton: Any, leaves: Sequence[Any]) -> Any:
    """Rebuild the object from a skeleton and its leaves (``leaves[i]`` for reference ``i``).

    The skeleton comes from a file, so every node is checked; each leaf must be referenced
    exactly once.

    Raises
    ------
    CorruptCheckpointError
        A node is malformed, nested deeper than :data:`MAX_DEPTH`, or the references do not
        match ``leaves`` one to one.
    """
    used = [False] * len(leaves)

    def bad(node: Any, why: str) -> CorruptCheckpointError:
        text = repr(node)
        return CorruptCheckpointError(
            f"malformed structure node {text[:80]}{'...' if len(text) > 80 else ''}: {why}"
        )

    def build(node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CorruptCheckpointError(f"structure is nested deeper than {MAX_DEPTH}")
        if node is None or isinstance(node, (bool, int, float, str)):
            if isinstance(node, float) and not math.isfinite(node):
                raise bad(node, "non-finite floats must use the 'float' node")
            return node
        if isinstance(node, list):
            raise bad(node, "bare JSON arrays are not structure nodes")
        if not isinstance(node, dict):
            raise bad(node, f"unexpected JSON type {type(node).__name__}")
        tag = node.get("$")
        if tag == "float":
            # isinstance first: an unhashable "v" (a list) must not reach the dict lookup
            if (
                set(node) != {"$", "v"}
                or not isinstance(node["v"], str)
                or node["v"] not in _NONFINITE
            ):
                raise bad(node, "expected {'$': 'float', 'v': 'nan' | 'inf' | '-inf'}")
            return _NONFINITE[node["v"]]
        if tag == "tensor":
            i = node.get("i")
            if set(node) != {"$", "i"} or isinstance(i, bool) or not isinstance(i, int):
                raise bad(node, "expected {'$': 'tensor', 'i': <int>}")
            if not 0 <= i < len(leaves):
                raise bad(node, f"tensor reference {i} outside 0..{len(leaves) - 1}")
            if used[i]:
                raise bad(node, f"tensor {i} is referenced twice")
            used[i] = True
            return leaves[i]
        if tag in ("list", "tuple"):
            if set(node) != {"$", "v"} or not isinstance(node["v"], list):
                raise bad(node, f"expected {{'$': {tag!r}, 'v': [...]}}")
            items = [build(v, depth + 1) for v in node["v"]]
            return tuple(items) if tag == "tuple" else items
        if tag == "dict":
            keys, values = node.get("k"), node.get("v")
            if (
                set(node) != {"$", "k", "v"}
                or not isinstance(keys, list)
                or not isinstance(values, list)
                or len(keys) != len(values)
            ):
                raise bad(node, "expected {'$': 'dict', 'k': [...], 'v': [...]} of equal length")
            out: dict[str | int, Any] = {}
            for k, v in zip(keys, values, strict=True):
                if isinstance(k, bool) or not isinstance(k, (str, int)):
                    raise bad(node, f"dict key {k!r} must be str or int")
                if k in out:
                    raise bad(node, f"duplicate dict key {k!r}")
                out[k] = build(v, depth + 1)
            return out
        raise bad(node, f"unknown node tag {tag!r}")

    obj = build(skeleton, 0)
    if not all(used):
        missing = used.index(False)
        raise CorruptCheckpointError(f"tensor {missing} is never referenced by the structure")
    return obj
