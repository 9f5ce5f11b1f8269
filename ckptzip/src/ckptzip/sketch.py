"""Log-bucket sketch of a tensor's values (DDSketch-like), on the tensor's own device.

A value ``x ≠ 0`` falls in the bucket with magnitude key ``k = ceil(log_γ |x|)``, where
``γ = (1 + α) / (1 − α)``; the bucket covers ``(γ^(k−1), γ^k]`` and its centre
``2 γ^k / (γ + 1)`` is within relative error ``α`` of every value in it. Exact zeros have a
bucket of their own. At most ``max_buckets`` keys are kept per sign: when the values span a
wider range, the lowest keys (the values closest to zero, relative to the largest) collapse
into the lowest kept one, as DDSketch does, so memory stays bounded whatever the data.

The bucket edges are one table of float thresholds ``γ^k`` (in the working dtype), and a
value's magnitude offset is the number of thresholds below ``|x|``
(:func:`ckptzip.kernels.sketch_codes`, one pass with the histogram): a value's bucket is a
function of the value alone, the same on every device and in either kernel implementation.

Every bucket has a *code*, an integer that orders buckets by value: with ``m`` the bucket's
offset above the collapsed key (``m = k − key_min + 1``, so ``m ≥ 1``), a value's code is
``cap + sign(x)·m`` and zero's is ``cap`` (``cap = max_buckets``). Codes are a monotone
function of the value, so a rank question ("the ``k`` smallest") is answered from the counts
and only the one bucket that straddles the cut needs looking at value by value.

>>> import torch
>>> sk = LogSketch.from_tensor(torch.linspace(1.0, 100.0, 1001))
>>> abs(sk.quantile(0.5) - 50.5) / 50.5 <= sk.alpha
True
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from ckptzip import kernels
from ckptzip.errors import ConfigError, UnsupportedValueError

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_MAX_BUCKETS",
    "LogSketch",
    "build_sketch",
    "edges",
    "scan",
    "value_codes",
]

DEFAULT_ALPHA = 0.01
"""Relative accuracy of the sketch (bucket centres are within 1 % of their values)."""

DEFAULT_MAX_BUCKETS = 2048
"""Magnitude keys kept per sign; ``2048`` keys of ``γ ≈ 1.0202`` span a ratio of ``~6e17``."""


@dataclass(frozen=True, eq=False)
class LogSketch:
    """Counts of a tensor's values in log-spaced buckets.

    Attributes
    ----------
    alpha:
        Relative accuracy ``α``.
    key_min:
        The lowest magnitude key kept; smaller keys were collapsed into it.
    counts:
        ``int64`` array of length ``2 * max_buckets + 1`` indexed by bucket code (ascending
        value order: negative buckets, the zero bucket at ``max_buckets``, positive buckets).
    bounds:
        ``(min, max)`` of the values, where the sketch was made by :func:`scan` (else
        ``None``).
    """

    alpha: float
    key_min: int
    counts: np.ndarray
    bounds: tuple[float, float] | None = None

    @property
    def gamma(self) -> float:
        return (1.0 + self.alpha) / (1.0 - self.alpha)

    @property
    def cap(self) -> int:
        """The code of the zero bucket (also the number of magnitude keys per sign)."""
        return (len(self.counts) - 1) // 2

    @property
    def count(self) -> int:
        """Number of values sketched."""
        return int(self.counts.sum())

    @classmethod
    def from_tensor(
        cls,
        x: torch.Tensor,
        *,
        alpha: float = DEFAULT_ALPHA,
        max_buckets: int = DEFAULT_MAX_BUCKETS,
    ) -> LogSketch:
        """Sketch the values of ``x`` (any shape, floating point, finite).

        Examples
        --------
        >>> import torch
        >>> LogSketch.from_tensor(torch.tensor([0.0, 1.0, -1.0, 2.0])).count
        4
        """
        sk = scan(x, alpha=alpha, max_buckets=max_buckets)
        if sk is not None:
            return sk
        return build_sketch(x, alpha=alpha, max_buckets=max_buckets)[0]

    def centres(self) -> np.ndarray:
        """Signed representative value of every bucket (float64, indexed by code).

        Examples
        --------
        >>> import torch
        >>> sk = LogSketch.from_tensor(torch.tensor([3.0]))
        >>> abs(float(sk.centres()[sk.counts.argmax()]) - 3.0) <= 3.0 * sk.alpha
        True
        """
        cap = self.cap
        gamma = self.gamma
        m = np.arange(1, cap + 1, dtype=np.float64)
        # 2 γ^k / (γ + 1) computed in log space: γ^k alone overflows float64 for large keys.
        logs = (self.key_min + m - 1) * math.log(gamma) + math.log(2.0 / (gamma + 1.0))
        mag = np.minimum(_exp(logs), _F64_MAX)  # a bucket beyond float64 holds no value
        out = np.zeros(2 * cap + 1, dtype=np.float64)
        out[cap + 1 :] = mag
        out[:cap] = -mag[::-1]
        return out

    def quantile(self, q: float) -> float:
        """Approximate ``q``-quantile (lower rank ``floor(q·(n−1))``), within ``α`` relative.

        The guarantee holds for values whose bucket was not collapsed.

        Examples
        --------
        >>> import torch
        >>> sk = LogSketch.from_tensor(torch.arange(1.0, 11.0))
        >>> [round(sk.quantile(q), 1) for q in (0.0, 0.5, 1.0)]
        [1.0, 5.0, 10.1]
        """
        if not 0.0 <= q <= 1.0:
            raise ConfigError(f"q={q!r} must lie in [0, 1]")
        n = self.count
        if n == 0:
            raise UnsupportedValueError("the sketch is empty: no quantile to read")
        rank = math.floor(q * (n - 1))
        code = int(np.searchsorted(np.cumsum(self.counts), rank, side="right"))
        return float(self.centres()[code])

    def threshold(self, m: int) -> float:
        """The upper edge of the buckets ``m`` above zero: ``|x| <= threshold(m)`` exactly
        when the value's magnitude offset is at most ``m`` (``m >= 1``; ``inf`` at ``cap``).

        Examples
        --------
        >>> import torch
        >>> sk = LogSketch.from_tensor(torch.tensor([1.0, 3.0]))
        >>> sk.threshold(sk.cap)
        inf
        """
        cap = self.cap
        if m >= cap:
            return math.inf
        table = key_table(self.alpha, cap)
        off = key_offset(table, self.key_min, cap)
        if table is not None and off is not None:
            return float(table.thresholds[off + m])
        return float(_thresholds(self.key_min, cap, self.alpha, torch.zeros(0))[m])

    def magnitude_counts(self) -> np.ndarray:
        """Counts by magnitude offset ``m = |code − cap|`` (``m = 0`` is the zero bucket)."""
        cap = self.cap
        out = self.counts[cap:].copy()
        out[1:] += self.counts[:cap][::-1]
        return out


def build_sketch(
    x: torch.Tensor,
    *,
    alpha: float = DEFAULT_ALPHA,
    max_buckets: int = DEFAULT_MAX_BUCKETS,
    bounds: tuple[float, float] | None = None,
) -> tuple[LogSketch, torch.Tensor]:
    """Sketch ``x`` and return, with it, every value's bucket code (``int32``, flat, on device).

    ``x`` must be floating point and finite (the quantizer takes non-finite values out
    first). ``float64`` input is bucketed in float64, everything else in float32.
    ``bounds`` is ``(min, max)`` of ``x`` when the caller already has it (saves a pass).

    Examples
    --------
    >>> import torch
    >>> sk, codes = build_sketch(torch.tensor([-2.0, 0.0, 2.0]))
    >>> (codes - sk.cap).tolist()[1], bool(codes[0] < codes[1] < codes[2])
    (0, True)
    """
    _check(alpha, max_buckets, x)
    work = x.detach().reshape(-1)
    if work.dtype != torch.float64:
        work = work.to(torch.float32)
    cap = max_buckets
    counts_len = 2 * cap + 1
    n = work.numel()
    if n == 0:
        return LogSketch(alpha, 0, np.zeros(counts_len, dtype=np.int64)), torch.zeros(
            0, dtype=torch.int32, device=work.device
        )
    inv_log_gamma = 1.0 / math.log((1.0 + alpha) / (1.0 - alpha))
    if bounds is None:
        lo_t, hi_t = torch.aminmax(work)
        bounds = (float(lo_t), float(hi_t))
    top_value = max(-bounds[0], bounds[1])
    if not math.isfinite(top_value):
        raise UnsupportedValueError("cannot sketch NaN or ±inf: take non-finite values out first")
    if top_value == 0.0:
        counts = np.zeros(counts_len, dtype=np.int64)
        counts[cap] = n
        return LogSketch(alpha, 0, counts), torch.full(
            (n,), cap, dtype=torch.int32, device=work.device
        )
    # key_max = ceil(log_γ top); the thresholds below, not this estimate, define the buckets
    key_max = math.ceil(math.log(top_value) * inv_log_gamma)
    key_min = key_max - cap + 1
    codes, counts = kernels.sketch_codes(work, _thresholds(key_min, cap, alpha, work), cap)
    assert counts is not None
    return LogSketch(alpha, key_min, counts), codes


def scan(
    x: torch.Tensor, *, alpha: float = DEFAULT_ALPHA, max_buckets: int = DEFAULT_MAX_BUCKETS
) -> LogSketch | None:
    """Sketch ``x`` in one pass that stores nothing per element (:func:`ckptzip.kernels.key_scan`),
    with its ``bounds``; the counts are :func:`build_sketch`'s, bucket for bucket.

    ``None`` where that pass does not apply: values that are not float32 once converted
    (float64), or NaN / ±inf among them (:func:`build_sketch` says which).

    Examples
    --------
    >>> import torch
    >>> sk = scan(torch.tensor([-2.0, 0.0, 3.0]))
    >>> sk.count, sk.bounds
    (3, (-2.0, 3.0))
    """
    _check(alpha, max_buckets, x)
    work = x.detach().reshape(-1)
    if work.dtype == torch.float64:
        return None
    work = work.to(torch.float32)
    table = key_table(alpha, max_buckets)
    if table is None:
        return None
    hist, lo, hi, finite = kernels.key_scan(work, table)
    if not finite:
        return None
    cap = max_buckets
    counts = np.zeros(2 * cap + 1, dtype=np.int64)
    n = work.numel()
    if n == 0:
        return LogSketch(alpha, 0, counts, None)
    top = max(-lo, hi)
    if top == 0.0:
        counts[cap] = n
        return LogSketch(alpha, 0, counts, (lo, hi))
    key_max = math.ceil(math.log(top) / math.log((1.0 + alpha) / (1.0 - alpha)))
    key_min = key_max - cap + 1
    off = key_offset(table, key_min, cap)
    if off is None:  # cannot happen for float32 values: the table covers them all
        return None
    neg, pos = _fold(hist[0], off, cap), _fold(hist[1], off, cap)
    counts[:cap] = neg[:0:-1]
    counts[cap] = neg[0] + pos[0]
    counts[cap + 1 :] = pos[1:]
    return LogSketch(alpha, key_min, counts, (lo, hi))


def _fold(row: np.ndarray, off: int, cap: int) -> np.ndarray:
    """Counts by magnitude offset ``m = clamp(key − off, 1, cap)`` (``m = 0``: key 0, zero)."""
    out = np.zeros(cap + 1, dtype=np.int64)
    out[0] = row[0]
    if cap == 1:
        out[1] = row[1:].sum()
        return out
    out[1] = row[1 : off + 2].sum()
    out[2:cap] = row[off + 2 : off + cap]
    out[cap] = row[off + cap :].sum()
    return out


@functools.lru_cache(maxsize=8)
def key_table(alpha: float, max_buckets: int) -> kernels.KeyTable | None:
    """The float32 thresholds ``γ^k`` for every key any float32 tensor's sketch can use.

    The same numbers as :func:`_thresholds` gives each tensor (``γ^k`` computed in float64
    for integer ``k``, rounded to float32), so a key read off this table is the tensor's
    bucket offset up to a shift: ``m = clamp(key − key_offset(key_min), 1, cap)``. From
    below every subnormal's reach (the first threshold is 0.0 in float32) to above the
    float32 maximum. ``None`` where that is more than ``2**22`` thresholds (tiny ``alpha``).
    """
    log_gamma = math.log((1.0 + alpha) / (1.0 - alpha))
    inv = 1.0 / log_gamma
    lowest_key_max = math.ceil(math.log(2.0**-149) * inv)
    k_lo = min(lowest_key_max - max_buckets - 1, math.floor(math.log(2.0**-150) * inv) - 1)
    k_hi = math.ceil(math.log(float(torch.finfo(torch.float32).max)) * inv) + 1
    size = k_hi - k_lo + 1
    if size > 1 << 22:
        return None
    logs = (np.arange(size, dtype=np.float64) + k_lo) * log_gamma
    edges = torch.from_numpy(np.exp(np.minimum(logs, 709.0))).to(torch.float32)
    return kernels.KeyTable.build(k_lo, edges)


def key_offset(table: kernels.KeyTable | None, key_min: int, cap: int) -> int | None:
    """``off`` of a sketch with ``key_min`` and ``cap`` on ``table``: its threshold ``j`` is
    the table's ``off + j``; ``None`` where its thresholds are not all on the table."""
    if table is None:
        return None
    off = key_min - 1 - table.k_lo
    return off if off >= 0 and off + cap <= table.size else None


