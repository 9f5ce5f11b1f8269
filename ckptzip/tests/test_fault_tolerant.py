"""The fault-tolerant benchmark's baselines restore what they wrote (they must be honest)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import _workloads
import fault_tolerant as ft


def _trained(seed: int = 0) -> _workloads.Workload:
    w = _workloads.make("mlp", seed)
    for step in range(3):
        w.train_step(step)
    return w


@pytest.mark.parametrize("name", ["exact", "cnr", "excp", "feedback"])
def test_a_chain_of_baseline_checkpoints_restores_the_last_one(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ft, "_zipnn", lambda: None)  # ZipNN's native module aborts under pytest
    w = _trained()
    method = ft.make_method(name, tmp_path, every=1)
    method.attach(w)
    stats = [method.save(s, w) for s in (3, 4, 5) if w.train_step(s) or True]
    live = {k: v.clone() for k, v in w.model.state_dict().items()}
    fresh = _workloads.make("mlp", 1)  # other weights: everything must come from the files
    method.attach(fresh)
    assert method.restore(fresh) == 5
    for k, v in fresh.model.state_dict().items():
        err = float((v - live[k]).norm() / live[k].norm())
        # exact is exact; 8-bit rows stay under 1 %; ExCP's pruned 4-bit residuals drift more;
        # feedback's 4-level residuals stay well under the 16-level keyframe's error
        limit = {"exact": 0.0, "cnr": 0.01, "excp": 0.5, "feedback": 0.05}[name]
        assert err <= limit, (name, k, err)
    assert all(s.bytes_out > 0 for s in stats)
    state = fresh.optimizer.state_dict()["state"]
    assert all(int(s["step"]) == 6 for s in state.values())  # step counters stay exact


def test_excp_prunes_moments_where_the_residual_is_pruned(tmp_path: Path) -> None:
    w = _trained()
    method = ft.ExCP(tmp_path, every=1)
    method.save(3, w)
    fresh = _workloads.make("mlp", 1)
    method.restore(fresh)
    for s in fresh.optimizer.state_dict()["state"].values():
        m, v = s["exp_avg"], s["exp_avg_sq"]
        if m.numel() >= ft.MIN_NUMEL:
            assert bool(((m == 0) == (v == 0)).all()) and float((m == 0).float().mean()) > 0.5
    assert torch.isfinite(fresh.model[0].weight).all()


def test_the_breakdown_accounts_for_every_byte_written(tmp_path: Path) -> None:
    w = _trained()
    method = ft.make_method("ckptzip", tmp_path, every=1)
    method.attach(w)
    stats = [method.save(s, w) for s in (3, 4) if w.train_step(s) or True]
    method.close()
    for s in stats:
        cells = [c for codings in s.extra["breakdown"].values() for c in codings.values()]
        assert sum(written for _, written in cells) == s.bytes_out
    kinds = stats[1].extra["breakdown"]
    assert {"weights", "exp_avg", "exp_avg_sq", "container"} <= set(kinds)
    # the second save is coded against the first: at the defaults (error feedback) the weights
    # as their change against the parent's reconstruction, the moments as bin-index deltas
    assert "residual" in kinds["weights"]
    assert "delta" in kinds["exp_avg_sq"]
    rows = ft._total_breakdown([s.to_json() for s in stats])
    assert abs(sum(r["share"] for r in rows if r["coding"] == "all") - 1.0) < 1e-9
    # the moments' ratio is the two Adam moments' rows together, every coding
    moments = [r for r in rows if r["kind"] in ("exp_avg", "exp_avg_sq") and r["coding"] == "all"]
    expected = sum(r["nbytes"] for r in moments) / sum(r["bytes"] for r in moments)
    assert ft.moments_ratio([s.to_json() for s in stats]) == pytest.approx(expected)
    assert ft.moments_ratio([{"bytes_in": 1, "bytes_out": 1}]) is None  # no breakdown


def test_the_exact_cache_runs_once_and_then_reads_the_stored_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def run(model: str, seed: int, method: str, plan: tuple[int, int, int]) -> dict:
        calls.append((model, seed, method, plan))
        return {"model": model, "seed": seed, "method": method, "losses": [(0, 1.5)]}

    monkeypatch.setattr(ft, "run", run)
    first = ft.cached_exact(tmp_path, "mlp", 1, (6, 2, 1))
    again = ft.cached_exact(tmp_path, "mlp", 1, (6, 2, 1))
    other = ft.cached_exact(tmp_path, "mlp", 2, (6, 2, 1))
    assert calls == [("mlp", 1, "exact", (6, 2, 1)), ("mlp", 2, "exact", (6, 2, 1))]
    assert again == {**first, "losses": [[0, 1.5]]} and other["seed"] == 2


def test_the_restore_jump_compares_each_restore_with_the_exact_runs() -> None:
    def run(method: str, losses: list[float]) -> dict:
        saves = [{"bytes_in": 10, "bytes_out": 5, "ratio": 2.0, "weights_ratio": None,
                  "seconds": 0.0, "step": 1}]  # fmt: skip
        return {
            "model": "m", "seed": 0, "method": method, "final_loss": losses[-1],
            "final_accuracy": 0.5, "run_seconds": 1.0, "saves": saves,
            "restores": [{"seconds": 0.0, "loss": x} for x in losses],
        }  # fmt: skip

    row = ft.summarize([run("exact", [2.0, 1.0]), run("cnr", [2.2, 1.01])])["m"]["methods"]
    jumps = [j["median"] for j in row["cnr"]["restore_jumps"]]
    assert jumps == pytest.approx([0.1, 0.01])
    assert row["cnr"]["max_restore_jump"]["median"] == pytest.approx(0.1)
    assert row["exact"]["max_restore_jump"]["median"] == 0.0


def test_the_llm_workload_is_shaped_like_an_llm() -> None:
    w = _workloads.make("llm", 0)
    model = w.model
    assert model.head.weight is model.embed.weight  # tied output head
    params = list(model.parameters())  # a tied tensor is listed once
    small = sum(p.numel() for p in params if p.dim() < 2)
    assert small / sum(p.numel() for p in params) < 0.001  # norms, no biases
    assert isinstance(w.train_step(0), float) and isinstance(w.eval_fn(model), float)


def _saved_and_restored(method: Any, w: Any) -> tuple[Any, dict[str, Any], dict[int, Any]]:
    """``w`` saved at step 3 by ``method`` and restored into a fresh workload: the fresh one,
    the live weights and first moments as they were saved."""
    method.attach(w)
    method.save(3, w)
    live = {k: v.clone() for k, v in w.model.state_dict().items()}
    moments = {i: s["exp_avg"].clone() for i, s in w.optimizer.state_dict()["state"].items()}
    fresh = _workloads.make("mlp", 1)
    method.attach(fresh)
    assert method.restore(fresh) == 3
    return fresh, live, moments


def test_restore_exact_keeps_the_named_parts_and_measures_the_restores_own_gap(
    tmp_path: Path,
) -> None:
    w = _trained()
    method = ft.make_method("ckptzip", tmp_path, every=1, restore_exact=("weights",))
    fresh, live, moments = _saved_and_restored(method, w)
    method.close()
    for k, v in fresh.model.state_dict().items():
        assert torch.equal(v, live[k]), k  # the weights as they were saved from
    quantized = [
        not torch.equal(s["exp_avg"], moments[i])
        for i, s in fresh.optimizer.state_dict()["state"].items()
        if s["exp_avg"].numel() >= ft.MIN_NUMEL
    ]
    assert quantized and all(quantized)  # the first moments still came from the file
    gap = method.restore_info["own_gap"]
    assert isinstance(gap, float) and abs(gap) < 0.5


def test_restore_noise_moves_the_weights_as_far_as_the_quantizer_in_a_random_direction(
    tmp_path: Path,
) -> None:
    w = _trained()
    runs = {}
    for noise in (False, True):
        method = ft.make_method("ckptzip", tmp_path / str(noise), every=1, restore_noise=noise)
        method.attach(w)
        method.save(3, w)
        fresh = _workloads.make("mlp", 1)
        method.attach(fresh)
        assert method.restore(fresh) == 3
        method.close()
        runs[noise] = (method.restore_info, fresh.model.state_dict())
    (quant, quant_sd), (noisy, noisy_sd) = runs[False], runs[True]
    assert 0 < quant["weight_error"] < 0.5
    # the same size of error per tensor, so the same overall size, in another direction
    assert noisy["weight_error"] == pytest.approx(quant["weight_error"], rel=1e-6)
    assert abs(noisy["error_cos_weights"]) < 0.1
    big = [k for k, v in quant_sd.items() if ft._big(v)]
    assert big and all(not torch.equal(quant_sd[k], noisy_sd[k]) for k in big)
    assert "error_cos_previous" not in quant  # the first restore has no earlier error


def test_the_summary_reports_the_shape_of_every_restores_error() -> None:
    def run(method: str, restores: list[dict]) -> dict:
        saves = [{"bytes_in": 10, "bytes_out": 5, "ratio": 2.0, "weights_ratio": None,
                  "seconds": 0.0, "step": 1}]  # fmt: skip
        return {"model": "m", "seed": 0, "method": method, "final_loss": 1.0,
                "final_accuracy": 0.5, "run_seconds": 1.0, "saves": saves,
                "restores": restores}  # fmt: skip

    shaped = [
        {"seconds": 0.0, "loss": 1.0, "weight_error": 0.1, "error_cos_weights": -0.2},
        {"seconds": 0.0, "loss": 1.0, "weight_error": 0.05, "error_cos_weights": 0.0,
         "error_cos_previous": 0.3},
    ]  # fmt: skip
    plain = [{"seconds": 0.0, "loss": 1.0}] * 2
    row = ft.summarize([run("exact", plain), run("cnr", shaped)])["m"]["methods"]
    assert [x["median"] for x in row["cnr"]["weight_error"]] == [0.1, 0.05]
    assert row["cnr"]["error_cos_previous"][0] is None
    assert row["cnr"]["error_cos_previous"][1]["median"] == 0.3
    assert "weight_error" not in row["exact"]


def test_feedback_measures_what_each_restore_cost_and_its_error_shape(tmp_path: Path) -> None:
    w = _trained()
    method = ft.make_method("feedback", tmp_path, every=1)
    method.attach(w)
    for s in (3, 4):
        w.train_step(s)
        method.save(s, w)
    fresh = _workloads.make("mlp", 1)
    method.attach(fresh)
    assert method.restore(fresh) == 4
    info = method.restore_info
    assert isinstance(info["own_gap"], float) and abs(info["own_gap"]) < 0.5
    assert 0 < info["weight_error"] < 0.05  # a residual checkpoint: far under a keyframe's
    assert "error_cos_previous" not in info


def test_the_ckptzip_methods_take_the_managers_chain_length_and_a_residual_config(
    tmp_path: Path,
) -> None:
    """--keyframe-every defaults to the manager's own default; --residual reaches the
    manager's CompressionConfig.residual (a pruned residual: its delta files store zeros)."""
    import inspect

    import ckptzip

    default = inspect.signature(ckptzip.CheckpointManager).parameters["keyframe_every"].default
    assert default == ft.CKPTZIP_KEYFRAME_EVERY == 10
    residual = ft.QuantConfig(bins=4, prune=0.7, protect=0.0005)
    w = _trained()
    method = ft.make_method("ckptzip", tmp_path, every=1, residual=residual)
    method.attach(w)
    assert method.mgr is not None and method.mgr.keyframe_every == default
    assert method.mgr.config.residual == residual
    method.save(3, w)
    w.train_step(3)
    method.save(4, w)
    method.close()
    entries = ckptzip.api.read_manifest(tmp_path / "step-00000004.ckz").tensors
    pruned = [e for e in entries if e.codec == "residual"]
    assert pruned and all(e.config is not None and e.config["prune"] == 0.7 for e in pruned)


