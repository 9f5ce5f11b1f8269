"""Configuration search: layer types, the cube walk, tolerance, the live model left untouched."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.errors import ConfigError, SearchGaveUpWarning
from ckptzip.plan import ALMOST_ALL_ZEROS
from ckptzip.quantize import dequantize, quantize
from ckptzip.search import AXES, MomentPolicy, SearchResult, layer_types, save_scores, search
from ckptzip.sensitivity import SensitivityTracker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _workloads


def _task(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, object]:
    """A small trained classifier and its held-out loss."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU())
    model.append(nn.Linear(64, 5))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    centres = 0.4 * torch.randn(5, 32, generator=g)  # overlapping classes: loss stays ~0.5

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, 5, (n,), generator=g)
        return centres[y] + torch.randn(n, 32, generator=g), y

    for _ in range(60):
        x, y = batch(64)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    held = batch(512)

    @torch.no_grad()
    def eval_fn(m: nn.Module) -> float:
        return float(nn.functional.cross_entropy(m(held[0]), held[1]))

    return model, opt, eval_fn


def _apply(model: nn.Module, config: CompressionConfig, prefix: str = "model/") -> nn.Module:
    """A copy of ``model`` with every parameter quantized as ``config`` says (independently of
    the search's own trial code)."""
    import copy

    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in out.named_parameters():
            cfg = config.quant_for(prefix + name)
            if cfg is not None and p.numel() >= config.min_numel:
                p.copy_(dequantize(quantize(p.detach(), cfg)).reshape(p.shape))
    return out


def test_layer_types_of_a_transformer() -> None:
    lm = _workloads.make("lm", 0).model
    kinds = layer_types(lm)
    assert kinds["embed.weight"] == "embedding"
    assert kinds["pos"] == "other"
    assert kinds["norm.weight"] == "norm"
    assert kinds["head.weight"] == "linear"
    assert kinds["blocks.layers.0.self_attn.in_proj_weight"] == "linear"
    assert kinds["blocks.layers.0.self_attn.out_proj.weight"] == "linear"
    assert kinds["blocks.layers.0.norm1.bias"] == "norm"
    conv = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    assert layer_types(conv) == {
        "0.weight": "conv",
        "0.bias": "conv",
        "1.weight": "norm",
        "1.bias": "norm",
    }


def test_search_honours_tolerance_and_leaves_model_untouched() -> None:
    model, _, eval_fn = _task()
    model.train()
    before = {n: (p.data_ptr(), p.detach().clone()) for n, p in model.named_parameters()}
    result = search(model, eval_fn=eval_fn, tolerance=0.05)  # type: ignore[arg-type]
    for n, p in model.named_parameters():
        assert p.data_ptr() == before[n][0] and torch.equal(p, before[n][1])
    assert model.training
    assert result.mode == "eval" and result.strategy == "full"
    assert result.baseline == pytest.approx(eval_fn(model))  # type: ignore[operator]
    limit = result.baseline * 1.05  # type: ignore[operator]
    assert result.quality is not None and result.quality <= limit
    # an independent reconstruction of the chosen config gives the same, feasible quality
    assert eval_fn(_apply(model, result.config)) <= limit  # type: ignore[operator]
    cfg = result.layer_configs["linear"]
    assert cfg is not None and cfg != QuantConfig(bins=32, prune=0.0, protect=0.01)
    assert 1 <= result.trials <= 15  # at most 3 + 12t for t = 1 layer type
    assert result.estimated_ratio > 4
    assert set(result.paths) == {"model/0.weight", "model/2.weight"}  # 4.weight: small
    assert result.config.quant_for("model/0.bias") is None  # small: exact
    assert SearchResult.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert result.to_json()["layer_configs"]["linear"] == cfg.to_json()


