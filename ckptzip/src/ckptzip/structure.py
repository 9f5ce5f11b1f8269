"""Flatten a checkpoint object into tensor entries plus a JSON skeleton, and back.

A checkpoint is what people pass to ``torch.save``: nested ``dict`` / ``list`` / ``tuple`` of
tensors, NumPy arrays, Python scalars (``int``, ``float`` including NaN and ±inf, ``bool``),
``str`` and ``None``. :func:`flatten` turns it into a JSON-able *skeleton* in which every
tensor is replaced by a reference to a stored *entry*, plus the list of ``(path, tensor)``
entries in the order the references first number them. Paths join dict keys and list
positions with ``/`` (``"model/fc.weight"``, ``"optimizer/state/3/exp_avg"``).

Tensors that share storage are stored once, as ``torch.save`` does: tied weights (GPT-2's
``transformer.wte.weight`` and ``lm_head.weight``) become one entry, named after the first
path that references it, and both references point at it; a view (``x[0]``, ``x.t()``) of a
stored tensor becomes a ``view`` node over its entry. So every decision about a tensor (exact
or quantized, which configuration) is made once per entry, and :func:`unflatten` gives back
tensors that share storage exactly as they did. When several views of one storage are saved
without the whole of it, the entry is the 1-D span of the storage they cover, named after the
first of them. Tensors of different dtypes over one storage (``x.view(torch.int32)``) are
stored apart and come back unshared.

Skeleton nodes::

    null, true, false, "text", 12, 0.5          plain JSON (finite floats keep a ".0")
    {"$": "float", "v": "nan" | "inf" | "-inf"}
    {"$": "list",  "v": [node, ...]}
    {"$": "tuple", "v": [node, ...]}
    {"$": "dict",  "k": [key, ...], "v": [node, ...]}   keys: str or int, order kept
    {"$": "counter", "k": [key, ...], "v": [node, ...]} a collections.Counter (version 5)
    {"$": "tensor", "i": n}                              entry n itself
    {"$": "view", "i": n, "offset": o, "shape": [...], "stride": [...]}     (version 2)
    {"$": "ndarray", "i": n}                             entry n as a NumPy array (version 2)

A ``tensor`` or ``view`` node may also hold ``"param": true`` (it was an ``nn.Parameter``) and
``"grad": true`` (a leaf that required grad); both appear only when true, from version 5 on,
and come back as they were (a new leaf over the same storage). A view's offset, strides and
the product of its non-zero dims are bounded (int64, :data:`MAX_NUMEL`), as are an entry's.

In format version 1 each entry is referenced by exactly one ``tensor`` node; version 2 lets
``tensor`` and ``view`` nodes share an entry (an ``ndarray`` entry is referenced once).
:func:`skeleton_version` is the lowest version that holds a skeleton, so files without shared
storage or NumPy arrays stay readable by version-1 readers.

Subclasses come back as their plain type: ``OrderedDict`` (every ``state_dict``),
``defaultdict`` and every other ``dict`` subclass (Lightning's ``AttributeDict``) as ``dict``,
except ``collections.Counter`` (a ``MultiStepLR``'s milestones), which comes back a
``Counter``; ``namedtuple`` and ``torch.Size`` as ``tuple``, ``IntEnum`` as ``int``; NumPy
scalars (``np.int64``, ``np.float32``, ``np.bool_``) as the Python scalar of the same value.
NumPy arrays of numeric and bool dtypes (``np.random.get_state()``'s key array,
``Generator.bit_generator.state``'s) are stored bit-exactly and come back as NumPy arrays on
the CPU. Integers are limited to :data:`MAX_INT_BITS` bits. Anything else raises
:class:`~ckptzip.errors.UnsupportedValueError` naming its path and type, because storing it
would need pickle, which ckptzip never uses.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ckptzip._collector import spent
from ckptzip.errors import CorruptCheckpointError, UnsupportedValueError

__all__ = [
    "DTYPES",
    "MAX_DEPTH",
    "MAX_INT_BITS",
    "dtype_from_name",
    "dtype_name",
    "extent",
    "flatten",
    "join_path",
    "ndarray_entries",
    "reference_paths",
    "reference_views",
    "shape_numel",
    "skeleton_version",
    "unflatten",
    "view_numels",
]

# Nesting deeper than this is refused on save and on load: real checkpoints nest a handful of
# levels, and a bound keeps recursion (ours and json's) far from Python's limit.
MAX_DEPTH = 100
# JSON readers refuse integers beyond about 4,300 decimal digits (Python's int-digits limit);
# refusing them while flattening fails a save before any work instead of after the encoding.
# 14,000 bits is about 4,215 digits; RNG states need 128.
MAX_INT_BITS = 14_000

# Shapes (of entries and views) beyond these are refused: no real tensor comes near, and the
# bounds keep arithmetic on hostile shapes harmless.
MAX_NUMEL = 1 << 48
MAX_NDIM = 64
# Offsets and strides are int64 in torch; a view's must fit.
_MAX_INT64 = (1 << 63) - 1
# Nodes and node fields a file of an older format version may not hold.
_COUNTER_FROM = _AUTOGRAD_FROM = 5
_AUTOGRAD_KEYS = frozenset(("param", "grad"))
_LATEST = max(_COUNTER_FROM, _AUTOGRAD_FROM)  # the newest skeleton rules

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


def _numpy_dtype_ok(dtype: torch.dtype) -> bool:
    """Whether entries of this dtype may come back as NumPy arrays (NumPy has no bf16/fp8)."""
    return dtype.itemsize > 1 or dtype in (torch.bool, torch.uint8, torch.int8)


def _from_ndarray(a: np.ndarray, where: str) -> torch.Tensor:
    if a.dtype.kind not in "biufc" or a.dtype.fields is not None:
        raise UnsupportedValueError(
            f"NumPy array at {where} has dtype {a.dtype}; only bool and numeric arrays can "
            "be stored without pickle"
        )
    native = a.dtype.newbyteorder("=")
    if a.dtype != native or not a.flags.c_contiguous or not a.flags.writeable:
        a = np.ascontiguousarray(a, dtype=native).copy()  # torch wants native, writable memory
    try:
        t = torch.from_numpy(a)
    except TypeError as exc:  # float128 and other dtypes torch lacks
        raise UnsupportedValueError(f"NumPy array at {where}: {exc}") from None
    if t.dtype not in _NAMES:
        raise UnsupportedValueError(f"NumPy array at {where} has unsupported dtype {a.dtype}")
    return t


def shape_numel(shape: Sequence[int]) -> int | None:
    """The number of elements of ``shape`` (ints >= 0), or ``None`` where the product of its
    non-zero dims exceeds :data:`MAX_NUMEL`: an empty shape like ``[0, 2**70]`` is refused too,
    as torch could not make it. The product is checked as it grows (no huge products).

    Examples
    --------
    >>> shape_numel([2, 3]), shape_numel([0, 2**40]), shape_numel([0, 2**50])
    (6, 0, None)
    """
    nonzero = 1
    for n in shape:
        if n:
            nonzero *= n
            if nonzero > MAX_NUMEL:
                return None
    return nonzero if all(shape) else 0


def extent(x: torch.Tensor) -> int:
    """Number of storage elements from ``x.storage_offset()`` that ``x`` can address (``x``
    not empty)."""
    return 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride(), strict=True))


@dataclass
class _Group:
    """Tensors met while flattening that share one storage and dtype (or stand alone)."""

    entry: int
    members: list[tuple[str, torch.Tensor, dict[str, Any]]] = field(default_factory=list)


def flatten(obj: Any) -> tuple[Any, list[tuple[str, torch.Tensor]]]:
    """Split ``obj`` into a JSON-able skeleton and its ``(path, tensor)`` entries.

    Tensors sharing storage yield one entry (see the module docstring), so ``len(entries)``
    may be smaller than the number of tensors in ``obj``.

    Raises
    ------
    UnsupportedValueError
        A value, dict key or dtype cannot be stored (its path is named), an integer has more
        than :data:`MAX_INT_BITS` bits, or the structure is cyclic or deeper than
        :data:`MAX_DEPTH`. (Where two entries' paths would be equal, keys ``1`` and ``"1"``
        or a key holding ``/``, the later ones are named ``path#2``, ``path#3`` ...: the
        skeleton keeps every key with its type.)

    Examples
    --------
    >>> w = torch.zeros(2, 3)
    >>> skel, tensors = flatten({"w": w, "tied": w, "row": w[1], "epoch": 3})
    >>> [p for p, _ in tensors], skel["k"]
    (['w'], ['w', 'tied', 'row', 'epoch'])
    >>> back = unflatten(skel, [t for _, t in tensors])
    >>> back["row"].data_ptr() == back["w"][1].data_ptr(), back["epoch"]
    (True, 3)
    """
    groups: list[_Group] = []
    by_storage: dict[tuple[str, int, torch.dtype], _Group] = {}
    seen_paths: set[str] = set()
    active: set[int] = set()  # ids of containers on the current path, to catch cycles

    def new_group() -> _Group:
        g = _Group(entry=len(groups))
        groups.append(g)
        return g

    def add_tensor(x: torch.Tensor, path: str, where: str) -> dict[str, Any]:
        if x.is_nested:
            raise UnsupportedValueError(
                f"tensor at {where} is a nested tensor, which ckptzip cannot store; store "
                "its components (.unbind()) as a list instead"
            )
        if x.layout != torch.strided:
            raise UnsupportedValueError(
                f"tensor at {where} has layout {x.layout}; convert it with .to_dense() first"
            )
        if x.is_quantized:
            raise UnsupportedValueError(
                f"tensor at {where} is a quantized tensor, which ckptzip cannot store; "
                "dequantize it first (x.dequantize())"
            )
        if x.is_meta:
            raise UnsupportedValueError(
                f"tensor at {where} is a meta tensor (a shape without data), which ckptzip "
                "cannot store; materialise it first (e.g. module.to_empty(device='cpu'), then "
                "initialise or load its values)"
            )
        try:
            dtype_name(x.dtype)
        except UnsupportedValueError as exc:
            raise UnsupportedValueError(f"tensor at {where}: {exc}") from None
        if shape_numel(x.shape) is None:
            raise UnsupportedValueError(
                f"tensor at {where} has shape {list(x.shape)}, whose non-zero dims multiply "
                f"past {MAX_NUMEL}; a file cannot hold it"
            )
        # before anything reads its data: a storage freed under the tensor (FSDP frees
        # unsharded parameters' with resize_(0)) or none at all (FakeTensor) would be read
        # from wherever its pointer points
        ptr = _checked_storage(x, where)
        node: dict[str, Any] = {"$": "tensor"}  # completed once every member is known
        if isinstance(x, torch.nn.Parameter):
            node["param"] = True
        if x.requires_grad and x.is_leaf:  # a view of one is rebuilt from the storage: no flag
            node["grad"] = True
        x = x.detach()
        if x.is_conj() or x.is_neg():
            # a lazy conjugate / negative view: its storage holds other values than it shows,
            # so it is stored as the values it shows (its own entry, sharing nothing)
            x = x.resolve_conj().resolve_neg()
            ptr = x.untyped_storage().data_ptr() if x.numel() else 0
        if ptr:
            key = (str(x.device), ptr, x.dtype)
            group = by_storage.get(key)
            if group is None:
                group = by_storage[key] = new_group()
        else:  # nothing to share: empty tensors (and storages without data) stand alone
            group = new_group()
        group.members.append((path, x, node))
        return node

    def walk(x: Any, path: str, depth: int) -> Any:
        where = repr(path) if path else "the root"
        if depth > MAX_DEPTH:
            raise UnsupportedValueError(f"value at {where} is nested deeper than {MAX_DEPTH}")
        if isinstance(x, (np.bool_, np.integer, np.floating)):
            x = x.item()  # then stored as the Python scalar below
        if x is None or isinstance(x, (bool, str)):
            return bool(x) if isinstance(x, bool) else (x if x is None else str(x))
        if isinstance(x, int):
            if x.bit_length() > MAX_INT_BITS:
                raise UnsupportedValueError(
                    f"integer at {where} has {x.bit_length()} bits, more than the "
                    f"{MAX_INT_BITS} a file may hold (JSON readers refuse such numbers); "
                    "store it as a string"
                )
            return int(x)  # IntEnum and friends become plain ints
        if isinstance(x, float):
            if math.isfinite(x):
                return float(x)
            return {"$": "float", "v": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
        if isinstance(x, (torch.Tensor, np.ndarray)):
            # A path names an entry (the skeleton keeps the keys, typed): where two would be
            # equal (keys 1 and "1", or "a/b" beside {"a": {"b": ...}}) later ones get a suffix.
            path = _unique_path(path, seen_paths)
            seen_paths.add(path)
            if isinstance(x, torch.Tensor):
                return add_tensor(x, path, where)
            group = new_group()  # arrays are stored apart: NumPy views are not tracked
            node = {"$": "ndarray"}
            group.members.append((path, _from_ndarray(x, where), node))
            return node
        if isinstance(x, (dict, list, tuple)):
            if id(x) in active:
                raise UnsupportedValueError(f"value at {where} contains itself (a cycle)")
            active.add(id(x))
            try:
                if isinstance(x, dict):
                    # Counter alone keeps its type: its methods (elements, most_common) are
                    # what a restored MultiStepLR calls; other subclasses load as dict
                    tag = "counter" if isinstance(x, Counter) else "dict"
                    keys: list[str | int] = []
                    values = []
                    for k, v in x.items():
                        if isinstance(k, bool) or not isinstance(k, (str, int)):
                            raise UnsupportedValueError(
                                f"dict at {where} has key {k!r} of type {type(k).__name__}; "
                                "only str and int keys can be stored"
                            )
                        if isinstance(k, int) and k.bit_length() > MAX_INT_BITS:
                            raise UnsupportedValueError(
                                f"dict at {where} has an integer key of more than "
                                f"{MAX_INT_BITS} bits; store it as a string"
                            )
                        keys.append(k if isinstance(k, str) else int(k))
                        values.append(walk(v, join_path(path, k), depth + 1))
                    return {"$": tag, "k": keys, "v": values}
                items = [walk(v, join_path(path, i), depth + 1) for i, v in enumerate(x)]
                return {"$": "tuple" if isinstance(x, tuple) else "list", "v": items}
            finally:
                active.discard(id(x))
        raise UnsupportedValueError(
            f"value at {where} has type {type(x).__module__}.{type(x).__qualname__}, which "
            "ckptzip cannot store without pickle; convert it to tensors, numbers, strings, "
            "lists or dicts first"
        )

    try:
        skeleton = walk(obj, "", 0)
    finally:
        walk = spent  # a cycle through its own cell held every tensor's view (spent's doc)
    # entries are numbered in the order their first reference was met
    return skeleton, [_settle(g) for g in groups]


def _checked_storage(x: torch.Tensor, where: str) -> int:
    """The data pointer of ``x``'s storage (0 for an empty tensor), once it is known to hold
    every byte ``x`` reaches; :class:`UnsupportedValueError` otherwise."""
    if not x.numel():
        return 0  # nothing is read: an empty tensor over any storage is fine
    try:
        storage = x.untyped_storage()
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError) as exc:  # subclasses without storage
        raise UnsupportedValueError(
            f"tensor at {where} ({type(x).__name__}) has no storage ckptzip can read "
            f"({exc}); convert it to a plain dense tensor first"
        ) from None
    need = (x.storage_offset() + extent(x)) * x.element_size()
    if nbytes < need:
        raise UnsupportedValueError(
            f"tensor at {where} reaches {need} bytes of its storage but the storage holds "
            f"{nbytes} (it was freed or shrunk, as FSDP does to unsharded parameters between "
            "uses); save it while its data is there (e.g. FSDP's full or sharded state_dict)"
        )
    if not ptr:
        raise UnsupportedValueError(
            f"tensor at {where} ({type(x).__name__}) has no data (a fake or symbolic tensor "
            "holds a shape only); save a real tensor"
        )
    return ptr


def _unique_path(path: str, taken: set[str]) -> str:
    """``path``, or ``path#2``, ``path#3`` ... : the first one not in ``taken``.

    Examples
    --------
    >>> _unique_path("1", {"1", "1#2"})
    '1#3'
    """
    if path not in taken:
        return path
    n = 2
    while f"{path}#{n}" in taken:
        n += 1
    return f"{path}#{n}"


def _settle(g: _Group) -> tuple[str, torch.Tensor]:
    """Choose what a group stores and fill in its members' nodes; returns the entry."""
    first_path, first, first_node = g.members[0]
    if first_node["$"] == "ndarray" or len(g.members) == 1:
        first_node["i"] = g.entry
        return first_path, first
    starts = [x.storage_offset() for _, x, _ in g.members]
    lo = min(starts)
    hi = max(s + extent(x) for s, (_, x, _) in zip(starts, g.members, strict=True))
    # Prefer a member that is exactly the covered span (tied weights, a base and its views):
    # its path and shape are what a user recognises in reports and configs.
    base_path, base = first_path, first.as_strided((hi - lo,), (1,), lo)
    for p, x, _ in g.members:
        if x.storage_offset() == lo and x.is_contiguous() and x.numel() == hi - lo:
            base_path, base = p, x
            break
    for _, x, node in g.members:
        node["i"] = g.entry
        same = (
            x.shape == base.shape
            and x.stride() == base.stride()
            and x.storage_offset() == base.storage_offset()
        )
        if not same:
            node["$"] = "view"
            node["offset"] = x.storage_offset() - lo
            node["shape"] = list(x.shape)
            node["stride"] = list(x.stride())
    return base_path, base


