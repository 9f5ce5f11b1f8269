"""The fast kernels: the compiled ``_native`` library through ctypes (which drops the GIL).

Each function takes what its reference twin takes and returns the same bits; inputs the C
code does not cover (CUDA tensors, float64 values) go to the reference, so callers never
check. Importing this module raises :class:`ImportError` where the library was not built, and
:class:`~ckptzip.errors.StaleKernelsError` (one) where it was built from other sources.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ckptzip import _pages
from ckptzip.errors import CorruptCheckpointError, StaleKernelsError
from ckptzip.kernels import _native  # type: ignore[attr-defined]  # built by setup.py
from ckptzip.kernels import _reference as ref

NAME = "fast"

_ABI_VERSION = 12

_lib = ctypes.CDLL(_native.__file__)
if _lib.ckz_abi_version() != _ABI_VERSION:  # a stale build next to newer Python code
    raise StaleKernelsError(
        f"ckptzip's compiled kernels have ABI {_lib.ckz_abi_version()}, this code needs "
        f"{_ABI_VERSION}: rebuild the package (pip install -e ckptzip)"
    )

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_I32 = ctypes.c_int32
_U32 = ctypes.c_uint32


def _fn(name: str, restype: Any, *argtypes: Any) -> Any:
    try:
        f = getattr(_lib, name)
    except AttributeError:  # built before this kernel existed, and the ABI was not bumped
        raise StaleKernelsError(
            f"ckptzip's compiled kernels lack {name}: a stale build next to newer Python code; "
            "rebuild the package (pip install -e ckptzip)"
        ) from None
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_sketch = _fn("ckz_sketch_codes", None, _P, _I64, _P, _I32, _P, _P)
_assign = _fn("ckz_assign_codes", None, _P, _P, _I64, _P, _I32, _P, _I32, _P, _I32, _P)
_nearest = _fn("ckz_nearest", None, _P, _I64, _P, _I32, _P)
_sqerr = _fn("ckz_squared_error", None, _P, _P, _I64, _P, _P, _I64, _P)
_reserr = _fn("ckz_residual_error", None, _P, _P, _I64, _P)
_pack = _fn("ckz_pack", _I32, _P, _I64, _I32, _P)
_unpack = _fn("ckz_unpack", None, _P, _I64, _I32, _P)
_gather = _fn("ckz_gather", None, _P, _I64, _P, _I32, _P)
_delta_enc = _fn("ckz_delta_encode", _I32, _P, _P, _I64, _I32, _I32, _P, _P)
_delta_dec = _fn("ckz_delta_decode", _I32, _P, _P, _I64, _I32, _I32, _P, _P)
_mrank = _fn("ckz_magnitude_rank", None, _P, _I64, _I32, _P)
_positions = _fn("ckz_positions", _I64, _P, _I64, _I32, _I32, _P)
_kmeans = _fn("ckz_kmeans", _I32, _P, _P, _I64, _I32, _I32, _P, _I32, _P)
_ans_counts = _fn("ckz_ans_counts", None, _P, _P, _I32, _I32, _P)
_ans_enc = _fn("ckz_ans_encode", _I64, _P, _P, _I32, _I32, _P, _P, _I64)
_ans_dec = _fn("ckz_ans_decode", _I32, _P, _I64, _P, _I32, _I32, _P, _P)
_ans_dec2 = _fn(
    "ckz_ans_decode2", _I32, _P, _I64, _P, _I32, _I32, _P, _P, _P, _I64, _P, _I32, _I32, _P, _P
)
_unpack_gather = _fn("ckz_unpack_gather", _I32, _P, _I64, _I32, _P, _I32, _P, _P)
_lanes_enc = _fn(
    "ckz_ans_lanes_encode", _I32, _P, _I64, _P, _I32, _I32, _P, _I64, _I32, _I64, _I64, _P, _I64, _P
)
_lanes_dec = _fn(
    "ckz_ans_lanes_decode", _I32, _P, _P, _I64, _P, _I32, _I32, _P, _I64, _I32, _I64, _I64, _P,
    _I32, _P, _P,
)  # fmt: skip
_wide_enc = _fn("ckz_wide_encode", _I32, _P, _I64, _P, _I32, _I64, _I64, _I64, _P, _I64, _P)
_wide_dec = _fn("ckz_wide_decode", _I32, _P, _P, _I64, _P, _I32, _I64, _I64, _I64, _P, _I32, _P, _P)
_wide_ctx_enc = _fn(
    "ckz_wide_ctx_encode", _I32, _P, _I64, _P, _I32, _P, _I32, _I64, _I64, _I64, _P, _I64, _P
)
_wide_ctx_dec = _fn(
    "ckz_wide_ctx_decode", _I32, _P, _P, _I64, _P, _I32, _P, _I32, _I64, _I64, _I64, _P
)
# the quantizer's fused passes
_F32 = ctypes.c_float
_key_scan = _fn("ckz_key_scan", _I32, _P, _I64, _P, _P, _I32, _P, _P, _P, _P)
_key_pack = _fn("ckz_key_pack", None, _P, _P, _P)
_log_fit = _fn("ckz_log_fit", _I32, _P, _I64, _P)
_F64 = ctypes.c_double
_fit_sums = _fn("ckz_fit_sums", None, _P, _P, _I64, _F64, _P, _I32, _F32, _I64, _F32, _I64, _P)
_members = _fn("ckz_members", None, _P, _I64, _P, _P, _I32, _P, _P, _P)
_assign_fused = _fn(
    "ckz_assign_fused", _I64, _P, _I64, _P, _I32, _P, _I32, _F32, _I64, _F32, _I64, _I32, _P,
    _P, _P, _I64, _P,
)  # fmt: skip


def _ptr(a: np.ndarray | torch.Tensor) -> int:
    return a.data_ptr() if isinstance(a, torch.Tensor) else a.ctypes.data


def _host_f32(*ts: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in ts)


def _contig(a: np.ndarray, dtype: Any) -> np.ndarray:
    """``a`` as a C-contiguous array of ``dtype`` whose address suits it: the C code reads a
    ``uint32_t *`` as one, and a word array viewed at an odd offset of a file's bytes (a chunk
    starts wherever the manifest before it ended) is copied first; reading a misaligned one is
    undefined behaviour in C (the compiler may vectorise assuming alignment)."""
    out = np.ascontiguousarray(a, dtype=dtype)
    return out if out.flags.aligned else out.copy()


# the passes the compiled code does not change stay NumPy/torch
KeyTable = ref.KeyTable
Assignment = ref.Assignment
blocks = ref.blocks
block_size = ref.block_size
bucket_extremes = ref.bucket_extremes
step_weights = ref.step_weights  # the fit weights as a tensor: off the save's path


def sketch_codes(
    work: torch.Tensor, thresholds: torch.Tensor, cap: int, *, histogram: bool = True
) -> tuple[torch.Tensor, np.ndarray | None]:
    if not _host_f32(work, thresholds):
        return ref.sketch_codes(work, thresholds, cap, histogram=histogram)
    w = work.contiguous()
    t = thresholds.contiguous()
    codes = torch.empty(w.numel(), dtype=torch.int32)
    counts = np.zeros(2 * cap + 1, dtype=np.int64)
    _sketch(_ptr(w), w.numel(), _ptr(t), cap, _ptr(codes), _ptr(counts))
    return codes, (counts if histogram else None)


# KeyTable hashes by identity (eq=False); sketch.key_table keeps at most 8 tables alive
@functools.lru_cache(maxsize=8)
def _packed_table(table: ref.KeyTable) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``ckz_key_pack``'s one-load form of ``table`` and ``ckz_log_fit``'s fit of its
    thresholds (``None`` where the fit is unusable), made once a table; ``None`` where the
    table has too many thresholds for the packed form."""
    if table.size >= 1 << 15:
        return None
    pk = np.empty(table.prefix.size, dtype=np.int32)
    _key_pack(_ptr(table.prefix), _ptr(table.thresholds), _ptr(pk))
    fit = np.zeros(5, dtype=np.float64)
    ok = _log_fit(_ptr(table.thresholds), table.size, _ptr(fit))
    return pk, (fit if ok else None)


