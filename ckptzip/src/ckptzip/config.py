"""Frozen configuration dataclasses, validated eagerly, round-tripping through plain JSON.

``QuantConfig`` is the per-tensor knob set the quantizer takes and the search chooses;
``CompressionConfig`` is what :func:`ckptzip.save` takes for a whole checkpoint.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from ckptzip.errors import ConfigError

__all__ = ["CompressionConfig", "QuantConfig", "StandaloneConfig"]

PruneMetric = Literal["magnitude", "sensitivity"]
_PRUNE_METRICS = ("magnitude", "sensitivity")
Fit = Literal["values", "update", "step"]
_FITS = ("values", "update", "step")
Rounding = Literal["nearest", "stochastic"]
_ROUNDINGS = ("nearest", "stochastic")


@dataclass(frozen=True)
class QuantConfig:
    """How one floating-point tensor is quantized.

    Parameters
    ----------
    bins:
        Number of quantization levels (2..256). When ``prune > 0`` one of them is the exact
        zero level, so indices always fit ``ceil(log2(bins))`` bits.
    prune:
        Fraction of entries (lowest by ``prune_metric``) set to exactly zero, in [0, 1).
    prune_metric:
        ``"magnitude"`` (``|w|``) or ``"sensitivity"`` (``|g·w|``; falls back to magnitude
        when no gradient scores are given).
    protect:
        Fraction of entries (top by magnitude and, with scores, by sensitivity) stored
        exactly in the original dtype, in [0, 1).
    log_domain:
        Quantize ``log|x|`` instead of ``x`` (for positive tensors with a huge dynamic range,
        such as Adam's ``exp_avg_sq``).
    fit:
        What the levels are fitted to. ``"values"`` (default): the entries' values (k-means
        weighted by count and magnitude, :mod:`ckptzip.quantize`). ``"update"``, for an Adam
        first moment ``m``: each entry weighted by ``1/(sqrt(v)+eps)²`` of its own second
        moment ``v``, so the levels minimize the error of the step ``m/(sqrt(v)+eps)`` a
        restored optimizer takes (:func:`ckptzip.plan.fit_weights`); where no second moment
        is at hand it fits the values. The file format is the same either way (only the
        levels differ). ``"step"``, for an Adam first moment: what is quantized is the step
        ``u = m/(sqrt(v̂)+eps)`` itself, over the second moment ``v̂`` as the same file stores
        it, and ``m`` is rebuilt as ``û·(sqrt(v̂)+eps)`` (the codec ``"step"``,
        :mod:`ckptzip.codecs.step`): the levels then scale with each entry's own step size;
        where the file holds no lossy second moment of the same shape the tensor is
        quantized as with ``"update"``.
    rounding:
        ``"nearest"`` (default): every entry takes its nearest level. ``"stochastic"``: the
        lower or the upper of the two levels around it, the upper with probability
        ``(x − lo) / (hi − lo)``, so the stored value is ``x`` in expectation (unbiased).
        Nearest rounding erases, at every restore, whatever training moved a weight by less
        than half a level's gap since the last checkpoint, in the same direction restore
        after restore; stochastic rounding keeps that progress in expectation and draws a
        new direction every time (its error is about 1.4x larger in norm). The draws are a
        hash of each entry's position under a seed taken from the tensor's values, so the
        same tensor gives the same file. Not with ``log_domain`` or ``prune > 0`` (pruned
        entries are meant to be zero). The file format is the same either way.

    Examples
    --------
    >>> QuantConfig(bins=8, prune=0.2).to_json()["bins"]
    8
    >>> QuantConfig.from_json(QuantConfig().to_json()) == QuantConfig()
    True
    """

    bins: int = 16
    prune: float = 0.0
    prune_metric: PruneMetric = "magnitude"
    protect: float = 0.0005
    log_domain: bool = False
    fit: Fit = "values"
    rounding: Rounding = "nearest"

    def __post_init__(self) -> None:
        if self.fit not in _FITS:
            raise ConfigError(f"fit={self.fit!r} must be one of {', '.join(_FITS)}")
        _check_rounding(self.rounding)
        if self.rounding == "stochastic" and (self.log_domain or self.prune > 0):
            raise ConfigError(
                "rounding='stochastic' is for linear-domain tensors without pruning "
                f"(log_domain={self.log_domain!r}, prune={self.prune!r})"
            )
        if self.fit != "values" and self.log_domain:
            raise ConfigError(f"fit={self.fit!r} is for a first moment: not with log_domain=True")
        if not isinstance(self.bins, int) or not 2 <= self.bins <= 256:
            raise ConfigError(f"bins={self.bins!r} must be an integer in [2, 256]")
        if not 0.0 <= self.prune < 1.0:
            raise ConfigError(f"prune={self.prune!r} must lie in [0, 1)")
        if self.prune_metric not in _PRUNE_METRICS:
            raise ConfigError(
                f"prune_metric={self.prune_metric!r} must be one of {', '.join(_PRUNE_METRICS)}"
            )
        if not 0.0 <= self.protect < 1.0:
            raise ConfigError(f"protect={self.protect!r} must lie in [0, 1)")
        if self.prune + self.protect >= 1.0:
            raise ConfigError(
                f"prune={self.prune!r} + protect={self.protect!r} must stay below 1: "
                "nothing would be left to quantize"
            )

    def to_json(self) -> dict[str, Any]:
        # every field is a flat scalar: no ``asdict`` (its recursive copy cost a save 2 % of
        # its CPU, one call per quantized tensor)
        out = {name: getattr(self, name) for name in _QUANT_FIELDS}
        if self.fit == "values":  # absent at the default: the JSON of older configs unchanged
            del out["fit"]
        if self.rounding == "nearest":  # likewise
            del out["rounding"]
        return out

    @classmethod
    def from_json(cls, data: Any) -> QuantConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"a QuantConfig must be a JSON object, got {type(data).__name__}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"bad QuantConfig {data!r}: {exc}") from exc


_QUANT_FIELDS = tuple(f.name for f in fields(QuantConfig))


@dataclass(frozen=True)
class StandaloneConfig:
    """The levels of a file standing alone (:attr:`CompressionConfig.standalone`).

    A file written without a parent (a plain :func:`ckptzip.save`, what the Lightning and
    Hugging Face integrations write) is all a restore from it gets, so its errors go back
    into training at every restore. Where a config keeps the default ``quant``
    (``QuantConfig()``), these levels take its place in such a file for every tensor without
    an override; a config that sets its own ``quant`` gets that ``quant`` everywhere. The
    moment rules still apply on top (first moments keep their exact zeros, second moments
    are quantized in the log domain and never pruned).

    Parameters
    ----------
    weight_bins:
        Levels of every lossy tensor that is no optimizer moment (the weights). 32: twice
        ``QuantConfig``'s 16, so stochastic rounding (the default ``rounding``) puts half the
        noise into the weights at each restore.
    first_bins:
        Levels of Adam's first moment (``exp_avg``; SGD's ``momentum_buffer``, which has no
        second moment to fit its levels to, keeps ``quant``'s).
    first_fit:
        What the first moment's levels are fitted to (:attr:`QuantConfig.fit`): ``"update"``
        (default) weights each entry by ``1/(sqrt(v)+eps)²`` of its second moment in the same
        file, so the levels minimize the error of the Adam step a restore resumes with
        (where the file holds no second moment of that path, the values are fitted). Fitted
        to the values, 16 levels put most entries of a first moment on the level nearest
        zero: the step after a restore was 62 % off in norm on ``chargru`` (8 levels fitted
        to the step: 36 %).
    second_bins:
        Levels of a second moment (``exp_avg_sq``, ``max_exp_avg_sq``; log domain). 4: Adam
        divides by its square root, so a level's error moves the step by half as much, and
        16 levels were a third of a file's bytes.

    Measured (README, "Files standing alone"): on the fault-tolerant benchmark, 10 restores
    from plain ``ckptzip.save`` files, these levels against ``quant``'s 16 everywhere took
    ``chargru`` from +1.59 % to -0.09 % mean final loss against the exact run (18 runs) at
    the same ratio.

    Examples
    --------
    >>> StandaloneConfig().weight_bins, StandaloneConfig().second_bins
    (32, 4)
    >>> StandaloneConfig.from_json(StandaloneConfig(first_bins=4).to_json()).first_bins
    4
    """

    weight_bins: int = 32
    first_bins: int = 8
    first_fit: Fit = "update"
    second_bins: int = 4

    def __post_init__(self) -> None:
        for name in ("weight_bins", "first_bins", "second_bins"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= 256:
                raise ConfigError(f"{name}={value!r} must be an integer in [2, 256]")
        if self.first_fit not in ("values", "update"):
            raise ConfigError(f"first_fit={self.first_fit!r} must be 'values' or 'update'")

    def weights(self, quant: QuantConfig) -> QuantConfig:
        """``quant`` (a weight's config) at :attr:`weight_bins` levels."""
        return replace(quant, bins=self.weight_bins)

    def first(self, quant: QuantConfig) -> QuantConfig:
        """``quant`` as Adam's first moment's config: :attr:`first_bins` levels,
        :attr:`first_fit` (before the moment rules keep its zeros)."""
        return replace(quant, bins=self.first_bins, fit=self.first_fit)

    def second(self, quant: QuantConfig) -> QuantConfig:
        """``quant`` at :attr:`second_bins` levels (before the moment rules put it in the log
        domain)."""
        return replace(quant, bins=self.second_bins)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> StandaloneConfig:
        if not isinstance(data, dict):
            raise ConfigError(
                f"a StandaloneConfig must be a JSON object, got {type(data).__name__}"
            )
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"bad StandaloneConfig {data!r}: {exc}") from exc