def _check(alpha: float, max_buckets: int, x: torch.Tensor) -> None:
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha={alpha!r} must lie in (0, 1)")
    if not isinstance(max_buckets, int) or not 1 <= max_buckets <= 1 << 20:
        raise ConfigError(f"max_buckets={max_buckets!r} must be an integer in [1, 2**20]")
    if not x.is_floating_point():
        raise UnsupportedValueError(f"can only sketch floating-point tensors, got {x.dtype}")


def _thresholds(key_min: int, cap: int, alpha: float, like: torch.Tensor) -> torch.Tensor:
    """``γ^(key_min − 1 + j)`` for ``j < cap``, in ``like``'s dtype and device: the upper
    edges of the buckets below each kept key, so ``m = #{thresholds < |x|}``.

    Computed once in float64 and rounded to the working dtype; every element and every
    cut-off is then compared against the same numbers, on any device and by either kernel
    implementation, so a value's bucket is a function of the value alone.
    """
    gamma = (1.0 + alpha) / (1.0 - alpha)
    logs = (np.arange(cap, dtype=np.float64) + (key_min - 1)) * math.log(gamma)
    return torch.from_numpy(_exp(logs)).to(dtype=like.dtype, device=like.device)


_F64_MAX = float(np.finfo(np.float64).max)