def test_the_file_methods_take_their_configs_and_restore_exact(tmp_path: Path) -> None:
    """ckptzip-file at the defaults, -quant and -nearest as the earlier defaults; a file
    method's --restore-exact keeps the named parts, --file-exact keeps paths exact."""
    configs = {n: ft.make_method(n, tmp_path / n, every=1).config for n in ft.FILE_METHODS}
    assert configs["ckptzip-file"].standalone is not None
    assert configs["ckptzip-file-quant"].standalone is None
    assert configs["ckptzip-file-nearest"].rounding == "nearest"
    w = _trained()
    method = ft.make_method(
        "ckptzip-file",
        tmp_path,
        every=1,
        restore_exact=("exp_avg",),
        file_exact=("model/0.weight",),
    )
    fresh, live, moments = _saved_and_restored(method, w)
    assert torch.equal(fresh.model.state_dict()["0.weight"], live["0.weight"])
    for i, s in fresh.optimizer.state_dict()["state"].items():
        assert torch.equal(s["exp_avg"], moments[i])


def test_salted_rounding_draws_other_bits_and_puts_the_library_back() -> None:
    from ckptzip import quantize

    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    library = quantize.rounding_seed(x)
    with ft.salted_rounding(0):
        assert quantize.rounding_seed(x) == library
    with ft.salted_rounding(3):
        salted = quantize.rounding_seed(x)
    assert salted != library and quantize.rounding_seed(x) == library