@dataclass(frozen=True)
class CompressionConfig:
    """How a whole checkpoint is compressed by :func:`ckptzip.save`.

    Parameters
    ----------
    quant:
        Default :class:`QuantConfig` for lossy floating-point tensors.
    overrides:
        ``(pattern, QuantConfig)`` pairs matched with :func:`fnmatch.fnmatchcase` against a
        tensor's path in the structure (``"model/encoder.weight"``); first match wins.
    exact:
        Path patterns kept bit-exact (compressed losslessly only).
    min_numel:
        Floating-point tensors with fewer elements stay exact (their metadata would cost
        more than quantizing saves), and so do their optimizer moments unless
        ``moment_min_numel`` says otherwise.
    moment_min_numel:
        A lower floor for optimizer moments (``exp_avg``, ``exp_avg_sq`` ...), or ``None``
        (the default: the same floor as ``min_numel``). When set, moments are quantized down
        to ``min(min_numel, moment_min_numel)`` elements, including the moments of weights
        that are exact only because they are small (biases, norms). Off by default because it
        was measured to cost quality: on the fault-tolerant benchmark (3 seeds, 10 restores)
        ``moment_min_numel=128`` wrote 1.11-1.19x fewer bytes but ended further from the
        exact run on every model (``digits`` +10.6 % against +2.4 %, ``gru`` +1.7 % against
        +0.95 %, ``lm`` +5.4 % against +5.1 %). Below 128 elements the per-tensor cost of a
        quantized moment (codebook, count table, a longer manifest record) eats most of what
        its levels save (``benchmarks/small_tensors.py``: at 128 elements 3.0x / 2.1x smaller
        than exact for first / second moments, at 64 1.9x / 1.3x).
    zstd_level:
        zstandard level of the lossless stage.
    moment_rules:
        Keep optimizer moments that ``quant`` would break safe (paths not matched by
        ``overrides``): second moments (``exp_avg_sq``, ``max_exp_avg_sq``) are quantized in
        the log domain and never pruned, first moments (``exp_avg``, ``momentum_buffer``)
        never lose their exact zeros (the rules are :mod:`ckptzip.plan`'s). Adam divides by
        ``sqrt(exp_avg_sq)``: a pruned second moment, or a zero first moment restored as a
        small level over a zero second moment, makes the first step after a restore throw
        those weights far away. (Pruning a first moment is safe: a zero first moment only
        skips that weight's step.)
    residual:
        Error feedback along a delta chain (``None``, the default: off). With a config, every
        lossy tensor of a delta file (``parent=``) that is not an optimizer moment is stored by
        the ``"residual"`` codec: its change against the parent's *reconstruction*, quantized
        with this config, so ``ŵ_k = ŵ_{k−1} + Q(w_k − ŵ_{k−1})`` and what one checkpoint's
        quantization left is corrected by the next instead of adding up over restores.
        Keyframes, and tensors the parent lacks, are quantized in full with their own config
        as without it. The measured point is ``QuantConfig(bins=4, protect=0.0005)``
        (:data:`ckptzip.plan.RESIDUAL`; README, "Error feedback along the chain").
    rounding:
        How the weights of a file without a parent are rounded to their levels:
        ``"stochastic"`` (the default) sets :attr:`QuantConfig.rounding` to ``"stochastic"``
        for every lossy tensor that is not an optimizer moment, where its config allows it
        (linear domain, no pruning, levels fitted to the values); ``"nearest"`` leaves every
        config as it is. A file standing alone is all a restore gets: nearest rounding there
        throws away, at every restore, each weight's progress smaller than half a level's
        gap, in the same direction each time (the fault-tolerant benchmark, 10 restores from
        plain ``ckptzip.save`` files: ``gru`` +3.3 % against the exact run with nearest
        rounding; README, "Files standing alone"). Delta files keep their configs as they
        are (their chains correct or delta-code the rounding), and so does
        :class:`~ckptzip.CheckpointManager`, which sets ``"nearest"`` for all its files.
    standalone:
        The levels of a file without a parent while ``quant`` is the default
        (:class:`StandaloneConfig`, the default: weights at 32 levels, Adam's first moment at
        8 fitted to its step, its second moment at 4), for every tensor without an override;
        ``None``: ``quant``'s 16 levels everywhere, as before. A config that sets its own
        ``quant`` (``QuantConfig(bins=8)``) gets it everywhere. Delta files (``parent=``)
        keep ``quant``; :class:`~ckptzip.CheckpointManager` and :class:`ckptzip.dcp.Writer`
        set ``None`` (their files are searched, or chained, as measured before).
    """

    quant: QuantConfig = field(default_factory=QuantConfig)
    overrides: tuple[tuple[str, QuantConfig], ...] = ()
    exact: tuple[str, ...] = ()
    min_numel: int = 4096
    moment_min_numel: int | None = None
    zstd_level: int = 3
    moment_rules: bool = True
    residual: QuantConfig | None = None
    rounding: Rounding = "stochastic"
    standalone: StandaloneConfig | None = field(default_factory=StandaloneConfig)

    def __post_init__(self) -> None:
        for name in ("min_numel", "moment_min_numel"):
            value = getattr(self, name)
            if value is None and name == "moment_min_numel":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name}={value!r} must be an integer >= 0")
        if not -7 <= self.zstd_level <= 22:
            raise ConfigError(f"zstd_level={self.zstd_level!r} must lie in [-7, 22]")
        for item in self.overrides:
            if (
                not isinstance(item, tuple)
                or len(item) != 2
                or not isinstance(item[0], str)
                or not isinstance(item[1], QuantConfig)
            ):
                raise ConfigError(f"override {item!r} must be a (pattern, QuantConfig) pair")
        if self.residual is not None and not isinstance(self.residual, QuantConfig):
            raise ConfigError(f"residual={self.residual!r} must be None or a QuantConfig")
        _check_rounding(self.rounding)
        if self.standalone is not None and not isinstance(self.standalone, StandaloneConfig):
            raise ConfigError(f"standalone={self.standalone!r} must be None or a StandaloneConfig")

    def is_exact(self, path: str) -> bool:
        """Whether ``path`` matches one of the ``exact`` patterns."""
        literal, globs = self._exact_matcher
        return path in literal or any(fnmatch.fnmatchcase(path, pat) for _, pat in globs)

    def override_for(self, path: str) -> QuantConfig | None:
        """The first override whose pattern matches ``path``, if any."""
        literal, globs = self._override_matcher
        first = literal.get(path)
        for i, pat in globs:
            if first is not None and i > first:
                break
            if fnmatch.fnmatchcase(path, pat):
                return self.overrides[i][1]
        return None if first is None else self.overrides[first][1]

    # A searched config names every tensor by its own pattern (one per path), so matching
    # every path against every pattern grew with the square of the tensors: literal patterns
    # are looked up instead, the others matched in order, first match still winning.
    @functools.cached_property
    def _exact_matcher(self) -> tuple[dict[str, int], list[tuple[int, str]]]:
        return _split_patterns(self.exact)

    @functools.cached_property
    def _override_matcher(self) -> tuple[dict[str, int], list[tuple[int, str]]]:
        return _split_patterns([pat for pat, _ in self.overrides])

    def quant_for(self, path: str) -> QuantConfig | None:
        """The configured QuantConfig for ``path``: ``None`` when it matches ``exact``, else
        its override or ``quant``.

        This is the configuration as written; what :func:`ckptzip.save` does with a tensor
        (eligibility, the moment rules) is decided by :class:`ckptzip.plan.Planner`.
        """
        if self.is_exact(path):
            return None
        override = self.override_for(path)
        return self.quant if override is None else override

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "quant": self.quant.to_json(),
            "overrides": [[p, c.to_json()] for p, c in self.overrides],
            "exact": list(self.exact),
            "min_numel": self.min_numel,
            "moment_min_numel": self.moment_min_numel,
            "zstd_level": self.zstd_level,
            "moment_rules": self.moment_rules,
        }
        if self.residual is not None:  # absent when off: the JSON of older configs unchanged
            out["residual"] = self.residual.to_json()
        out["rounding"] = self.rounding
        out["standalone"] = None if self.standalone is None else self.standalone.to_json()
        return out

    @classmethod
    def from_json(cls, data: Any) -> CompressionConfig:
        if not isinstance(data, dict):
            raise ConfigError("a CompressionConfig must be a JSON object")
        try:
            return cls(
                quant=QuantConfig.from_json(data["quant"]),
                overrides=tuple((p, QuantConfig.from_json(c)) for p, c in data["overrides"]),
                exact=tuple(data["exact"]),
                min_numel=int(data["min_numel"]),
                moment_min_numel=_optional_int(data.get("moment_min_numel")),
                zstd_level=int(data["zstd_level"]),
                moment_rules=bool(data.get("moment_rules", True)),
                residual=None
                if data.get("residual") is None
                else QuantConfig.from_json(data["residual"]),
                rounding=data.get("rounding", "stochastic"),
                standalone=_standalone(data),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"bad CompressionConfig: {exc}") from exc