def key_scan(work: torch.Tensor, table: ref.KeyTable) -> tuple[np.ndarray, float, float, bool]:
    if not _host_f32(work):
        return ref.key_scan(work, table)
    w = work.contiguous()
    size = table.size
    hist = np.zeros((2, size + 1), dtype=np.int64)
    bounds = np.zeros(2, dtype=np.float32)
    packed = _packed_table(table)
    pk, fit = (None, None) if packed is None else packed
    bad = _key_scan(
        _ptr(w), w.numel(), _ptr(table.prefix), _ptr(table.thresholds), size,
        None if pk is None else _ptr(pk), None if fit is None else _ptr(fit), _ptr(hist),
        _ptr(bounds),
    )  # fmt: skip
    if bad or w.numel() == 0:
        return hist, math.nan, math.nan, not bad
    return hist, float(bounds[0]), float(bounds[1]), True


def members(work: torch.Tensor, ranges: list[tuple[float, float]]) -> list[torch.Tensor]:
    if not ranges:
        return []
    if not _host_f32(work) or len(ranges) > 2:
        return ref.members(work, ranges)
    w = work.contiguous()
    n = w.numel()
    lo = np.array([r[0] for r in ranges], dtype=np.float32)
    hi = np.array([r[1] for r in ranges], dtype=np.float32)
    if not (
        np.array_equal(lo, [r[0] for r in ranges]) and np.array_equal(hi, [r[1] for r in ranges])
    ):
        return ref.members(work, ranges)  # bounds that are not float32 values
    outs = [np.empty(n + 1, dtype=np.int64) for _ in range(2)]
    found = np.zeros(2, dtype=np.int64)
    _members(_ptr(w), n, _ptr(lo), _ptr(hi), len(ranges), _ptr(outs[0]), _ptr(outs[1]), _ptr(found))
    return [torch.from_numpy(outs[r][: found[r]].copy()) for r in range(len(ranges))]


