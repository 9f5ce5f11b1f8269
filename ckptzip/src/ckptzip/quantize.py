"""Non-uniform quantization of one floating-point tensor: sketch, k-means, three-way split.

The method:

1. **Sketch** the finite values in log buckets (:mod:`ckptzip.sketch`, relative accuracy 1 %).
2. **Protect** the top ``protect`` fraction: by magnitude alone, or, when sensitivity scores
   are given, half of it (rounded up) by magnitude and the rest by sensitivity among the
   entries not already taken. The union is therefore exactly the asked fraction and holds both
   the largest weights and the ones whose loss would move most; protected entries are stored
   exactly. NaN and ±inf are always protected, on top of the fraction.
3. **Prune** the bottom ``prune`` fraction, by magnitude or (with scores) by sensitivity,
   among the entries not protected: they become exactly zero, and ``0.0`` is one of the levels.
   Entries tied on the score are taken in position order (lowest positions first), in every
   selection.
4. **Fit the levels** with weighted k-means (k-means++ init, fixed seed) on the bucket centres
   of the entries left: bucket weight ``σ·count/Σcount + (1−σ)·|centre|/Σ|centre|`` with
   ``σ = 0.2``, which pulls levels away from the dense region near zero. In ``log_domain``
   the k-means runs on ``log|centre|`` with count weights (a relative error in Adam's
   ``exp_avg_sq`` matters the same at every scale) and zeros stay exact. When the entries left
   have no more distinct values than free levels, the levels are those values, exactly.
5. **Assign** every entry its nearest level: ``#{cut-offs < x}`` over the cut-offs between
   levels, an exact nearest-level assignment.

The passes over the elements (:mod:`ckptzip.kernels`). Without scores, and for float32 work
(float16 and bfloat16 are converted), there are three, and none stores anything per element
but the indices: the sketch (:func:`ckptzip.sketch.scan`: counts, minimum, maximum, whether
all is finite); the members of the (at most two) buckets a protect or prune cut falls in,
read off the sketch's counts, skipped where a cut takes its whole bucket; and one pass that
assigns every level, applies both selections as rules on value and position (``|x| > t``, or
``|x| == t`` at a position ``<= p``) and measures the error. With scores (or float64 values)
the sketch also gives each element's bucket code, selections rank by those codes, and each
bucket's level is read from a lookup table by its code; the results are the same as the
rule-based passes' for the same selections. Only the k-means over at most a few thousand
bucket centres runs apart from the elements. ``rel_error`` is measured from what decoding
gives, never estimated.

>>> import torch
>>> from ckptzip.config import QuantConfig
>>> x = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
>>> q = quantize(x, QuantConfig(bins=16, prune=0.0))
>>> len(q.levels) <= 16 and q.rel_error < 0.15
True
>>> bool(torch.equal(dequantize(q)[q.protected_positions], x[q.protected_positions]))
True
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ckptzip import kernels
from ckptzip._types import IndicesOnly, QuantizedTensor, StepWeights
from ckptzip.config import QuantConfig
from ckptzip.errors import ConfigError, CorruptCheckpointError, UnsupportedValueError
from ckptzip.sketch import LogSketch, build_sketch, edges, scan, value_codes

__all__ = ["SIGMA", "assign", "dequantize", "fit_levels", "quantize", "requantize", "sketch_of"]

SIGMA = 0.2
"""Weight of the (normalised) count against the (normalised) magnitude of a bucket in k-means."""

KMEANS_SEED = 0
"""Seed of the k-means++ initialisation: the same tensor always gets the same levels."""

KMEANS_MAX_ITER = 100

KMEANS_RESTARTS = 3
"""k-means++ restarts of the level fit (the best weighted error wins)."""

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# -- public API ------------------------------------------------------------------------------


def quantize(
    x: torch.Tensor,
    config: QuantConfig,
    *,
    scores: torch.Tensor | None = None,
    sketch: LogSketch | None = None,
    fit_weights: torch.Tensor | StepWeights | None = None,
) -> QuantizedTensor:
    """Quantize ``x`` to at most ``config.bins`` levels, protecting and pruning as configured.

    Parameters
    ----------
    x:
        A float16, bfloat16, float32 or float64 tensor of any shape, on any device.
    config:
        The :class:`~ckptzip.config.QuantConfig`.
    scores:
        Optional per-element sensitivity ``|g·w|`` (same shape as ``x``); used for the
        sensitivity half of ``protect`` and, with ``prune_metric="sensitivity"``, for pruning.
        Non-finite scores count as zero (a gradient blow-up must not break a checkpoint).
    sketch:
        ``x``'s :func:`ckptzip.sketch.scan` (:func:`sketch_of`), when the caller quantizes
        the same tensor several times (the configuration search's trials): its pass over the
        values is then not repeated. The result is the same as without it.
    fit_weights:
        Optional per-element weights (same shape as ``x``, non-negative) of the k-means that
        fits the levels, in place of the count and magnitude weights (``QuantConfig.fit ==
        "update"``: :func:`ckptzip.plan.fit_weights`). Only the levels change; protect,
        prune and the nearest-level assignment are the same. Ignored in ``log_domain``.
        A :class:`~ckptzip._types.StepWeights` (:func:`ckptzip.plan.step_weights`) gives
        the levels its weight tensor (:func:`ckptzip.kernels.step_weights`) gives; where the
        sketched passes apply (float32 work, all finite, no scores) they sum its weights per
        bucket in one more pass (:func:`ckptzip.kernels.fit_sums`), with no such tensor.

    Returns
    -------
    QuantizedTensor
        Levels, one ``uint8`` index per element, the protected entries, the measured
        relative L2 error.

    Examples
    --------
    >>> import torch
    >>> from ckptzip.config import QuantConfig
    >>> q = quantize(torch.tensor([0.0, 1.0, 2.0, 3.0]), QuantConfig(bins=4, protect=0.0))
    >>> q.levels.tolist(), q.indices.tolist(), q.rel_error
    ([0.0, 1.0, 2.0, 3.0], [0, 1, 2, 3], 0.0)
    """
    _check_inputs(x, config, scores)
    shape = tuple(x.shape)
    dtype = x.dtype
    flat = x.detach().reshape(-1)
    n = flat.numel()
    if n == 0:
        return QuantizedTensor(
            shape=shape,
            dtype=dtype,
            config=config,
            levels=np.zeros(0, dtype=np.float64),
            indices=np.zeros(0, dtype=np.uint8),
            protected_positions=np.zeros(0, dtype=np.int64),
            protected_values=torch.zeros(0, dtype=dtype),
            rel_error=0.0,
        )
    work = flat if flat.dtype in (torch.float32, torch.float64) else flat.to(torch.float32)
    s = None
    if scores is not None:
        s = torch.nan_to_num(
            scores.detach().reshape(-1).to(device=flat.device, dtype=torch.float32).abs(),
            nan=0.0,
            posinf=0.0,
        )
    fw = None
    step = None
    if fit_weights is not None and not config.log_domain:
        if tuple(fit_weights.shape) != shape:
            raise ConfigError(
                f"fit_weights of shape {list(fit_weights.shape)} must have x's {list(shape)}"
            )
        if isinstance(fit_weights, StepWeights) and s is None:
            step = fit_weights  # summed per bucket by the sketched path, if it applies
        else:
            fw = _weight_values(fit_weights, flat.device)
    if sketch is not None and (
        not isinstance(sketch, LogSketch) or sketch.bounds is None or sketch.count != n
    ):
        raise ConfigError(
            f"sketch must be this tensor's sketch_of(x) ({n} values), got {sketch!r:.80}"
        )
    sk = sketch if s is None and fw is None else None
    if sk is None and s is None and fw is None:
        # one pass: the sketch, its bounds, and whether every value is finite
        sk = sketch_of(work)
    if sk is not None:
        res = _quantize_sketched(work, config, dtype, sk, step)
        indices = res.indices
        protected = res.protected
        return _assemble(shape, dtype, config, flat, res, indices, protected)
    if step is not None:  # float64 or non-finite values: the weights' tensor after all
        fw = _weight_values(step, flat.device)
    lo_t, hi_t = torch.aminmax(work)  # NaN propagates, so this also tells "all finite"
    lo, hi = float(lo_t), float(hi_t)
    if math.isfinite(lo) and math.isfinite(hi):
        res = _quantize_finite(work, config, s, dtype, (lo, hi), fw)
        indices = res.indices
        protected = res.protected
    else:
        # Rare path: NaN/±inf are taken out, the finite entries quantized, and the result
        # spread back. Non-finite entries get the index nearest to nan_to_num(x), as the
        # QuantizedTensor contract asks, and are protected.
        finite = torch.isfinite(work)
        fpos = finite.nonzero().squeeze(1)
        part = work[fpos]
        sk_part = sketch_of(part) if s is None and fw is None and part.numel() else None
        if sk_part is not None:
            res = _quantize_sketched(part, config, dtype, sk_part)
        else:
            res = _quantize_finite(
                part,
                config,
                None if s is None else s[fpos],
                dtype,
                fw=None if fw is None else fw[fpos],
            )
        bad = (~finite).nonzero().squeeze(1)
        indices = torch.empty(n, dtype=torch.uint8, device=flat.device)
        indices[fpos] = res.indices
        special = torch.nan_to_num(work[bad], nan=0.0)
        indices[bad] = res.assign_values(special)
        protected = torch.cat([fpos[res.protected], bad]).sort().values
    return _assemble(shape, dtype, config, flat, res, indices, protected)


def _weight_values(w: torch.Tensor | StepWeights, device: torch.device) -> torch.Tensor:
    """The fit weights as :func:`_quantize_finite` sums them: flat float64, a NaN or +inf
    weight 0."""
    t = kernels.step_weights(w.second_moment, w.eps) if isinstance(w, StepWeights) else w
    flat = t.detach().reshape(-1).to(device=device, dtype=torch.float64).abs()
    return torch.nan_to_num(flat, nan=0.0, posinf=0.0)


def sketch_of(x: torch.Tensor) -> LogSketch | None:
    """The sketch :func:`quantize` makes of ``x``, to hand to several calls (``sketch=``).

    ``None`` where quantize does not sketch that way: float64 values, NaN or ±inf among
    them, or ``scores`` given (the sensitivity path ranks by its own sketch).

    Examples
    --------
    >>> import torch
    >>> from ckptzip.config import QuantConfig
    >>> x = torch.randn(5000, generator=torch.Generator().manual_seed(0))
    >>> sk = sketch_of(x)
    >>> q4, q8 = (quantize(x, QuantConfig(bins=b), sketch=sk) for b in (4, 8))
    >>> q8.rel_error < q4.rel_error
    True
    """
    work = x.detach().reshape(-1)
    if work.dtype == torch.float64:
        return None
    return scan(work)


def _assemble(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    config: QuantConfig,
    flat: torch.Tensor,
    res: _Result,
    indices: torch.Tensor,
    protected: torch.Tensor,
) -> QuantizedTensor:
    rel_error = res.rel_error
    if config.rounding == "stochastic" and res.levels.size > 1:
        indices, rel_error = _round_stochastic(flat, dtype, res.levels, indices, protected)
    return QuantizedTensor(
        shape=shape,
        dtype=dtype,
        config=config,
        levels=res.levels,
        indices=indices.cpu().numpy(),
        protected_positions=protected.cpu().numpy().astype(np.int64, copy=False),
        protected_values=flat[protected].cpu().clone(),
        rel_error=rel_error,
    )


ROUNDING_SAMPLE = 4096
"""How many evenly spaced entries of a tensor seed its stochastic rounding (with its size)."""


def rounding_seed(x: torch.Tensor) -> int:
    """The seed of ``x``'s stochastic rounding: a CRC-32 of :data:`ROUNDING_SAMPLE` evenly
    spaced entries' bytes and of the size, so the same tensor rounds the same way (the same
    file) and a tensor training has moved draws anew.

    Examples
    --------
    >>> x = torch.arange(10_000, dtype=torch.float32)
    >>> rounding_seed(x) == rounding_seed(x.clone()), rounding_seed(x) == rounding_seed(x + 1)
    (True, False)
    """
    flat = x.detach().reshape(-1)
    step = max(1, flat.numel() // ROUNDING_SAMPLE)
    sample = flat[::step][:ROUNDING_SAMPLE].to("cpu").contiguous()
    raw = sample.view(torch.uint8) if sample.numel() else torch.zeros(0, dtype=torch.uint8)
    return zlib.crc32(raw.numpy().tobytes(), zlib.crc32(str(flat.numel()).encode()))


def _round_stochastic(
    flat: torch.Tensor,
    dtype: torch.dtype,
    levels: np.ndarray,
    indices: torch.Tensor,
    protected: torch.Tensor,
) -> tuple[torch.Tensor, float]:
    """Nearest-level ``indices`` rounded stochastically between the two levels (as decoding
    gives them, in ``dtype``) around each value, and the measured error of the result."""
    # the draws compare float32 values with float32 levels; the error is measured on the
    # values as quantize measures them (float64 stays float64)
    f32 = flat.to(torch.float32)
    work = flat if flat.dtype == torch.float64 else f32
    values = _level_values(levels, False, dtype, work.device)
    grid = values.to(torch.float32)
    rounded = kernels.round_stochastic(f32, indices, grid, protected, rounding_seed(flat))
    return rounded, _measure(work, rounded, values, protected)


def dequantize(q: QuantizedTensor, *, device: torch.device | str = "cpu") -> torch.Tensor:
    """Rebuild the tensor (original shape and dtype) on ``device``.

    Raises :class:`~ckptzip.errors.CorruptCheckpointError` when the parts do not fit together
    (an index beyond the levels, a protected position out of range …).

    Examples
    --------
    >>> import torch
    >>> from ckptzip.config import QuantConfig
    >>> x = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.bfloat16)
    >>> y = dequantize(quantize(x, QuantConfig(bins=2)))
    >>> y.dtype, tuple(y.shape), bool(torch.equal(x, y))
    (torch.bfloat16, (2, 2), True)
    """
    _check_quantized(q)
    n = q.numel
    lv = _level_values(q.levels, q.config.log_domain, q.dtype, torch.device(device))
    if n == 0:
        return torch.zeros(q.shape, dtype=q.dtype, device=device)
    out = kernels.gather(lv, np.ascontiguousarray(q.indices).reshape(-1))
    if q.protected_positions.size:
        pos = torch.from_numpy(np.ascontiguousarray(q.protected_positions)).to(device)
        out.index_copy_(0, pos, q.protected_values.to(device=device, dtype=q.dtype))
    return out.reshape(q.shape)


def assign(x: torch.Tensor, levels: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Index of the nearest of the sorted ``levels`` for every element of ``x`` (``uint8``).

    Plain ``searchsorted`` on the midpoints between levels (a value exactly on a midpoint
    goes to the lower level). :func:`quantize` computes the same result faster from its
    sketch; this function is the reference and serves callers that bring their own levels.

    Examples
    --------
    >>> import torch
    >>> assign(torch.tensor([-1.0, 0.4, 0.6, 9.0]), [0.0, 1.0]).tolist()
    [0, 0, 1, 1]
    """
    lv = torch.as_tensor(np.asarray(levels, dtype=np.float64))
    if lv.ndim != 1 or lv.numel() == 0 or lv.numel() > 256:
        raise ConfigError(f"levels must be a 1-D array of 1 to 256 values, got {tuple(lv.shape)}")
    if bool((lv[1:] < lv[:-1]).any()):
        raise ConfigError("levels must be sorted ascending")
    work = x.detach().reshape(-1)
    if work.dtype != torch.float64:
        work = work.to(torch.float32)
    mids = ((lv[1:] + lv[:-1]) / 2).to(device=work.device, dtype=work.dtype)
    return kernels.nearest(work, mids).reshape(x.shape)


