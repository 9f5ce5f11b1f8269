"""Per-checkpoint configuration search: the most aggressive quantization within a tolerance.

One :class:`~ckptzip.config.QuantConfig` is chosen per *layer type* (``linear``, ``conv``,
``embedding``, ``norm``, ``other``: the type of the module that holds a parameter), from the
cube below, each axis ordered from least to most aggressive::

    bins     256, 128, 64, 32, 16, 12, 8, 6, 4     (embeddings: 256, 128, 64, 32, 16)
    prune    0, .1, .2, .3, .4, .5
    protect  .01, .005, .0005
    metric   magnitude | sensitivity      (sensitivity only when gradient scores are given)

A configuration is *feasible* when the user's ``eval_fn(model)`` (lower is better) with the
quantized weights loaded stays within ``baseline + tolerance·|baseline|`` of the exact weights'
value (and within what training gained per checkpoint interval, ``earlier=``), and every
searched tensor's relative L2 error ``||ŵ − w|| / ||w||`` stays within ``error_budget``
(0.1): what a restore costs training lasts and adds up over restores, so the size of the
perturbation is bounded too, not only ``eval_fn`` right after it (a point over the budget
costs no evaluation).
Without ``eval_fn`` the error budget alone is the rule (the result says so).

**Full search** (first checkpoint, or when the neighbourhood has nothing feasible). Quality is
taken as monotone along each axis, so:

1. *Diagonal.* Point ``d`` (0..5) puts every axis of every type at ``round(d·(n−1)/5)`` of its
   ``n`` levels. The feasible part of the diagonal is a prefix; bisection finds its end ``d*``
   in at most 3 trials (when even ``d = 0`` fails, everything searched stays exact and a
   :class:`~ckptzip.errors.SearchGaveUpWarning` says so, naming the mildest point's quality).
2. *Sub-cube.* From the diagonal point ``d*``, for each type (largest first) and each axis in
   the order bins, prune, protect, bisect the most aggressive feasible level between the
   current one and the end of the axis, the other coordinates fixed (``ceil(log2(k+1))``
   trials for ``k`` untried levels, so at most 4).
3. *Metric.* With gradient scores, each type that prunes at all and could prune more tries the
   other metric one prune level further (1 trial); it is kept when feasible.

So a model with ``t`` searched layer types costs at most ``3 + 12t`` evaluations (4 + 3 + 2
bisection steps on the axes, the metric trial and up to 2 more prune steps after it),
typically about ``3 + 5t``, plus one evaluation of the exact weights.

*Budget first.* With ``eval_fn``, the walk above is first made by the error budget alone
(every point decided by quantizing, none evaluated); its end point is then evaluated once,
and when it passes it is the answer: the walk with evaluations takes the same path wherever
``eval_fn`` holds at every point it passes, so it would have ended there too. Only when that
end point fails does the walk with evaluations run (the budget's verdicts are known by then).
So the usual first checkpoint costs 1 trial (on ``benchmarks/throughput.py --quick``:
4 before), at most one more than the walk with evaluations alone. A point's budget check
stops at the first tensor over the budget.

**Neighbourhood search** (later checkpoints, given ``previous``): never more aggressive than the
previous choice. The previous configuration is tried first (1 trial, the usual outcome); when
it fails, the two single-axis steps back toward precision that leave the least total squared
weight error (measured by quantizing, no evaluation) are tried, and the first feasible one
wins; then one step back on every axis at once; then the full search. So a later checkpoint
costs 1 evaluation usually and 4 at most before falling back to the full search.

**Ratio estimate.** No file is written during the search: a candidate's size is estimated
from the quantizer's output, as the order-0 entropy of its indices (capped at the packed bit
width), plus the exact protected values with a 4-byte position each, plus the codebook. It ranks
candidates and is reported as ``estimated_ratio``; the real ratio comes from the saved file
(and is lower while the "quant" codec stores bit-packed indices through zstd, which stays
above the order-0 entropy: 11.9x written against 16x estimated on the ``mlp`` workload).

**Trials never touch the live model for good.** A trial swaps quantized tensors into the
parameters' ``.data`` and restores the original tensor objects (and a copy of every buffer,
in case ``eval_fn`` runs the model in training mode) in a ``finally`` block.

**Optimizer state** (decision: no separate codec). The "quant" codec already does all the
moments need, so :func:`search` only chooses per-path configs for them, by the rules of
:mod:`ckptzip.plan` (:class:`~ckptzip.plan.MomentPolicy`):

* ``exp_avg`` (Adam/AdamW) and SGD's ``momentum_buffer``: quantized with
  :attr:`MomentPolicy.first_bins` levels, exact zeros kept exact (a moment that is almost all
  zeros is stored exactly). ExCP's rule, pruning them where the weight is pruned, is available
  (``MomentPolicy(prune_first=True)``: the moment gets its weight's prune fraction and, through
  :func:`save_scores`, the weight's own pruning scores) but off by default, because it
  measured worse for training after a restore.
* ``exp_avg_sq`` and AMSGrad's ``max_exp_avg_sq`` are positive with a dynamic range of many
  decades: quantized in the log domain with :attr:`MomentPolicy.second_bins` levels, never
  pruned (a zero second moment under a nonzero first moment would blow up the next Adam
  update).
* the moments of a weight that is exact only because it is small (fewer than
  ``base.min_numel`` elements: biases, norms) stay exact by default; with
  ``base.moment_min_numel`` set they follow the same policy, down to that many elements
  (:func:`ckptzip.plan.small_weight`). The moments of weights exact for any other reason
  always stay exact.
* step counters, hyper-parameters and every other optimizer tensor stay exact.

**Moments judged by training after a restore** (``probe_fn``, optional). After the weight
search, the moments' policy is chosen from :func:`moment_ladder` (the given policy first, then
fewer levels) by what training does next: the probe (a few training steps on fixed batches)
runs from the exact state and ``eval_fn`` gives the reference; a rung is feasible when the
same probe, started from the searched weights and that rung's quantized moments, ends within
``tolerance`` of it. Bisection over the rungs (at most 3 probes for 5), every probe from the
same RNG states; the live state is put back exactly afterwards (:class:`_Isolated`). The
result says what it cost (:class:`ProbeResult`).

**Which tensors are searched** is the plan's rule too (:func:`ckptzip.plan.exact_reason`):
floating-point parameters of at least ``base.min_numel`` elements, not 0-d, not float8, not
matched by ``base.exact``. Tied parameters (one tensor under two names) are searched once and
both names get its config.

**Quantize once.** The quantized tensors of the accepted configuration are returned in
:attr:`SearchResult.prequantized`; :func:`ckptzip.save` stores them as they are (the file holds
exactly what the search evaluated) as long as the weights were not modified since.

The effect of these choices on training after a restore is measured by
``benchmarks/search.py --optimizer`` and checked in ``tests/test_manager_model.py``.
"""

from __future__ import annotations

import copy
import itertools
import math
import random
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from ckptzip._parallel import default_threads, encoding_pool, map_on_encoding_threads
from ckptzip._types import QuantizedTensor, StepWeights
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.entropy import order0_entropy_bits
from ckptzip.errors import ConfigError, ProbeError, SearchGaveUpWarning
from ckptzip.packing import bits_for
from ckptzip.plan import (
    FIRST_MOMENT_KEYS,
    SMALL_WEIGHT,
    MomentPolicy,
    Planner,
    Prequantized,
    exact_reason,
    fingerprint,
    moment_configs,
    small_weight,
    state_indices,
    step_weights,
)
from ckptzip.quantize import dequantize, quantize, sketch_of
from ckptzip.sketch import LogSketch

__all__ = [
    "AXES",
    "LAYER_TYPES",
    "MomentPolicy",
    "ProbeFn",
    "ProbeResult",
    "SearchResult",
    "check_options",
    "for_residuals",
    "layer_types",
    "moment_ladder",
    "allowance_per_interval",
    "save_scores",
    "search",
]