def test_each_step_toward_aggression_from_the_choice_is_infeasible_or_at_the_end() -> None:
    """The chosen point is a local optimum of the cube: one more step on any axis fails
    (eval_fn over the limit, or a tensor's relative error over the error budget)."""
    model, _, eval_fn = _task(1)
    result = search(model, eval_fn=eval_fn, tolerance=0.05)  # type: ignore[arg-type]
    cfg = result.layer_configs["linear"]
    assert cfg is not None
    limit = result.baseline * 1.05  # type: ignore[operator]
    steps = {"bins": AXES["bins"], "prune": AXES["prune"]}
    for axis, values in steps.items():
        i = values.index(getattr(cfg, axis))
        if i + 1 < len(values):
            bolder = QuantConfig(**{**cfg.to_json(), axis: values[i + 1]})
            config = CompressionConfig(quant=bolder)
            error = max(
                quantize(p.detach(), bolder).rel_error
                for n, p in model.named_parameters()
                if f"model/{n}" in result.paths
            )
            assert eval_fn(_apply(model, config)) > limit or error > 0.1  # type: ignore[operator]


def test_with_eval_fn_no_searched_tensor_exceeds_the_error_budget() -> None:
    """A configuration eval_fn cannot tell from exact (it ignores the weights here) is still
    refused when a tensor's relative error exceeds error_budget, without an evaluation:
    restores from such a checkpoint cost training more than eval_fn shows (pruning half of
    a transformer's weights cost its training loss +3.6 % where held-out data saw less)."""
    model, _, _ = _task(2)
    calls = []

    def blind(m: nn.Module) -> float:
        calls.append(1)
        return 1.0

    result = search(model, eval_fn=blind, tolerance=0.05, error_budget=0.05)
    assert result.layer_configs["linear"] is not None
    for n, p in model.named_parameters():
        if f"model/{n}" in result.paths:
            q = quantize(p.detach(), result.config.quant_for(f"model/{n}"))  # type: ignore[arg-type]
            assert q.rel_error <= 0.05
    assert result.trials == len(calls) - 1  # the exact weights' evaluation not counted
    coarse = search(model, eval_fn=blind, tolerance=0.05, error_budget=0.5)
    assert coarse.estimated_ratio > result.estimated_ratio


def test_the_manager_hands_its_error_budget_to_the_search(tmp_path: Path) -> None:
    from ckptzip.manager import CheckpointManager

    model, opt, _ = _task(2)
    mgr = CheckpointManager(
        tmp_path,
        model=model,
        optimizer=opt,
        eval_fn=lambda m: 1.0,
        error_budget=0.05,
        window=None,  # no gradient scores: the quantization below is the search's
    )
    report = mgr.save(1)
    mgr.close()
    assert report.search is not None
    cfg = report.search.layer_configs["linear"]
    assert cfg is not None
    for n, p in model.named_parameters():
        if f"model/{n}" in report.search.paths:
            assert quantize(p.detach(), cfg).rel_error <= 0.05


def test_live_model_restored_when_eval_fn_raises() -> None:
    model = nn.Sequential(nn.Linear(64, 96), nn.BatchNorm1d(96), nn.Linear(96, 3))
    model.eval()
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    stats = model[1].running_mean.clone()
    calls = []

    def eval_fn(m: nn.Module) -> float:
        m.train()  # runs in training mode: updates BatchNorm's running statistics
        m(torch.randn(8, 64))
        calls.append(1)
        if len(calls) == 2:  # the first trial (the exact weights' baseline is call 1)
            raise RuntimeError("boom")
        return 1.0

    with pytest.raises(RuntimeError, match="boom"):
        search(model, eval_fn=eval_fn)
    for n, p in model.named_parameters():
        assert torch.equal(p, weights[n])
    assert torch.equal(model[1].running_mean, stats)
    assert not model.training


def test_later_checkpoint_searches_only_the_neighbourhood() -> None:
    model, _, eval_fn = _task(2)
    first = search(model, eval_fn=eval_fn)  # type: ignore[arg-type]
    again = search(model, eval_fn=eval_fn, previous=first)  # type: ignore[arg-type]
    assert again.strategy == "neighbourhood" and again.trials == 1
    assert dict(again.layer_configs) == dict(first.layer_configs)