def _moment_args(**given: Any) -> Any:
    import argparse

    fields = ("moments", "first_protect", "first_fit", "quiet", "quiet_below")
    return argparse.Namespace(**{f: given.get(f) for f in fields})


def test_the_quiet_options_set_the_feedback_policys_quiet_moments() -> None:
    import ckptzip

    assert ft.moment_policy(_moment_args()) is None
    policy = ft.moment_policy(_moment_args(quiet="3,8,step", quiet_below=0.25))
    assert policy is not None
    # the other moments stay the feedback methods' policy
    assert policy.first_bins == ft.FEEDBACK_MOMENTS.first_bins
    assert policy.second_bins == ft.FEEDBACK_MOMENTS.second_bins
    assert policy.quiet_below == 0.25
    assert policy.quiet is not None
    assert (policy.quiet.first_bins, policy.quiet.second_bins, policy.quiet.first_fit) == (
        3,
        8,
        "step",
    )
    # --moments first, then the quiet ones on top of it
    policy = ft.moment_policy(_moment_args(moments="6,16,0.5", quiet="3,8,values"))
    assert policy is not None and policy.quiet is not None
    assert (policy.first_bins, policy.second_bins, policy.first_prune) == (6, 16, 0.5)
    assert policy.quiet.first_fit == "values"
    assert policy.quiet_below == ckptzip.MomentPolicy().quiet_below