def fit_levels(
    points: np.ndarray,
    weights: np.ndarray,
    k: int,
    *,
    seed: int = KMEANS_SEED,
    max_iter: int = KMEANS_MAX_ITER,
    n_init: int = KMEANS_RESTARTS,
) -> np.ndarray:
    """Weighted 1-D k-means (k-means++ init, then Lloyd): at most ``k`` sorted levels.

    ``n_init`` seeded restarts, keeping the lowest weighted squared error: cheap on the few
    thousand bucket centres it is meant for, and it removes most of the spread between
    k-means++ draws. The benchmark also runs it on raw values as the plain-Lloyd baseline.

    Examples
    --------
    >>> import numpy as np
    >>> fit_levels(np.array([0.0, 0.1, 5.0, 5.1]), np.ones(4), 2).round(2).tolist()
    [0.05, 5.05]
    """
    pts = np.asarray(points, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if pts.ndim != 1 or pts.shape != w.shape:
        raise ConfigError(f"points {pts.shape} and weights {w.shape} must be equal 1-D shapes")
    if k < 1:
        raise ConfigError(f"k={k!r} must be >= 1")
    if n_init < 1:
        raise ConfigError(f"n_init={n_init!r} must be >= 1")
    keep = w > 0
    pts, w = pts[keep], w[keep]
    if pts.size == 0:
        return np.zeros(0, dtype=np.float64)
    if bool((pts[1:] > pts[:-1]).all()):  # the sketch's centres, in code order: no sort
        if pts.size <= k:
            return pts
    else:
        uniq = np.unique(pts)
        if uniq.size <= k:
            return uniq
        order = np.argsort(pts, kind="stable")
        pts, w = pts[order], w[order]
    scale = float(np.abs(pts).max())
    if math.isfinite(scale) and scale > 0 and not _SQUARES_FIT[0] <= scale <= _SQUARES_FIT[1]:
        # squared distances would overflow or vanish in float64 (values beyond about 1e150
        # or below 1e-150, float64 tensors only): fit the points scaled into range, whose
        # levels are the same up to that factor; ordinary points are fitted as they are
        lv = fit_levels(pts / scale, w, k, seed=seed, max_iter=max_iter, n_init=n_init)
        return np.unique(lv * scale)
    c = kernels.kmeans(pts, w, k, n_init, np.random.default_rng(seed), max_iter)
    cost = [
        float(np.dot(w, (pts - row[np.searchsorted(0.5 * (row[1:] + row[:-1]), pts)]) ** 2))
        for row in c
    ]
    return np.unique(c[int(np.argmin(cost))])


_SQUARES_FIT = (2.0**-500, 2.0**500)
"""The magnitudes :func:`fit_levels` fits as they are: the squares of any two points' distance
stay within float64's normal range."""


# -- the core --------------------------------------------------------------------------------


@dataclass
class _Result:
    levels: np.ndarray
    indices: torch.Tensor  # uint8, on device
    protected: torch.Tensor  # int64 positions, sorted, on device
    rel_error: float
    thresholds: torch.Tensor  # value-space cut-offs between consecutive non-zero levels
    ordinal_to_index: torch.Tensor  # int64: ordinal among non-zero levels -> index in levels
    zero_index: int  # index of the level standing for exact zero in log domain, or -1

    def assign_values(self, v: torch.Tensor) -> torch.Tensor:
        """Nearest-level indices of arbitrary values (used for the non-finite entries)."""
        if self.levels.size == 0:
            return torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
        v = v.to(self.thresholds.dtype)
        ords = torch.searchsorted(self.thresholds, v)
        out = self.ordinal_to_index.index_select(0, ords)
        if self.zero_index >= 0:
            out = torch.where(v == 0, self.zero_index, out)
        return out.to(torch.uint8)


class _Ranking:
    """A ranking of the elements by a non-negative score, through the score's sketch codes.

    ``rank`` is the magnitude offset of each element's bucket (monotone in the score);
    ``counts`` counts elements per rank. Ties inside the one bucket a cut falls in are broken
    by the score itself (``score(positions)``), so selections are exact. Excluded elements
    are never selected.
    """

    def __init__(
        self,
        rank: torch.Tensor,
        counts: np.ndarray,
        score: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        self.rank = rank
        self.counts = counts.copy()
        self.score = score
        self.excluded: torch.Tensor | None = None

    def exclude(self, positions: torch.Tensor) -> None:
        if positions.numel() == 0:
            return
        if self.excluded is not None:
            # Already-excluded positions carry a marker rank; take only the new ones.
            positions = positions[~torch.isin(positions, self.excluded)]
            self.excluded = torch.cat([self.excluded, positions])
        else:
            self.excluded = positions
        np.subtract.at(self.counts, self.rank[positions].cpu().numpy(), 1)

    def _cut(self, k: int, *, largest: bool) -> tuple[int, int]:
        """The rank the cut falls in, and how many to take from inside it."""
        if self.excluded is not None:
            marker = -1 if largest else len(self.counts)
            self.rank.index_fill_(0, self.excluded, marker)
        return _cut_of(self.counts, k, largest=largest)

    def _pick(self, cand: torch.Tensor, need: int, *, largest: bool) -> torch.Tensor:
        if need == cand.numel():
            return cand
        return cand[_order(self.score(cand), largest=largest)[:need]]

    def top(self, k: int) -> torch.Tensor:
        """Sorted positions of the ``k`` non-excluded elements with the largest score."""
        if k <= 0:
            return torch.zeros(0, dtype=torch.int64, device=self.rank.device)
        cut, need = self._cut(k, largest=True)
        # One pass: the candidates are everything at or above the cut's bucket (k plus a
        # bucket's worth), which is small for the protect fraction.
        cand = kernels.positions(self.rank, cut, _NO_TOP)
        at_cut = self.rank[cand] == cut
        inside = self._pick(cand[at_cut], need, largest=True)
        return torch.cat([cand[~at_cut], inside]).sort().values

    def bottom(self, k: int) -> tuple[torch.Tensor, int, torch.Tensor]:
        """Mask of the ``k`` non-excluded elements with the smallest score.

        Also returns the cut rank (every element ranked below it is selected) and the
        positions picked inside the cut's bucket.
        """
        cut, need = self._cut(k, largest=False)
        mask = self.rank < cut
        inside = torch.zeros(0, dtype=torch.int64, device=self.rank.device)
        if need > 0:
            cand = kernels.positions(self.rank, cut, cut)
            inside = self._pick(cand, need, largest=False)
            mask[inside] = True
        return mask, cut, inside


_NO_TOP = 1 << 30  # above every rank: "at or above the cut"


def _order(score: torch.Tensor, *, largest: bool) -> torch.Tensor:
    """Positions into ``score`` by score (largest or smallest first), ties by position: the
    one order every selection uses, so a cut is a value and a position."""
    return torch.sort(score, descending=largest, stable=True).indices


def _cut_of(counts: np.ndarray, k: int, *, largest: bool) -> tuple[int, int]:
    """The rank a cut of ``k`` falls in (counts by rank), and how many to take from it."""
    rev = counts[::-1] if largest else counts
    csum = np.cumsum(rev)
    j = int(np.searchsorted(csum, k, side="left"))
    before = int(csum[j] - rev[j])
    return (len(counts) - 1 - j if largest else j), k - before


def _count(fraction: float, n: int) -> int:
    return math.floor(fraction * n + 0.5)


def _quantize_finite(
    v: torch.Tensor,
    cfg: QuantConfig,
    s: torch.Tensor | None,
    dtype: torch.dtype,
    bounds: tuple[float, float] | None = None,
    fw: torch.Tensor | None = None,
) -> _Result:
    """Quantize finite values ``v`` (flat, float32/float64). Positions are into ``v``.

    ``bounds`` is ``(min, max)`` of ``v`` when the caller already knows it; ``fw`` the
    per-element weights of the level fit (:func:`quantize`'s ``fit_weights``, flat).
    """
    n = v.numel()
    device = v.device
    if n == 0:  # every entry was non-finite: a lone level, nothing to fit
        return _Result(
            levels=np.zeros(1, dtype=np.float64),
            indices=torch.zeros(0, dtype=torch.uint8, device=device),
            protected=torch.zeros(0, dtype=torch.int64, device=device),
            rel_error=0.0,
            thresholds=torch.zeros(0, dtype=v.dtype, device=device),
            ordinal_to_index=torch.zeros(1, dtype=torch.int64, device=device),
            zero_index=-1,
        )
    if bounds is None:
        lo_t, hi_t = torch.aminmax(v)
        bounds = (float(lo_t), float(hi_t))
    if cfg.log_domain:
        low = bounds[0]
        if low < 0:
            raise UnsupportedValueError(
                f"log_domain=True needs non-negative values, got a minimum of {low!r}; "
                "use log_domain=False for signed tensors"
            )
    sk, codes = build_sketch(v, bounds=bounds)
    cap = sk.cap

    # -- protect and prune (exact counts; ranks from the sketch, ties inside one bucket by value)
    k_protect = _count(cfg.protect, n)
    k_prune = min(_count(cfg.prune, n), n - k_protect)
    by_sensitivity = s is not None
    prune_by_sensitivity = s is not None and cfg.prune_metric == "sensitivity"
    k_mag = (k_protect + 1) // 2 if by_sensitivity else k_protect
    mag_rank: _Ranking | None = None
    sens_rank: _Ranking | None = None
    if k_protect or (k_prune and not prune_by_sensitivity):
        mag_rank = _Ranking(
            kernels.magnitude_rank(codes, cap), sk.magnitude_counts(), lambda pos: v[pos].abs()
        )
    if s is not None and (k_protect > k_mag or (k_prune and prune_by_sensitivity)):
        ssk, scodes = build_sketch(s)
        sens_rank = _Ranking(scodes.sub_(cap), ssk.magnitude_counts(), lambda pos: s[pos])

    protected = torch.zeros(0, dtype=torch.int64, device=device)
    if k_protect:
        assert mag_rank is not None
        protected = mag_rank.top(k_mag)
        if k_protect > k_mag:
            assert sens_rank is not None
            sens_rank.exclude(protected)
            more = sens_rank.top(k_protect - k_mag)
            protected = torch.cat([protected, more]).sort().values

    # -- histogram of the entries left (protected and pruned taken out)
    counts = sk.counts.copy()
    if protected.numel():
        counts -= torch.bincount(codes[protected], minlength=counts.size).cpu().numpy()
    pruned: torch.Tensor | None = None
    if k_prune:
        ranking = sens_rank if prune_by_sensitivity else mag_rank
        assert ranking is not None
        ranking.exclude(protected)
        pruned, cut, inside = ranking.bottom(k_prune)
        if prune_by_sensitivity:
            counts -= torch.bincount(codes[pruned], minlength=counts.size).cpu().numpy()
        else:
            # By magnitude the pruned set is whole buckets below the cut plus the picks in
            # it: no pass over the elements needed. (Protected entries were taken out above
            # and are never pruned.)
            counts[cap - cut + 1 : cap + cut] = 0
            counts -= torch.bincount(codes[inside], minlength=counts.size).cpu().numpy()
    fit = None
    if fw is not None and not cfg.log_domain:
        # the fit's weight of each bucket: Σ fit_weights of its entries left. The entries
        # taken out weigh zero rather than being masked out (a boolean gather of codes and
        # weights cost 7x the count): adding 0.0 leaves every sum exactly as it was.
        left = fw.clone()
        if pruned is not None:
            left.masked_fill_(pruned, 0.0)
        left[protected] = 0.0
        fit = torch.bincount(codes, weights=left, minlength=counts.size).cpu().numpy()
    book = _codebook(v, sk, lambda: codes, counts, cfg, dtype, bounds, fit)

    # -- nearest-level assignment through the bucket codes
    indices = _assign_by_codes(
        v, sk, codes, book.thresholds, book.o2i, book.zero_index, book.levels, cfg.log_domain
    )
    if pruned is not None:
        indices.masked_fill_(pruned, book.prune_index)
    # measured on what decoding gives (levels in the tensor's dtype; pruned entries have the
    # zero level, protected ones their exact value)
    rel = _measure(v, indices, book.values, protected)
    return _Result(book.levels, indices, protected, rel, book.thresholds, book.o2i, book.zero_index)


@dataclass
class _Codebook:
    levels: np.ndarray
    values: torch.Tensor  # what each level decodes to, in the tensor's dtype
    thresholds: torch.Tensor  # value-space cut-offs between consecutive non-zero levels
    o2i: torch.Tensor  # int64: ordinal among non-zero levels -> index in levels
    zero_index: int  # the level standing for exact zero in log domain, or -1
    prune_index: int  # the index a pruned entry gets


def _codebook(
    v: torch.Tensor,
    sk: LogSketch,
    codes: Callable[[], torch.Tensor],
    counts: np.ndarray,
    cfg: QuantConfig,
    dtype: torch.dtype,
    bounds: tuple[float, float],
    fit: np.ndarray | None = None,
) -> _Codebook:
    """The levels fitted to ``counts`` (the sketch of the entries left after protect and
    prune) and the cut-offs between them; ``codes`` gives every value's bucket code, asked
    for only where the levels may be the exact distinct values; ``fit``, per bucket, the
    k-means weights in place of the count and magnitude blend."""
    device = v.device
    cap = sk.cap
    zero_needed = cfg.prune > 0 or (cfg.log_domain and counts[cap] > 0)
    free = cfg.bins - (1 if zero_needed else 0)
    if cfg.log_domain:
        counts[cap] = 0  # zeros are exact in log domain, not part of the fit
    nonzero_levels, nonzero_values, exact = _levels_for(
        v, sk, codes, counts, free, cfg.log_domain, bounds, fit
    )

    # -- assemble the level table: non-zero levels sorted, plus the zero level if needed
    if cfg.log_domain:
        nz = nonzero_levels.copy()
        # A log-level of exactly 0.0 (x = 1) would read as "exact zero": nudge it (exp is 1).
        nz[nz == 0.0] = np.nextafter(0.0, 1.0)
        levels = np.unique(np.concatenate([nz, [0.0]])) if zero_needed else nz
        thresholds_np = _cutoffs(nonzero_values, exact=exact, log_domain=True)
    else:
        levels = nonzero_levels
        if zero_needed:
            levels = np.unique(np.concatenate([levels, [0.0]]))
        thresholds_np = _cutoffs(levels, exact=exact, log_domain=False)
    if levels.size == 0:  # everything pruned, protected or zero: a lone zero level
        levels = np.zeros(1, dtype=np.float64)
    if cfg.log_domain:
        ordinal_to_index = np.searchsorted(levels, nz) if nz.size else np.zeros(1, np.int64)
        zero_index = int(np.searchsorted(levels, 0.0)) if zero_needed else -1
    else:
        ordinal_to_index = np.arange(levels.size)
        zero_index = -1
    thresholds = torch.as_tensor(thresholds_np).to(device=device, dtype=v.dtype)
    o2i = torch.as_tensor(ordinal_to_index, dtype=torch.int64).to(device)
    prune_index = int(np.searchsorted(levels, 0.0)) if zero_index < 0 else zero_index
    values = _level_values(levels, cfg.log_domain, dtype, device)
    return _Codebook(levels, values, thresholds, o2i, zero_index, prune_index)


def _quantize_sketched(
    v: torch.Tensor,
    cfg: QuantConfig,
    dtype: torch.dtype,
    sk: LogSketch,
    step: StepWeights | None = None,
) -> _Result:
    """Quantize finite float32 values ``v`` (flat) by magnitude alone, from their sketch.

    The selections are the same as :func:`_quantize_finite`'s without scores, made without a
    per-element ranking: the cuts are read off the sketch's counts, only the (at most two)
    buckets a cut falls in are looked at value by value (:func:`ckptzip.kernels.members`),
    and each selection becomes a rule on value and position (``|x| > t``, or ``|x| == t``
    at a position ``<= p``) that the one assignment pass applies
    (:func:`ckptzip.kernels.assign_fused`), with the error measured in the same pass.
    ``step``: the level fit's weights, summed per bucket over the entries the rules leave
    (:func:`ckptzip.kernels.fit_sums`), the sums :func:`_quantize_finite` makes of them.
    """
    n = v.numel()
    device = v.device
    assert sk.bounds is not None
    bounds = sk.bounds
    if cfg.log_domain and bounds[0] < 0:
        raise UnsupportedValueError(
            f"log_domain=True needs non-negative values, got a minimum of {bounds[0]!r}; "
            "use log_domain=False for signed tensors"
        )
    cap = sk.cap
    counts = sk.counts.copy()
    k_protect = _count(cfg.protect, n)
    k_prune = min(_count(cfg.prune, n), n - k_protect)
    mag = sk.magnitude_counts()
    # -- the cuts, from the counts alone: protect's from the top, prune's from the bottom
    # of what protect leaves; a cut that takes its whole bucket is a bucket edge
    cut_p = need_p = cut_q = need_q = -1
    whole_p = whole_q = False
    if k_protect:
        cut_p, need_p = _cut_of(mag, k_protect, largest=True)
        whole_p = need_p == mag[cut_p]
        mag[cut_p + 1 :] = 0
        mag[cut_p] -= need_p
    if k_prune:
        cut_q, need_q = _cut_of(mag, k_prune, largest=False)
        whole_q = need_q == mag[cut_q]
    looked = sorted(
        {r for r, whole in ((cut_p, whole_p), (cut_q, whole_q)) if r >= 0 and not whole}
    )
    # no bucket to look into (each cut takes whole buckets): no pass over the values
    ranges = [_bucket_range(sk, r) for r in looked]
    found = dict(zip(looked, kernels.members(v, ranges), strict=True)) if looked else {}

    def signs(pos: torch.Tensor) -> tuple[int, int]:
        neg = int(torch.signbit(v[pos]).sum())
        return neg, pos.numel() - neg

    protect: tuple[float, int] = (math.inf, -1)
    if k_protect:
        counts[: cap - cut_p] = 0
        counts[cap + cut_p + 1 :] = 0
        if whole_p:  # |x| above the bucket's lower edge
            protect = (_bucket_range(sk, cut_p)[0], -1)
            _take(counts, cap, cut_p, None)
        else:
            cand = found[cut_p]
            a = v[cand].abs()
            protect, pick = _rule(cand, a, need_p, largest=True)
            _take(counts, cap, cut_p, signs(cand[pick]))
    prune: tuple[float, int] = (-1.0, -1)
    if k_prune:
        counts[cap - cut_q + 1 : cap + cut_q] = 0
        if whole_q:  # |x| up to the bucket's upper edge, protected values aside
            prune = (_bucket_range(sk, cut_q)[1], n)
            _take(counts, cap, cut_q, None)
        else:
            cand = found[cut_q]
            a = v[cand].abs()
            if k_protect:  # the protected members of that bucket are not candidates
                pt, pp = protect
                free = ~((a > pt) | ((a == pt) & (cand <= pp)))
                cand, a = cand[free], a[free]
            prune, pick = _rule(cand, a, need_q, largest=False)
            _take(counts, cap, cut_q, signs(cand[pick]))

    fit = None
    if step is not None and not cfg.log_domain:
        second = step.second_moment.detach().reshape(-1).to(v.device)
        fit = kernels.fit_sums(v, second, step.eps, edges(sk, v), cap, protect, prune)
    book = _codebook(v, sk, lambda: value_codes(sk, v), counts, cfg, dtype, bounds, fit)
    plan = kernels.Assignment(
        cuts=book.thresholds,
        o2i=book.o2i.cpu().numpy().astype(np.uint8),
        zero_fix=book.zero_index if cfg.log_domain else -1,
        protect=protect,
        n_protected=k_protect,
        prune=(*prune, book.prune_index),
        values=book.values,
    )
    indices, protected, err2, norm2 = kernels.assign_fused(v, plan)
    protected = protected.to(device)
    rel = _measure(v, indices, book.values, protected, (err2, norm2))
    return _Result(book.levels, indices, protected, rel, book.thresholds, book.o2i, book.zero_index)


def _rule(
    cand: torch.Tensor, a: torch.Tensor, need: int, *, largest: bool
) -> tuple[tuple[float, int], torch.Tensor]:
    """The ``need`` largest (or smallest) of ``a`` (candidates at ascending positions
    ``cand``), ties by position, as a rule ``(t, p)`` (``a`` beyond ``t``, or ``a == t`` at a
    position ``<= p``) and the mask of the picks: what :func:`_order` takes, found by a
    selection (linear) instead of a sort."""
    m = a.numel()
    t = a.kthvalue(m - need + 1 if largest else need).values
    beyond = a > t if largest else a < t
    tied = (a == t).nonzero().squeeze(1)
    last = int(tied[need - int(beyond.sum()) - 1])  # the last tie taken, in position order
    pick = beyond.clone()
    pick[tied[tied <= last]] = True
    return (float(t), int(cand[last])), pick


def _bucket_range(sk: LogSketch, rank: int) -> tuple[float, float]:
    """``(lo, hi)`` with ``lo < |x| <= hi`` exactly for the values of magnitude offset
    ``rank``."""
    if rank == 0:
        return (-1.0, 0.0)
    lo = 0.0 if rank == 1 else sk.threshold(rank - 1)
    return (lo, sk.threshold(rank))


def _take(counts: np.ndarray, cap: int, rank: int, signs: tuple[int, int] | None) -> None:
    """Remove ``signs`` = (negative, other) picks of magnitude offset ``rank`` from counts
    (``None``: what is left of both buckets)."""
    if signs is None:
        counts[cap - rank] = counts[cap + rank] = 0
        return
    neg, other = signs
    if rank == 0:
        counts[cap] -= neg + other
    else:
        counts[cap - rank] -= neg
        counts[cap + rank] -= other


def _levels_for(
    v: torch.Tensor,
    sk: LogSketch,
    codes: Callable[[], torch.Tensor],
    counts: np.ndarray,
    free: int,
    log_domain: bool,
    bounds: tuple[float, float],
    fit: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Fit the levels of the entries counted in ``counts`` (the zero level excluded); with
    ``fit`` (per bucket, linear domain), weighted by it instead of count and magnitude.

    Returns the levels (``log`` values in log domain), what they stand for in value space,
    and whether they are the exact distinct values.
    """
    occupied = np.flatnonzero(counts)
    if occupied.size == 0 or free <= 0:
        empty = np.zeros(0, dtype=np.float64)
        return empty, empty, False
    if occupied.size <= free:
        exact = _exact_values(v, codes(), occupied, counts.size)
        if exact is not None:
            return (np.log(exact) if log_domain else exact), exact, True
    centres = sk.centres()[occupied]
    cnt = counts[occupied].astype(np.float64)
    if log_domain:
        pts = np.log(centres)
        w = cnt / cnt.sum()
    else:
        pts = centres
        own = None if fit is None else fit[occupied].astype(np.float64)
        if own is not None and np.isfinite(own.sum()) and own.sum() > 0:
            w = own / own.sum()
        else:
            mag = np.abs(centres)
            w = SIGMA * cnt / cnt.sum()
            with np.errstate(over="ignore"):
                total = mag.sum()
            if not np.isfinite(total):  # float64 values near its limit: the same shares
                mag = mag / mag.max()
                total = mag.sum()
            if total > 0:
                w = w + (1.0 - SIGMA) * mag / total
    lv = fit_levels(pts, w, free)
    # Bucket centres sit up to α beyond the data: keep levels inside the data's range so a
    # float16 level can never round to inf.
    lo, hi = bounds
    if log_domain:
        lv = np.unique(np.minimum(lv, math.log(hi)))
        return lv, np.exp(lv), False
    lv = np.unique(np.clip(lv, lo, hi))
    return lv, lv, False


def _cutoffs(values: np.ndarray, *, exact: bool, log_domain: bool) -> np.ndarray:
    """Value-space cut-offs: an element goes to level ``#{cut-offs < element}``."""
    if values.size < 2:
        return np.zeros(0, dtype=np.float64)
    if exact:
        # Every element equals one of the values: cutting at the lower one is exact and
        # avoids a midpoint that rounds onto a neighbour in the working dtype.
        return values[:-1].copy()
    # Levels beyond about 1e154 overflow the product (log domain), below about 1e-154 it
    # underflows, near float64's largest the sum overflows: those cut-offs are computed
    # another way, every other one with the same bits as always.
    with np.errstate(over="ignore"):
        if log_domain:  # midpoint in log space
            prod = values[1:] * values[:-1]
            lost = ~((prod >= np.finfo(np.float64).tiny) & np.isfinite(prod))
            return np.where(lost, np.sqrt(values[1:]) * np.sqrt(values[:-1]), np.sqrt(prod))
        mid = (values[1:] + values[:-1]) / 2
    return np.where(np.isfinite(mid), mid, values[1:] / 2 + values[:-1] / 2)


def _exact_values(
    v: torch.Tensor, codes: torch.Tensor, occupied: np.ndarray, n_codes: int
) -> np.ndarray | None:
    """The distinct values, when every occupied bucket holds a single distinct value."""
    lo, hi = kernels.bucket_extremes(codes, v, n_codes)
    occ = torch.as_tensor(occupied, device=v.device)
    if not bool((lo[occ] == hi[occ]).all()):
        return None
    return np.unique(lo[occ].double().cpu().numpy())


def _assign_by_codes(
    v: torch.Tensor,
    sk: LogSketch,
    codes: torch.Tensor,
    thresholds: torch.Tensor,
    o2i: torch.Tensor,
    zero_index: int,
    levels: np.ndarray,
    log_domain: bool,
) -> torch.Tensor:
    """Level indices (uint8) by a lookup on the bucket codes."""
    lut, sentinel, zero_fix = _code_lut(sk, thresholds, o2i, zero_index, levels, log_domain)
    return kernels.assign_codes(
        codes, v, lut, sentinel, thresholds, o2i.cpu().numpy().astype(np.uint8), zero_fix
    )


def _code_lut(
    sk: LogSketch,
    thresholds: torch.Tensor,
    o2i: torch.Tensor,
    zero_index: int,
    levels: np.ndarray,
    log_domain: bool,
) -> tuple[np.ndarray, int, int]:
    """The level index of every bucket code (int16), the sentinel marking the buckets that
    hold a cut-off (resolved value by value), and the index of exact zeros (or -1)."""
    n_codes = sk.counts.size
    cap = sk.cap
    # ordinal of each bucket = number of cut-offs in lower buckets; buckets holding a
    # cut-off are "straddling" and resolved element by element.
    tcodes = value_codes(sk, thresholds) if thresholds.numel() else thresholds.to(torch.int32)
    tc = np.sort(tcodes.cpu().numpy().astype(np.int64))
    ordinal = np.searchsorted(tc, np.arange(n_codes), side="left")
    straddle = np.zeros(n_codes, dtype=bool)
    straddle[tc] = True
    o2i_np = o2i.cpu().numpy()
    index_lut = o2i_np[np.minimum(ordinal, o2i_np.size - 1)]
    zero_fix = zero_index if log_domain and zero_index >= 0 else -1
    if zero_fix >= 0:
        index_lut[cap] = zero_index
        straddle[cap] = False
    sentinel = levels.size  # not a valid index: marks straddling buckets
    lut = np.where(straddle, sentinel, index_lut).astype(np.int16)
    return lut, sentinel, zero_fix


def _measure(
    v: torch.Tensor,
    indices: torch.Tensor,
    values: torch.Tensor,
    protected: torch.Tensor,
    sums: tuple[float, float] | None = None,
) -> float:
    """Relative L2 error of decoding ``indices`` to ``values`` (the levels in the tensor's
    dtype), the ``protected`` entries exact, against ``v``; non-finite entries (always
    protected) are left out of both norms. ``sums`` are ``(err2, norm2)`` when a pass
    already measured them (:func:`ckptzip.kernels.assign_fused`)."""
    err2, norm2 = sums if sums is not None else kernels.squared_error(v, indices, values, protected)
    tiny = v.dtype == torch.float64 and norm2 < _TINY_NORM2
    if math.isfinite(err2) and math.isfinite(norm2) and not tiny:
        return _relative_error(err2, norm2)
    # non-finite entries, values near the dtype's maximum that overflow a difference or
    # the sums, or float64 values so small that their squares underflow (a tensor of 1e-200s
    # measured 0.0): measure again in float64, scaled, only then, since it costs extra passes
    v64 = v.double()
    xhat = values.double().index_select(0, indices.long())
    if protected.numel():
        xhat.index_copy_(0, protected, v64[protected])
    finite = torch.isfinite(v64)
    if not bool(finite.all()):
        v64, xhat = v64[finite], xhat[finite]
    scale = float(v64.abs().max()) if v64.numel() else 0.0
    if not scale > 0:
        return 0.0
    d = xhat.sub_(v64).div_(scale)
    return _relative_error(float(d.square().sum()), float(v64.div(scale).square().sum()))


# Below this sum of squares a float64 tensor's squares may have lost their precision to
# underflow (each under 1e-154 is, squared, below float64's smallest normal number).
_TINY_NORM2 = 1e-200


def _relative_error(err2: float, norm2: float) -> float:
    """``sqrt(err2 / norm2)``, rounded to 8 significant digits.

    The rounding makes the recorded figure independent of the order a kernel summed in
    (float64 sums over millions of terms differ in their last bits between orders), so
    both kernel implementations write the same file.
    """
    if norm2 <= 0:
        return 0.0
    return float(f"{math.sqrt(err2 / norm2):.8g}")


def _level_values(
    levels: np.ndarray, log_domain: bool, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """What each level dequantizes to, in ``dtype`` (one function for quantize and dequantize)."""
    lv = np.asarray(levels, dtype=np.float64)
    if log_domain:
        lv = np.where(lv == 0.0, 0.0, np.exp(lv))
    return torch.as_tensor(lv).to(dtype=dtype).to(device)


def level_table(levels: np.ndarray, log_domain: bool, dtype: torch.dtype) -> torch.Tensor:
    """:func:`_level_values` on the CPU padded with zeros to 256 entries: the table the
    decoding kernels index by any byte, made without torch ops for float32 and float64 (a
    chain-end restore makes one for every residual of every link). The same values: NumPy's
    float64 to float32 cast rounds to nearest even, as torch's does.

    Examples
    --------
    >>> t = level_table(np.array([-1.0, 0.5]), False, torch.float32)
    >>> t.shape, t[:3].tolist()
    (torch.Size([256]), [-1.0, 0.5, 0.0])
    """
    if dtype in (torch.float32, torch.float64):
        lv = np.asarray(levels, dtype=np.float64)
        if log_domain:
            lv = np.where(lv == 0.0, 0.0, np.exp(lv))
        out = np.zeros(256, dtype=np.float32 if dtype == torch.float32 else np.float64)
        with np.errstate(over="ignore"):  # beyond float32's range is inf, as torch casts it
            out[: lv.size] = lv
        return torch.from_numpy(out)
    values = _level_values(levels, log_domain, dtype, torch.device("cpu"))
    table = torch.zeros(256, dtype=dtype)
    table[: values.numel()] = values
    return table


def requantize(x: torch.Tensor, q: QuantizedTensor, levels: np.ndarray) -> QuantizedTensor | None:
    """``x``'s quantization ``q`` with its levels replaced by ``levels`` (another codebook).

    What ``q`` decided stays: the protected entries (stored exactly) and the entries it set to
    exactly zero (pruned, or exact zeros of a log-domain tensor). Every other entry takes the
    nearest of ``levels`` (in the log domain for a log-domain config; the zero level there
    stands for exact zero only). ``rel_error`` is measured. A delta chain uses this to keep
    its parent's codebook, so bin indices stay comparable from checkpoint to checkpoint.

    ``None`` when ``levels`` cannot hold ``q``'s decisions: more levels than ``q.config.bins``,
    zeros to keep but no zero level, or no level for the nonzero entries.

    Examples
    --------
    >>> from ckptzip.config import QuantConfig
    >>> x = torch.tensor([0.0, 0.9, 2.1, 3.0])
    >>> q = quantize(x, QuantConfig(bins=4, protect=0.0))
    >>> r = requantize(x, q, np.array([0.0, 1.0, 2.0, 3.0]))
    >>> r.indices.tolist(), round(r.rel_error, 3)
    ([0, 1, 2, 3], 0.038)
    """
    lv = np.asarray(levels, dtype=np.float64)
    cfg = q.config
    if lv.ndim != 1 or not 0 < lv.size <= min(cfg.bins, 256) or (np.diff(lv) < 0).any():
        return None
    flat = x.detach().reshape(-1)
    work = flat if flat.dtype == torch.float64 else flat.to(torch.float32)
    # entries q decoded to exactly zero, read off its levels (no dequantized copy)
    own = _level_values(q.levels, cfg.log_domain, q.dtype, work.device) == 0
    zero_at = np.flatnonzero(lv == 0.0)
    o2i = None
    if cfg.log_domain:
        # the nearest in log space among the non-zero levels: value-space cut-offs at their
        # geometric midpoints, as quantize cuts (no logarithm per entry); the ordinal among
        # the non-zero levels is mapped to the index in lv
        o2i = np.flatnonzero(lv != 0.0)
        if o2i.size == 0:
            return None
        cuts = _cutoffs(np.exp(lv[o2i]), exact=False, log_domain=True)
        mids = torch.as_tensor(cuts).to(device=work.device, dtype=work.dtype)
        o2i = o2i.astype(np.uint8)
    else:
        lv_t = torch.as_tensor(lv)
        mids = ((lv_t[1:] + lv_t[:-1]) / 2).to(device=work.device, dtype=work.dtype)
    # the zeros, the nearest levels and the error in one pass
    values = _level_values(lv, cfg.log_domain, q.dtype, work.device)
    pos = torch.from_numpy(np.ascontiguousarray(q.protected_positions)).to(work.device)
    qidx = np.ascontiguousarray(q.indices).reshape(-1)
    got = kernels.requantize(
        work, qidx, own, pos, mids, int(zero_at[0]) if zero_at.size else -1, values, o2i
    )
    if got is None:
        return None
    idx, err2, norm2 = got
    return QuantizedTensor(
        shape=q.shape,
        dtype=q.dtype,
        config=q.config,
        levels=lv.copy(),
        indices=idx.cpu().numpy(),
        protected_positions=q.protected_positions,
        protected_values=q.protected_values,
        rel_error=_measure(work, idx, values, pos, (err2, norm2)),
    )


# -- validation ------------------------------------------------------------------------------


def _check_inputs(x: torch.Tensor, config: QuantConfig, scores: torch.Tensor | None) -> None:
    if not isinstance(x, torch.Tensor):
        raise UnsupportedValueError(f"quantize needs a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise UnsupportedValueError(
            f"quantize needs a float16/bfloat16/float32/float64 tensor, got dtype={x.dtype}; "
            "store other tensors exactly (codec 'exact')"
        )
    if not isinstance(config, QuantConfig):
        raise ConfigError(f"config must be a QuantConfig, got {type(config).__name__}")
    if scores is not None:
        if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != tuple(x.shape):
            got = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores)
            raise ConfigError(
                f"scores must be a tensor of the tensor's shape {tuple(x.shape)}, got {got}"
            )
        if not scores.is_floating_point():
            raise ConfigError(f"scores must be floating point, got dtype={scores.dtype}")


def _check_quantized(q: QuantizedTensor) -> None:
    if isinstance(q, IndicesOnly):
        raise ValueError(
            "an IndicesOnly tensor (a chain link decoded for its indices alone) lacks its "
            "protected values: it cannot be dequantized"
        )
    n = q.numel
    if q.indices.dtype != np.uint8 or q.indices.size != n:
        raise CorruptCheckpointError(
            f"indices must be {n} uint8 values, got {q.indices.size} of {q.indices.dtype}"
        )
    if n and q.levels.size == 0:
        raise CorruptCheckpointError("a non-empty quantized tensor has no levels")
    if n and int(q.indices.max()) >= q.levels.size:
        raise CorruptCheckpointError(
            f"index {int(q.indices.max())} is beyond the {q.levels.size} levels"
        )
    pos = q.protected_positions
    if pos.size:
        if pos.ndim != 1 or int(pos.min()) < 0 or int(pos.max()) >= n:
            raise CorruptCheckpointError(f"protected positions fall outside [0, {n})")
        if q.protected_values.numel() != pos.size:
            raise CorruptCheckpointError(
                f"{pos.size} protected positions but {q.protected_values.numel()} values"
            )