def _previous(
    cfg: QuantConfig,
    config: CompressionConfig | None = None,
    baseline: float | None = None,
    quality: float | None = None,
) -> SearchResult:
    """A previous full search (no trials, tolerance 0.05) that chose ``cfg`` for ``_task``'s
    one layer, ``"linear"``: where the next search's neighbourhood starts from."""
    return SearchResult(
        layer_configs={"linear": cfg},
        config=CompressionConfig() if config is None else config,
        mode="eval",
        strategy="full",
        trials=0,
        seconds=0.0,
        baseline=baseline,
        quality=quality,
        tolerance=0.05,
        estimated_ratio=1.0,
    )


def test_neighbourhood_never_goes_more_aggressive() -> None:
    model, _, eval_fn = _task(3)
    first = search(model, eval_fn=eval_fn)  # type: ignore[arg-type]
    # pretend the previous choice was the most precise point: nothing bolder may be chosen
    precise = QuantConfig(bins=32, prune=0.0, protect=0.01)
    prev = _previous(precise, first.config, first.baseline, first.quality)
    again = search(model, eval_fn=eval_fn, previous=prev)  # type: ignore[arg-type]
    assert again.strategy == "neighbourhood" and again.layer_configs["linear"] == precise


def test_infeasible_previous_steps_back_toward_precision() -> None:
    model, _, eval_fn = _task(4)
    bold = QuantConfig(bins=4, prune=0.5, protect=0.0005)
    prev = _previous(bold)
    result = search(model, eval_fn=eval_fn, tolerance=0.01, previous=prev)  # type: ignore[arg-type]
    cfg = result.layer_configs["linear"]
    assert result.quality is not None and result.quality <= result.baseline * 1.01  # type: ignore[operator]
    if result.strategy == "neighbourhood":
        assert cfg is not None
        assert cfg.bins >= 4 and cfg.prune <= 0.5 and cfg.protect >= 0.0005