def ndarray_entries(skeleton: Any) -> set[int]:
    """Indices of the entries a skeleton restores as NumPy arrays (stored exactly, on CPU).

    Examples
    --------
    >>> ndarray_entries(flatten({"t": torch.ones(1), "a": np.ones(2)})[0])
    {1}
    """
    out: set[int] = set()
    for node in _nodes(skeleton):
        if node.get("$") == "ndarray" and isinstance(node.get("i"), int):
            out.add(node["i"])
    return out


def reference_paths(skeleton: Any) -> dict[int, list[str]]:
    """Every path that references each entry, in structure order.

    Examples
    --------
    >>> w = torch.ones(2)
    >>> reference_paths(flatten({"wte": w, "head": {"w": w}, "row": w[1:]})[0])
    {0: ['wte', 'head/w', 'row']}
    """
    out: dict[int, list[str]] = {}
    for node, path in _referencing_nodes(skeleton):
        out.setdefault(node["i"], []).append(path)
    return out


def reference_views(
    skeleton: Any, leaves: Sequence[tuple[str, torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """The tensor each path of a :func:`flatten`-ed skeleton stands for, as a view of its
    entry in ``leaves``: an entry holds the span of storage all its paths reach, so a path
    that views part of it (a bias in a flat buffer, one moment of a stacked pair) is judged
    by its own elements, not the span's.

    Examples
    --------
    >>> w = torch.arange(6.0)
    >>> skeleton, leaves = flatten({"w": w, "tail": w[4:]})
    >>> {p: t.tolist() for p, t in reference_views(skeleton, leaves).items()}
    {'w': [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 'tail': [4.0, 5.0]}
    """
    out: dict[str, torch.Tensor] = {}
    for node, path in _referencing_nodes(skeleton):
        base = leaves[node["i"]][1]
        if node["$"] == "view":
            offset = base.storage_offset() + node["offset"]
            out[path] = base.as_strided(node["shape"], node["stride"], offset)
        else:
            out[path] = base
    return out


def _referencing_nodes(skeleton: Any) -> Iterator[tuple[dict[str, Any], str]]:
    """``(node, path)`` of every node that references an entry, in structure order."""
    stack: list[tuple[Any, str]] = [(skeleton, "")]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            continue
        tag, v = node.get("$"), node.get("v")
        if tag in ("tensor", "view", "ndarray") and isinstance(node.get("i"), int):
            yield node, path
        elif tag in ("dict", "counter") and isinstance(v, list) and isinstance(node.get("k"), list):
            stack.extend(
                (c, join_path(path, k)) for k, c in reversed(list(zip(node["k"], v, strict=False)))
            )
        elif tag in ("list", "tuple") and isinstance(v, list):
            stack.extend((c, join_path(path, i)) for i, c in reversed(list(enumerate(v))))


def skeleton_version(skeleton: Any) -> int:
    """The lowest format version whose nodes hold ``skeleton`` (1, 2 for shared storage and
    NumPy arrays, 5 for a ``Counter`` or a parameter / tensor that requires grad).

    Examples
    --------
    >>> w = torch.ones(2)
    >>> skeleton_version(flatten({"a": w})[0]), skeleton_version(flatten({"a": w, "b": w})[0])
    (1, 2)
    """
    seen: set[int] = set()
    version = 1
    for node in _nodes(skeleton):
        tag = node.get("$")
        if tag == "counter" or not _AUTOGRAD_KEYS.isdisjoint(node):
            return _LATEST
        if tag in ("view", "ndarray"):
            version = 2
        elif tag == "tensor":
            if node.get("i") in seen:
                version = 2
            seen.add(node.get("i"))  # type: ignore[arg-type]
    return version


def view_numels(skeleton: Any) -> Iterator[tuple[int, int]]:
    """``(entry, elements)`` of each view node of a skeleton :func:`unflatten` has checked.

    A view costs no memory as it comes back, but a copy of it (``.clone()``, ``.numpy()``)
    costs its elements, however few its entry holds (an ``expand()`` is stride 0): the read
    limit counts them.

    Examples
    --------
    >>> w = torch.ones(3)
    >>> list(view_numels(flatten({"w": w, "e": w.expand(4, 3)})[0]))
    [(0, 12)]
    """
    for node in _nodes(skeleton):
        if node.get("$") == "view":
            yield node["i"], shape_numel(node["shape"]) or 0


def _nodes(skeleton: Any) -> Iterator[dict[str, Any]]:
    """Every tagged node of a skeleton, depth first (iterative: no recursion limit)."""
    stack = [skeleton]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            v = node.get("v")
            if isinstance(v, list):
                stack.extend(reversed(v))
        elif isinstance(node, list):
            stack.extend(reversed(node))


@dataclass(frozen=True)
class StandIn:
    """A data-less leaf for :func:`unflatten` that checks a skeleton without decoding: views
    are bounds-checked against ``numel`` (cheaper than a ``meta`` tensor per entry)."""

    n: int
    dtype: torch.dtype
    is_meta: bool = True

    def numel(self) -> int:
        return self.n

    def storage_offset(self) -> int:
        return 0

    def as_strided(self, *args: Any) -> StandIn:
        return self

    def detach(self) -> StandIn:
        return self


def unflatten(skeleton: Any, leaves: Sequence[Any], *, version: int = _LATEST) -> Any:
    """Rebuild the object from a skeleton and its leaves (``leaves[i]`` for entry ``i``).

    The skeleton comes from a file, so every node is checked against ``version``'s rules
    (module docstring; by default the newest's); every leaf must be referenced. Leaves are
    the decoded tensors (contiguous), or :class:`StandIn` objects to check a skeleton without
    data.

    Raises
    ------
    CorruptCheckpointError
        A node is malformed, nested deeper than :data:`MAX_DEPTH`, a view reaches outside
        its entry or past int64 and :data:`MAX_NUMEL`, or the references do not match
        ``leaves`` as ``version`` requires.
    """
    uses = [0] * len(leaves)
    as_array = [False] * len(leaves)

    def bad(node: Any, why: str) -> CorruptCheckpointError:
        text = repr(node)
        return CorruptCheckpointError(
            f"malformed structure node {text[:80]}{'...' if len(text) > 80 else ''}: {why}"
        )

    def leaf(node: dict[str, Any], keys: set[str]) -> tuple[int, Any]:
        i = node.get("i")
        if node["$"] != "ndarray" and version >= _AUTOGRAD_FROM:
            keys = keys | (_AUTOGRAD_KEYS & set(node))  # optional, checked by autograd()
        if set(node) != keys or isinstance(i, bool) or not isinstance(i, int):
            raise bad(node, f"expected the keys {sorted(keys)} with an int 'i'")
        if not 0 <= i < len(leaves):
            raise bad(node, f"tensor reference {i} outside 0..{len(leaves) - 1}")
        if uses[i] and (version < 2 or as_array[i] or node["$"] == "ndarray"):
            raise bad(node, f"tensor {i} is referenced twice")
        uses[i] += 1
        return i, leaves[i]

    def view(node: dict[str, Any], base: Any) -> Any:
        offset, shape, stride = node["offset"], node["shape"], node["stride"]
        if (
            not isinstance(shape, list)
            or not isinstance(stride, list)
            or len(shape) > MAX_NDIM
            or len(shape) != len(stride)
            or not all(_is_count(n) for n in (*shape, *stride, offset))
        ):
            raise bad(
                node, "offset, shape and stride must be ints from 0 to 2**63-1, equally many dims"
            )
        numel = shape_numel(shape)
        if numel is None:
            raise bad(node, f"the view's non-zero dims make more than {MAX_NUMEL} elements")
        if base.storage_offset() + offset > _MAX_INT64:
            raise bad(node, "the view's offset is past int64")
        reach = offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
        if numel and reach >= base.numel():
            raise bad(node, f"the view reaches element {reach} of a {base.numel()}-element entry")
        return base.as_strided(shape, stride, base.storage_offset() + offset)

    def autograd(node: dict[str, Any], x: Any) -> Any:
        """``x`` as a new leaf over its storage, as the node's ``param`` / ``grad`` say."""
        param, grad = node.get("param"), node.get("grad")
        if param is None and grad is None:
            return x
        if (param is not None and param is not True) or (grad is not None and grad is not True):
            raise bad(node, "'param' and 'grad' are written only as true")
        if grad and not (x.dtype.is_floating_point or x.dtype.is_complex):
            raise bad(node, f"a {dtype_name(x.dtype)} tensor cannot require grad")
        if x.is_meta:  # a StandIn: nothing to make
            return x
        # a new tensor object, so views built from the same leaf stay plain
        x = x.detach()
        return torch.nn.Parameter(x, requires_grad=bool(grad)) if param else x.requires_grad_()

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
            i, x = leaf(node, {"$", "i"})
            # a second name of one entry is its own tensor object over the same storage,
            # as torch.load gives back tied weights
            return autograd(node, x if uses[i] == 1 else x.detach())
        if tag == "view" and version >= 2:
            _, x = leaf(node, {"$", "i", "offset", "shape", "stride"})
            return autograd(node, view(node, x))
        if tag == "ndarray" and version >= 2:
            i, x = leaf(node, {"$", "i"})
            as_array[i] = True
            if not _numpy_dtype_ok(x.dtype):
                raise bad(node, f"NumPy has no dtype for {dtype_name(x.dtype)}")
            return x if x.is_meta else x.cpu().numpy()
        if tag in ("list", "tuple"):
            if set(node) != {"$", "v"} or not isinstance(node["v"], list):
                raise bad(node, f"expected {{'$': {tag!r}, 'v': [...]}}")
            items = [build(v, depth + 1) for v in node["v"]]
            return tuple(items) if tag == "tuple" else items
        if tag == "dict" or (tag == "counter" and version >= _COUNTER_FROM):
            keys, values = node.get("k"), node.get("v")
            if (
                set(node) != {"$", "k", "v"}
                or not isinstance(keys, list)
                or not isinstance(values, list)
                or len(keys) != len(values)
            ):
                raise bad(node, f"expected {{'$': {tag!r}, 'k': [...], 'v': [...]}}, equally long")
            out: dict[str | int, Any] = Counter() if tag == "counter" else {}
            for k, v in zip(keys, values, strict=True):
                if isinstance(k, bool) or not isinstance(k, (str, int)):
                    raise bad(node, f"dict key {k!r} must be str or int")
                if k in out:
                    raise bad(node, f"duplicate dict key {k!r}")
                out[k] = build(v, depth + 1)
            return out
        raise bad(node, f"unknown node tag {tag!r} (format version {version})")

    try:
        obj = build(skeleton, 0)
    finally:
        build = spent  # a cycle through its own cell held the leaves (spent's doc)
    if not all(uses):
        missing = uses.index(0)
        raise CorruptCheckpointError(f"tensor {missing} is never referenced by the structure")
    if any(a and n > 1 for a, n in zip(as_array, uses, strict=True)):
        raise CorruptCheckpointError("an entry restored as a NumPy array is referenced twice")
    return obj


def _is_count(x: Any) -> bool:
    """An int a view's offset, dim or stride may be: from 0 to int64's largest."""
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _MAX_INT64