LayerType = Literal["linear", "conv", "embedding", "norm", "other"]
ProbeFn = Callable[[nn.Module, torch.optim.Optimizer], None]
"""``probe_fn(model, optimizer)``: a few training steps on fixed batches (see :func:`search`)."""
LAYER_TYPES: tuple[LayerType, ...] = ("linear", "conv", "embedding", "norm", "other")

# Every axis from least to most aggressive; the search walks level indices into these.
AXES: dict[str, tuple[Any, ...]] = {
    # The mild end reaches 8 bits: a tensor the loss is very sensitive to (an output head
    # tied to the embedding table, whose error enters every logit) needs more than 32 levels,
    # and without them the whole search failed at its mildest point and stored every tensor
    # exact (a byte-level tied transformer: +4 % eval_fn from its embedding alone at 32 bins).
    "bins": (256, 128, 64, 32, 16, 12, 8, 6, 4),
    "prune": (0.0, 0.1, 0.2, 0.3, 0.4, 0.5),
    "protect": (0.01, 0.005, 0.0005),
}
_EMBEDDING_BINS = (256, 128, 64, 32, 16)
_AXIS_ORDER = ("bins", "prune", "protect")
_DIAGONAL = 5  # diagonal points 0..5: bisected in at most 3 trials, each axis spread over them
_SINGLE_STEPS_TRIED = 2  # neighbourhood: single-axis steps back evaluated before stepping all
# A trial's quantizing of fewer elements than this runs in the caller's thread: on the `mlp`
# workload (tensors of 8-33K elements) handing every trial to threads raised the search's
# share of training from 54.7 % to 87.1 % at the first checkpoint (benchmarks/search.py).
_INLINE_NUMEL = 1 << 17

_NORMS: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._NormBase,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
)
_CONVS = (nn.modules.conv._ConvNd,)
_EMBEDDINGS = (nn.Embedding, nn.EmbeddingBag)
_LINEARS = (nn.Linear, nn.Bilinear, nn.MultiheadAttention)
if hasattr(nn, "RMSNorm"):
    _NORMS = (*_NORMS, nn.RMSNorm)


def _module_type(module: nn.Module) -> LayerType:
    if isinstance(module, _EMBEDDINGS):
        return "embedding"
    if isinstance(module, _CONVS):
        return "conv"
    if isinstance(module, _NORMS):
        return "norm"
    if isinstance(module, _LINEARS):
        return "linear"
    return "other"


def layer_types(model: nn.Module) -> dict[str, LayerType]:
    """The layer type of every parameter, from the module that directly holds it.

    ``nn.MultiheadAttention``'s own projection weights count as ``linear``; a bare
    ``nn.Parameter`` of a custom module (a positional table, say) is ``other``.

    Examples
    --------
    >>> m = nn.Sequential(nn.Embedding(10, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    >>> layer_types(m)
    {'0.weight': 'embedding', '1.weight': 'norm', '1.bias': 'norm', '2.weight': 'linear', \
'2.bias': 'linear'}
    """
    out: dict[str, LayerType] = {}
    for mod_name, module in model.named_modules():
        kind = _module_type(module)
        for p_name, _ in module.named_parameters(recurse=False):
            out[f"{mod_name}.{p_name}" if mod_name else p_name] = kind
    return out


# -- configurations as level vectors -------------------------------------------------------


def _levels(kind: str, axis: str) -> tuple[Any, ...]:
    if axis == "bins" and kind == "embedding":
        return _EMBEDDING_BINS
    return AXES[axis]


@dataclass(frozen=True)
class _Point:
    """One point of the cube: per layer type, level indices into (bins, prune, protect) and
    the prune metric."""

    levels: tuple[tuple[str, tuple[int, int, int], str], ...]

    def get(self, kind: str) -> tuple[tuple[int, int, int], str]:
        for k, lv, metric in self.levels:
            if k == kind:
                return lv, metric
        raise KeyError(kind)

    def with_level(self, kind: str, axis: str, level: int) -> _Point:
        i = _AXIS_ORDER.index(axis)
        out = []
        for k, lv, metric in self.levels:
            if k == kind:
                lv = (*lv[:i], level, *lv[i + 1 :])  # type: ignore[assignment]
            out.append((k, lv, metric))
        return _Point(tuple(out))

    def with_metric(self, kind: str, metric: str) -> _Point:
        return _Point(tuple((k, lv, metric if k == kind else m) for k, lv, m in self.levels))

    def config(self, kind: str) -> QuantConfig:
        lv, metric = self.get(kind)
        bins, prune, protect = (_levels(kind, a)[i] for a, i in zip(_AXIS_ORDER, lv, strict=True))
        return QuantConfig(bins=bins, prune=prune, protect=protect, prune_metric=metric)  # type: ignore[arg-type]

    @classmethod
    def diagonal(cls, kinds: Iterable[str], d: int, metrics: Mapping[str, str]) -> _Point:
        rows = []
        for k in kinds:
            lv = tuple(round(d * (len(_levels(k, a)) - 1) / _DIAGONAL) for a in _AXIS_ORDER)
            rows.append((k, lv, metrics[k]))
        return cls(tuple(rows))  # type: ignore[arg-type]

    @classmethod
    def from_configs(cls, configs: Mapping[str, QuantConfig]) -> _Point | None:
        """The point of a previous choice, or None when a value is off the cube."""
        rows = []
        for k, cfg in configs.items():
            values = (cfg.bins, cfg.prune, cfg.protect)
            try:
                lv = tuple(_levels(k, a).index(v) for a, v in zip(_AXIS_ORDER, values, strict=True))
            except ValueError:
                return None
            rows.append((k, lv, cfg.prune_metric))
        return cls(tuple(rows))  # type: ignore[arg-type]


# -- the result ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeResult:
    """How :func:`search` chose the moments' storage by training after a restore.

    Attributes
    ----------
    moments:
        The chosen :class:`MomentPolicy`.
    level:
        Its index in ``ladder`` (0: the least aggressive, the policy :func:`search` was given).
    ladder:
        The candidates, least to most aggressive (:func:`moment_ladder`).
    trials:
        Probes run with quantized state (the reference probe from the exact state not counted).
    seconds:
        Wall time of the reference probe and the trials, quantizing the moments included.
    reference:
        ``eval_fn`` after ``probe_fn`` from the exact weights and optimizer state.
    quality:
        ``eval_fn`` after ``probe_fn`` from the chosen quantized state (``None`` when level 0
        was kept without a trial because every more aggressive one failed).
    tolerance:
        The relative tolerance against ``reference`` that a candidate had to hold.
    """

    moments: MomentPolicy
    level: int
    ladder: tuple[MomentPolicy, ...]
    trials: int
    seconds: float
    reference: float
    quality: float | None
    tolerance: float

    def to_json(self) -> dict[str, Any]:
        return {
            "moments": asdict(self.moments),
            "level": self.level,
            "ladder": [[m.first_bins, m.second_bins, m.first_prune] for m in self.ladder],
            "trials": self.trials,
            "seconds": self.seconds,
            "reference": self.reference,
            "quality": self.quality,
            "tolerance": self.tolerance,
        }