def assign_fused(
    v: torch.Tensor, plan: ref.Assignment
) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    pt, pp = plan.protect
    qt, qp, qidx = plan.prune
    # float32 inputs whose rules are float32 values; anything else is the reference's
    if not _host_f32(v, plan.cuts) or np.float32(pt) != pt or np.float32(qt) != qt:
        return ref.assign_fused(v, plan)
    x = v.contiguous()
    n = x.numel()
    cuts = plan.cuts.contiguous()
    o2i = _contig(plan.o2i, np.uint8)
    levels = np.zeros(256, dtype=np.float32)
    levels[: plan.values.numel()] = plan.values.to(torch.float32).cpu().numpy()
    out = torch.empty(n, dtype=torch.uint8)
    max_prot = plan.n_protected
    prot = np.empty(max_prot + 1, dtype=np.int64)
    err = np.zeros(2, dtype=np.float64)
    k = _assign_fused(
        _ptr(x), n, _ptr(cuts), cuts.numel(), _ptr(o2i), plan.zero_fix, pt, pp, qt, qp, qidx,
        _ptr(levels), _ptr(out), _ptr(prot), max_prot, _ptr(err),
    )  # fmt: skip
    if k == -2:
        raise MemoryError("assignment table")
    if k < 0:  # the caller's count from the sketch was wrong: a bug, not bad input
        raise RuntimeError(f"more than the {max_prot} protected positions counted")
    return out, torch.from_numpy(prot[:k].copy()), float(err[0]), float(err[1])


def fit_sums(
    work: torch.Tensor,
    second: torch.Tensor,
    eps: float,
    thresholds: torch.Tensor,
    cap: int,
    protect: tuple[float, int],
    prune: tuple[float, int],
) -> np.ndarray:
    (pt, pp), (qt, qp) = protect, prune
    # float32 inputs whose rules are float32 values; anything else is the reference's
    if (
        not _host_f32(work, second, thresholds)
        or second.numel() != work.numel()
        or np.float32(pt) != pt
        or np.float32(qt) != qt
    ):
        return ref.fit_sums(work, second, eps, thresholds, cap, protect, prune)
    x = work.contiguous()
    v = second.reshape(-1).contiguous()
    t = thresholds.contiguous()
    sums = np.zeros(2 * cap + 1, dtype=np.float64)
    _fit_sums(_ptr(x), _ptr(v), x.numel(), eps, _ptr(t), cap, pt, pp, qt, qp, _ptr(sums))
    return sums


def magnitude_rank(codes: torch.Tensor, cap: int) -> torch.Tensor:
    if codes.device.type != "cpu" or codes.dtype != torch.int32:
        return ref.magnitude_rank(codes, cap)
    c = codes.contiguous()
    out = torch.empty(c.numel(), dtype=torch.int32)
    _mrank(_ptr(c), c.numel(), cap, _ptr(out))
    return out