def _exp(logs: np.ndarray) -> np.ndarray:
    """``e^logs`` in float64, ``inf`` where that is beyond its range: an edge no finite
    value exceeds. (Clamping ``logs`` at 709 instead made every edge above ``e^709`` equal,
    so values within a factor of about 2.2 of float64's largest shared one bucket.)"""
    with np.errstate(over="ignore"):
        return np.exp(logs)


def edges(sketch: LogSketch, like: torch.Tensor) -> torch.Tensor:
    """``sketch``'s bucket thresholds in ``like``'s dtype (float64 stays, else float32) and
    device: a value's magnitude offset is ``#{edges < |x|}``
    (:func:`ckptzip.kernels.sketch_codes`)."""
    dtype = torch.float64 if like.dtype == torch.float64 else torch.float32
    empty = torch.empty(0, dtype=dtype, device=like.device)
    return _thresholds(sketch.key_min, sketch.cap, sketch.alpha, empty)


def value_codes(sketch: LogSketch, values: torch.Tensor) -> torch.Tensor:
    """Bucket codes of ``values`` under ``sketch``'s key range, by the same kernel.

    Used to place thresholds (level midpoints) in buckets consistently with the elements:
    because the code is a monotone function of the value, an element whose code is below a
    threshold's code is strictly below the threshold.

    Examples
    --------
    >>> import torch
    >>> sk, codes = build_sketch(torch.tensor([1.0, 5.0]))
    >>> bool((value_codes(sk, torch.tensor([1.0, 5.0])) == codes).all())
    True
    """
    work = values.detach().reshape(-1)
    if work.dtype != torch.float64:
        work = work.to(torch.float32)
    cap = sketch.cap
    table = key_table(sketch.alpha, cap) if work.dtype == torch.float32 else None
    off = key_offset(table, sketch.key_min, cap)
    if table is not None and off is not None and work.numel() <= _FEW:
        # a few values (cut-offs): their keys off the shared table, no per-call table
        t = table.thresholds[: table.size].to(work.device)
        key = torch.searchsorted(t, work.abs()).to(torch.int32)
        m = torch.where(key == 0, 0, (key - off).clamp_(1, cap))
        return torch.where(torch.signbit(work), cap - m, cap + m).to(torch.int32)
    return kernels.sketch_codes(work, edges(sketch, work), cap, histogram=False)[0]


_FEW = 4096