@dataclass(frozen=True)
class SearchResult:
    """What :func:`search` chose, and what it cost.

    Attributes
    ----------
    layer_configs:
        Layer type → chosen :class:`QuantConfig`, or ``None`` when that type stays exact
        (only types with at least one searched tensor appear).
    config:
        The :class:`CompressionConfig` to pass to :func:`ckptzip.save`: per-path overrides for
        every searched weight (and the optimizer moments when an optimizer was given), every
        other model and optimizer tensor exact.
    mode:
        ``"eval"`` (feasibility by ``eval_fn``) or ``"data-free"`` (by the per-tensor
        relative error budget, because no ``eval_fn`` was given).
    strategy:
        ``"full"``, ``"neighbourhood"``, ``"none"`` (nothing to search) or ``"residual"``
        (a delta save with error feedback, :func:`for_residuals`: the weights are stored as
        residuals, so none was searched; the configs are the previous result's).
    trials:
        Quantize-and-evaluate trials run (the baseline evaluation not counted).
    seconds:
        Wall time of the whole search.
    baseline:
        ``eval_fn`` with the exact weights (``None`` in data-free mode).
    quality:
        ``eval_fn`` with the chosen configuration; in data-free mode the largest relative
        error of a searched tensor.
    tolerance:
        The relative tolerance (eval mode) or error budget (data-free mode) applied.
    estimated_ratio:
        Estimated compression ratio of the searched weights alone (see the module docstring).
    paths:
        Tensor path → layer type of every searched weight.
    note:
        One line for reports (says when the data-free rule was used or nothing was feasible).
    prequantized:
        Tensor path → the searched weight quantized with its chosen config, as evaluated;
        pass it to :func:`ckptzip.save` (``prequantized=``) to store it without quantizing
        again (empty when nothing was chosen).
    moments:
        The :class:`MomentPolicy` the optimizer's moments follow in ``config``.
    probe:
        How ``moments`` was chosen by training after a restore (``None`` without ``probe_fn``).
    limit:
        The largest ``eval_fn`` a feasible configuration could reach: ``baseline`` plus the
        smaller of ``tolerance·|baseline|`` and :func:`allowance_per_interval` over ``earlier``
        (``None`` in data-free mode).
    """

    layer_configs: Mapping[str, QuantConfig | None]
    config: CompressionConfig
    mode: Literal["eval", "data-free"]
    strategy: Literal["full", "neighbourhood", "none", "residual"]
    trials: int
    seconds: float
    baseline: float | None
    quality: float | None
    tolerance: float
    estimated_ratio: float
    paths: Mapping[str, str] = field(default_factory=dict)
    note: str = ""
    prequantized: Mapping[str, Prequantized] = field(
        default_factory=dict, repr=False, compare=False
    )
    moments: MomentPolicy = field(default_factory=MomentPolicy)
    probe: ProbeResult | None = None
    limit: float | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able summary (the per-path config is left out: see ``config.to_json()``)."""
        return {
            "layer_configs": {
                k: (None if v is None else v.to_json()) for k, v in self.layer_configs.items()
            },
            "mode": self.mode,
            "strategy": self.strategy,
            "trials": self.trials,
            "seconds": self.seconds,
            "baseline": self.baseline,
            "quality": self.quality,
            "tolerance": self.tolerance,
            "limit": self.limit,
            "estimated_ratio": self.estimated_ratio,
            "note": self.note,
            "moments": asdict(self.moments),
            "probe": None if self.probe is None else self.probe.to_json(),
        }


# -- trials --------------------------------------------------------------------------------


def _estimated_bytes(x: torch.Tensor, q: QuantizedTensor) -> float:
    """Bytes the quantized tensor should take after entropy coding (see module docstring)."""
    n = x.numel()
    entropy = order0_entropy_bits(q.indices) / max(n, 1)
    index_bits = min(entropy, float(bits_for(max(len(q.levels), 2))))
    protected = len(q.protected_positions) * (x.element_size() + 4)
    return n * index_bits / 8 + protected + 8 * len(q.levels) + 64


class _Evaluator:
    """Runs trials: quantize the searched tensors for a point, load them, measure quality.

    The quantizing (and dequantizing) of a trial runs on the encoding threads, every tensor
    it needs at once: their torch ops then run without an OpenMP team each, and tensors in
    parallel (the kernels release the GIL). A batch smaller than :data:`_INLINE_NUMEL`
    elements runs in the caller's thread instead: on a tiny model handing it to threads
    cost more than the work. One pool serves the whole search (:meth:`close`). Each
    tensor's sketch (the quantizer's first pass) is made once and reused by every trial.
    Caches are filled in the caller's thread only.
    """

    def __init__(
        self,
        model: nn.Module,
        params: dict[str, tuple[str, nn.Parameter]],
        eval_fn: Callable[[nn.Module], float] | None,
        scores: Mapping[str, torch.Tensor],
    ) -> None:
        self.model = model
        self.params = params  # name -> (layer type, parameter)
        self.eval_fn = eval_fn
        self.scores = scores
        # name -> {config: dequantized tensor}, two configs per tensor at most: a trial changes
        # one type, so the incumbent's tensors of the other types are reused.
        self._tensors: dict[str, dict[QuantConfig, torch.Tensor]] = {}
        # (name, config) -> relative error: small, kept for the whole search (the estimated
        # bytes are computed for the chosen point only: the indices' entropy is a pass of
        # its own, 13 % of a trial's quantizing when every trial paid it)
        self._stats: dict[tuple[str, QuantConfig], float] = {}
        self._norms: dict[str, float] = {}
        self._last_error: dict[str, float] = {}  # name -> its latest quantization's error
        # The quantizer's outputs: the two latest per tensor, and those of the latest feasible
        # point (what the search returns for save to store without quantizing again).
        self._recent: dict[str, dict[QuantConfig, QuantizedTensor]] = {}
        self._accepted: dict[tuple[str, QuantConfig], QuantizedTensor] = {}
        # name -> the tensor's sketch (None where the quantizer sketches its own way: with
        # sensitivity scores, float64 or non-finite values); the weights do not change
        # during a search
        self._sketches: dict[str, LogSketch | None] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.trials = 0

    def close(self) -> None:
        """Stop the search's encoding threads (idempotent)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _map(self, fn: Callable[[Any], Any], items: Sequence[Any], numel: int) -> list[Any]:
        """``[fn(x) for x in items]``: inline when the batch is small (``numel`` elements in
        all), else on the search's encoding threads."""
        if numel < _INLINE_NUMEL:
            return [fn(x) for x in items]
        if self._pool is None:
            self._pool = encoding_pool(default_threads(), "ckptzip-search")
        return list(self._pool.map(fn, items))

    def quantized(self, name: str, cfg: QuantConfig) -> QuantizedTensor:
        """``name`` quantized with ``cfg``: from the caches, or quantized now."""
        q = self._cached(name, cfg)
        if q is None:  # its statistics or dequantized tensor may be cached, the output not
            self._prepare([(name, cfg)], keep=False, force=True)
            q = self._recent[name][cfg]
        return q

    def _cached(self, name: str, cfg: QuantConfig) -> QuantizedTensor | None:
        return self._accepted.get((name, cfg)) or self._recent.get(name, {}).get(cfg)

    def _numel(self, name: str) -> int:
        return self.params[name][1].numel()

    def _sketch(self, names: Iterable[str]) -> None:
        """Make the sketches of ``names`` not made yet (the sensitivity path has its own)."""
        todo = [n for n in dict.fromkeys(names) if n not in self._sketches]
        with_scores = [n for n in todo if n in self.scores]
        self._sketches.update(dict.fromkeys(with_scores))
        todo = [n for n in todo if n not in self.scores]
        made = self._map(
            lambda n: sketch_of(self.params[n][1].detach()),
            todo,
            sum(map(self._numel, todo)),
        )
        self._sketches.update(zip(todo, made, strict=True))

    def accept(self, point: _Point) -> None:
        """Keep the quantized tensors of a feasible point (the last one is the search's)."""
        self._accepted = {
            (n, point.config(k)): self.quantized(n, point.config(k))
            for n, (k, _) in self.params.items()
        }

    def _prepare(
        self, wanted: Iterable[tuple[str, QuantConfig]], *, keep: bool, force: bool = False
    ) -> None:
        """Quantize every ``(name, config)`` in ``wanted`` whose statistics (``keep``: whose
        dequantized tensor; ``force``: whose quantizer output) are not cached yet, on the
        encoding threads, and cache them."""
        jobs: dict[tuple[str, QuantConfig], QuantizedTensor | None] = {}
        for name, cfg in wanted:
            if force:
                done = self._cached(name, cfg) is not None
            elif keep:
                done = cfg in self._tensors.get(name, {})
            else:
                done = (name, cfg) in self._stats
            if not done and (name, cfg) not in jobs:
                jobs[name, cfg] = self._cached(name, cfg)

        self._sketch([name for name, _ in jobs if jobs[name, _] is None])

        def run(
            job: tuple[tuple[str, QuantConfig], QuantizedTensor | None],
        ) -> tuple[QuantizedTensor, bool, torch.Tensor | None]:
            (name, cfg), q = job
            x = self.params[name][1].detach()
            fresh = q is None
            if q is None:
                q = quantize(x, cfg, scores=self.scores.get(name), sketch=self._sketches[name])
            out = dequantize(q, device=x.device).reshape(x.shape) if keep else None
            return q, fresh, out

        items = list(jobs.items())
        results = self._map(run, items, sum(self._numel(name) for (name, _), _ in items))
        for (name, cfg), (q, fresh, out) in zip(jobs, results, strict=True):
            if fresh:
                self._stats[name, cfg] = self._last_error[name] = float(q.rel_error)
                recent = self._recent.setdefault(name, {})
                while len(recent) >= 2:
                    recent.pop(next(iter(recent)))
                recent[cfg] = q
            if out is not None:
                per = self._tensors.setdefault(name, {})
                while len(per) >= 2:
                    per.pop(next(iter(per)))
                per[cfg] = out

    def _error(self, name: str, cfg: QuantConfig) -> float:
        self._prepare([(name, cfg)], keep=False)
        return self._stats[name, cfg]

    def _point_items(self, point: _Point) -> list[tuple[str, QuantConfig]]:
        return [(n, point.config(k)) for n, (k, _) in self.params.items()]

    def estimated_ratio(self, point: _Point | None) -> float:
        """Estimated ratio of the searched weights at ``point`` (no evaluation counted)."""
        exact = sum(p.numel() * p.element_size() for _, p in self.params.values())
        if point is None:
            return 1.0
        items = self._point_items(point)
        self._prepare(items, keep=False)
        quantized = [(self.params[n][1].detach(), self.quantized(n, cfg)) for n, cfg in items]
        numel = sum(self._numel(n) for n, _ in items)
        est = sum(self._map(lambda xq: _estimated_bytes(*xq), quantized, numel))
        return exact / est if est > 0 else 1.0

    def squared_errors(self, points: Sequence[_Point]) -> list[float]:
        """``Σ ||ŵ − w||²`` over the searched weights at each point (no evaluation counted;
        the quantizations they need run together)."""
        if not self._norms:
            for n, (_, p) in self.params.items():
                self._norms[n] = float(torch.linalg.vector_norm(p.detach().float()))
        self._prepare([item for pt in points for item in self._point_items(pt)], keep=False)
        return [
            sum((self._error(n, cfg) * self._norms[n]) ** 2 for n, cfg in self._point_items(pt))
            for pt in points
        ]

    def max_error(self, point: _Point, *, over: float = math.inf) -> float:
        """The largest relative L2 error of a searched tensor at ``point`` (no evaluation).

        With ``over``, stop as soon as one tensor's error exceeds it (the point is decided)
        and return that error: the tensors likeliest to exceed (largest error at their
        latest quantization, then largest) are quantized first, one per encoding thread,
        and the rest together only when none of those exceeded.
        """
        items = self._point_items(point)
        known = [self._stats[item] for item in items if item in self._stats]
        worst = max(known, default=0.0)
        todo = [item for item in items if item not in self._stats]
        if worst > over or not todo:
            return worst
        if math.isinf(over):
            self._prepare(todo, keep=False)
            return max(worst, *(self._stats[item] for item in todo))
        todo.sort(key=lambda item: (-self._last_error.get(item[0], 0.0), -self._numel(item[0])))
        first = max(1, default_threads())
        for chunk in (todo[:first], todo[first:]):
            if not chunk or worst > over:
                break
            self._prepare(chunk, keep=False)
            worst = max(worst, *(self._stats[item] for item in chunk))
        return worst

    def quality(self, point: _Point, *, over: float = math.inf) -> float:
        """eval_fn with the point's weights loaded, or the largest relative error (data-free;
        ``over``: as in :meth:`max_error`)."""
        self.trials += 1
        items = self._point_items(point)
        if self.eval_fn is None:
            return self.max_error(point, over=over)
        self._prepare(items, keep=True)
        weights = {n: self._tensors[n][cfg] for n, cfg in items}
        return _evaluate_with(self.model, self.params, weights, self.eval_fn)


