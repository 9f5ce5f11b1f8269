"""Types shared by every stage of the pipeline (the bottom of the import graph).

``QuantizedTensor`` is the quantizer's output and the codecs' input: everything needed to
rebuild the lossy tensor, in a device-independent form. ``StepWeights`` is what the planner
hands the quantizer to fit a first moment's levels to Adam's step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ckptzip.config import QuantConfig

__all__ = ["IndicesOnly", "QuantizedTensor", "StepWeights"]


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """One floating-point tensor after quantization.

    Attributes
    ----------
    shape:
        The original shape.
    dtype:
        The original dtype (``torch.float32`` …); dequantization returns it.
    config:
        The :class:`QuantConfig` used.
    levels:
        The codebook, float64, sorted ascending, ``len(levels) <= config.bins``. When
        ``config.prune > 0`` it contains an exact ``0.0`` level. With ``config.log_domain`` the
        levels are of ``log|x|`` and the zero level (if any) stands for exact zero.
    indices:
        uint8, flat (C order), one index into ``levels`` per element. At protected positions
        the index is the nearest level's (the position list is authoritative), so the index
        stream stays smooth for the delta stage.
    protected_positions:
        int64, sorted flat positions stored exactly (the top ``protect`` fraction plus every
        non-finite value: NaN and ±inf are always protected).
    protected_values:
        1-D CPU tensor of the original dtype: the exact values at ``protected_positions``.
    rel_error:
        Measured relative L2 error ``||x̂ − x|| / ||x||`` over finite entries (0 when
        ``||x|| = 0``).
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    config: QuantConfig
    levels: np.ndarray
    indices: np.ndarray
    protected_positions: np.ndarray
    protected_values: torch.Tensor
    rel_error: float

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True, eq=False)
class IndicesOnly(QuantizedTensor):
    """A :class:`QuantizedTensor` decoded for its indices alone: a link inside a delta chain
    whose next link is a bin-index delta against it, which reads nothing of it but its
    indices (and the walk hands it to nothing else). Its levels and indices are decoded and
    checked as any entry's; its protected positions and values are not decoded (left empty),
    so it does not stand for the tensor: ``dequantize`` refuses it."""


@dataclass(frozen=True, eq=False)
class StepWeights:
    """The level-fit weights of an Adam first moment, ``1/(sqrt(v)+eps)²``, held as ``v``.

    :func:`ckptzip.quantize.quantize` takes them as ``fit_weights`` like a weight tensor and
    gets the same levels, but sums them per bucket in the pass that reads ``v``
    (:func:`ckptzip.kernels.fit_sums`), without a tensor of weights
    (:func:`ckptzip.kernels.step_weights` makes that tensor).

    Attributes
    ----------
    second_moment:
        ``v``, Adam's second moment (``exp_avg_sq``, or AMSGrad's ``max_exp_avg_sq``), the
        first moment's shape.
    eps:
        Adam's ``eps``, the floor of ``sqrt(v)``.
    """

    second_moment: torch.Tensor
    eps: float

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.second_moment.shape)