def positions(x: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    if x.device.type != "cpu" or x.dtype != torch.int32 or hi >= 1 << 31:
        return ref.positions(x, lo, min(hi, (1 << 31) - 1))
    c = x.contiguous()
    out = np.empty(c.numel() + 1, dtype=np.int64)  # the branch-free loop writes one past
    k = _positions(_ptr(c), c.numel(), lo, hi, _ptr(out))
    return torch.from_numpy(out[:k].copy())


def assign_codes(
    codes: torch.Tensor,
    v: torch.Tensor,
    lut: np.ndarray,
    sentinel: int,
    cuts: torch.Tensor,
    o2i: np.ndarray,
    zero_fix: int,
) -> torch.Tensor:
    if not _host_f32(v, cuts) or codes.device.type != "cpu":
        return ref.assign_codes(codes, v, lut, sentinel, cuts, o2i, zero_fix)
    c = codes.contiguous()
    x = v.contiguous()
    cu = cuts.contiguous()
    lut16 = _contig(lut, np.int16)
    o2i8 = _contig(o2i, np.uint8)
    out = torch.empty(x.numel(), dtype=torch.uint8)
    _assign(
        _ptr(c), _ptr(x), x.numel(), _ptr(lut16), sentinel, _ptr(cu), cu.numel(), _ptr(o2i8),
        zero_fix, _ptr(out),
    )  # fmt: skip
    return out


def nearest(v: torch.Tensor, mids: torch.Tensor) -> torch.Tensor:
    if not _host_f32(v, mids):
        return ref.nearest(v, mids)
    x, m = v.contiguous(), mids.contiguous()
    out = torch.empty(x.numel(), dtype=torch.uint8)
    _nearest(_ptr(x), x.numel(), _ptr(m), m.numel(), _ptr(out))
    return out


def squared_error(
    v: torch.Tensor, indices: torch.Tensor, levels: torch.Tensor, protected: torch.Tensor
) -> tuple[float, float]:
    if not _host_f32(v) or indices.device.type != "cpu":
        return ref.squared_error(v, indices, levels, protected)
    x = v.contiguous()
    idx = indices.contiguous()
    lv = levels.to(torch.float32).contiguous()
    prot = protected.to(torch.int64).contiguous()
    out = np.zeros(2, dtype=np.float64)
    _sqerr(_ptr(x), _ptr(idx), x.numel(), _ptr(lv), _ptr(prot), prot.numel(), _ptr(out))
    return float(out[0]), float(out[1])


_round = _fn("ckz_round_stochastic", None, _P, _I64, _P, _I32, _P, _I64, _U32, _P)


def round_stochastic(
    v: torch.Tensor, indices: torch.Tensor, levels: torch.Tensor, protected: torch.Tensor, seed: int
) -> torch.Tensor:
    if not _host_f32(v) or indices.device.type != "cpu" or levels.dtype != torch.float32:
        return ref.round_stochastic(v, indices, levels, protected, seed)
    x = v.contiguous()
    out = indices.to(torch.uint8, memory_format=torch.contiguous_format, copy=True)
    lv = levels.contiguous()
    prot = protected.to(torch.int64).contiguous()
    _round(_ptr(x), x.numel(), _ptr(lv), lv.numel(), _ptr(prot), prot.numel(), seed, _ptr(out))
    return out


def residual_error(x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    if not _host_f32(x, y) or x.numel() != y.numel():
        return ref.residual_error(x, y)
    a, b = x.contiguous(), y.contiguous()
    out = np.zeros(2, dtype=np.float64)
    _reserr(_ptr(a), _ptr(b), a.numel(), _ptr(out))
    return float(out[0]), float(out[1])


def kmeans(
    pts: np.ndarray, w: np.ndarray, k: int, n_init: int, rng: np.random.Generator, max_iter: int
) -> np.ndarray:
    p, ww = _contig(pts, np.float64), _contig(w, np.float64)
    # the draws the reference makes, k of n_init each, in its order
    draws = rng.random(k * n_init)
    c = np.empty((n_init, k), dtype=np.float64)
    if _kmeans(_ptr(p), _ptr(ww), p.size, k, n_init, _ptr(draws), max_iter, _ptr(c)):
        raise MemoryError("k-means scratch space")
    return c


def gather(levels: torch.Tensor, idx: np.ndarray) -> torch.Tensor:
    size = levels.element_size()
    if levels.device.type != "cpu" or size not in (2, 4, 8):
        return ref.gather(levels, idx)
    table = _table256(levels)
    flat = _contig(idx, np.uint8)
    out = _pages.empty(flat.size, levels.dtype)  # a load's output: see ckptzip._pages
    _gather(_ptr(flat), flat.size, _ptr(table), size, _ptr(out))
    return out


def pack(flat: np.ndarray, bits: int, nbytes: int) -> bytes:
    out = np.zeros(nbytes, dtype=np.uint8)
    f = _contig(flat, np.uint8)
    _pack(_ptr(f), f.size, bits, _ptr(out))
    return out.tobytes()


def unpack(raw: np.ndarray, bits: int, n: int) -> np.ndarray:
    r = _contig(raw, np.uint8)
    out = np.empty(n, dtype=np.uint8)
    _unpack(_ptr(r), n, bits, _ptr(out))
    return out


def delta_encode(
    prev: np.ndarray, now: np.ndarray, bins: int, rearrange: bool
) -> tuple[np.ndarray, list[int]]:
    p, q = _contig(prev, np.uint8), _contig(now, np.uint8)
    out = np.empty(p.size, dtype=np.uint8)
    groups = np.zeros(256, dtype=np.int64)
    _delta_enc(_ptr(p), _ptr(q), p.size, bins, int(rearrange), _ptr(out), _ptr(groups))
    return out, groups[:bins].tolist()


def delta_decode(
    prev: np.ndarray,
    symbols: np.ndarray,
    bins: int,
    rearrange: bool,
    groups: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    p, s = _contig(prev, np.uint8), _contig(symbols, np.uint8)
    out = _output(out, p.size)
    known = None
    if rearrange and groups is not None:
        known = _contig(groups, np.int64)
        if known.size != 256:
            raise ValueError(f"groups holds {known.size} counts, not 256")
    bad = _delta_dec(
        _ptr(p), _ptr(s), p.size, bins, int(rearrange), None if known is None else _ptr(known),
        _ptr(out),
    )  # fmt: skip
    if bad:
        raise CorruptCheckpointError(f"delta payload holds a difference >= bins={bins}")
    return out


def _output(out: np.ndarray | None, n: int) -> np.ndarray:
    """``out`` where it can take ``n`` indices in place (``prev`` itself may be it: each
    position is read before it is written), else a new array."""
    ok = (
        out is not None
        and out.dtype == np.uint8
        and out.size == n
        and out.flags.c_contiguous
        and out.flags.writeable
    )
    return out.reshape(-1) if ok else np.empty(n, dtype=np.uint8)  # type: ignore[union-attr]


def ans_encode(
    symbols: np.ndarray, bounds: np.ndarray, alphabet: int
) -> tuple[np.ndarray, np.ndarray]:
    s = _contig(symbols, np.uint8)
    b = _contig(bounds, np.int64)
    contexts = b.size - 1
    counts = np.zeros((contexts, alphabet), dtype=np.uint32)
    _ans_counts(_ptr(s), _ptr(b), contexts, alphabet, _ptr(counts))
    # a symbol costs at most PRECISION = 24 bits, plus the two words of the final state
    capacity = (3 * s.size) // 4 + 4
    words = np.empty(capacity, dtype=np.uint32)
    nw = _ans_enc(_ptr(s), _ptr(b), contexts, alphabet, _ptr(counts), _ptr(words), capacity)
    if nw < 0:  # cannot happen: the bound above holds for every model
        raise RuntimeError("ANS output exceeded its bound")
    return counts, words[:nw].copy()


def ans_decode(words: np.ndarray, bounds: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
    w = _contig(words, np.uint32)
    b = _contig(bounds, np.int64)
    c = _contig(counts, np.uint32)
    out = np.empty(n, dtype=np.uint8)
    _ans_status(_ans_dec(_ptr(w), w.size, _ptr(b), b.size - 1, c.shape[1], _ptr(c), _ptr(out)))
    return out


def _ans_status(status: int) -> None:
    if status == 2:
        raise CorruptCheckpointError(
            "ans payload does not decode: Invalid compressed data: ANS compressed data never "
            "ends in a zero word."
        )
    if status:
        raise CorruptCheckpointError("ans payload has coded data left after the last symbol")


def ans_decode_pair(
    first: tuple[np.ndarray, np.ndarray, np.ndarray, int],
    second: tuple[np.ndarray, np.ndarray, np.ndarray, int],
) -> tuple[np.ndarray, np.ndarray]:
    args: list[Any] = []
    outs = []
    keep = []  # the contiguous copies must outlive the call
    for words, bounds, counts, n in (first, second):
        w, b, c = _contig(words, np.uint32), _contig(bounds, np.int64), _contig(counts, np.uint32)
        out = np.empty(n, dtype=np.uint8)
        keep += [w, b, c]
        outs.append(out)
        args += [_ptr(w), w.size, _ptr(b), b.size - 1, c.shape[1], _ptr(c), _ptr(out)]
    status = _ans_dec2(*args)
    if status < 0:
        raise MemoryError("ckz_ans_decode2 could not allocate its two decoders")
    _ans_status(status & 3)  # the first stream's error first, as two calls in turn report
    _ans_status(status >> 2)
    return outs[0], outs[1]


def ans_counts(symbols: np.ndarray, bounds: np.ndarray, alphabet: int) -> np.ndarray:
    s = _contig(symbols, np.uint8)
    b = _contig(bounds, np.int64)
    counts = np.zeros((b.size - 1, alphabet), dtype=np.uint32)
    _ans_counts(_ptr(s), _ptr(b), b.size - 1, alphabet, _ptr(counts))
    return counts


def ans_lanes_encode(
    symbols: np.ndarray,
    bounds: np.ndarray,
    counts: np.ndarray,
    block: int,
    lanes: int,
    threads: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    s = _contig(symbols, np.uint8)
    b = _contig(bounds, np.int64)
    c = _contig(counts, np.uint32)
    blocks = -(-s.size // block)
    # a symbol costs at most PRECISION = 24 bits, plus the two words of the final state
    cap = (3 * -(-block // lanes)) // 4 + 4
    scratch = np.empty(blocks * lanes * cap, dtype=np.uint32)
    lengths = np.zeros(blocks * lanes, dtype=np.int64)

    def run(lo: int, hi: int) -> int:
        return int(
            _lanes_enc(
                _ptr(s), s.size, _ptr(b), b.size - 1, c.shape[1], _ptr(c), block, lanes, lo, hi,
                _ptr(scratch), cap, _ptr(lengths),
            )
        )  # fmt: skip

    if any(ref.over_blocks(run, blocks, threads)):  # cannot happen: the bound above holds
        raise RuntimeError("ANS output exceeded its bound")
    rows = scratch.reshape(blocks * lanes, cap)
    # each lane's words are a prefix of its row: slices, not a mask over the whole scratch
    parts = [r[:k] for r, k in zip(rows, lengths.tolist(), strict=True)]
    return lengths, np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)


def ans_lanes_decode(
    words: np.ndarray,
    lengths: np.ndarray,
    bounds: np.ndarray,
    counts: np.ndarray,
    n: int,
    block: int,
    lanes: int,
    *,
    table: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    threads: int = 1,
    base: torch.Tensor | None = None,
) -> np.ndarray | None:
    if base is not None and not _adds(base, out):
        return ref.ans_lanes_decode(
            words, lengths, bounds, counts, n, block, lanes, table=table, out=out, base=base
        )
    w = _contig(words, np.uint32)
    starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    b = _contig(bounds, np.int64)
    c = _contig(counts, np.uint32)
    blocks = -(-n // block) if n else 0
    symbols, tab, size, dst = _decode_target(n, table, out)

    def run(lo: int, hi: int) -> int:
        return int(
            _lanes_dec(
                _ptr(w), _ptr(starts), n, _ptr(b), b.size - 1, c.shape[1], _ptr(c), block, lanes,
                lo, hi, None if tab is None else _ptr(tab), size,
                None if base is None else _ptr(base), dst,
            )
        )  # fmt: skip

    status = max(ref.over_blocks(run, blocks, threads), default=0)
    if status == 2:
        raise CorruptCheckpointError("ans payload: a lane's words end in a zero word")
    if status:
        raise CorruptCheckpointError("ans payload has coded data left after the last symbol")
    return symbols


def ans_wide_encode(
    symbols: np.ndarray, counts: np.ndarray, block: int, threads: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    s = _contig(symbols, np.uint8)
    c = _contig(counts, np.uint32).reshape(-1)

    def run(lo: int, hi: int, scratch: np.ndarray, cap: int, lengths: np.ndarray) -> int:
        return int(
            _wide_enc(
                _ptr(s), s.size, _ptr(c), c.size, block, lo, hi, _ptr(scratch), cap,
                _ptr(lengths),
            )
        )  # fmt: skip

    lengths, words, status = _wide_blocks_encode(s.size, block, threads, run)
    if any(status):
        raise ValueError(f"ans-wide: block={block} must be a positive multiple of 32")
    return lengths, words


def _wide_blocks_encode(
    n: int, block: int, threads: int, run: Callable[[int, int, np.ndarray, int, np.ndarray], int]
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The wide-lane encoders' blocks: ``run(lo, hi, scratch, cap, lengths)`` codes blocks
    [lo, hi) into rows of ``cap`` words of ``scratch`` (their word counts into ``lengths``),
    on ``threads``; then the blocks' words, one after another, and each range's status."""
    blocks = -(-n // block)
    cap = min(block, n) + 2 * ref.WIDE_LANES  # a symbol pushes at most one word
    scratch = np.empty(blocks * cap, dtype=np.uint16)
    lengths = np.zeros(blocks, dtype=np.int64)
    status = ref.over_blocks(lambda lo, hi: run(lo, hi, scratch, cap, lengths), blocks, threads)
    rows = scratch.reshape(blocks, cap)
    parts = [r[:k] for r, k in zip(rows, lengths.tolist(), strict=True) if k]
    words = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)
    return lengths, words, status


def ans_wide_decode(
    words: np.ndarray,
    lengths: np.ndarray,
    counts: np.ndarray,
    n: int,
    block: int,
    *,
    table: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    threads: int = 1,
    base: torch.Tensor | None = None,
) -> np.ndarray | None:
    if base is not None and not _adds(base, out):
        return ref.ans_wide_decode(
            words, lengths, counts, n, block, table=table, out=out, base=base
        )
    w = _contig(words, np.uint16)
    starts = ref.wide_starts(w, lengths, n, block, "ans-wide")
    c = _contig(counts, np.uint32).reshape(-1)
    blocks = starts.size - 1
    symbols, tab, size, dst = _decode_target(n, table, out)

    def run(lo: int, hi: int) -> int:
        return int(
            _wide_dec(
                _ptr(w), _ptr(starts), n, _ptr(c), c.size, block, lo, hi,
                None if tab is None else _ptr(tab), size,
                None if base is None else _ptr(base), dst,
            )
        )  # fmt: skip

    status = ref.over_blocks(run, blocks, threads)
    if any(s < 0 for s in status):
        raise MemoryError("ckz_wide_decode could not allocate its model")
    if any(status):
        raise CorruptCheckpointError(ref.wide_bad("ans-wide"))
    return symbols


def ans_wide_ctx_encode(
    symbols: np.ndarray, bounds: np.ndarray, counts: np.ndarray, block: int, threads: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    s = _contig(symbols, np.uint8)
    b = _contig(bounds, np.int64)
    c = _contig(counts, np.uint32)
    ref.check_contexts(s.size, b, c, block, ValueError)

    def run(lo: int, hi: int, scratch: np.ndarray, cap: int, lengths: np.ndarray) -> int:
        return int(
            _wide_ctx_enc(
                _ptr(s), s.size, _ptr(b), b.size - 1, _ptr(c), c.shape[1], block, lo, hi,
                _ptr(scratch), cap, _ptr(lengths),
            )
        )  # fmt: skip

    lengths, words, status = _wide_blocks_encode(s.size, block, threads, run)
    if any(k == -2 for k in status):
        raise MemoryError("ckz_wide_ctx_encode could not allocate its models")
    if any(status):
        raise ValueError("ans-wide-ctx: arguments out of range")
    return lengths, words


def ans_wide_ctx_decode(
    words: np.ndarray,
    lengths: np.ndarray,
    bounds: np.ndarray,
    counts: np.ndarray,
    n: int,
    block: int,
    threads: int = 1,
) -> np.ndarray:
    w = _contig(words, np.uint16)
    b = _contig(bounds, np.int64)
    c = _contig(counts, np.uint32)
    ref.check_contexts(n, b, c, block, CorruptCheckpointError)
    starts = ref.wide_starts(w, lengths, n, block, "ans-wide-ctx")
    symbols = np.empty(n, dtype=np.uint8)

    def run(lo: int, hi: int) -> int:
        return int(
            _wide_ctx_dec(
                _ptr(w), _ptr(starts), n, _ptr(b), b.size - 1, _ptr(c), c.shape[1], block,
                lo, hi, _ptr(symbols),
            )
        )  # fmt: skip

    status = ref.over_blocks(run, starts.size - 1, threads)
    if any(k == -2 for k in status):
        raise MemoryError("ckz_wide_ctx_decode could not allocate its models")
    if any(status):
        raise CorruptCheckpointError(ref.WIDE_CTX_BAD)
    return symbols


def _decode_target(
    n: int, table: torch.Tensor | None, out: torch.Tensor | None
) -> tuple[np.ndarray | None, torch.Tensor | None, int, int]:
    """Where an ANS decoder writes: ``(symbols, table, size, dst)``, a new uint8 array of
    ``n`` symbols (table ``None``, size 1) unless ``table`` and ``out`` are given, then the
    table padded to 256 entries and ``out``'s element size (symbols ``None``)."""
    if table is None or out is None:
        symbols = np.empty(n, dtype=np.uint8)
        return symbols, None, 1, _ptr(symbols)
    return None, _table256(table), out.element_size(), _ptr(out)


def _table256(table: torch.Tensor) -> torch.Tensor:
    """``table`` padded to 256 entries: any byte indexes it (itself where it has them)."""
    if table.numel() == 256 and table.is_contiguous():
        return table
    padded = torch.zeros(256, dtype=table.dtype)
    padded[: table.numel()] = table
    return padded


def _adds(base: torch.Tensor, out: torch.Tensor | None) -> bool:
    """Whether the compiled ``out = base + table[index]`` covers these tensors: the same
    float32 or float64 dtype and size, on the CPU, contiguous."""
    return (
        out is not None
        and base.dtype == out.dtype
        and base.dtype in (torch.float32, torch.float64)
        and base.device.type == "cpu"
        and out.device.type == "cpu"
        and base.numel() == out.numel()
        and base.is_contiguous()
        and out.is_contiguous()
    )


def unpack_gather(
    raw: np.ndarray,
    bits: int,
    table: torch.Tensor,
    out: torch.Tensor,
    base: torch.Tensor | None = None,
) -> int:
    if (
        out.element_size() not in (2, 4, 8)
        or out.device.type != "cpu"
        or (base is not None and not _adds(base, out))
    ):
        return ref.unpack_gather(raw, bits, table, out, base)
    r = _contig(raw, np.uint8)
    tab = _table256(table)
    b = None if base is None else _ptr(base)
    return int(
        _unpack_gather(_ptr(r), out.numel(), bits, _ptr(tab), out.element_size(), b, _ptr(out))
    )


_rle_split = _fn("ckz_rle_split", _I64, _P, _P, _I32, _P, _P, _P, _P, _P, _P, _P)
_rle_join = _fn("ckz_rle_join", _I32, _P, _I64, _P, _I64, _P, _I64, _P, _I32, _P, _P, _P)
_bin_counts = _fn("ckz_bin_counts", None, _P, _I64, _P)


def rle_split(
    symbols: np.ndarray, bounds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    s = _contig(symbols, np.uint8)
    b = _contig(bounds, np.int64)
    groups = b.size - 1
    tokens = np.empty(s.size + groups, dtype=np.uint8)
    values = np.empty(s.size, dtype=np.uint8)
    nonzero = np.empty(groups, dtype=np.int64)
    base = np.empty(groups, dtype=np.uint8)
    extra = np.zeros(s.size // 32 + 16, dtype=np.uint8)
    counts = np.zeros(2, dtype=np.int64)  # values, extra bits
    nt = _rle_split(
        _ptr(s), _ptr(b), groups, _ptr(tokens), _ptr(values), _ptr(nonzero), _ptr(base),
        _ptr(extra), _ptr(counts), _ptr(counts[1:]),
    )  # fmt: skip
    bits = int(counts[1])
    return (
        tokens[:nt].copy(), values[: counts[0]].copy(), nonzero, base,
        extra[: (bits + 7) // 8].copy(), bits,
    )  # fmt: skip


_zero_runs = _fn("ckz_zero_runs_decode", _I32, _P, _I64, _I64, _I64, _P, _P)
_zero_runs_enc = _fn("ckz_zero_runs_encode", _I64, _P, _I64, _P, _P, _P)


def zero_runs_encode(symbols: np.ndarray) -> tuple[np.ndarray, int]:
    s = _contig(symbols, np.uint8).reshape(-1)
    runs = np.empty(s.size + s.size // 255 + 1, dtype=np.uint8)
    values = np.empty(s.size, dtype=np.uint8)
    n_runs = np.zeros(1, dtype=np.int64)
    nonzero = int(_zero_runs_enc(_ptr(s), s.size, _ptr(runs), _ptr(values), _ptr(n_runs)))
    return np.concatenate([runs[: int(n_runs[0])], values[:nonzero]]), nonzero


def zero_runs_decode(data: np.ndarray, n: int, nonzero: int) -> np.ndarray:
    raw = _contig(data, np.uint8)
    ref.check_zero_runs(raw.size, n, nonzero)
    out = np.empty(n, dtype=np.uint8)
    last = np.zeros(1, dtype=np.int64)
    status = _zero_runs(_ptr(raw), raw.size, nonzero, n, _ptr(out), _ptr(last))
    if status == 1:
        raise CorruptCheckpointError("run-length payload is inconsistent with its metadata")
    if status == 2:
        raise CorruptCheckpointError(
            f"run-length payload places a symbol at {int(last[0])} past the end ({n})"
        )
    return out


def rle_join(
    tokens: np.ndarray,
    values: np.ndarray,
    extra: np.ndarray,
    extra_bits: int,
    bounds: np.ndarray,
    nonzero: np.ndarray,
    base: np.ndarray,
) -> np.ndarray:
    t, v, e = _contig(tokens, np.uint8), _contig(values, np.uint8), _contig(extra, np.uint8)
    b, nz, bs = _contig(bounds, np.int64), _contig(nonzero, np.int64), _contig(base, np.uint8)
    if extra_bits > 8 * e.size or nz.size != b.size - 1 or bs.size != nz.size:
        raise CorruptCheckpointError("rle+ans payload is inconsistent with its metadata")
    out = np.empty(int(b[-1]), dtype=np.uint8)
    if _rle_join(
        _ptr(t), t.size, _ptr(v), v.size, _ptr(e), extra_bits, _ptr(b), nz.size, _ptr(nz),
        _ptr(bs), _ptr(out),
    ):  # fmt: skip
        raise CorruptCheckpointError("rle+ans payload is inconsistent with its metadata")
    return out


def bin_counts(prev: np.ndarray) -> np.ndarray:
    p = _contig(prev, np.uint8)
    out = np.empty(256, dtype=np.int64)
    _bin_counts(_ptr(p), p.size, _ptr(out))
    return out


_requantize = _fn(
    "ckz_requantize", _I32, _P, _I64, _P, _P, _P, _I64, _P, _I32, _P, _I32, _P, _P, _P
)


def requantize(
    work: torch.Tensor,
    qidx: np.ndarray,
    own_zero: torch.Tensor,
    protected: torch.Tensor,
    mids: torch.Tensor,
    zero_at: int,
    values: torch.Tensor,
    o2i: np.ndarray | None = None,
) -> tuple[torch.Tensor, float, float] | None:
    if not _host_f32(work, mids) or own_zero.numel() > 256:
        return ref.requantize(work, qidx, own_zero, protected, mids, zero_at, values, o2i)
    table = None
    if o2i is not None:
        table = np.zeros(256, dtype=np.uint8)
        table[: o2i.size] = o2i
    x, m = work.contiguous(), mids.contiguous()
    q = _contig(qidx, np.uint8)
    own = np.zeros(256, dtype=np.uint8)
    own[: own_zero.numel()] = own_zero.cpu().numpy()
    prot = protected.to(torch.int64).contiguous()
    lv = values.to(torch.float32).contiguous()
    out = torch.empty(x.numel(), dtype=torch.uint8)
    sums = np.zeros(2, dtype=np.float64)
    if _requantize(
        _ptr(x), x.numel(), _ptr(q), _ptr(own), _ptr(prot), prot.numel(), _ptr(m), m.numel(),
        None if table is None else _ptr(table), zero_at, _ptr(lv), _ptr(out), _ptr(sums),
    ):  # fmt: skip
        return None
    return out, float(sums[0]), float(sums[1])