def _evaluate_with(
    model: nn.Module,
    params: Mapping[str, tuple[str, nn.Parameter]],
    weights: Mapping[str, torch.Tensor],
    eval_fn: Callable[[nn.Module], float],
) -> float:
    """``eval_fn(model)`` with ``weights`` swapped into the parameters, then put back exactly."""
    originals = {n: params[n][1].data for n in weights}
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    training = model.training
    try:
        for n, w in weights.items():
            params[n][1].data = w
        return float(eval_fn(model))
    finally:
        for n, data in originals.items():
            params[n][1].data = data
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        model.train(training)


# -- the search ----------------------------------------------------------------------------


class _Walk:
    """The state of one search: the feasibility rule and the trial log.

    ``evaluate=False``: a walk by the error budget alone (``limit`` is the budget), which
    quantizes but never evaluates, counts no trials and keeps no quantized outputs.
    """

    def __init__(
        self,
        ev: _Evaluator,
        limit: float,
        budget: float | None = None,
        *,
        evaluate: bool = True,
    ) -> None:
        self.ev = ev
        self.limit = limit
        self.budget = budget  # with eval_fn: the largest relative error of a searched tensor
        self.evaluate = evaluate
        self.seen: dict[_Point, float] = {}

    def feasible(self, point: _Point) -> bool:
        if point not in self.seen:
            if not self.evaluate:
                self.seen[point] = self.ev.max_error(point, over=self.limit)
            else:
                budget = self.budget
                coarse = budget is not None and self.ev.max_error(point, over=budget) > budget
                # too coarse to be restored without a lasting cost: no evaluation spent on it
                self.seen[point] = math.inf if coarse else self.ev.quality(point, over=self.limit)
        q = self.seen[point]
        ok = not math.isnan(q) and q <= self.limit
        if ok and self.evaluate:
            self.ev.accept(point)
        return ok

    def search(self, kinds: list[str], metrics: Mapping[str, str]) -> _Point | None:
        """The full search. With an error budget, first the walk by the budget alone
        (quantizing, no evaluation); when its end point also passes ``eval_fn`` (one trial)
        that is the answer, since the walk with evaluations would have taken the same path
        wherever ``eval_fn`` held at every point it passed. Otherwise the walk with
        evaluations (the budget's verdicts already known)."""
        if self.evaluate and self.budget is not None:
            guess = _Walk(self.ev, self.budget, evaluate=False).full(kinds, metrics)
            if guess is not None and self.feasible(guess):
                return guess
        return self.full(kinds, metrics)

    def full(self, kinds: list[str], metrics: Mapping[str, str]) -> _Point | None:
        diag = [_Point.diagonal(kinds, d, metrics) for d in range(_DIAGONAL + 1)]
        lo, hi = -1, _DIAGONAL  # the last feasible index lies in [lo, hi]; -1: none
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.feasible(diag[mid]):
                lo = mid
            else:
                hi = mid - 1
        if lo < 0:
            return None
        point = diag[lo]
        for kind in kinds:
            for axis in _AXIS_ORDER:
                point = self._climb(point, kind, axis)
            lv, metric = point.get(kind)
            prune_levels = len(AXES["prune"])
            if self.ev.scores and lv[1] > 0 and lv[1] + 1 < prune_levels:
                other = "magnitude" if metric == "sensitivity" else "sensitivity"
                cand = point.with_metric(kind, other).with_level(kind, "prune", lv[1] + 1)
                if self.feasible(cand):
                    point = self._climb(cand, kind, "prune")
        return point

    def _climb(self, point: _Point, kind: str, axis: str) -> _Point:
        """Bisect the most aggressive feasible level of one axis, the rest fixed."""
        i = _AXIS_ORDER.index(axis)
        lo = point.get(kind)[0][i]  # feasible
        hi = len(_levels(kind, axis)) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.feasible(point.with_level(kind, axis, mid)):
                lo = mid
            else:
                hi = mid - 1
        return point.with_level(kind, axis, lo)

    def neighbourhood(self, previous: _Point) -> _Point | None:
        if self.feasible(previous):
            return previous
        backs = []
        for kind, lv, _ in previous.levels:
            for i, axis in enumerate(_AXIS_ORDER):
                if lv[i] > 0:
                    backs.append(previous.with_level(kind, axis, lv[i] - 1))
        # Smallest total weight error first (measured by quantizing, much cheaper than an
        # evaluation): the step that removes the most error is the likeliest to be feasible.
        # When the best two fail, the others (leaving more error) rarely pass: go straight to
        # one step back everywhere instead of paying one evaluation per axis and type.
        errors = dict(zip(backs, self.ev.squared_errors(backs), strict=True))
        for point in sorted(backs, key=errors.__getitem__)[:_SINGLE_STEPS_TRIED]:
            if self.feasible(point):
                return point
        all_back = previous
        for kind, lv, _ in previous.levels:
            for i, axis in enumerate(_AXIS_ORDER):
                all_back = all_back.with_level(kind, axis, max(lv[i] - 1, 0))
        if all_back != previous and self.feasible(all_back):
            return all_back
        return None