def _standalone(data: dict[str, Any]) -> StandaloneConfig | None:
    """A config's ``standalone`` from its JSON: the default where the key is absent (JSON
    written before the field existed), ``None`` where it is null."""
    if "standalone" not in data:
        return StandaloneConfig()
    value = data["standalone"]
    return None if value is None else StandaloneConfig.from_json(value)


def _check_rounding(value: Any) -> None:
    """The one check of a ``rounding`` (QuantConfig's and CompressionConfig's)."""
    if value not in _ROUNDINGS:
        raise ConfigError(f"rounding={value!r} must be one of {', '.join(_ROUNDINGS)}")


def _optional_int(value: Any) -> int | None:
    """``None`` stays ``None`` (and an older config without the key reads as ``None``)."""
    return None if value is None else int(value)


def _literal(pattern: str) -> str | None:
    """The one path ``pattern`` matches when it has no wildcard (a character class of one of
    ``[]*?``, as in ``"[*]"``, is that character), else ``None``."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c in "*?":
            return None
        if c == "[":
            if i + 2 < len(pattern) and pattern[i + 1] in "[]*?" and pattern[i + 2] == "]":
                out.append(pattern[i + 1])
                i += 3
                continue
            return None
        out.append(c)
        i += 1
    return "".join(out)


def _split_patterns(patterns: Sequence[str]) -> tuple[dict[str, int], list[tuple[int, str]]]:
    """Literal patterns (path -> position of the first one) and the others (position,
    pattern), in order."""
    literal: dict[str, int] = {}
    globs: list[tuple[int, str]] = []
    for i, pat in enumerate(patterns):
        path = _literal(pat)
        if path is None:
            globs.append((i, pat))
        else:
            literal.setdefault(path, i)
    return literal, globs
