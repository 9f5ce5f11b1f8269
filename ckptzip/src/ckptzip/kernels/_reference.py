"""The reference kernels: torch ops on the tensor's own device, NumPy on the host, constriction.

Each function here is the definition of what its fast twin in :mod:`ckptzip.kernels._fast`
must produce bit for bit; the signatures are documented once, in :mod:`ckptzip.kernels`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ckptzip.errors import CorruptCheckpointError

NAME = "reference"

BLOCK = 1 << 14
"""Elements per block of the element-wise passes, in a thread whose torch ops run inline.

Under torch's parallel grain (32768 elements), and a block's temporaries stay in cache: the
passes over a large tensor stop allocating (and page-faulting in) a fresh tensor-sized buffer
each (measured on a 9.4M-element tensor in an encoding thread: codes 2-3x faster than
whole-tensor ops).
"""


def block_size(x: torch.Tensor) -> int:
    """Block length for element-wise passes over ``x`` in the calling thread.

    :data:`BLOCK` where this thread runs torch's CPU ops on one core (the encoding threads of
    :mod:`ckptzip._parallel`); otherwise the whole tensor, one op each: torch then spreads
    each op over its threads, and small blocks would pay that team's start and stop per op
    (or, on an accelerator, a launch per op).
    """
    if x.device.type == "cpu" and torch.get_num_threads() == 1:
        return BLOCK
    return max(x.numel(), 1)


def blocks(n: int, x: torch.Tensor) -> list[tuple[int, int]]:
    """``(start, stop)`` of the consecutive blocks covering ``n`` elements of ``x``."""
    size = block_size(x)
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)]


# -- sketch ----------------------------------------------------------------------------------


_PREFIX_SHIFT = 16  # float32 bits of |x| above this: the exponent and 7 mantissa bits


def sketch_codes(
    work: torch.Tensor, thresholds: torch.Tensor, cap: int, *, histogram: bool = True
) -> tuple[torch.Tensor, np.ndarray | None]:
    n = work.numel()
    codes = torch.empty(n, dtype=torch.int32, device=work.device)
    if work.dtype == torch.float32:
        # m = #{thresholds < |x|}: a table over the top bits of |x| gives a lower bound (the
        # count below the smallest float with those bits), then single steps up to the
        # exact count; with the default accuracy one step is the most a value needs
        lowest = (torch.arange(1 << (31 - _PREFIX_SHIFT), dtype=torch.int32) << _PREFIX_SHIFT).view(
            torch.float32
        )
        lut = torch.searchsorted(thresholds.cpu(), lowest, out_int32=True)
        # at most one threshold inside every slice of the float line: one step is exact
        one_step = bool((lut[1:] - lut[:-1]).max() <= 1)
        lut = lut.to(work.device)
        padded = torch.cat([thresholds, thresholds.new_full((1,), float("inf"))])
    for lo, hi in blocks(n, work):
        w = work[lo:hi]
        a = w.abs()
        if work.dtype == torch.float32:
            m = lut.index_select(0, a.view(torch.int32) >> _PREFIX_SHIFT)
            while True:
                step = padded.index_select(0, m) < a
                m += step
                if one_step or not bool(step.any()):
                    break
        else:
            m = torch.searchsorted(thresholds, a, out_int32=True)
        m = torch.maximum(m, (w != 0).to(torch.int32))
        codes[lo:hi] = torch.where(w < 0, cap - m, cap + m)
    if not histogram:
        return codes, None
    counts = torch.bincount(codes, minlength=2 * cap + 1).cpu().numpy().astype(np.int64)
    return codes, counts


def magnitude_rank(codes: torch.Tensor, cap: int) -> torch.Tensor:
    if codes.device.type != "cpu":
        return (codes - cap).abs_()
    rank = np.empty(codes.numel(), dtype=np.int32)
    cn = codes.numpy()
    for lo, hi in blocks(cn.size, codes):  # NumPy: integer ops faster than torch's here
        np.abs(np.subtract(cn[lo:hi], cap, out=rank[lo:hi]), out=rank[lo:hi])
    return torch.from_numpy(rank)


def positions(x: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    if x.device.type != "cpu":
        return ((x >= lo) & (x <= hi)).nonzero().squeeze(1)
    xn = x.numpy()
    parts = [np.flatnonzero((xn[a:b] >= lo) & (xn[a:b] <= hi)) + a for a, b in blocks(xn.size, x)]
    return torch.from_numpy(np.concatenate(parts) if parts else np.zeros(0, np.int64))


# -- the quantizer's fused passes ----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class KeyTable:
    """One table of float32 bucket thresholds for every key a float32 value can need.

    ``thresholds[i]`` is ``γ^(k_lo + i)`` rounded to float32 (ascending; ``thresholds[0]`` is
    ``0.0``), and a value's *key* is ``#{i : thresholds[i] < |x|}``: ``0`` for zero only.
    ``prefix`` is a derived acceleration, the same for both implementations: for each value
    of the top 15 bits of ``|x|`` (exponent and 7 mantissa bits), the key of the smallest
    float with those bits, or ``-key - 1`` where that slice of the float line holds more than
    one threshold (one comparison finishes a key everywhere else).
    """

    k_lo: int
    thresholds: torch.Tensor
    prefix: np.ndarray

    @classmethod
    def build(cls, k_lo: int, thresholds: torch.Tensor) -> KeyTable:
        t = thresholds.to(device="cpu", dtype=torch.float32).contiguous()
        if t.numel() == 0 or float(t[0]) != 0.0:
            raise ValueError("a key table starts with a threshold that is 0.0 in float32")
        lowest = (np.arange(1 << (31 - _PREFIX_SHIFT), dtype=np.uint32) << _PREFIX_SHIFT).view(
            np.float32
        )
        keys = np.searchsorted(t.numpy(), lowest, side="left").astype(np.int64)
        upper = np.append(keys[1:], t.numel())
        multi = upper - keys > 1
        prefix = np.where(multi, -keys - 1, keys).astype(np.int32)
        padded = torch.cat([t, torch.full((1,), math.inf)])
        return cls(k_lo, padded, prefix)

    @property
    def size(self) -> int:
        """Number of thresholds (keys run from 0 to ``size``)."""
        return self.thresholds.numel() - 1


def key_scan(work: torch.Tensor, table: KeyTable) -> tuple[np.ndarray, float, float, bool]:
    n = work.numel()
    size = table.size
    t = table.thresholds[:size].to(work.device)
    hist = torch.zeros((2, size + 1), dtype=torch.int64, device=work.device)
    finite = True
    for lo, hi in blocks(n, work):
        w = work[lo:hi]
        if not bool(torch.isfinite(w).all()):
            finite = False
            break
        key = torch.searchsorted(t, w.abs())
        neg = torch.signbit(w)
        hist[0] += torch.bincount(key[neg], minlength=size + 1)
        hist[1] += torch.bincount(key[~neg], minlength=size + 1)
    if not finite or n == 0:
        return hist.cpu().numpy(), math.nan, math.nan, finite
    lo_t, hi_t = torch.aminmax(work)
    return hist.cpu().numpy(), float(lo_t), float(hi_t), True


def members(work: torch.Tensor, ranges: list[tuple[float, float]]) -> list[torch.Tensor]:
    out: list[list[torch.Tensor]] = [[] for _ in ranges]
    for lo, hi in blocks(work.numel(), work):
        a = work[lo:hi].abs()
        for r, (low, high) in enumerate(ranges):
            out[r].append(((a > low) & (a <= high)).nonzero().squeeze(1) + lo)
    return [
        torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64, device=work.device)
        for parts in out
    ]


@dataclass(frozen=True, eq=False)
class Assignment:
    """What :func:`assign_fused` does to each value: its nearest level, protect and prune.

    Index ``o2i[#{cuts < x}]`` (``zero_fix`` for an exact zero when it is >= 0); protected
    where ``|x| > t`` or ``|x| == t`` at a position ``<= p`` (``protect = (t, p)``; exactly
    ``n_protected`` values, as the caller counted them from the sketch); pruned (when not
    protected) where ``|x| < t`` or ``|x| == t`` at a position ``<= p``
    (``prune = (t, p, index)``): the index given. ``values`` is what each level decodes to,
    in the tensor's dtype.
    """

    cuts: torch.Tensor
    o2i: np.ndarray
    zero_fix: int
    protect: tuple[float, int]
    n_protected: int
    prune: tuple[float, int, int]
    values: torch.Tensor


def assign_fused(
    v: torch.Tensor, plan: Assignment
) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    n = v.numel()
    device = v.device
    cuts = plan.cuts.to(device=device, dtype=v.dtype)
    o2i = torch.as_tensor(plan.o2i.astype(np.int64), device=device)
    lv = plan.values.to(device=device, dtype=v.dtype)
    pt, pp = plan.protect
    qt, qp, qidx = plan.prune
    indices = torch.empty(n, dtype=torch.uint8, device=device)
    protected: list[torch.Tensor] = []
    err = 0.0
    norm = 0.0
    for lo, hi in blocks(n, v):
        w = v[lo:hi]
        a = w.abs()
        pos = torch.arange(lo, hi, device=device)
        idx = o2i.index_select(0, torch.searchsorted(cuts, w))
        if plan.zero_fix >= 0:
            idx = torch.where(w == 0, plan.zero_fix, idx)
        prot = (a > pt) | ((a == pt) & (pos <= pp))
        pruned = ~prot & ((a < qt) | ((a == qt) & (pos <= qp)))
        idx = torch.where(pruned, qidx, idx)
        indices[lo:hi] = idx.to(torch.uint8)
        d = lv.index_select(0, idx).sub_(w).double()
        d.masked_fill_(prot, 0.0)
        err += float(d.square_().sum())
        norm += float(w.double().square().sum())
        protected.append(pos[prot])
    prot_all = (
        torch.cat(protected) if protected else torch.zeros(0, dtype=torch.int64, device=device)
    )
    return indices, prot_all, err, norm


def step_weights(second: torch.Tensor, eps: float) -> torch.Tensor:
    # in place on the one float64 copy: the same values as out-of-place ops, at a fifth of
    # the time (each fresh 8-byte-per-entry buffer costs its page faults)
    d = second.detach().to(torch.float64, copy=True).clamp_min_(0.0).sqrt_().add_(eps)
    return d.mul_(d).reciprocal_().to(torch.float32)


def fit_sums(
    work: torch.Tensor,
    second: torch.Tensor,
    eps: float,
    thresholds: torch.Tensor,
    cap: int,
    protect: tuple[float, int],
    prune: tuple[float, int],
) -> np.ndarray:
    n = work.numel()
    codes, _ = sketch_codes(work, thresholds, cap, histogram=False)
    w = step_weights(second.reshape(-1).to(work.device), eps).to(torch.float64)
    w = torch.nan_to_num(w, nan=0.0, posinf=0.0)
    (pt, pp), (qt, qp) = protect, prune
    a = work.abs()
    pos = torch.arange(n, device=work.device)
    taken = (a > pt) | ((a == pt) & (pos <= pp)) | (a < qt) | ((a == qt) & (pos <= qp))
    # the entries taken out weigh 0.0: adding it leaves every sum as it was, and one
    # bincount over all the entries adds in position order
    w.masked_fill_(taken, 0.0)
    return torch.bincount(codes, weights=w, minlength=2 * cap + 1).cpu().numpy()


# -- quantize ----------------------------------------------------------------------------------


def assign_codes(
    codes: torch.Tensor,
    v: torch.Tensor,
    lut: np.ndarray,
    sentinel: int,
    cuts: torch.Tensor,
    o2i: np.ndarray,
    zero_fix: int,
) -> torch.Tensor:
    device = v.device
    lut_dtype = torch.uint8 if sentinel < 256 else torch.int16
    idx_lut = torch.as_tensor(lut).to(device=device, dtype=lut_dtype)
    n = codes.numel()
    indices = torch.empty(n, dtype=lut_dtype, device=device)
    for lo, hi in blocks(n, codes):
        torch.index_select(idx_lut, 0, codes[lo:hi], out=indices[lo:hi])
    if (lut == sentinel).any():
        fix = positions(indices, sentinel, sentinel)
        if fix.numel():
            sub = v[fix]
            ords = torch.searchsorted(cuts, sub)
            fixed = torch.as_tensor(o2i.astype(np.int64), device=device).index_select(0, ords)
            if zero_fix >= 0:
                fixed = torch.where(sub == 0, zero_fix, fixed)
            indices[fix] = fixed.to(lut_dtype)
    return indices.to(torch.uint8)


def nearest(v: torch.Tensor, mids: torch.Tensor) -> torch.Tensor:
    out = torch.empty(v.numel(), dtype=torch.uint8, device=v.device)
    for lo, hi in blocks(v.numel(), v):
        out[lo:hi] = torch.searchsorted(mids, v[lo:hi], out_int32=True)
    return out


def squared_error(
    v: torch.Tensor, indices: torch.Tensor, levels: torch.Tensor, protected: torch.Tensor
) -> tuple[float, float]:
    err = 0.0
    norm = 0.0
    lv = levels.to(v.dtype)
    keep = torch.ones(v.numel(), dtype=torch.bool, device=v.device)
    if protected.numel():
        keep[protected] = False
    for lo, hi in blocks(v.numel(), v):
        w = v[lo:hi]
        d = lv.index_select(0, indices[lo:hi].to(torch.int32)).sub_(w).double()
        d.masked_fill_(~keep[lo:hi], 0.0)
        err += float(d.square_().sum())
        norm += float(w.double().square().sum())
    return err, norm


_M32 = 0xFFFFFFFF


def _mul32(a: torch.Tensor, c: int) -> torch.Tensor:
    """``a * c mod 2^32`` for int64 ``a`` in ``[0, 2^32)``, in halves so no product overflows."""
    return (a * (c & 0xFFFF) + (((a * (c >> 16)) & 0xFFFF) << 16)) & _M32


def _mix32(h: torch.Tensor) -> torch.Tensor:
    h = h ^ (h >> 16)
    h = _mul32(h, 0x7FEB352D)
    h = h ^ (h >> 15)
    h = _mul32(h, 0x846CA68B)
    return h ^ (h >> 16)


def round_stochastic(
    v: torch.Tensor, indices: torch.Tensor, levels: torch.Tensor, protected: torch.Tensor, seed: int
) -> torch.Tensor:
    out = indices.to(torch.uint8).clone()
    n_levels = levels.numel()
    lv = levels.to(device=v.device, dtype=torch.float32)
    keep = torch.ones(v.numel(), dtype=torch.bool, device=v.device)
    if protected.numel():
        keep[protected] = False
    for lo_, hi_ in blocks(v.numel(), v):
        x = v[lo_:hi_]
        k = indices[lo_:hi_].long()
        a_i = k - (x < lv[k]).long()
        ok = keep[lo_:hi_] & torch.isfinite(x) & (a_i >= 0) & (a_i + 1 < n_levels)
        a_c = torch.where(ok, a_i, torch.zeros_like(a_i))
        a = lv[a_c]
        b = lv[a_c + (1 if n_levels > 1 else 0)]
        i = torch.arange(lo_, hi_, dtype=torch.int64, device=v.device)
        h = _mix32((i & _M32) ^ (seed & _M32) ^ _mul32((i >> 32) & _M32, 0x9E3779B9))
        u = (h >> 8).to(torch.float32) * (1.0 / 16777216.0)  # exact: 24 bits, a power of 2
        up = (u * (b - a) < x - a).long()
        out[lo_:hi_] = torch.where(ok & (b > a), a_i + up, k).to(torch.uint8)
    return out


def residual_error(x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    a, b = x.reshape(-1), y.reshape(-1)
    finite = torch.isfinite(a)  # as in float64: widening keeps every value's class
    if not bool(finite.all()):  # masking costs a pass and a copy of each: only where it bites
        a, b = a[finite], b[finite]
    a, b = a.double(), b.double()
    return float((b - a).square().sum()), float(a.square().sum())


def bucket_extremes(
    codes: torch.Tensor, v: torch.Tensor, n_codes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    idx = codes.long()
    lo = torch.full((n_codes,), float("inf"), dtype=v.dtype, device=v.device)
    hi = torch.full((n_codes,), -float("inf"), dtype=v.dtype, device=v.device)
    lo.scatter_reduce_(0, idx, v, "amin")
    hi.scatter_reduce_(0, idx, v, "amax")
    return lo, hi


def gather(levels: torch.Tensor, idx: np.ndarray) -> torch.Tensor:
    return levels.index_select(0, torch.from_numpy(idx).to(levels.device).to(torch.int32))


def kmeans(
    pts: np.ndarray, w: np.ndarray, k: int, n_init: int, rng: np.random.Generator, max_iter: int
) -> np.ndarray:
    # All restarts advance together as rows of one array: the cost of a NumPy call, not the
    # size of these few thousand points, is what dominates here.
    return _lloyd_1d(pts, w, _kmeans_pp(pts, w, k, n_init, rng), max_iter)


def _kmeans_pp(
    pts: np.ndarray, w: np.ndarray, k: int, n_init: int, rng: np.random.Generator
) -> np.ndarray:
    """Weighted k-means++ seeding, ``n_init`` independent rows: centre ∝ w·D² draws."""
    centres = np.empty((n_init, k), dtype=np.float64)

    def draw(p: np.ndarray) -> np.ndarray:
        # inverse-CDF draw per row (p is (n_init, n)); rng.choice would loop over rows
        cdf = np.cumsum(p, axis=1)
        u = rng.random(n_init) * cdf[:, -1]
        return pts[np.minimum((cdf < u[:, None]).sum(axis=1), pts.size - 1)]

    centres[:, 0] = draw(np.broadcast_to(w, (n_init, pts.size)))
    d2 = (pts[None, :] - centres[:, :1]) ** 2
    for j in range(1, k):  # k draws, each vectorised over points and restarts
        p = w * d2
        # a row whose points are all taken (D² = 0 everywhere) repeats a centre; np.unique
        # later merges it
        p[p.sum(axis=1) <= 0] = w
        centres[:, j] = draw(p)
        np.minimum(d2, (pts[None, :] - centres[:, j : j + 1]) ** 2, out=d2)
    return np.sort(centres, axis=1)


def _lloyd_1d(pts: np.ndarray, w: np.ndarray, c: np.ndarray, max_iter: int) -> np.ndarray:
    """Weighted Lloyd iterations in 1-D on sorted points, for each row of centres ``c``.

    With sorted points a partition is just ``k − 1`` cut positions, and each cluster's sums
    are differences of prefix sums: an iteration costs ``O(k log n)``, not ``O(n)``, and
    the means of consecutive non-empty segments come out sorted by themselves.
    """
    n_init, k = c.shape
    cw = np.concatenate([[0.0], np.cumsum(w)])
    cwp = np.concatenate([[0.0], np.cumsum(w * pts)])
    bounds = np.empty((n_init, k + 1), dtype=np.intp)
    bounds[:, 0], bounds[:, -1] = 0, pts.size
    previous = np.full((n_init, k - 1), -1, dtype=np.intp)
    for _ in range(max_iter):
        # a point p belongs to cluster #{mids < p}: cluster j ends after the points <= mids[j]
        mids = 0.5 * (c[:, 1:] + c[:, :-1])
        bounds[:, 1:-1] = np.searchsorted(pts, mids.ravel(), side="right").reshape(mids.shape)
        if np.array_equal(bounds[:, 1:-1], previous):  # same partitions: centres are final
            break
        previous[:] = bounds[:, 1:-1]
        wsum = np.diff(cw[bounds], axis=1)
        psum = np.diff(cwp[bounds], axis=1)
        if wsum.all():
            c = psum / wsum
        else:  # an empty cluster keeps its centre
            c = np.sort(np.where(wsum > 0, psum / np.where(wsum > 0, wsum, 1.0), c), axis=1)
    return c


# -- packing ------------------------------------------------------------------------------------

_U64 = np.dtype("<u8")


def pack(flat: np.ndarray, bits: int, nbytes: int) -> bytes:
    n = flat.size
    if 8 % bits == 0:
        # 1, 2 and 4 bits: whole indices per byte, OR-ed in lane by lane
        per = 8 // bits
        if n == nbytes * per:
            byte_lanes = flat.reshape(nbytes, per)
        else:
            padded = np.zeros(nbytes * per, dtype=np.uint8)
            padded[:n] = flat
            byte_lanes = padded.reshape(nbytes, per)
        out8 = byte_lanes[:, 0].copy()
        for j in range(1, per):
            out8 |= byte_lanes[:, j] << np.uint8(j * bits)
        return out8.tobytes()
    groups = -(-n // 8)
    padded = np.zeros(groups * 8, dtype=np.uint8)
    padded[:n] = flat
    lanes = padded.reshape(groups, 8)
    word = np.zeros(groups, dtype=_U64)
    for j in range(8):  # eight lanes per group, not a loop over elements
        word |= lanes[:, j].astype(_U64) << np.uint64(j * bits)
    out = word.view(np.uint8).reshape(groups, 8)[:, :bits]
    return out.tobytes()[:nbytes]


def unpack(raw: np.ndarray, bits: int, n: int) -> np.ndarray:
    mask = np.uint64((1 << bits) - 1)
    if 8 % bits == 0:
        per = 8 // bits
        out8 = np.empty((raw.size, per), dtype=np.uint8)
        for j in range(per):
            out8[:, j] = (raw >> np.uint8(j * bits)) & np.uint8((1 << bits) - 1)
        flat_out = out8.reshape(-1)
        return flat_out if flat_out.size == n else flat_out[:n].copy()
    groups = -(-n // 8)
    buf = np.zeros((groups, 8), dtype=np.uint8)
    body = np.zeros(groups * bits, dtype=np.uint8)
    body[: raw.size] = raw
    buf[:, :bits] = body.reshape(groups, bits)
    word = buf.view(_U64).reshape(groups)
    out = np.empty((groups, 8), dtype=np.uint8)
    for j in range(8):
        out[:, j] = (word >> np.uint64(j * bits)) & mask
    return out.reshape(-1)[:n].copy()


def _put(values: torch.Tensor, out: torch.Tensor, base: torch.Tensor | None) -> None:
    """``out = values``, or ``out = base + values`` (one addition in the dtype)."""
    if base is None:
        out.copy_(values)
    else:
        torch.add(base.reshape(-1), values, out=out.reshape(-1))


def unpack_gather(
    raw: np.ndarray,
    bits: int,
    table: torch.Tensor,
    out: torch.Tensor,
    base: torch.Tensor | None = None,
) -> int:
    idx = unpack(raw, bits, out.numel())
    top = int(idx.max(initial=0))
    if top < table.numel():  # else the caller refuses the stream: nothing to gather
        _put(gather(table, idx), out, base)
    return top


# -- delta by parent bin ------------------------------------------------------------------------


def delta_encode(
    prev: np.ndarray, now: np.ndarray, bins: int, rearrange: bool
) -> tuple[np.ndarray, list[int]]:
    diff = ((prev.astype(np.int16) - now.astype(np.int16)) % bins).astype(np.uint8)
    groups = np.bincount(prev, minlength=bins).tolist()
    if rearrange:
        # NumPy's stable sort of 8-bit keys is a radix sort: O(n)
        diff = diff[np.argsort(prev, kind="stable")]
    return diff, groups


def delta_decode(
    prev: np.ndarray,
    symbols: np.ndarray,
    bins: int,
    rearrange: bool,
    groups: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    del groups  # the fast kernel's shortcut (prev's bin counts); the sort finds the groups
    if symbols.size and int(symbols.max()) >= bins:
        raise CorruptCheckpointError(f"delta payload holds a difference >= bins={bins}")
    if rearrange:
        diff = np.empty_like(symbols)
        diff[np.argsort(prev, kind="stable")] = symbols
    else:
        diff = symbols
    now = ((prev.astype(np.int16) - diff.astype(np.int16)) % bins).astype(np.uint8)
    if out is None or out.dtype != np.uint8 or out.size != now.size or not out.flags.writeable:
        return now
    out.reshape(-1)[:] = now.reshape(-1)
    return out.reshape(-1)


# -- ANS (constriction) ---------------------------------------------------------------------------

_ANS_BLOCK = 1 << 16


def _categorical(counts: np.ndarray) -> Any:
    from constriction import stream  # the only back end that needs it

    # Built from the integer counts alone, so encoder and decoder get the same fixed-point
    # model (perfect=False: its quantization is a deterministic function of the input).
    return stream.model.Categorical(counts.astype(np.float64), perfect=False)


def ans_encode(
    symbols: np.ndarray, bounds: np.ndarray, alphabet: int
) -> tuple[np.ndarray, np.ndarray]:
    from constriction import stream

    contexts = bounds.size - 1
    counts = np.zeros((contexts, alphabet), dtype=np.uint32)
    coder = stream.stack.AnsCoder()
    # A stack coder decodes last-in first-out: encode the contexts back to front.
    for c in range(contexts - 1, -1, -1):
        part = symbols[bounds[c] : bounds[c + 1]]
        # by blocks: the int32 copies NumPy's bincount and the coder want stay in cache
        # instead of being tensor-sized (measured 3x faster on 9M symbols)
        starts = range(0, part.size, _ANS_BLOCK)
        counts[c] = sum(
            (np.bincount(part[i : i + _ANS_BLOCK], minlength=alphabet) for i in starts),
            np.zeros(alphabet, dtype=np.int64),
        )
        if np.count_nonzero(counts[c]) > 1:
            model = _categorical(counts[c])
            # encoding the blocks back to front pushes the same symbols in the same order
            # as one call on the whole part: the same words
            for i in reversed(starts):
                coder.encode_reverse(part[i : i + _ANS_BLOCK].astype(np.int32), model)
    return counts, np.asarray(coder.get_compressed(), dtype=np.uint32)


def ans_decode(words: np.ndarray, bounds: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
    from constriction import stream

    out = np.empty(n, dtype=np.uint8)
    try:
        coder = stream.stack.AnsCoder(words)
        for c in range(bounds.size - 1):
            lo, hi = int(bounds[c]), int(bounds[c + 1])
            used = np.flatnonzero(counts[c])
            if used.size <= 1:
                out[lo:hi] = used[0] if used.size else 0
            elif hi > lo:
                out[lo:hi] = coder.decode(_categorical(counts[c]), hi - lo)
        empty = coder.is_empty()
    except (ValueError, RuntimeError, OverflowError) as exc:
        raise CorruptCheckpointError(f"ans payload does not decode: {exc}") from exc
    if not empty:
        raise CorruptCheckpointError("ans payload has coded data left after the last symbol")
    return out


def ans_decode_pair(
    first: tuple[np.ndarray, np.ndarray, np.ndarray, int],
    second: tuple[np.ndarray, np.ndarray, np.ndarray, int],
) -> tuple[np.ndarray, np.ndarray]:
    return ans_decode(*first), ans_decode(*second)


# -- ANS in lanes (the "ans-lanes" layout of ckptzip.entropy) --------------------------------------


def over_blocks(run: Callable[[int, int], int], blocks: int, threads: int) -> list[int]:
    """``run(lo, hi)`` over ``blocks`` blocks, split into ``threads`` contiguous ranges run in
    parallel (the compiled kernels release the GIL); the results of the ranges, in order."""
    parts = max(1, min(threads, blocks))
    cuts = [blocks * k // parts for k in range(parts + 1)]
    if parts == 1:
        return [run(0, blocks)] if blocks else []
    with ThreadPoolExecutor(parts, thread_name_prefix="ckptzip-ans") as pool:
        return list(pool.map(run, cuts[:-1], cuts[1:]))


def ans_counts(symbols: np.ndarray, bounds: np.ndarray, alphabet: int) -> np.ndarray:
    counts = np.zeros((bounds.size - 1, alphabet), dtype=np.uint32)
    for c in range(bounds.size - 1):
        part = symbols[bounds[c] : bounds[c + 1]]
        starts = range(0, part.size, _ANS_BLOCK)
        counts[c] = sum(
            (np.bincount(part[i : i + _ANS_BLOCK], minlength=alphabet) for i in starts),
            np.zeros(alphabet, dtype=np.int64),
        )
    return counts


def _lane_runs(
    bounds: np.ndarray, lo: int, hi: int, lane: int, lanes: int
) -> list[tuple[int, np.ndarray]]:
    """(context, positions) of one lane of block [lo, hi), context by context in order."""
    runs = []
    for c in range(bounds.size - 1):
        a, b = max(int(bounds[c]), lo), min(int(bounds[c + 1]), hi)
        if a < b:
            first = a + (lo + lane - a) % lanes
            runs.append((c, np.arange(first, b, lanes)))
    return runs


def ans_lanes_encode(
    symbols: np.ndarray,
    bounds: np.ndarray,
    counts: np.ndarray,
    block: int,
    lanes: int,
    threads: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    from constriction import stream

    del threads  # constriction holds the GIL: one thread
    n = symbols.size
    models = {c: _categorical(counts[c]) for c in range(counts.shape[0])
              if np.count_nonzero(counts[c]) > 1}  # fmt: skip
    lengths, parts = [], []
    for lo in range(0, n, block):
        hi = min(lo + block, n)
        for lane in range(lanes):
            coder = stream.stack.AnsCoder()
            # a stack decodes last-in first-out: the lane's contexts back to front
            for c, pos in reversed(_lane_runs(bounds, lo, hi, lane, lanes)):
                if c in models and pos.size:
                    coder.encode_reverse(symbols[pos].astype(np.int32), models[c])
            words = np.asarray(coder.get_compressed(), dtype=np.uint32)
            lengths.append(words.size)
            parts.append(words)
    words = np.concatenate(parts) if parts else np.zeros(0, np.uint32)
    return np.asarray(lengths, dtype=np.int64), words


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
    from constriction import stream

    del threads
    symbols = np.empty(n, dtype=np.uint8)
    starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    models = {c: _categorical(counts[c]) for c in range(counts.shape[0])
              if np.count_nonzero(counts[c]) > 1}  # fmt: skip
    s = 0
    try:
        for lo in range(0, n, block):
            hi = min(lo + block, n)
            for lane in range(lanes):
                coder = stream.stack.AnsCoder(words[starts[s] : starts[s + 1]].copy())
                s += 1
                for c, pos in _lane_runs(bounds, lo, hi, lane, lanes):
                    if c in models:
                        symbols[pos] = coder.decode(models[c], pos.size)
                    else:
                        used = np.flatnonzero(counts[c])
                        symbols[pos] = used[0] if used.size else 0
                if not coder.is_empty():
                    raise CorruptCheckpointError(
                        "ans payload has coded data left after the last symbol"
                    )
    except (ValueError, RuntimeError, OverflowError) as exc:
        raise CorruptCheckpointError(f"ans payload does not decode: {exc}") from exc
    if table is None or out is None:
        return symbols
    _put(gather(table, symbols), out, base)
    return None


# -- ANS in 32 wide lanes (the "ans-wide" layout of ckptzip.entropy) ------------------------------

WIDE_LANES = 32
WIDE_PRECISION = 12
_WIDE_LOW = 1 << 16


def wide_model(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray] | int:
    """The ``"ans-wide"`` model of one context's ``counts``: ``(freq, cum)`` (int64, ``cum``
    with the total ``2^12`` appended), or the stream's one symbol (0 when it holds none) when
    fewer than two distinct symbols occur: such a stream codes nothing."""
    c = np.asarray(counts, dtype=np.float64).reshape(-1)
    used = np.flatnonzero(c)
    if used.size < 2:
        return int(used[0]) if used.size else 0
    scale = ((1 << WIDE_PRECISION) - c.size) / c.sum()
    # the cumulative counts in double, in order, as the C loop adds them (exact below 2^53)
    starts = np.concatenate([[0.0], np.cumsum(c)[:-1]])
    left = np.trunc(starts * scale).astype(np.int64) + np.arange(c.size)
    cum = np.append(left, 1 << WIDE_PRECISION)
    return np.diff(cum), cum


def _wide_grid(n: int, block: int) -> tuple[int, int, np.ndarray]:
    """Blocks, steps a block and the positions ``(step, block, lane)`` of the layout (``-1``
    past ``n``)."""
    blocks = -(-n // block)
    steps = -(-min(block, n) // WIDE_LANES)
    pos = (np.arange(steps)[:, None, None] * WIDE_LANES
           + np.arange(blocks)[None, :, None] * block
           + np.arange(WIDE_LANES)[None, None, :])  # fmt: skip
    pos[pos >= n] = -1
    return blocks, steps, pos


def ans_wide_encode(
    symbols: np.ndarray, counts: np.ndarray, block: int, threads: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    del threads  # one NumPy pass steps every block's lanes together
    if block < WIDE_LANES or block % WIDE_LANES:
        raise ValueError(f"ans-wide: block={block} must be a positive multiple of 32")
    sym = np.ascontiguousarray(symbols, dtype=np.uint8).reshape(-1)
    n = sym.size
    model = wide_model(counts)
    if isinstance(model, int) or n == 0:  # a stream of one symbol has no words
        return np.zeros(-(-n // block), dtype=np.int64), np.zeros(0, dtype=np.uint16)
    freq, cum = model
    one = np.array([0, n], dtype=np.int64)
    return _wide_steps_encode(sym, freq[None], cum[None], np.array([-1]), one, block)


def _wide_steps_encode(
    sym: np.ndarray,
    freq: np.ndarray,
    cum: np.ndarray,
    only: np.ndarray,
    bounds: np.ndarray,
    block: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The wide lanes' encoding of ``sym`` (n > 0), every block's lanes stepped together
    backwards, under the models of :func:`wide_ctx_models` (one row per context; one row and
    ``only = [-1]`` for ``"ans-wide"``) and the contexts' ``bounds``: each block's word count
    and the words (:func:`_wide_blocks`)."""
    blocks, steps, pos = _wide_grid(sym.size, block)
    ctx = _wide_contexts(sym.size, bounds, pos)
    x = np.full((blocks, WIDE_LANES), _WIDE_LOW, dtype=np.int64)
    pushed = np.zeros((steps, blocks, WIDE_LANES), dtype=np.uint16)
    pushes = np.zeros((steps, blocks, WIDE_LANES), dtype=bool)
    for t in range(steps - 1, -1, -1):  # the encoder runs backwards: a decoder reads forwards
        p, c = pos[t], ctx[t]
        coded = (p >= 0) & (only[c] < 0)
        s = sym[np.where(coded, p, 0)]
        f = np.where(coded, freq[c, s], 1)
        push = coded & (x >= f << (32 - WIDE_PRECISION))
        pushed[t] = x & 0xFFFF
        pushes[t] = push
        x = np.where(push, x >> 16, x)
        x = np.where(coded, ((x // f) << WIDE_PRECISION) + x % f + cum[c, s], x)
    return _wide_blocks(x, pushed, pushes)


def _wide_blocks(
    x: np.ndarray, pushed: np.ndarray, pushes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The wide-lane encoders' output from their final states ``x`` (blocks x lanes) and
    every step's words (``pushed``, steps x blocks x lanes, where ``pushes``): block by
    block, the final states (low word, high word), then the pushed words in the order a
    decoder takes them (step by step, lane by lane); and each block's word count."""
    blocks = x.shape[0]
    states = np.stack([x & 0xFFFF, x >> 16], axis=2).reshape(blocks, 2 * WIDE_LANES)
    by_block = pushes.transpose(1, 0, 2).reshape(blocks, -1)
    body = pushed.transpose(1, 0, 2).reshape(blocks, -1)
    parts = [np.zeros(0, dtype=np.uint16)]
    for b in range(blocks):
        parts += [states[b].astype(np.uint16), body[b][by_block[b]]]
    lengths = 2 * WIDE_LANES + by_block.sum(axis=1, dtype=np.int64)
    return lengths, np.concatenate(parts)


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
    del threads
    if block < WIDE_LANES or block % WIDE_LANES:
        raise CorruptCheckpointError(f"ans-wide payload: block={block}")
    w = np.asarray(words, dtype=np.int64).reshape(-1)
    starts = wide_starts(w, lengths, n, block, "ans-wide")
    model = wide_model(counts)
    if isinstance(model, int):
        if (np.diff(starts) != 0).any():
            raise CorruptCheckpointError(wide_bad("ans-wide"))
        symbols = np.full(n, model, dtype=np.uint8)
    else:
        freq, cum = model
        one = np.array([0, n], dtype=np.int64)
        symbols = _wide_steps_decode(
            w, starts, freq[None], cum[None], np.array([-1]), one, block, "ans-wide"
        )
    if table is None or out is None:
        return symbols
    _put(gather(table, symbols), out, base)
    return None


# -- the same lanes under one model per context ("ans-wide-ctx") ---------------------------------


def wide_bad(what: str) -> str:
    """The message both implementations raise for a damaged wide-lane stream of ``what``."""
    return (
        f"{what} payload does not decode to exactly its symbols (words missing or left over, "
        "or a lane that does not end in its initial state)"
    )


WIDE_CTX_BAD = wide_bad("ans-wide-ctx")


def wide_starts(
    words: np.ndarray, lengths: np.ndarray, n: int, block: int, what: str
) -> np.ndarray:
    """Where each block's words start (and the last one ends), checked against the words
    before any is read (both implementations' decoders read every block's words by these)."""
    starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    blocks = -(-n // block) if n else 0
    if starts.size != blocks + 1 or starts[-1] != words.size or (np.diff(starts) < 0).any():
        raise CorruptCheckpointError(
            f"{what} payload: {starts.size - 1} block lengths summing to {starts[-1]} for "
            f"{blocks} blocks of {words.size} words does not decode"
        )
    return starts


def check_contexts(
    n: int, bounds: np.ndarray, counts: np.ndarray, block: int, error: type[Exception]
) -> None:
    """Raise ``error`` unless ``bounds`` (int64, contexts + 1 offsets from 0 to ``n``,
    non-decreasing), ``counts`` (contexts rows of an alphabet of 1 to 256) and ``block`` (a
    positive multiple of 32) fit together: what the compiled coder assumes."""
    b = np.asarray(bounds)
    c = np.asarray(counts)
    if (
        b.ndim != 1
        or b.size < 2
        or b[0] != 0
        or b[-1] != n
        or (np.diff(b) < 0).any()
        or c.ndim != 2
        or c.shape[0] != b.size - 1
        or not 1 <= c.shape[1] <= 256
        or block < WIDE_LANES
        or block % WIDE_LANES
    ):
        raise error(
            f"ans-wide-ctx: bounds {b.shape}, counts {c.shape} and block={block} do not fit "
            f"a stream of {n} symbols"
        )


def wide_ctx_models(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every context's ``"ans-wide-ctx"`` model: ``(freq, cum, only)``, ``freq`` (contexts x
    alphabet, int64) by :func:`wide_model`'s rule over the symbols the context holds (the
    others 0), ``cum`` its running sum (contexts x (alphabet + 1)), ``only`` the one symbol of
    a context that codes nothing (fewer than two distinct symbols; 0 when empty), else -1."""
    c = np.asarray(counts, dtype=np.int64)
    contexts, alphabet = c.shape
    freq = np.zeros((contexts, alphabet), dtype=np.int64)
    only = np.full(contexts, -1, dtype=np.int64)
    for k in range(contexts):
        used = np.flatnonzero(c[k])
        model = wide_model(c[k][used])
        if isinstance(model, int):
            only[k] = int(used[model]) if used.size else 0
        else:
            freq[k, used] = model[0]
    cum = np.concatenate([np.zeros((contexts, 1), np.int64), np.cumsum(freq, axis=1)], axis=1)
    return freq, cum, only


def _wide_contexts(n: int, bounds: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The context of every position of the layout (``-1`` past ``n``: context 0)."""
    return np.searchsorted(np.asarray(bounds)[1:], np.maximum(pos, 0), side="right")


def ans_wide_ctx_encode(
    symbols: np.ndarray, bounds: np.ndarray, counts: np.ndarray, block: int, threads: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    del threads  # one NumPy pass steps every block's lanes together
    sym = np.ascontiguousarray(symbols, dtype=np.uint8).reshape(-1)
    n = sym.size
    check_contexts(n, bounds, counts, block, ValueError)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16)
    freq, cum, only = wide_ctx_models(counts)
    return _wide_steps_encode(sym, freq, cum, only, np.asarray(bounds), block)


def ans_wide_ctx_decode(
    words: np.ndarray,
    lengths: np.ndarray,
    bounds: np.ndarray,
    counts: np.ndarray,
    n: int,
    block: int,
    threads: int = 1,
) -> np.ndarray:
    del threads
    check_contexts(n, bounds, counts, block, CorruptCheckpointError)
    w = np.asarray(words, dtype=np.int64).reshape(-1)
    starts = wide_starts(w, lengths, n, block, "ans-wide-ctx")
    freq, cum, only = wide_ctx_models(counts)
    return _wide_steps_decode(w, starts, freq, cum, only, np.asarray(bounds), block, "ans-wide-ctx")


def _wide_steps_decode(
    w: np.ndarray,
    starts: np.ndarray,
    freq: np.ndarray,
    cum: np.ndarray,
    only: np.ndarray,
    bounds: np.ndarray,
    block: int,
    what: str,
) -> np.ndarray:
    """The wide lanes' decoding, every block's lanes stepped together: words ``w`` (int64),
    block ``b``'s from ``starts[b]`` to ``starts[b + 1]`` (checked against ``w``), the models
    of :func:`wide_ctx_models` (one row per context; one row and ``only = [-1]`` for
    ``"ans-wide"``) and the contexts' ``bounds``; ``what`` names the layout in errors."""
    n = int(bounds[-1])
    blocks, steps, pos = _wide_grid(n, block)
    bad = CorruptCheckpointError(wide_bad(what))
    first, end = starts[:-1], starts[1:]
    if blocks and (end - first < 2 * WIDE_LANES).any():
        raise bad
    ctx = _wide_contexts(n, bounds, pos)
    # slot -> symbol, per context (a context that codes nothing: its one symbol)
    slot_symbol = np.zeros((freq.shape[0], 1 << WIDE_PRECISION), dtype=np.int64)
    for k in range(freq.shape[0]):
        if only[k] < 0:
            slot_symbol[k] = np.repeat(np.arange(freq.shape[1]), freq[k])
    at = first[:, None] + 2 * np.arange(WIDE_LANES)[None, :]
    x = w[at] | w[at + 1] << 16 if blocks else np.zeros((0, WIDE_LANES), np.int64)
    p = first + 2 * WIDE_LANES
    symbols = np.empty(n, dtype=np.uint8)
    for t in range(steps):
        live, c = pos[t] >= 0, ctx[t]
        coded = live & (only[c] < 0)
        slot = x & ((1 << WIDE_PRECISION) - 1)
        s = np.where(coded, slot_symbol[c, slot], np.maximum(only[c], 0))
        y = freq[c, s] * (x >> WIDE_PRECISION) + slot - cum[c, s]
        need = coded & (y < _WIDE_LOW)
        take = p[:, None] + np.cumsum(need, axis=1) - 1
        if (need & (take >= end[:, None])).any():
            raise bad
        refill = w[np.where(need, take, 0)] if w.size else np.zeros_like(y)
        x = np.where(coded, np.where(need, y << 16 | refill, y), x)
        p = p + need.sum(axis=1)
        symbols[pos[t][live]] = s[live]
    if (p != end).any() or (x != _WIDE_LOW).any():
        raise bad
    return symbols


# -- run-length split of a rearranged delta stream (the "rle+ans" back end) -----------------

_RLE_DIRECT = 16  # runs below this are their own token; longer ones a length class + bits
_RLE_DIRECT_BITS = 5  # bit length of _RLE_DIRECT


def _bit_length(r: np.ndarray) -> np.ndarray:
    # frexp is exact for integers below 2**53: r = m * 2**e with 0.5 <= m < 1
    return np.frexp(r.astype(np.float64))[1].astype(np.int64)


def rle_split(
    symbols: np.ndarray, bounds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    values, nonzero, runs = [], [], []
    base = np.zeros(bounds.size - 1, dtype=np.uint8)
    for g in range(bounds.size - 1):
        part = symbols[int(bounds[g]) : int(bounds[g + 1])]
        if part.size == 0:
            nonzero.append(0)
            continue
        base[g] = np.argmax(np.bincount(part))  # the first of equal counts: the smallest
        nz = np.flatnonzero(part != base[g])
        runs.append(np.diff(nz, prepend=-1, append=part.size) - 1)
        values.append(part[nz])
        nonzero.append(nz.size)
    r = np.concatenate(runs) if runs else np.zeros(0, np.int64)
    big = r >= _RLE_DIRECT
    width = np.where(big, _bit_length(r) - 1, 0)
    tok = np.where(big, width + 1 + _RLE_DIRECT - _RLE_DIRECT_BITS, r).astype(np.uint8)
    w = width[big]
    starts = np.cumsum(w) - w
    k = np.arange(int(w.sum())) - np.repeat(starts, w)
    bits = ((np.repeat(r[big], w) >> k) & 1).astype(np.uint8)
    extra = np.packbits(bits, bitorder="little")
    vals = np.concatenate(values) if values else np.zeros(0, np.uint8)
    counts = np.asarray(nonzero, np.int64)
    return tok, vals.astype(np.uint8), counts, base, extra, int(bits.size)


def zero_runs_encode(symbols: np.ndarray) -> tuple[np.ndarray, int]:
    flat = np.asarray(symbols, dtype=np.uint8).reshape(-1)
    nz = np.flatnonzero(flat)
    gaps = np.diff(nz, prepend=-1) - 1
    quot, rem = np.divmod(gaps, 255)
    ends = np.cumsum(quot + 1) - 1
    runs = np.full(int(ends[-1]) + 1 if ends.size else 0, 255, dtype=np.uint8)
    runs[ends] = rem.astype(np.uint8)
    return np.concatenate([runs, flat[nz]]), int(nz.size)


def check_zero_runs(size: int, n: int, nonzero: int) -> None:
    """What both kernels check before decoding zero runs: ``nonzero`` symbols fit the
    payload's ``size`` bytes and the ``n`` symbols."""
    if nonzero > size or nonzero > n:
        raise CorruptCheckpointError(f"run-length payload announces {nonzero} nonzero symbols")


def zero_runs_decode(data: np.ndarray, n: int, nonzero: int) -> np.ndarray:
    raw = np.asarray(data, dtype=np.uint8)
    check_zero_runs(raw.size, n, nonzero)
    runs, values = raw[: raw.size - nonzero], raw[raw.size - nonzero :]
    ends = np.flatnonzero(runs != 255)
    if ends.size != nonzero or (ends.size and ends[-1] != runs.size - 1) or (values == 0).any():
        raise CorruptCheckpointError("run-length payload is inconsistent with its metadata")
    escapes = np.diff(ends, prepend=-1) - 1
    gaps = escapes.astype(np.int64) * 255 + runs[ends]
    positions = np.cumsum(gaps + 1) - 1
    if positions.size and positions[-1] >= n:
        raise CorruptCheckpointError(
            f"run-length payload places a symbol at {int(positions[-1])} past the end ({n})"
        )
    out = np.zeros(n, dtype=np.uint8)
    out[positions] = values
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
    sizes = np.diff(bounds)
    bad = CorruptCheckpointError("rle+ans payload is inconsistent with its metadata")
    if (nonzero < 0).any() or (nonzero > sizes).any():
        raise bad
    if int((nonzero + 1)[sizes > 0].sum()) != tokens.size or int(nonzero.sum()) != values.size:
        raise bad
    if base.size != sizes.size or extra_bits > 8 * extra.size:
        raise bad
    if (values == np.repeat(base, nonzero)).any():
        raise bad
    tok = tokens.astype(np.int64)
    big = tok >= _RLE_DIRECT
    width = tok[big] - _RLE_DIRECT + _RLE_DIRECT_BITS - 1
    if (width > 61).any() or int(width.sum()) != extra_bits:
        raise bad
    bits = np.unpackbits(extra, count=extra_bits, bitorder="little").astype(np.int64)
    starts = np.cumsum(width) - width
    k = np.arange(extra_bits) - np.repeat(starts, width)
    low = np.add.reduceat(bits << k, starts) if width.size else np.zeros(0, np.int64)
    runs = tok.copy()
    runs[big] = low | (np.int64(1) << width)
    out = np.repeat(base.astype(np.uint8), sizes)
    t = v = 0
    for g in range(sizes.size):
        if sizes[g] == 0:
            continue
        nz = int(nonzero[g])
        r = runs[t : t + nz + 1]
        if int(r.sum()) + nz != sizes[g]:
            raise bad
        at = int(bounds[g]) + np.cumsum(r[:-1] + 1) - 1
        out[at] = values[v : v + nz]
        t, v = t + nz + 1, v + nz
    return out


def bin_counts(prev: np.ndarray) -> np.ndarray:
    return np.bincount(prev, minlength=256).astype(np.int64)


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
    zero = own_zero.index_select(0, torch.from_numpy(qidx).to(work.device).long())
    if protected.numel():
        zero[protected] = False
    if zero_at < 0 and bool(zero.any()):
        return None
    idx = nearest(work, mids)
    if o2i is not None:
        table = torch.from_numpy(np.ascontiguousarray(o2i, dtype=np.uint8)).to(work.device)
        idx = table.index_select(0, idx.to(torch.int32))
    if zero_at >= 0:
        idx.masked_fill_(zero, zero_at)
    return (idx, *squared_error(work, idx, values, protected))