# -- moments judged by training after a restore --------------------------------------------

# Levels of each ladder rung relative to the policy's own: a quarter fewer each time, to 2.
# (A further rung pruning half of each first moment was measured and not kept: on a small CNN
# it passed the probe and cost 11-18 % of final loss over runs with 4 and 10 restores.)
_LADDER_SCALES = (1.0, 0.75, 0.5, 0.375, 0.25)


def moment_ladder(policy: MomentPolicy) -> tuple[MomentPolicy, ...]:
    """Moment policies from ``policy`` (first) to the most aggressive, fewer levels each step.

    Examples
    --------
    >>> [(m.first_bins, m.second_bins) for m in moment_ladder(MomentPolicy())]
    [(8, 16), (6, 12), (4, 8), (3, 6), (2, 4)]
    >>> compact = MomentPolicy(3, second_bins=8, first_prune=0.5)
    >>> [(m.first_bins, m.second_bins) for m in moment_ladder(compact)]
    [(3, 8), (3, 6), (3, 4), (3, 3), (3, 2)]
    """
    out: list[MomentPolicy] = []
    # a pruned first moment needs a level on each side of its exact zero
    first_floor = 3 if policy.first_prune > 0 else 2
    for scale in _LADDER_SCALES:
        rung = replace(
            policy,
            first_bins=max(first_floor, round(policy.first_bins * scale)),
            second_bins=max(2, round(policy.second_bins * scale)),
        )
        if not out or rung != out[-1]:
            out.append(rung)
    return tuple(out)


class _Isolated:
    """Trials on the live model and optimizer, whose own state is put back exactly afterwards.

    Parameters keep their objects: a trial swaps fresh tensors into ``.data`` and
    ``optimizer.state[p]`` (the originals are never written), buffers and per-module
    training flags are copied back, and the RNG states (torch CPU and initialised CUDA
    devices, NumPy's and Python's global generators) are reset before every trial (so every
    trial sees the same random draws) and restored at the end.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer
        params: dict[int, nn.Parameter] = {id(p): p for p in model.parameters()}
        for group in optimizer.param_groups:
            params.update((id(p), p) for p in group["params"])
        self.params = list(params.values())
        self.data = [p.data for p in self.params]
        self.grads = [p.grad for p in self.params]
        self.buffers = [(b, b.detach().clone()) for b in model.buffers()]
        self.modes = [(m, m.training) for m in model.modules()]
        self.state = dict(optimizer.state)  # the per-parameter dicts, never written by a trial
        self.groups = [
            {k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
            for g in optimizer.param_groups
        ]
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.rng = (
            torch.get_rng_state(),
            torch.cuda.get_rng_state_all() if self.cuda else None,
            np.random.get_state(),
            random.getstate(),
        )

    def _reset(self) -> None:
        cpu, cuda, numpy_state, python_state = self.rng
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        np.random.set_state(numpy_state)
        random.setstate(python_state)
        with torch.no_grad():
            for b, saved in self.buffers:
                b.copy_(saved)
        for m, mode in self.modes:
            m.training = mode
        for g, saved_group in zip(self.optimizer.param_groups, self.groups, strict=True):
            for k in [k for k in g if k != "params" and k not in saved_group]:
                del g[k]
            g.update(copy.deepcopy(saved_group))

    def trial(
        self,
        weights: Mapping[int, torch.Tensor],
        state: Mapping[int, Mapping[str, Any]],
        probe_fn: ProbeFn,
        eval_fn: Callable[[nn.Module], float],
    ) -> float:
        """``eval_fn`` after ``probe_fn`` from ``weights`` / ``state`` (by ``id(param)``;
        the others start from copies of their live values)."""
        self._reset()
        self.optimizer.state.clear()
        for p, data in zip(self.params, self.data, strict=True):
            p.data = weights.get(id(p), data).clone()
            p.grad = None
        for key, own in self.state.items():
            given = state.get(id(key), own)
            self.optimizer.state[key] = {
                k: v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
                for k, v in given.items()
            }
        try:
            probe_fn(self.model, self.optimizer)
        except Exception as exc:
            raise ProbeError(
                f"probe_fn raised {type(exc).__name__}: {exc}; the model and optimizer were "
                "put back as they were. probe_fn(model, optimizer) must run a few training "
                "steps on fixed batches (zero_grad, forward, backward, optimizer.step) and "
                "return None"
            ) from exc
        return float(eval_fn(self.model))

    def restore(self) -> None:
        """Put the live state back as it was when this object was made."""
        self._reset()
        for p, data, grad in zip(self.params, self.data, self.grads, strict=True):
            p.data = data
            p.grad = grad
        self.optimizer.state.clear()
        self.optimizer.state.update(self.state)


def _probe_moments(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    result: SearchResult,
    weights: Mapping[str, torch.Tensor],
    *,
    probe_fn: ProbeFn,
    eval_fn: Callable[[nn.Module], float],
    tolerance: float,
    scores: Mapping[str, torch.Tensor],
    ladder: tuple[MomentPolicy, ...],
    config_for: Callable[[MomentPolicy], CompressionConfig],
    optimizer_prefix: str,
) -> ProbeResult:
    """The most aggressive rung of ``ladder`` whose state, after ``probe_fn``, keeps
    ``eval_fn`` within ``tolerance`` of the exact state after the same probe (bisection;
    quality taken as monotone along the ladder). ``weights``: searched parameter name → its
    dequantized weight as the file will hold it."""
    t0 = time.perf_counter()
    named = dict(model.named_parameters())
    trial_weights = {id(named[n]): w for n, w in weights.items()}
    index = state_indices(optimizer)
    path_of = {pid: f"{optimizer_prefix}state/{i}/" for pid, i in index.items()}

    def moments_for(policy: MomentPolicy) -> dict[int, dict[str, Any]]:
        config = config_for(policy)
        planner = Planner(config)
        moment_scores = save_scores(
            model,
            replace(result, config=config),
            scores=scores,
            optimizer=optimizer,
            optimizer_prefix=optimizer_prefix,
        )
        out: dict[int, dict[str, Any]] = {}
        Job = tuple[
            dict[str, Any], str, torch.Tensor, QuantConfig, torch.Tensor | None, StepWeights | None
        ]
        jobs: list[Job] = []
        for p, own in optimizer.state.items():
            row = dict(own)
            if id(p) in path_of:
                here = {path_of[id(p)] + k: v for k, v in own.items()}
            for key, value in own.items():
                if not isinstance(value, torch.Tensor) or id(p) not in path_of:
                    continue
                path = path_of[id(p)] + key
                quant, _ = planner.quant_for(path, value)
                if quant is not None:
                    fw = step_weights(path, quant, here)
                    jobs.append((row, key, value.detach(), quant, moment_scores.get(path), fw))
            out[id(p)] = row

        def run(job: Job) -> Any:
            _, _, value, quant, score, fw = job
            q = quantize(value, quant, scores=score, fit_weights=fw)
            return dequantize(q, device=value.device).reshape(value.shape)

        for (row, key, *_), value in zip(jobs, map_on_encoding_threads(run, jobs), strict=True):
            row[key] = value
        return out

    live = _Isolated(model, optimizer)
    seen: dict[int, float] = {}
    try:
        reference = live.trial({}, {}, probe_fn, eval_fn)
        limit = reference + tolerance * abs(reference)
        lo, hi = 0, len(ladder) - 1  # rung 0 is kept untested when every other one fails
        if math.isfinite(reference):
            while lo < hi:
                mid = (lo + hi + 1) // 2
                q = live.trial(trial_weights, moments_for(ladder[mid]), probe_fn, eval_fn)
                seen[mid] = q
                if math.isfinite(q) and q <= limit:
                    lo = mid
                else:
                    hi = mid - 1
    finally:
        live.restore()
    return ProbeResult(
        moments=ladder[lo],
        level=lo,
        ladder=ladder,
        trials=len(seen),
        seconds=time.perf_counter() - t0,
        reference=reference,
        quality=seen.get(lo),
        tolerance=tolerance,
    )


def _previous_point(previous: SearchResult | None, kinds: list[str]) -> _Point | None:
    """The previous choice as a point of this search's cube, when it is one."""
    if previous is None or set(previous.layer_configs) != set(kinds):
        return None
    configs = {k: previous.layer_configs[k] for k in kinds}
    if any(c is None for c in configs.values()):
        return None  # a type stayed exact last time: search afresh
    return _Point.from_configs({k: c for k, c in configs.items() if c is not None})


