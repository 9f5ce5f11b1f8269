"""The compression plan: for every tensor of a checkpoint, how it is stored, decided once.

Every rule that chooses a tensor's treatment lives here and nowhere else: which tensors may be
lossy at all (:func:`exact_reason`), the configured :class:`~ckptzip.config.QuantConfig`, the
optimizer-moment rules (:class:`MomentPolicy`, :func:`keep_zeros`, :func:`second_moment`,
:func:`moment_configs`: which state tensors are whose moments and how they follow their
weight, and :func:`momentum_coherence`: whether a weight's momentum is quiet), and whether a
lossy tensor is delta-coded against a parent (``"delta"``: bin-index differences;
``"residual"``, with ``CompressionConfig.residual``: error feedback, every lossy tensor but the
optimizer moments). :func:`ckptzip.save`
executes a plan; :func:`ckptzip.search.search` asks the same functions which tensors it may
search and how the moments of a searched weight follow it.

The shape follows ``torch.distributed.checkpoint``'s ``SavePlanner``: decide first, as plain
frozen data, then write. Call order (driven by :func:`ckptzip.save`)::

    planner = Planner(config, parent=has_parent, prequantized=search_result.prequantized)
    plan = planner.plan(leaves)              # one Treatment per (path, tensor), in order
    for t, (path, x) in zip(plan, leaves):
        codec = get_codec(t.codec)           # "exact", "quant", "delta", "residual", "step"
        codec.encode(x, EncodeContext(..., quant=t.quant, reason=t.reason,
                                      quantized=planner.prequantized_for(t, x, scores)))

Tensors that share storage (tied weights: two names, one tensor) get one treatment, decided
from all their paths, so neither the key order of the structure nor which name comes first can
change what is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import torch

from ckptzip import kernels
from ckptzip._parallel import map_on_encoding_threads
from ckptzip._types import QuantizedTensor, StepWeights
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.errors import ConfigError
from ckptzip.structure import dtype_name, extent

__all__ = [
    "FEEDBACK_MOMENTS",
    "QUIET_MOMENTS",
    "ALMOST_ALL_ZEROS",
    "FIRST_MOMENT_KEYS",
    "RESIDUAL",
    "SECOND_MOMENT_KEYS",
    "MomentPolicy",
    "Planner",
    "Prequantized",
    "SMALL_WEIGHT",
    "Treatment",
    "exact_reason",
    "fingerprint",
    "fit_weights",
    "step_weights",
    "keep_zeros",
    "moment_configs",
    "moment_kind",
    "momentum_coherence",
    "second_moment",
    "size_floor",
    "small_weight",
    "state_indices",
    "zero_fraction",
]

FIRST_MOMENT_KEYS = ("exp_avg", "momentum_buffer")
"""Optimizer-state keys of first moments (Adam/AdamW, SGD with momentum)."""
SECOND_MOMENT_KEYS = ("exp_avg_sq", "max_exp_avg_sq")
"""Optimizer-state keys of second moments (Adam/AdamW, AMSGrad's running maximum)."""

ADAM_EPS = 1e-8
"""Adam's default ``eps``: the floor of ``sqrt(v)`` in :func:`fit_weights`."""

ALMOST_ALL_ZEROS = 0.99
"""A first moment whose exact zeros plus protected share reach this fraction is stored exactly:
losslessly it costs next to nothing, and nothing would be left to quantize."""

Codec = Literal["exact", "quant", "delta", "residual", "step"]

RESIDUAL = QuantConfig(bins=4, protect=0.0005)
"""The residual config of error feedback (``CompressionConfig.residual``,
``CheckpointManager(error_feedback=True)``): 4 levels, 0.05 % protected, no pruning. The
measured point: about today's bytes per delta checkpoint for a 10x smaller error on ``lm``'s
chain (``benchmarks/error_feedback.py``); pruning the change (2 levels, 90 % pruned) kept each
error small yet cost training +3.6 % over 10 restores (README, "Error feedback along the
chain")."""


def moment_kind(path: str) -> Literal["first", "second"] | None:
    """Whether the tensor at ``path`` is an optimizer's first or second moment (by its key).

    Examples
    --------
    >>> moment_kind("optimizer/state/0/max_exp_avg_sq"), moment_kind("model/w")
    ('second', None)
    """
    leaf = path.rsplit("/", 1)[-1]
    if leaf in FIRST_MOMENT_KEYS:
        return "first"
    if leaf in SECOND_MOMENT_KEYS:
        return "second"
    return None


def second_moment_path(path: str) -> list[str]:
    """The paths of the second moments next to the first moment at ``path``, most specific
    first (AMSGrad divides by ``max_exp_avg_sq``), or ``[]`` when ``path`` is none.

    Examples
    --------
    >>> second_moment_path("optimizer/state/3/exp_avg")
    ['optimizer/state/3/max_exp_avg_sq', 'optimizer/state/3/exp_avg_sq']
    >>> second_moment_path("optimizer/state/3/momentum_buffer")
    []
    """
    head, _, key = path.rpartition("/")
    if key != "exp_avg":
        return []
    return [f"{head}/{k}" if head else k for k in reversed(SECOND_MOMENT_KEYS)]


def step_weights(
    path: str, quant: QuantConfig | None, leaves: Mapping[str, object]
) -> StepWeights | None:
    """The level-fit weights of the tensor at ``path`` (``quant.fit``), as the second moment
    they come from: what :func:`fit_weights` computes, for the quantizer to compute where it
    sums them (the same levels, a pass and a tensor fewer).

    Examples
    --------
    >>> v = torch.tensor([1.0, 0.25])
    >>> leaves = {"optimizer/state/0/exp_avg_sq": v}
    >>> sw = step_weights("optimizer/state/0/exp_avg", QuantConfig(fit="update"), leaves)
    >>> torch.equal(sw.second_moment, v), sw.eps
    (True, 1e-08)
    """
    if quant is None or quant.fit != "update":
        return None
    for p in second_moment_path(path):
        v = leaves.get(p)
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return StepWeights(v.detach(), ADAM_EPS)
    return None


def fit_weights(
    path: str, quant: QuantConfig | None, leaves: Mapping[str, object]
) -> torch.Tensor | None:
    """The per-element weights of the level fit of the tensor at ``path`` (``quant.fit``).

    For ``fit="update"`` on an Adam first moment ``m`` whose second moment ``v`` (same shape)
    is among ``leaves``: ``1/(sqrt(v)+eps)²``. Adam's step is ``m/(sqrt(v)+eps)``, so levels
    fitted with these weights minimize the error of the step a restored optimizer takes,
    rather than the error of ``m``: the default fit (count and magnitude) pulls the levels
    towards ``m``'s largest entries and leaves the small ones over a small ``v`` on a level
    many times their size, a step far larger than any the exact state would take. ``None``
    (fit the values) otherwise. A save hands the quantizer :func:`step_weights` instead,
    which gives the same levels.

    Examples
    --------
    >>> v = torch.tensor([1.0, 0.25])
    >>> leaves = {"optimizer/state/0/exp_avg_sq": v}
    >>> w = fit_weights("optimizer/state/0/exp_avg", QuantConfig(fit="update"), leaves)
    >>> [round(x, 4) for x in w.tolist()]  # 1/(sqrt(v)+eps)^2, eps 1e-8
    [1.0, 4.0]
    >>> fit_weights("optimizer/state/0/exp_avg", QuantConfig(), leaves) is None
    True
    """
    sw = step_weights(path, quant, leaves)
    return None if sw is None else kernels.step_weights(sw.second_moment, sw.eps)


def zero_fraction(x: torch.Tensor) -> float:
    """The fraction of ``x``'s entries that are exactly zero."""
    if x.device.type == "cpu" and x.dtype in (torch.float16, torch.float32, torch.float64):
        # NumPy's count on one core: the planner runs in the caller's thread, where torch's
        # count_nonzero would start an OpenMP team whose threads then spin while the tensors
        # encode (measured: a quarter of a save's CPU time, benchmarks/throughput.py --quick).
        # Counting the == 0 mask is 4x faster than count_nonzero of the floats (0.28 against
        # 1.18 ms for 1.8M float32) and counts the same entries: +-0, not NaN.
        nonzero = x.numel() - int(np.count_nonzero(x.detach().numpy() == 0))
    else:
        # count_nonzero makes no tensor-sized mask (measured 4x faster than (x == 0).sum())
        nonzero = int(torch.count_nonzero(x))
    return float(x.numel() - nonzero) / max(x.numel(), 1)


def keep_zeros(quant: QuantConfig, zeros: float) -> QuantConfig | None:
    """``quant`` with its prune fraction raised to a moment's fraction of exact ``zeros``.

    Pruning by magnitude then removes exactly the zeros (they tie at the bottom), so they come
    back as the codebook's exact zero level, not as the nearest nonzero one: a zero first
    moment over a zero second moment (a unit that never had a gradient) restored as a small
    level would make Adam's next step ``m / (sqrt(v) + eps)`` throw that weight far away.
    ``None`` (store exactly) when zeros and protected entries leave almost nothing
    (:data:`ALMOST_ALL_ZEROS`).

    Examples
    --------
    >>> keep_zeros(QuantConfig(prune=0.0), 0.3).prune
    0.3
    >>> keep_zeros(QuantConfig(protect=0.01), 0.985) is None
    True
    """
    if zeros <= quant.prune:
        return quant
    if zeros + quant.protect >= ALMOST_ALL_ZEROS:
        return None
    return replace(quant, prune=zeros, prune_metric="magnitude")


def second_moment(quant: QuantConfig, *, log_domain: bool = True) -> QuantConfig:
    """A second moment's config from ``quant``: never pruned, in the log domain by default.

    Adam divides by ``sqrt(exp_avg_sq)``: a pruned second moment under a nonzero first moment
    blows up the next update, and its many decades crush under linear levels.
    """
    return replace(quant, prune=0.0, prune_metric="magnitude", log_domain=log_domain)


@dataclass(frozen=True)
class MomentPolicy:
    """How the optimizer's moments of a searched weight are stored.

    The defaults are the measured choice of ``benchmarks/search.py --optimizer`` (see the
    README): training after a restore is what was compared, not reconstruction error. With
    8 and 16 levels the training loss after a restore stayed within 0.5 % of resuming with
    exact moments at every step (``mlp``, ``lm``), for about 10-12x on the optimizer state;
    4 and 8 levels gave 14-20x within 1.7 %; zeroed moments cost 30 %. The compact policy
    ``MomentPolicy(3, second_bins=8, first_prune=0.5)`` (about 90 % of each first moment on
    its exact zero, one level per sign for the rest) took ``llm``'s whole checkpoint from
    27.9x to 49.5x over 10 restores (3 seeds, at the error-budget defaults), its final loss
    1.5-2.9 points further from the exact run's on every seed; the same first moment with 16
    second-moment levels, 43.3x and 1.2-3.0 points (README, "`llm` at the error-budget
    defaults"): options, not the default.

    Parameters
    ----------
    first_bins:
        Levels for ``exp_avg`` (Adam/AdamW) and ``momentum_buffer`` (SGD).
    prune_first:
        Prune the first moment where its weight is pruned (ExCP's rule), using the weight's
        own scores through :func:`ckptzip.search.save_scores`. Off by default: measured, it
        perturbed training after a restore 5-20x more than quantization alone (1-2 % against
        0.1-0.2 % with 16 and 32 levels) for 5-7 % of the optimizer's bytes.
    second_bins:
        Levels for ``exp_avg_sq`` and ``max_exp_avg_sq``.
    second_log_domain:
        Quantize second moments in the log domain (they span many decades; linear levels
        crush their small values, and the Adam step divides by their square root).
    protect:
        Fraction of each moment stored exactly (the largest entries).
    first_prune:
        Fraction of each first moment, smallest by its own magnitude, set to exact zeros
        (zeros the moment already has count towards it; never a second moment). Off by
        default: what it costs training after a restore is measured in the README. With a
        fraction, ``first_bins`` must be at least 3: two levels, one of them the exact zero,
        would leave one sign for everything else.
    first_protect:
        Fraction of each first moment stored exactly (its largest entries), when it should
        differ from ``protect``; ``None``: ``protect``.
    first_fit:
        What the first moment's levels are fitted to (``QuantConfig.fit``): ``"values"``,
        ``"update"``: weighted by ``1/(sqrt(v)+eps)²`` so they minimize the error of Adam's
        step (:func:`fit_weights`), or ``"step"``: Adam's step itself is quantized, over the
        second moment the file stores (the codec ``"step"``).
    quiet:
        The policy for both moments of a weight whose momentum is *quiet*: its
        :func:`momentum_coherence` below ``quiet_below``, so the gradients cancel within the
        momentum's horizon and Adam's step is small against what uncorrelated gradients would
        give; ``None`` (the default): every weight follows this policy. Decided per weight at
        every save, from the optimizer state being saved (Adam-like state only: without
        ``exp_avg_sq``, ``step`` and ``betas`` a weight follows this policy). Measured in the
        README ("A moment policy that follows the momentum").
    quiet_below:
        The :func:`momentum_coherence` under which a weight's moments follow ``quiet``.

    Examples
    --------
    >>> MomentPolicy().second().log_domain
    True
    >>> MomentPolicy(prune_first=True).first(QuantConfig(bins=4, prune=0.3)).prune
    0.3
    >>> MomentPolicy(first_prune=0.5).first(QuantConfig(), zeros=0.1).prune
    0.5
    """

    first_bins: int = 8
    prune_first: bool = False
    second_bins: int = 16
    second_log_domain: bool = True
    protect: float = 0.0005
    first_prune: float = 0.0
    first_protect: float | None = None
    first_fit: Literal["values", "update", "step"] = "values"
    quiet: MomentPolicy | None = None
    quiet_below: float = 0.5

    def __post_init__(self) -> None:
        if self.quiet is not None and not isinstance(self.quiet, MomentPolicy):
            raise ConfigError(f"quiet={self.quiet!r} must be None or a MomentPolicy")
        if self.quiet is not None and self.quiet.quiet is not None:
            raise ConfigError(
                f"quiet={self.quiet!r} has a quiet policy of its own: give the quiet policy "
                "quiet=None (one level of nesting)"
            )
        if not (isinstance(self.quiet_below, (int, float)) and 0.0 < self.quiet_below <= 1.0):
            raise ConfigError(
                f"quiet_below={self.quiet_below!r} must lie in (0, 1]: 1 is the coherence "
                "uncorrelated gradients give"
            )
        for name in ("first_bins", "second_bins"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= 256:
                raise ConfigError(f"{name}={value!r} must be an integer in [2, 256]")
        if not 0.0 <= self.protect < 0.5:
            raise ConfigError(f"protect={self.protect!r} must lie in [0, 0.5)")
        if self.first_protect is not None and not 0.0 <= self.first_protect < 0.5:
            raise ConfigError(
                f"first_protect={self.first_protect!r} must be None or lie in [0, 0.5)"
            )
        if self.first_fit not in ("values", "update", "step"):
            raise ConfigError(f"first_fit={self.first_fit!r} must be 'values', 'update' or 'step'")
        if not 0.0 <= self.first_prune < 0.9:
            raise ConfigError(f"first_prune={self.first_prune!r} must lie in [0, 0.9)")
        if self.first_prune > 0 and self.first_bins < 3:
            raise ConfigError(
                f"first_bins={self.first_bins!r} with first_prune={self.first_prune!r} leaves "
                "one level beside the exact zero, so one sign for every other entry: use "
                "first_bins >= 3, or first_prune=0.0 for two levels"
            )

    @property
    def first_protected(self) -> float:
        """The fraction of each first moment stored exactly (``first_protect``, else
        ``protect``)."""
        return self.protect if self.first_protect is None else self.first_protect

    def first(self, weight: QuantConfig, zeros: float = 0.0) -> QuantConfig | None:
        """The first moment's config given its weight's and its own fraction of exact zeros.

        ``None`` when the moment is (almost) all zeros and is stored exactly (:func:`keep_zeros`).
        """
        if self.prune_first and weight.prune > 0:
            # "sensitivity" means "by the scores given": save_scores passes the weight's own
            return QuantConfig(
                bins=self.first_bins,
                prune=weight.prune,
                prune_metric="sensitivity",
                protect=self.first_protected,
                fit=self.first_fit,
            )
        own = QuantConfig(
            bins=self.first_bins,
            prune=self.first_prune,
            protect=self.first_protected,
            fit=self.first_fit,
        )
        return keep_zeros(own, zeros)

    def second(self) -> QuantConfig:
        """The second moment's config (never pruned: see :func:`second_moment`)."""
        return second_moment(
            QuantConfig(bins=self.second_bins, protect=self.protect),
            log_domain=self.second_log_domain,
        )

    def for_moment(
        self,
        kind: Literal["first", "second"],
        weight: QuantConfig,
        zeros: float,
        coherence: float | None = None,
    ) -> QuantConfig | None:
        """The config of a moment of ``kind`` whose weight is quantized with ``weight``.

        ``coherence`` is the weight's :func:`momentum_coherence` (``None``: unknown); below
        ``quiet_below`` the moment follows ``quiet`` when that is set.

        Examples
        --------
        >>> p = MomentPolicy(quiet=MomentPolicy(first_bins=3, first_fit="step"))
        >>> p.for_moment("first", QuantConfig(), 0.0, coherence=0.3).bins
        3
        >>> p.for_moment("first", QuantConfig(), 0.0, coherence=0.9).bins
        8
        """
        if self.quiet is not None and coherence is not None and coherence < self.quiet_below:
            return self.quiet.for_moment(kind, weight, zeros)
        return self.first(weight, zeros) if kind == "first" else self.second()


QUIET_MOMENTS = MomentPolicy(first_bins=3, first_fit="step", second_bins=8)
"""How :data:`FEEDBACK_MOMENTS` stores both moments of a weight whose momentum is quiet
(:func:`momentum_coherence` below 0.5): Adam's step at 3 levels, the second moment at 8."""

FEEDBACK_MOMENTS = MomentPolicy(first_bins=4, first_fit="update", quiet=QUIET_MOMENTS)
"""The moment policy of error feedback (``CheckpointManager(error_feedback=True)`` without
``moments``): the first moment at 4 levels fitted to Adam's step (weights
``1/(sqrt(v)+eps)^2``), the second as :class:`MomentPolicy`'s default; both moments of a
weight whose momentum is quiet by :data:`QUIET_MOMENTS` (the default since December 2026:
on the full protocol, 10 restores, 3 seeds, `llm` 34.9x against 25.1x, no model outside its
noise floor on the worse side, `chargru` within 1 % of exact; README, "A moment policy that
follows the momentum"). Without it (``replace(FEEDBACK_MOMENTS, quiet=None)``), measured on the full
protocol (10 restores, ``benchmarks/fault_tolerant.py --methods exact ckptzip-feedback``):
within the exact run's noise floor on all six models, and within 1 % of the exact run on
every seed of ``chargru``. Storing the step itself (``first_fit="step"``, the codec
``"step"``) gave larger files (31.1x on ``llm`` against 25.1x, 22.6x on ``gru`` against
20.8x), also within every floor, but ended 1.1-3.1 points further from the exact run on
every seed of ``llm`` and ``gru`` and +1.04 % on one seed of ``chargru``: quality first, it is
opt-in (``moments=MomentPolicy(first_bins=4, first_fit="step")``; README, "Adam's first
moment as its step"). Three levels of the step with eight second-moment levels
(``MomentPolicy(first_bins=3, first_fit="step", second_bins=8)``, with ``keyframe_every=20``)
took ``llm`` to 50.1x within its noise floor, but ``chargru`` to +2.4-2.5 % on two of three
seeds, outside its 1 % target; eight second-moment levels alone, +1.1-1.4 % on two (README, "`llm`
at 50x"): options, not the default. The same two codings for the quiet weights alone
(``replace(FEEDBACK_MOMENTS, quiet=MomentPolicy(first_bins=3, first_fit="step",
second_bins=8))``, ``keyframe_every=20``) kept ``chargru`` and ``bytetf`` within 1 % of exact
on every seed but took ``llm`` to 37.7x, not 50x (README, "A moment policy that follows the
momentum"); with the default chain (``keyframe_every=10``) it is the default now."""


def momentum_coherence(state: Mapping[str, object], betas: object) -> float | None:
    """How large Adam's momentum is against what uncorrelated gradients would make it.

    ``rho = ||m̂|| / ||sqrt(v̂)||`` (both bias-corrected) over the noise value at step ``t``,
    ``sqrt((1-b1)(1+b1^t) / ((1+b1)(1-b1^t)))``: the ratio gradients of zero mean, independent
    from step to step and of the same second moment give (``sqrt((1-b1)/(1+b1))`` once ``t``
    is many horizons ``1/(1-b1)``; 1 at ``t = 1``, where ``m̂`` is the gradient). About 1:
    the momentum is as large as noise makes it; above: the gradients agree from step to step;
    well below: they cancel within the momentum's horizon (or are small against the second
    moment's longer memory), so Adam's step is small and an error in the stored momentum moves
    training little. ``None`` where ``state`` is not Adam's (no ``exp_avg``, ``exp_avg_sq``
    or ``step``; ``betas`` not a pair) or the second moment is all zeros.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> w = torch.nn.Parameter(torch.zeros(4096))
    >>> opt = torch.optim.Adam([w])
    >>> for _ in range(100):
    ...     w.grad = torch.randn(4096, generator=g)
    ...     opt.step()
    >>> round(momentum_coherence(opt.state[w], opt.param_groups[0]["betas"]), 1)
    1.0
    """
    m, v, t = state.get("exp_avg"), state.get("exp_avg_sq"), state.get("step")
    if not (isinstance(m, torch.Tensor) and isinstance(v, torch.Tensor)):
        return None
    if not isinstance(t, (torch.Tensor, int, float)):
        return None
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        return None
    b1, b2 = (float(b) for b in betas)
    step = float(t)
    if step < 1 or not (0.0 < b1 < 1.0 and 0.0 < b2 < 1.0):
        return None
    v_sum = float(v.detach().double().sum()) / (1.0 - b2**step)
    if v_sum <= 0.0:
        return None
    m_sq = float(torch.linalg.vector_norm(m.detach().double())) ** 2 / (1.0 - b1**step) ** 2
    noise = (1.0 - b1) * (1.0 + b1**step) / ((1.0 + b1) * (1.0 - b1**step))
    return float(np.sqrt(m_sq / v_sum / noise))


def state_indices(optimizer: torch.optim.Optimizer) -> dict[int, int]:
    """``id(param)`` → its index in ``optimizer.state_dict()["state"]`` (param_groups order)."""
    out: dict[int, int] = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            out.setdefault(id(p), len(out))
    return out


def moment_configs(
    optimizer: torch.optim.Optimizer,
    weight_config: Callable[[torch.Tensor], QuantConfig | None],
    policy: MomentPolicy,
    prefix: str = "optimizer/",
) -> dict[str, QuantConfig | None]:
    """The config of every floating-point tensor of ``optimizer``'s state, by path.

    A moment (:func:`moment_kind`) of a weight for which ``weight_config`` gives a config
    follows ``policy`` (the search gives :data:`SMALL_WEIGHT` for a weight exact only because
    it is small); everything else (moments of exact weights, step counters, other state) is
    ``None``: exact. A moment below :func:`size_floor` is exact whatever its config says.
    Paths are those of ``optimizer.state_dict()`` under ``prefix``
    (``"optimizer/state/3/exp_avg"``).

    Examples
    --------
    >>> w = torch.nn.Parameter(torch.randn(64, 64))
    >>> opt = torch.optim.Adam([w]); w.grad = torch.ones_like(w); opt.step()
    >>> cfgs = moment_configs(opt, lambda p: QuantConfig(), MomentPolicy())
    >>> cfgs["optimizer/state/0/exp_avg_sq"].log_domain, cfgs["optimizer/state/0/step"]
    (True, None)
    """
    out: dict[str, QuantConfig | None] = {}
    index = state_indices(optimizer)
    moments: list[tuple[str, Literal["first", "second"], QuantConfig, torch.Tensor, int]] = []
    # the weights whose moments are lossy, with their optimizer state and betas
    owners: dict[int, tuple[Mapping[str, object], object]] = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            weight = weight_config(p)
            for key, value in optimizer.state.get(p, {}).items():
                if not isinstance(value, torch.Tensor) or not value.is_floating_point():
                    continue
                path = f"{prefix}state/{index[id(p)]}/{key}"
                kind = moment_kind(path)
                out[path] = None
                if weight is not None and kind is not None:
                    moments.append((path, kind, weight, value, id(p)))
                    owners[id(p)] = (optimizer.state[p], group.get("betas"))
    # a pass over every moment: on the encoding threads, one core per op, moments in parallel
    zeros = map_on_encoding_threads(zero_fraction, [m[3] for m in moments])
    coherence: dict[int, float | None] = {}
    if policy.quiet is not None:  # a pass over both moments of each weight, the same way
        found = map_on_encoding_threads(lambda o: momentum_coherence(*o), list(owners.values()))
        coherence = dict(zip(owners, found, strict=True))
    for (path, kind, weight, _, owner), z in zip(moments, zeros, strict=True):
        out[path] = policy.for_moment(kind, weight, z, coherence.get(owner))
    return out


def size_floor(path: str, config: CompressionConfig) -> int:
    """The fewest elements a floating-point tensor at ``path`` needs to be lossy.

    ``config.min_numel``; for an optimizer moment (:func:`moment_kind`) the lower
    ``config.moment_min_numel`` when that is set and smaller.

    Examples
    --------
    >>> c = CompressionConfig(moment_min_numel=128)
    >>> size_floor("model/b", c), size_floor("optimizer/state/0/exp_avg", c)
    (4096, 128)
    >>> size_floor("optimizer/state/0/exp_avg", CompressionConfig())
    4096
    """
    if moment_kind(path) is not None:
        return _moment_floor(config)
    return config.min_numel


def _moment_floor(config: CompressionConfig) -> int:
    if config.moment_min_numel is None:
        return config.min_numel
    return min(config.min_numel, config.moment_min_numel)


def exact_reason(
    path: str, x: torch.Tensor, config: CompressionConfig, *, min_numel: int | None = None
) -> str | None:
    """Why the tensor at ``path`` is stored exactly whatever its config, or ``None``.

    The eligibility rules of both :func:`ckptzip.save` and the search: integers, bool,
    complex and one-byte floats (float8), 0-d tensors, optimizer step counters, tensors below
    :func:`size_floor` (``min_numel`` when given) and paths matching ``config.exact``.

    Examples
    --------
    >>> exact_reason("optimizer/state/0/step", torch.tensor(5.0), CompressionConfig())
    '0-d tensor'
    >>> exact_reason("model/w", torch.zeros(10_000), CompressionConfig()) is None
    True
    """
    parts = path.split("/")
    if not x.is_floating_point() or x.dtype.itemsize == 1:
        return f"dtype {dtype_name(x.dtype)}"
    if x.dim() == 0:
        return "0-d tensor"
    if len(parts) >= 3 and parts[-1] == "step" and parts[-3] == "state":
        return "optimizer step counter"
    floor = size_floor(path, config) if min_numel is None else min_numel
    if x.numel() < max(floor, 1):
        name = "min_numel" if floor == config.min_numel else "moment_min_numel"
        return f"fewer than {name}={floor} elements"
    if config.is_exact(path):
        return "matched config.exact"
    return None


SMALL_WEIGHT = QuantConfig(prune=0.0)
"""What :func:`moment_configs` is told for a weight that is exact only because it is small
(:func:`small_weight`): its moments follow the :class:`MomentPolicy` as for a weight that is
quantized without pruning."""


def small_weight(path: str, x: torch.Tensor, config: CompressionConfig) -> bool:
    """Whether the weight at ``path`` is exact only because it has fewer than ``min_numel``
    elements, with at least ``moment_min_numel`` (when set): its optimizer moments are then
    quantized.

    Not for weights exact by ``config.exact``, dtype or shape (those moments stay exact).

    Examples
    --------
    >>> c = CompressionConfig(moment_min_numel=128)
    >>> small_weight("model/b", torch.zeros(512), c), small_weight("model/b", torch.zeros(64), c)
    (True, False)
    >>> small_weight("model/b", torch.zeros(512), CompressionConfig())
    False
    """
    floor = _moment_floor(config)
    return (
        exact_reason(path, x, config) is not None
        and exact_reason(path, x, config, min_numel=floor) is None
    )


@dataclass(frozen=True)
class Treatment:
    """How one tensor is stored: the plan's decision, shown by ``ckptzip inspect``.

    Attributes
    ----------
    path:
        The tensor's path in the structure.
    codec:
        ``"exact"``, ``"quant"``, ``"delta"`` (quantized, coded against the parent) or
        ``"residual"`` (the change against the parent's reconstruction, quantized with
        ``CompressionConfig.residual``) or ``"step"`` (an Adam first moment with
        ``fit="step"``, stored as its step over the file's second moment).
    quant:
        The :class:`QuantConfig` of a lossy tensor, ``None`` when exact (for ``"residual"``,
        the tensor's own config: what it is quantized with where the parent lacks it).
    reason:
        Why the tensor is exact (``None`` when lossy).
    shares_with:
        The other paths of the same storage (tied weights), which get this same treatment.
    """

    path: str
    codec: Codec
    quant: QuantConfig | None = None
    reason: str | None = None
    shares_with: tuple[str, ...] = ()

    @property
    def lossy(self) -> bool:
        return self.quant is not None


def _storage_key(x: torch.Tensor) -> tuple[object, ...] | None:
    """Identity of the elements ``x`` views: equal keys mean one tensor under two names."""
    if x.numel() == 0:
        return None
    return (
        x.device,
        x.untyped_storage().data_ptr(),
        x.storage_offset(),
        tuple(x.shape),
        tuple(x.stride()),
        x.dtype,
    )


def fingerprint(x: torch.Tensor) -> tuple[object, ...]:
    """What ``x`` is now: its storage, layout and in-place write counter.

    Equal fingerprints mean the same elements, unwritten in between (``_version`` counts
    in-place writes: an optimizer step changes it, swapping ``.data`` back and forth does not).
    """
    return (*(_storage_key(x) or ()), x._version)


@dataclass(frozen=True, eq=False)
class Prequantized:
    """A tensor quantized before the save (by the search), with what it was computed from.

    :func:`ckptzip.save` stores ``quantized`` as it is, without quantizing again, when the
    plan chose the same config, the tensor is the very one quantized and was not written since
    (same storage, shape, strides and in-place version counter), and the save's scores for it
    are the ones the search used; otherwise it quantizes.
    """

    quantized: QuantizedTensor
    source: tuple[object, ...] = field(repr=False)
    scores: tuple[object, ...] | None = field(default=None, repr=False)

    @classmethod
    def of(
        cls, x: torch.Tensor, q: QuantizedTensor, scores: torch.Tensor | None = None
    ) -> Prequantized:
        """Record that ``q`` is the quantization of ``x`` (with ``scores``) as they are now."""
        return cls(q, fingerprint(x), None if scores is None else fingerprint(scores))

    def fits(self, x: torch.Tensor, quant: QuantConfig, scores: torch.Tensor | None = None) -> bool:
        """Whether ``quantized`` is what quantizing ``x`` with ``quant`` now would give."""
        if self.quantized.config != quant or fingerprint(x) != self.source:
            return False
        return (None if scores is None else fingerprint(scores)) == self.scores


_DEFAULT_QUANT = QuantConfig()
"""``CompressionConfig``'s default ``quant``: where a config keeps it, a file standing alone
takes ``CompressionConfig.standalone``'s levels."""


class Planner:
    """Decides every tensor's :class:`Treatment` for one :func:`ckptzip.save`.

    Parameters
    ----------
    config:
        The checkpoint's :class:`CompressionConfig`.
    parent:
        Whether the file is a delta against a parent (lossy tensors then use ``"delta"``, or
        ``"residual"`` with ``config.residual`` for every one that is not an optimizer
        moment: :meth:`codec_for`).
    prequantized:
        Tensors already quantized by the search, by path (:attr:`SearchResult.prequantized`).

    Examples
    --------
    >>> leaves = [("model/w", torch.randn(5000)), ("model/b", torch.zeros(5))]
    >>> [(t.codec, t.reason) for t in Planner(CompressionConfig()).plan(leaves)]
    [('quant', None), ('exact', 'fewer than min_numel=4096 elements')]
    """

    def __init__(
        self,
        config: CompressionConfig,
        *,
        parent: bool = False,
        prequantized: Mapping[str, Prequantized] | None = None,
    ) -> None:
        self.config = config
        self.parent = parent
        self._prequantized = dict(prequantized or {})

    def quant_for(self, path: str, x: torch.Tensor) -> tuple[QuantConfig | None, str | None]:
        """The config of the tensor at ``path`` (``None`` when exact) and why it is exact."""
        quant, reason = self._configured(path, x)
        return self._rounded(path, quant), reason

    def _rounded(self, path: str, quant: QuantConfig | None) -> QuantConfig | None:
        """``quant`` with stochastic rounding where ``config.rounding`` asks for it: a file
        without a parent, a tensor that is no optimizer moment, a config that allows it."""
        if (
            quant is None
            or self.parent
            or self.config.rounding != "stochastic"
            or quant.rounding == "stochastic"
            or moment_kind(path) is not None
            or quant.log_domain
            or quant.prune > 0
            or quant.fit != "values"
        ):
            return quant
        return replace(quant, rounding="stochastic")

    def _configured(self, path: str, x: torch.Tensor) -> tuple[QuantConfig | None, str | None]:
        reason = exact_reason(path, x, self.config)
        if reason is not None:
            return None, reason
        cfg = self.config
        override = cfg.override_for(path)
        if override is not None:
            return override, None  # an explicit override is the caller's, moments included
        # a file standing alone at the default quant: config.standalone's levels in its place
        alone = None if self.parent or cfg.quant != _DEFAULT_QUANT else cfg.standalone
        kind = moment_kind(path) if cfg.moment_rules else None
        if kind == "second":
            return second_moment(cfg.quant if alone is None else alone.second(cfg.quant)), None
        if kind == "first":
            # Adam's exp_avg; SGD's momentum_buffer (the step itself, no second moment to fit
            # its levels to) keeps quant's levels
            adam = path.rsplit("/", 1)[-1] == "exp_avg"
            first = alone.first(cfg.quant) if alone is not None and adam else cfg.quant
            quant = keep_zeros(first, zero_fraction(x))
            if quant is None:
                return None, f"first moment almost all zeros (>= {ALMOST_ALL_ZEROS:g})"
            return quant, None
        if alone is not None and moment_kind(path) is None:
            return alone.weights(cfg.quant), None
        return cfg.quant, None

    def plan(
        self,
        leaves: Sequence[tuple[str, torch.Tensor]],
        *,
        aliases: Mapping[int, Sequence[str]] | None = None,
        exact: Mapping[int, str] | None = None,
        views: Mapping[str, torch.Tensor] | None = None,
    ) -> tuple[Treatment, ...]:
        """One :class:`Treatment` per leaf, in order; one decision per storage.

        Parameters
        ----------
        leaves:
            ``(path, tensor)`` pairs, as :func:`ckptzip.structure.flatten` gives them.
        aliases:
            Leaf index → the other paths that reference the same stored entry (a structure
            that stores tied weights once names the entry after one of them): the decision
            considers every name, so it does not depend on which one came first.
        exact:
            Leaf index → why that leaf must be stored exactly whatever its paths say (values
            the structure restores in a form that cannot be lossy, such as NumPy arrays).
        views:
            Path → the tensor that path stands for, where it is a view of part of its leaf
            (:func:`ckptzip.structure.reference_views`): each name is judged by its own
            elements, so a small bias in a flat buffer stays exact, and the leaf with it.
        """
        aliases = aliases or {}
        exact = exact or {}
        views = views or {}
        groups: dict[tuple[object, ...], list[int]] = {}
        for i, (_, x) in enumerate(leaves):
            key = _storage_key(x)
            groups.setdefault(("leaf", i) if key is None else key, []).append(i)
        decided: dict[int, Treatment] = {}
        for members in groups.values():
            names = {leaves[i][0]: views.get(leaves[i][0], leaves[i][1]) for i in members}
            for i in members:
                for alias in aliases.get(i, ()):
                    names.setdefault(alias, views.get(alias, leaves[i][1]))
            forced = next((exact[i] for i in members if i in exact), None)
            quant, reason = (None, forced) if forced is not None else self._decide(_own(names))
            codec = self.codec_for(names, quant)
            for i in members:
                path = leaves[i][0]
                others = tuple(sorted(n for n in names if n != path))
                decided[i] = Treatment(path, codec, quant, reason, others)
        return self._steps(leaves, decided)

    def _steps(
        self, leaves: Sequence[tuple[str, torch.Tensor]], decided: Mapping[int, Treatment]
    ) -> tuple[Treatment, ...]:
        """The treatments with every ``fit="step"`` first moment on the codec ``"step"``
        where the file holds its second moment lossy, with the same shape (what the codec
        divides by); elsewhere it is quantized as with ``fit="update"``."""
        where = {p: i for i, (p, _) in enumerate(leaves)}
        out = []
        for i, (path, x) in enumerate(leaves):
            t = decided[i]
            if t.quant is not None and t.quant.fit == "step":
                step = t.quant
                second = [
                    j
                    for p in second_moment_path(path)
                    if (j := where.get(p)) is not None
                    and decided[j].lossy
                    and decided[j].codec != "step"
                    and tuple(leaves[j][1].shape) == tuple(x.shape)
                ]
                if second and not t.shares_with:
                    t = replace(t, codec="step")
                else:
                    quant = replace(step, fit="update")
                    t = replace(t, quant=quant, codec=self.codec_for([path], quant))
            out.append(t)
        return tuple(out)

    def codec_for(self, names: Iterable[str], quant: QuantConfig | None) -> Codec:
        """The codec of one storage with these paths and config: ``"exact"`` without a config;
        in a delta file ``"residual"`` when ``config.residual`` is set and no path is an
        optimizer moment (moments keep their bin-index deltas: error feedback is for what
        restores put back into training, the weights), else ``"delta"``; else ``"quant"``."""
        if quant is None:
            return "exact"
        if not self.parent:
            return "quant"
        if self.config.residual is not None and all(moment_kind(n) is None for n in names):
            return "residual"
        return "delta"

    def _decide(self, names: Mapping[str, torch.Tensor]) -> tuple[QuantConfig | None, str | None]:
        """One decision for all names of one storage: exact if any name must be, or if
        names over different parts of it would be quantized differently (a first and a second
        moment stacked in one buffer: one config would give one of them the wrong levels),
        else the config of the first name in sorted order (independent of key order)."""
        decisions = {p: self.quant_for(p, x) for p, x in names.items()}
        exact = sorted(p for p, (q, _) in decisions.items() if q is None)
        if exact:
            why = decisions[exact[0]][1]
            return None, why if len(names) == 1 else f"{why} (as {exact[0]})"
        first = min(names)
        spans = _spans(names)
        differ = sorted(
            p
            for p, (q, _) in decisions.items()
            if q != decisions[first][0] and spans.get(p) != spans.get(first)
        )
        if differ:  # tied names (one range) take the first name's config, as always
            return None, f"parts of one storage quantized differently ({first}, {differ[0]})"
        return decisions[first][0], None

    def prequantized_for(
        self, t: Treatment, x: torch.Tensor, scores: torch.Tensor | None = None
    ) -> QuantizedTensor | None:
        """The search's quantization of ``t.path`` when it is still exactly what to store."""
        pre = self._prequantized.get(t.path)
        if pre is None or t.quant is None or not pre.fits(x, t.quant, scores):
            return None
        return pre.quantized


def _own(names: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The names of one storage that are tensors of their own, not slices of another name:
    those whose storage range no other name's strictly contains. A weight's row follows the
    weight (its values are the weight's, quantized with it); tied names and a transpose
    (one range) are each a name of their own, as are parameters packed side by side in one
    flat buffer, or two moments stacked in one, each judged by its own elements."""
    # by first element, the longest first: a range is strictly inside another exactly when an
    # earlier, different range reaches as far (one sweep, not a comparison of every pair: a
    # flat buffer holds thousands of parameters)
    order = sorted(_spans(names).items(), key=lambda kv: (kv[1][0], -kv[1][1]))
    own: dict[str, torch.Tensor] = {}
    reach, i = -1, 0
    while i < len(order):
        span = order[i][1]
        j = i
        while j < len(order) and order[j][1] == span:
            j += 1
        if reach < span[1]:
            own.update((p, names[p]) for p, _ in order[i:j])
        reach, i = max(reach, span[1]), j
    return own or dict(names)


def _spans(names: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, int]]:
    """Each non-empty name's range of storage elements, ``[first, last + 1)``."""
    return {
        p: (int(x.storage_offset()), int(x.storage_offset()) + int(extent(x)))
        for p, x in names.items()
        if x.numel()
    }