def test_trials_quantize_on_the_encoding_threads_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In the caller's thread each torch op of a trial ran on an OpenMP team: on a loaded
    # machine 3x the time of a pool thread's one-core ops (benchmarks/throughput.py).
    import threading

    import ckptzip.search as search_module

    model, opt, eval_fn = _task(4)
    seen: list[tuple[str, int]] = []

    def recording(*args: object, **kwargs: object) -> object:
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return quantize(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(search_module, "quantize", recording)
    monkeypatch.setattr(search_module, "_INLINE_NUMEL", 0)  # this model's trials are small
    import ckptzip.plan as plan_module

    counted: list[str] = []
    real_zeros = plan_module.zero_fraction

    def zero_fraction(x: torch.Tensor) -> float:  # the moments' pass, by moment_configs
        counted.append(threading.current_thread().name)
        return real_zeros(x)

    monkeypatch.setattr(plan_module, "zero_fraction", zero_fraction)
    estimated: list[object] = []
    real_estimate = search_module._estimated_bytes

    def estimate(x: torch.Tensor, q: object) -> float:
        estimated.append(q)
        return real_estimate(x, q)  # type: ignore[arg-type]

    monkeypatch.setattr(search_module, "_estimated_bytes", estimate)
    bold = QuantConfig(bins=4, prune=0.5, protect=0.0005)
    prev = _previous(bold)
    # a failing neighbourhood ranks its steps back by weight error, then searches in full
    result = search(model, eval_fn=eval_fn, tolerance=0.01, previous=prev, optimizer=opt)  # type: ignore[arg-type]
    assert result.strategy == "full" and result.trials >= 1 and seen
    assert {name.split("_")[0] for name, _ in seen} == {"ckptzip-search"}
    assert counted and {name.split("_")[0] for name in counted} == {"ckptzip-search"}
    # the size estimate (a pass over the indices) only for the chosen point, not every trial
    assert len(estimated) == len(result.paths) < len(seen)
    from ckptzip._parallel import _omp_set_num_threads

    if _omp_set_num_threads() is not None:
        assert {n for _, n in seen} == {1}
    for path, pre in result.prequantized.items():
        x = dict(model.named_parameters())[path.removeprefix("model/")].detach()
        mine = quantize(x, pre.quantized.config)
        assert np.array_equal(mine.indices, pre.quantized.indices)
        assert np.array_equal(mine.levels, pre.quantized.levels)


def test_small_trials_run_in_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # On a tiny model the hand-off to threads cost more than the quantizing (benchmarks/
    # search.py, mlp: the search's share of training 54.7 % -> 87.1 % with threads).
    import threading

    import ckptzip.search as search_module

    model, _, eval_fn = _task(4)
    seen: list[str] = []

    def recording(*args: object, **kwargs: object) -> object:
        seen.append(threading.current_thread().name)
        return quantize(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(search_module, "quantize", recording)
    search(model, eval_fn=eval_fn)  # type: ignore[arg-type]
    assert seen and set(seen) == {threading.current_thread().name}


def test_the_budget_walk_costs_one_evaluation_when_its_end_point_passes() -> None:
    # The full search walks by the error budget alone (quantizing only), then evaluates its
    # end point once; the walk with evaluations, which ends at the same point when eval_fn
    # holds everywhere it passes, cost an evaluation at each of its steps.
    model, _, _ = _task(6)
    calls: list[int] = []

    def lenient(m: nn.Module) -> float:
        calls.append(1)
        return 1.0  # never moves: only the error budget decides

    result = search(model, eval_fn=lenient)
    assert result.strategy == "full" and result.trials == 1 and len(calls) == 2
    data_free = search(model)  # the same walk by the budget alone
    assert dict(result.layer_configs) == dict(data_free.layer_configs)


def test_the_walk_with_evaluations_runs_when_the_budget_walks_end_fails() -> None:
    model, _, _ = _task(6)
    calls: list[int] = []

    def fails_once(m: nn.Module) -> float:
        calls.append(1)
        return 2.0 if len(calls) == 2 else 1.0  # the budget walk's end point fails

    result = search(model, eval_fn=fails_once)
    data_free = search(model)
    assert result.trials == len(calls) - 1 > 1
    assert dict(result.layer_configs) != dict(data_free.layer_configs)  # a milder point
    assert result.quality == 1.0 and result.layer_configs["linear"] is not None


def test_a_points_budget_check_stops_at_the_first_tensor_over_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ckptzip.search as search_module
    from ckptzip._parallel import default_threads
    from ckptzip.search import _Evaluator, _Point

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
    params = {n: ("linear", p) for n, p in model.named_parameters() if p.dim() == 2}
    calls: list[int] = []

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return quantize(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(search_module, "quantize", counting)
    corner = _Point((("linear", (8, 5, 2), "magnitude"),))  # 4 bins, prune 0.5: far over 0.1
    ev = _Evaluator(model, params, None, {})
    assert ev.max_error(corner, over=0.1) > 0.1
    assert len(calls) == min(default_threads(), len(params)) < len(params)
    full = ev.max_error(corner)  # without a bound every tensor is measured
    assert len(calls) == len(params) and full >= 0.1
    mild = _Point((("linear", (0, 0, 0), "magnitude"),))
    assert ev.max_error(mild, over=0.1) <= 0.1  # within the budget: every tensor measured
    assert len(calls) == 2 * len(params)


def test_a_quantization_evicted_by_the_error_ranking_is_made_again() -> None:
    # The neighbourhood ranks its steps back by weight error, quantizing several configs per
    # tensor; that evicted the quantizer's output of a config whose dequantized tensor was
    # still cached, and accepting that point then raised KeyError (lm, benchmarks/search.py).
    from ckptzip.search import _Evaluator, _Point

    model, _, eval_fn = _task(1)
    params = {n: ("linear", p) for n, p in model.named_parameters() if p.dim() == 2}
    ev = _Evaluator(model, params, eval_fn, {})
    point = _Point((("linear", (3, 2, 1), "magnitude"),))
    ev.quality(point)  # dequantized tensors cached for point
    backs = [point.with_level("linear", axis, 1) for axis in ("bins", "prune", "protect")]
    ev.squared_errors([point, *backs])  # more configs per tensor than the caches keep
    ev.accept(point)
    for n, (k, p) in params.items():
        q = ev.quantized(n, point.config(k))
        assert np.array_equal(q.indices, quantize(p.detach(), point.config(k)).indices)


def test_nothing_feasible_keeps_weights_exact() -> None:
    model, _, _ = _task(5)
    x = torch.randn(64, 32)
    reference = model(x).detach()

    def eval_fn(m: nn.Module) -> float:  # any change at all is a failure
        return 1.0 + float((m(x) - reference).abs().max() > 0)

    with pytest.warns(SearchGaveUpWarning, match=r"^step 7: no configuration was feasible"):
        result = search(model, eval_fn=eval_fn, tolerance=0.0, context="step 7")
    assert result.layer_configs == {"linear": None}
    assert result.trials <= 3 and "exact" in result.note
    # the note names the mildest configuration tried and what it did
    assert "linear 256 bins prune 0 protect 0.01" in result.note and "eval_fn 2 " in result.note
    assert result.config.quant_for("model/2.weight") is None


def test_the_allowed_worsening_is_at_most_how_far_eval_fn_moved_per_interval() -> None:
    model, _, eval_fn = _task(3)
    loose = search(model, eval_fn=eval_fn, tolerance=0.05)  # type: ignore[arg-type]
    assert loose.baseline is not None and loose.limit == pytest.approx(loose.baseline * 1.05)
    # the exact weights' eval_fn was 0.004 higher two intervals ago: 0.002 per interval
    earlier = (loose.baseline + 0.004, loose.baseline + 0.001)
    tight = search(model, eval_fn=eval_fn, tolerance=0.05, earlier=earlier)  # type: ignore[arg-type]
    assert tight.limit == pytest.approx(loose.baseline + 0.002)
    assert tight.quality is not None and tight.quality <= tight.limit
    assert tight.to_json()["limit"] == tight.limit
    # a large gain leaves the tolerance as the cap
    capped = search(model, eval_fn=eval_fn, tolerance=0.05, earlier=(loose.baseline + 1.0,))  # type: ignore[arg-type]
    assert capped.limit == pytest.approx(loose.limit)
    # a plateau: no net gain, eval_fn went up and down by 0.002 between saves; that noise is
    # the allowance, not zero (which made every save on a plateau give up, weights exact)
    noisy = (loose.baseline, loose.baseline + 0.002)
    flat = search(model, eval_fn=eval_fn, tolerance=0.05, earlier=noisy)  # type: ignore[arg-type]
    assert flat.limit == pytest.approx(loose.baseline + 0.002)
    assert flat.quality is not None and flat.quality <= flat.limit
    # an eval_fn that did not move at all allows no worsening
    still = search(model, eval_fn=eval_fn, earlier=(loose.baseline,) * 3)  # type: ignore[arg-type]
    assert still.limit == pytest.approx(loose.baseline)


def test_a_feasible_search_warns_nothing() -> None:
    model, _, eval_fn = _task(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SearchGaveUpWarning)
        result = search(model, eval_fn=eval_fn, tolerance=0.05)  # type: ignore[arg-type]
    assert result.layer_configs["linear"] is not None and result.note == ""


def test_data_free_mode_holds_the_error_budget_and_says_so() -> None:
    model, _, _ = _task(6)
    result = search(model, error_budget=0.08)
    assert result.mode == "data-free" and "data-free" in result.note
    assert result.baseline is None and result.quality is not None and result.quality <= 0.08
    for name, p in model.named_parameters():
        cfg = result.config.quant_for("model/" + name)
        if cfg is not None and p.numel() >= result.config.min_numel:
            assert quantize(p.detach(), cfg).rel_error <= 0.08


def test_sensitivity_scores_enable_the_sensitivity_metric() -> None:
    model, opt, eval_fn = _task(7)
    tracker = SensitivityTracker(model, window=5, optimizer=opt)
    tracker.arm(5)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        opt.zero_grad()
        x = torch.randn(64, 32, generator=g)
        nn.functional.cross_entropy(model(x), torch.randint(0, 5, (64,), generator=g)).backward()
        opt.step()
    scores = tracker.scores()
    tracker.close()
    result = search(model, eval_fn=eval_fn, scores=scores)  # type: ignore[arg-type]
    assert result.quality <= result.baseline * 1.05  # type: ignore[operator]
    cfg = result.layer_configs["linear"]
    assert cfg is not None
    if cfg.prune == 0:
        return
    # by default the first moments are not pruned, so they get no scores
    result = search(model, eval_fn=eval_fn, scores=scores, optimizer=opt)  # type: ignore[arg-type]
    out = save_scores(model, result, scores=scores, optimizer=opt)
    assert torch.equal(out["model/2.weight"], scores["2.weight"])
    assert "optimizer/state/2/exp_avg" not in out
    # with ExCP's rule they are pruned by the weight's own pruning scores
    excp = MomentPolicy(prune_first=True)
    result = search(model, eval_fn=eval_fn, scores=scores, optimizer=opt, moments=excp)  # type: ignore[arg-type]
    out = save_scores(model, result, scores=scores, optimizer=opt)
    expected = scores["2.weight"] if cfg.prune_metric == "sensitivity" else model[2].weight.abs()
    torch.testing.assert_close(out["optimizer/state/2/exp_avg"], expected.detach())
    m_path = "optimizer/state/2/exp_avg"
    exp_avg = opt.state[model[2].weight]["exp_avg"]
    m_cfg = result.config.quant_for(m_path)
    assert m_cfg is not None and m_cfg.prune == cfg.prune
    restored = dequantize(quantize(exp_avg, m_cfg, scores=out[m_path])).reshape(-1)
    # the entries lowest by the weight's scores (a margin below the cut) are zero in the moment
    order = out[m_path].reshape(-1).argsort()
    surely_pruned = order[: int((cfg.prune - 0.02) * order.numel())]
    assert (restored[surely_pruned] == 0).float().mean() > 0.99


def test_optimizer_paths_get_moment_configs_and_the_rest_stays_exact() -> None:
    model, opt, eval_fn = _task(8)
    result = search(model, eval_fn=eval_fn, optimizer=opt)  # type: ignore[arg-type]
    cfg = result.layer_configs["linear"]
    assert cfg is not None
    m = result.config.quant_for("optimizer/state/2/exp_avg")
    v = result.config.quant_for("optimizer/state/2/exp_avg_sq")
    zeros = float((opt.state[model[2].weight]["exp_avg"] == 0).float().mean())
    pruned = max(zeros, MomentPolicy().first_prune)  # its own smallest, and its exact zeros
    assert m is not None and m.prune == pytest.approx(pruned) and not m.log_domain
    assert v is not None and v.log_domain and v.prune == 0
    assert result.config.quant_for("optimizer/state/2/step") is None
    # a 128-element bias: exact (below min_numel), and by default so are its moments
    assert result.config.quant_for("model/0.bias") is None
    assert result.config.quant_for("optimizer/state/1/exp_avg") is None
    # with moment_min_numel its moments follow the policy, down to that floor
    low = search(
        model,
        eval_fn=eval_fn,  # type: ignore[arg-type]
        optimizer=opt,
        base=CompressionConfig(moment_min_numel=128),
    )
    cfg = low.layer_configs["linear"]
    assert cfg is not None
    assert low.config.quant_for("model/0.bias") is None
    assert low.config.quant_for("optimizer/state/1/exp_avg") == MomentPolicy().first(cfg)
    assert low.config.quant_for("optimizer/state/1/exp_avg_sq") == MomentPolicy().second()
    # a 5-element bias (below moment_min_numel): its moments stay exact
    assert low.config.quant_for("optimizer/state/5/exp_avg") is None


def test_moments_of_weights_exact_by_config_stay_exact() -> None:
    model, opt, eval_fn = _task(8)
    base = CompressionConfig(exact=("model/0.*",), moment_min_numel=128)
    result = search(model, eval_fn=eval_fn, optimizer=opt, base=base)  # type: ignore[arg-type]
    for i in (0, 1):  # 0.weight and 0.bias, exact by config.exact
        for key in ("exp_avg", "exp_avg_sq"):
            assert result.config.quant_for(f"optimizer/state/{i}/{key}") is None
    assert result.config.quant_for("optimizer/state/3/exp_avg_sq") is None  # 2.bias: 64
    assert result.config.quant_for("optimizer/state/4/exp_avg_sq") is not None  # 4.weight


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tolerance": -0.1}, "tolerance"),
        ({"tolerance": float("nan")}, "tolerance"),
        ({"error_budget": 0.0}, "error_budget"),
        ({"moments": "16 bins"}, "moments"),
        ({"eval_fn": 3}, "eval_fn"),
        ({"scores": {"nope": torch.zeros(1)}}, "nope"),
        ({"scores": {"0.weight": torch.zeros(3)}}, "shape"),
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict[str, object], match: str) -> None:
    model = nn.Sequential(nn.Linear(64, 80))
    with pytest.raises(ConfigError, match=match):
        search(model, **kwargs)  # type: ignore[arg-type]


def test_non_finite_baseline_is_rejected() -> None:
    with pytest.raises(ConfigError, match="exact weights"):
        search(nn.Linear(64, 80), eval_fn=lambda m: float("nan"))


def test_zero_first_moments_stay_exactly_zero() -> None:
    """A unit that never had a gradient has m = v = 0; a nonzero m there would make Adam's
    next step m / (sqrt(v) + eps) huge, so the config must keep those zeros exact."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 3))
    with torch.no_grad():
        model[0].weight[:40] = 0.0
        model[0].bias[:40] = -1.0  # 40 dead ReLU units: their weights never get a gradient
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(256, 64), torch.randint(0, 3, (256,))
    for _ in range(5):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    m = opt.state[model[0].weight]["exp_avg"]
    v = opt.state[model[0].weight]["exp_avg_sq"]
    assert (m[:40] == 0).all() and (v[:40] == 0).all()
    result = search(model, optimizer=opt, base=CompressionConfig(min_numel=1024))
    for key, x_ in (("exp_avg", m), ("exp_avg_sq", v)):
        cfg = result.config.quant_for(f"optimizer/state/0/{key}")
        assert cfg is not None
        back = dequantize(quantize(x_, cfg)).reshape(x_.shape)
        assert (back[x_ == 0] == 0).all(), key  # zeros stay zero
    # and a positive second moment never comes back as zero (m / eps would blow up)
    assert (back[v > 0] > 0).all()


def test_paths_with_glob_characters_are_matched_literally() -> None:
    model = nn.Sequential()
    model.add_module("a[0]", nn.Linear(64, 96))
    model.add_module("b*", nn.Linear(96, 64))
    result = search(model)
    cfg = result.layer_configs["linear"]
    assert cfg is not None
    assert result.config.quant_for("model/a[0].weight") == cfg
    assert result.config.quant_for("model/b*.weight") == cfg
    assert result.config.quant_for("model/a0.weight") == result.config.quant  # no false match


def test_search_config_round_trips_through_json() -> None:
    model, opt, eval_fn = _task(9)
    result = search(model, eval_fn=eval_fn, optimizer=opt)  # type: ignore[arg-type]
    again = CompressionConfig.from_json(json.loads(json.dumps(result.config.to_json())))
    assert again == result.config
    json.dumps(result.to_json())


@settings(max_examples=40, deadline=None)
@given(
    values=hnp.arrays(
        np.float32,
        st.integers(64, 2000),
        elements=st.floats(-1.0, 1.0, width=32, allow_subnormal=False),
    ),
    zero_every=st.integers(2, 9),
    bins=st.sampled_from([2, 3, 4, 8, 16]),
    first_prune=st.sampled_from([0.0, 0.5]),
)
def test_moment_policy_keeps_zero_moments_exact(
    values: np.ndarray, zero_every: int, bins: int, first_prune: float
) -> None:
    """Whatever the values, a first moment's exact zeros come back exactly zero."""
    m = torch.from_numpy(values.copy()) * 1e-3  # first moments are small
    m[::zero_every] = 0.0
    zeros = float((m == 0).float().mean())
    prune = first_prune if bins >= 3 else 0.0  # two levels cannot prune (test_plan)
    cfg = MomentPolicy(first_bins=bins, first_prune=prune).first(QuantConfig(bins=4), zeros)
    if cfg is None:  # (almost) all zeros: stored exactly, the plan's one threshold
        assert zeros + MomentPolicy().protect >= ALMOST_ALL_ZEROS
        return
    back = dequantize(quantize(m, cfg)).reshape(m.shape)
    assert (back[m == 0] == 0).all()