def _escape(path: str) -> str:
    """A pattern that fnmatch matches against ``path`` only."""
    return "".join(f"[{c}]" if c in "[]*?" else c for c in path)


def check_options(
    *,
    tolerance: float,
    moments: MomentPolicy | None,
    eval_fn: Callable[[nn.Module], float] | None,
    optimizer: torch.optim.Optimizer | None,
    probe_fn: ProbeFn | None,
) -> None:
    """Raise :class:`~ckptzip.errors.ConfigError` for search options :func:`search` cannot
    use; :class:`~ckptzip.manager.CheckpointManager` calls it at construction, so a bad
    option fails there rather than at the first save."""
    if not tolerance >= 0 or not math.isfinite(tolerance):
        raise ConfigError(f"tolerance={tolerance!r} must be a finite number >= 0")
    if moments is not None and not isinstance(moments, MomentPolicy):
        raise ConfigError(f"moments={moments!r} must be a MomentPolicy")
    if eval_fn is not None and not callable(eval_fn):
        raise ConfigError(f"eval_fn={eval_fn!r} must be callable as eval_fn(model) -> float")
    if probe_fn is not None:
        if not callable(probe_fn):
            raise ConfigError(f"probe_fn={probe_fn!r} must be callable as probe_fn(model, opt)")
        if eval_fn is None or optimizer is None:
            raise ConfigError(
                "probe_fn needs eval_fn and optimizer: it judges the optimizer's moments by "
                "eval_fn after a few training steps"
            )


def allowance_per_interval(series: Sequence[float]) -> float:
    """What one checkpoint may cost ``eval_fn``, from the exact weights' values at consecutive
    checkpoints (oldest first, one interval apart).

    While training gains, it is the net gain per interval,
    ``(series[0] - series[-1]) / (len(series) - 1)``: a restore then costs the run less than
    the training between two checkpoints. Where training did not gain over the window (a
    plateau, or evaluation noise larger than the gain) it is the mean absolute change between
    consecutive values, the run's own noise between checkpoints, so a search on a plateau
    does not give up only because training stopped gaining; zero only when ``eval_fn`` did
    not move at all.

    >>> round(allowance_per_interval([1.0, 0.9, 0.8]), 6)
    0.1
    >>> round(allowance_per_interval([0.8, 0.81, 0.8]), 6)
    0.01
    """
    steps = [b - a for a, b in itertools.pairwise(series)]
    if not steps:
        return 0.0
    gain = -sum(steps) / len(steps)
    return gain if gain > 0 else sum(abs(d) for d in steps) / len(steps)


def search(
    model: nn.Module,
    *,
    eval_fn: Callable[[nn.Module], float] | None = None,
    tolerance: float = 0.05,
    scores: Mapping[str, torch.Tensor] | None = None,
    previous: SearchResult | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    base: CompressionConfig | None = None,
    error_budget: float = 0.1,
    model_prefix: str = "model/",
    optimizer_prefix: str = "optimizer/",
    moments: MomentPolicy | None = None,
    probe_fn: ProbeFn | None = None,
    earlier: Sequence[float] = (),
    context: str = "",
) -> SearchResult:
    """Choose the most aggressive per-layer-type quantization whose quality stays in tolerance.

    Parameters
    ----------
    model:
        The live model; it is only read (trials swap tensors in and always restore them).
    eval_fn:
        ``eval_fn(model) -> float``, lower is better (a held-out loss on a few batches).
        ``None``: the data-free rule (every tensor's relative error within ``error_budget``).
    tolerance:
        Allowed relative worsening of ``eval_fn`` over the exact weights' value.
    scores:
        Sensitivity scores ``|g·w|`` by parameter name (as :meth:`SensitivityTracker.scores`
        returns them without prefix); they enable the ``sensitivity`` prune metric.
    previous:
        The previous checkpoint's result: search its neighbourhood, never more aggressive.
    optimizer:
        When given, the returned config also covers its moments (see the module docstring).
    base:
        Where the rest of the config comes from (``exact`` patterns, ``min_numel``,
        ``zstd_level``, the default for tensors outside the model and optimizer).
    error_budget:
        The largest relative L2 error ``||ŵ − w|| / ||w||`` of any searched tensor. Without
        ``eval_fn`` it is the whole rule; with it, a configuration must hold both, and one
        over the budget is refused before it is evaluated. A restore's cost lasts, so the
        perturbation itself is bounded, not only what ``eval_fn`` sees right after it (on the
        ``lm`` workload at step 140, half of every weight pruned moved the training loss by
        +3.6 % at the first resumed step and still +1.7 % on average over 25; 32 levels
        without pruning, relative error 0.065, moved neither: ``benchmarks/restore_cost.py``).
    model_prefix, optimizer_prefix:
        Where the model's ``state_dict`` and the optimizer's sit in the saved object
        (``{"model": ..., "optimizer": ...}`` by default).
    moments:
        How the optimizer's moments are quantized (default :class:`MomentPolicy`); with
        ``probe_fn``, the least aggressive rung of the :func:`moment_ladder` searched.
    probe_fn:
        ``probe_fn(model, optimizer) -> None``: a few training steps on fixed batches of the
        user's data (needs ``eval_fn`` and ``optimizer``). After the weight search, the
        moments' policy is chosen by training after a restore: the probe runs from the
        exact state, then ``eval_fn`` gives the reference; for a rung of the ladder the
        searched weights and that rung's quantized moments are put into the live model and
        optimizer, the same probe runs and ``eval_fn`` must stay within ``tolerance`` of the
        reference. Bisection finds the most aggressive such rung (at most 3 trials for 5
        rungs). The live parameters, gradients, buffers, optimizer state and
        hyper-parameters and the RNG states are put back exactly afterwards, so training
        goes on as if no probe had run (the optimizer's step hooks do run during a probe).
        A probe that raises is reported as :class:`~ckptzip.errors.ProbeError`.
    earlier:
        ``eval_fn`` of the exact weights at the previous checkpoints, oldest first, one
        checkpoint interval apart (:class:`~ckptzip.manager.CheckpointManager` passes up to
        the last three). The allowed worsening is then also at most how far ``eval_fn`` of
        the exact weights moved per interval over them (:func:`allowance_per_interval`): while
        training gains that is the net gain per interval, so a restore from this
        checkpoint costs the run less than the training between two checkpoints; on a plateau
        it is the run's own noise between checkpoints, so the search does not give up because
        training stopped gaining. ``tolerance`` stays the cap.
    context:
        What is being saved (``"step 40"``): the start of the
        :class:`~ckptzip.errors.SearchGaveUpWarning` issued when no configuration is
        feasible (the result's ``note`` says the same).

    Returns
    -------
    SearchResult

    Examples
    --------
    >>> torch.manual_seed(0) and None
    >>> model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))
    >>> x = torch.randn(256, 64); y = model(x).argmax(1)
    >>> loss = lambda m: float(nn.functional.cross_entropy(m(x), y).detach())
    >>> result = search(model, eval_fn=loss, tolerance=0.05)
    >>> result.quality <= result.baseline * 1.05
    True
    >>> result.config.quant_for("model/0.weight") == result.layer_configs["linear"]
    True
    """
    check_options(
        tolerance=tolerance,
        moments=moments,
        eval_fn=eval_fn,
        optimizer=optimizer,
        probe_fn=probe_fn,
    )
    if not 0 < error_budget < 1:
        raise ConfigError(f"error_budget={error_budget!r} must lie in (0, 1)")
    policy = moments if moments is not None else MomentPolicy()
    base = base if base is not None else CompressionConfig()
    t0 = time.perf_counter()
    kinds_of = layer_types(model)
    scores = dict(scores or {})
    params: dict[str, tuple[str, nn.Parameter]] = {}
    for name, p in model.named_parameters():  # tied parameters: the first name only
        if exact_reason(model_prefix + name, p.detach(), base) is None:
            params[name] = (kinds_of[name], p)
    before = {n: fingerprint(p.detach()) for n, (_, p) in params.items()}
    unknown = sorted(set(scores) - {n for n, _ in model.named_parameters()})
    if unknown:
        raise ConfigError(
            f"scores for {unknown[:3]!r} name no parameter of the model; pass the names "
            "model.named_parameters() uses (SensitivityTracker.scores() without prefix)"
        )
    for name, s in scores.items():
        if name in params and s.shape != params[name][1].shape:
            raise ConfigError(
                f"scores[{name!r}] has shape {tuple(s.shape)}, the parameter "
                f"{tuple(params[name][1].shape)}"
            )

    ev = _Evaluator(model, params, eval_fn, scores)
    try:
        kinds = sorted(
            {k for k, _ in params.values()},
            key=lambda k: -sum(p.numel() for kk, p in params.values() if kk == k),
        )
        if eval_fn is not None:
            exact_quality = _evaluate_with(model, params, {}, eval_fn)
            if not math.isfinite(exact_quality):
                raise ConfigError(
                    f"eval_fn returned {exact_quality!r} for the exact weights; it must return a "
                    "finite loss"
                )
            baseline: float | None = exact_quality
            allowed = tolerance * abs(exact_quality)
            series = [float(e) for e in earlier if math.isfinite(e)] + [exact_quality]
            if len(series) > 1:
                allowed = min(allowed, allowance_per_interval(series))
            limit = exact_quality + allowed
        else:
            baseline, limit = None, error_budget
        walk = _Walk(ev, limit, error_budget if eval_fn is not None else None)

        strategy: Literal["full", "neighbourhood", "none"] = "none"
        chosen: _Point | None = None
        if kinds:
            prev_point = _previous_point(previous, kinds)
            if prev_point is not None:
                strategy = "neighbourhood"
                chosen = walk.neighbourhood(prev_point)
            if chosen is None:
                strategy = "full"
                metrics = {
                    k: (
                        "sensitivity"
                        if any(n in scores for n, (kk, _) in params.items() if kk == k)
                        else "magnitude"
                    )
                    for k in kinds
                }
                chosen = walk.search(kinds, metrics)

        layer_configs: dict[str, QuantConfig | None] = {
            k: (chosen.config(k) if chosen is not None else None) for k in kinds
        }
        quality = walk.seen.get(chosen) if chosen is not None else baseline
        notes = []
        if eval_fn is None:
            notes.append(
                f"data-free: no eval_fn, so each tensor's relative error was held within "
                f"{error_budget:g} instead of measuring quality"
            )
        if kinds and chosen is None:
            why = _gave_up(walk, kinds, baseline, tolerance, error_budget)
            notes.append(why)
            warnings.warn(
                f"{context}: {why}" if context else why, SearchGaveUpWarning, stacklevel=2
            )

        def config_for(policy: MomentPolicy) -> CompressionConfig:
            return _compression_config(
                model,
                optimizer,
                base,
                params,
                layer_configs,
                model_prefix,
                optimizer_prefix,
                policy,
            )

        config = config_for(policy)
        prequantized: dict[str, Prequantized] = {}
        if chosen is not None:
            for alias, name in _aliases(model).items():
                if name not in params:
                    continue
                x, cfg = params[name][1].detach(), chosen.config(params[name][0])
                if fingerprint(x) == before[name]:  # eval_fn did not write to the weights
                    q = ev.quantized(name, cfg)
                    pre = Prequantized.of(x, q, scores.get(name))
                    prequantized[model_prefix + alias] = pre
        result = SearchResult(
            layer_configs=MappingProxyType(layer_configs),
            config=config,
            mode="eval" if eval_fn is not None else "data-free",
            strategy=strategy,
            trials=ev.trials,
            seconds=time.perf_counter() - t0,
            baseline=baseline,
            quality=quality,
            tolerance=tolerance if eval_fn is not None else error_budget,
            estimated_ratio=ev.estimated_ratio(chosen),
            paths=MappingProxyType({model_prefix + n: k for n, (k, _) in params.items()}),
            note="; ".join(notes),
            prequantized=MappingProxyType(prequantized),
            moments=policy,
            limit=limit if eval_fn is not None else None,
        )
        if probe_fn is None or chosen is None or optimizer is None or eval_fn is None:
            return result
        weights = {}
        for name, (kind, p) in params.items():
            q = ev.quantized(name, chosen.config(kind))
            weights[name] = dequantize(q, device=p.device).reshape(p.shape)
        probe = _probe_moments(
            model,
            optimizer,
            result,
            weights,
            probe_fn=probe_fn,
            eval_fn=eval_fn,
            tolerance=tolerance,
            scores=scores,
            ladder=moment_ladder(policy),
            config_for=config_for,
            optimizer_prefix=optimizer_prefix,
        )
        return replace(
            result,
            config=config_for(probe.moments),
            moments=probe.moments,
            probe=probe,
            seconds=time.perf_counter() - t0,
        )
    finally:
        ev.close()


def for_residuals(
    model: nn.Module,
    previous: SearchResult | None,
    *,
    eval_fn: Callable[[nn.Module], float] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    base: CompressionConfig | None = None,
    model_prefix: str = "model/",
    optimizer_prefix: str = "optimizer/",
    moments: MomentPolicy | None = None,
) -> SearchResult:
    """The result of a delta save with error feedback (``base.residual`` set): no search.

    Every searched weight of such a save is stored as its change against the parent's
    reconstruction, quantized with ``base.residual`` (the ``"residual"`` codec), so no weight
    config is tried and ``eval_fn`` judges none. The result still gives each weight a config,
    ``previous``'s layer type's (``base.quant`` for a type ``previous`` lacks, or without
    ``previous``), which is what the codec quantizes a weight with where the parent lacks it,
    and what the moments follow, by :class:`~ckptzip.plan.MomentPolicy` (``moments``,
    default ``previous.moments``), with the zeros the moments have now. With ``eval_fn`` the
    exact weights are evaluated once (``baseline``: the manager's gain per interval needs
    every save's), nothing else.

    Examples
    --------
    >>> model = nn.Linear(128, 64)
    >>> r = for_residuals(model, None, base=CompressionConfig(residual=QuantConfig(bins=4)))
    >>> r.strategy, r.trials, r.layer_configs["linear"] == QuantConfig()
    ('residual', 0, True)
    """
    t0 = time.perf_counter()
    base = base if base is not None else CompressionConfig()
    if base.residual is None:
        raise ConfigError("for_residuals needs base.residual (the residual's QuantConfig)")
    policy = moments if moments is not None else (previous.moments if previous else None)
    policy = policy if policy is not None else MomentPolicy()
    kinds_of = layer_types(model)
    params: dict[str, tuple[str, nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if exact_reason(model_prefix + name, p.detach(), base) is None:
            params[name] = (kinds_of[name], p)
    earlier = previous.layer_configs if previous is not None else {}
    layer_configs: dict[str, QuantConfig | None] = {
        k: earlier.get(k, base.quant) for k in sorted({k for k, _ in params.values()})
    }
    baseline = None if eval_fn is None else _evaluate_with(model, params, {}, eval_fn)
    if baseline is not None and not math.isfinite(baseline):
        raise ConfigError(
            f"eval_fn returned {baseline!r} for the exact weights; it must return a finite loss"
        )
    config = _compression_config(
        model, optimizer, base, params, layer_configs, model_prefix, optimizer_prefix, policy
    )
    return SearchResult(
        layer_configs=MappingProxyType(layer_configs),
        config=config,
        mode="eval" if eval_fn is not None else "data-free",
        strategy="residual",
        trials=0,
        seconds=time.perf_counter() - t0,
        baseline=baseline,
        quality=None,
        tolerance=previous.tolerance if previous is not None else 0.0,
        estimated_ratio=previous.estimated_ratio if previous is not None else 1.0,
        paths=MappingProxyType({model_prefix + n: k for n, (k, _) in params.items()}),
        note=(
            f"error feedback: the weights are residuals against the parent at "
            f"{base.residual.bins} levels, not searched"
        ),
        moments=policy,
    )


def _gave_up(
    walk: _Walk,
    kinds: list[str],
    baseline: float | None,
    tolerance: float,
    error_budget: float,
) -> str:
    """Why nothing was feasible, naming the mildest configuration tried and its quality."""
    mildest = min(walk.seen, key=lambda p: sum(sum(lv) for _, lv, _ in p.levels))
    configs = ", ".join(
        f"{k} {c.bins} bins prune {c.prune:g} protect {c.protect:g}"
        for k in kinds
        for c in [mildest.config(k)]
    )
    if baseline is None:
        measured = (
            f"a relative error of {walk.seen[mildest]:.4g} against the budget {error_budget:g}"
        )
    else:
        measured = (
            f"eval_fn {walk.seen[mildest]:.6g} against the exact weights' {baseline:.6g} "
            f"(limit {walk.limit:.6g}: tolerance {tolerance:g}, at most how far the exact "
            "weights' eval_fn moved per checkpoint interval)"
        )
    return (
        f"no configuration was feasible in {len(walk.seen)} trials, so the searched weights "
        f"are stored exactly (ratio about 1x on them); the mildest tried ({configs}) gave "
        f"{measured}"
    )


def _aliases(model: nn.Module) -> dict[str, str]:
    """Every parameter name (tied ones too) → the name ``named_parameters()`` lists it under."""
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        out[name] = first.setdefault(id(p), name)
    return out


def _compression_config(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    base: CompressionConfig,
    params: Mapping[str, tuple[str, nn.Parameter]],
    layer_configs: Mapping[str, QuantConfig | None],
    model_prefix: str,
    optimizer_prefix: str,
    moments: MomentPolicy,
) -> CompressionConfig:
    overrides: list[tuple[str, QuantConfig]] = []
    exact: list[str] = list(base.exact)
    aliases = _aliases(model)
    for name, tensor in model.state_dict().items():
        path = model_prefix + name
        canonical = aliases.get(name, name)  # a tied weight follows the name it was searched as
        cfg = layer_configs.get(params[canonical][0]) if canonical in params else None
        if cfg is None:
            if tensor.is_floating_point():  # buffers and unsearched weights: never lossy
                exact.append(_escape(path))
        else:
            overrides.append((_escape(path), cfg))
    if optimizer is not None:
        names = {id(p): n for n, p in model.named_parameters()}

        def weight_config(p: torch.Tensor) -> QuantConfig | None:
            name = names.get(id(p), "")
            if name in params:
                return layer_configs.get(params[name][0])
            small = bool(name) and small_weight(model_prefix + name, p.detach(), base)
            return SMALL_WEIGHT if small else None

        for path, cfg in moment_configs(
            optimizer, weight_config, moments, optimizer_prefix
        ).items():
            if cfg is None:
                exact.append(_escape(path))
            else:
                overrides.append((_escape(path), cfg))
    return replace(base, overrides=(*overrides, *base.overrides), exact=tuple(exact))


def save_scores(
    model: nn.Module,
    result: SearchResult,
    *,
    scores: Mapping[str, torch.Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    model_prefix: str = "model/",
    optimizer_prefix: str = "optimizer/",
) -> dict[str, torch.Tensor]:
    """The ``scores=`` mapping to pass to :func:`ckptzip.save` with ``result.config``.

    Model paths get the sensitivity scores (when given); each first moment gets its weight's
    pruning scores (``|g·w|`` when the weight's type prunes by sensitivity, else ``|w|``), so
    the quantizer prunes the moment where it prunes the weight.

    Examples
    --------
    >>> model = nn.Linear(4, 2)
    >>> r = search(model, base=CompressionConfig(min_numel=1))
    >>> sorted(save_scores(model, r))
    []
    """
    scores = dict(scores or {})
    # every name of a tied weight gets its scores, so both names quantize alike
    out = {model_prefix + a: scores[n] for a, n in _aliases(model).items() if n in scores}
    if optimizer is None:
        return out
    index = state_indices(optimizer)
    kinds = {path[len(model_prefix) :]: k for path, k in result.paths.items()}
    for name, p in model.named_parameters():
        kind = kinds.get(name)
        cfg = result.layer_configs.get(kind) if kind is not None else None
        if cfg is None or id(p) not in index:
            continue
        for key in FIRST_MOMENT_KEYS:
            path = f"{optimizer_prefix}state/{index[id(p)]}/{key}"
            moment_cfg = result.config.quant_for(path)
            if key not in optimizer.state.get(p, {}) or moment_cfg is None:
                continue
            if moment_cfg.prune_metric != "sensitivity" or not moment_cfg.prune:
                continue  # not pruned with the weight (zeros alone are pruned by magnitude)
            if cfg.prune_metric == "sensitivity" and name in scores:
                out[path] = scores[name]
            else:
                out[path] = p.detach().abs().float().cpu()
    return out
