"""The compression plan: one rule set for save and search, tied weights, quantize once."""

from __future__ import annotations

import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import ckptzip
import ckptzip.quantize
from ckptzip.api import read_manifest
from ckptzip.codecs import base as codecs_base
from ckptzip.codecs.base import available_codecs, get_codec
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.errors import ConfigError, UnsupportedFormatError
from ckptzip.plan import ALMOST_ALL_ZEROS, MomentPolicy, Planner, keep_zeros, zero_fraction
from ckptzip.search import moment_ladder, search


def _adam_model(*, amsgrad: bool = False) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=amsgrad)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(32, 64)).pow(2).mean().backward()
        opt.step()
    return model, opt


def test_amsgrad_max_exp_avg_sq_is_a_second_moment_under_the_search_too() -> None:
    model, opt = _adam_model(amsgrad=True)
    result = search(model, optimizer=opt, base=CompressionConfig(min_numel=1000))
    cfg = result.config.quant_for("optimizer/state/0/max_exp_avg_sq")
    assert cfg is not None and cfg.log_domain and cfg.prune == 0.0
    assert cfg == result.config.quant_for("optimizer/state/0/exp_avg_sq")
    # and without the search: the same rule, from the same place
    v = opt.state[model[0].weight]["max_exp_avg_sq"]
    quant, reason = Planner(CompressionConfig()).quant_for("optimizer/state/0/max_exp_avg_sq", v)
    assert reason is None and quant is not None and quant.log_domain and quant.prune == 0.0


@pytest.mark.parametrize("zeros", [0.3, 0.985, 0.9895, 0.995, 1.0])
def test_almost_zero_first_moments_get_one_treatment_with_and_without_search(
    zeros: float,
) -> None:
    n = 20_000
    m = torch.randn(n) * 1e-3
    m[: round(zeros * n)] = 0.0
    protect = 0.0005
    planned, reason = Planner(CompressionConfig(quant=QuantConfig(protect=protect))).quant_for(
        "optimizer/state/0/exp_avg", m
    )
    # the zeros rule alone (the search's own pruning, first_prune, would add to it)
    searched = MomentPolicy(protect=protect, first_prune=0.0).first(QuantConfig(bins=4), zeros)
    exact = zeros + protect >= ALMOST_ALL_ZEROS
    assert (planned is None) == (searched is None) == exact
    assert (reason is not None) == exact
    if not exact:
        assert planned is not None and searched is not None
        assert planned.prune == searched.prune == pytest.approx(zeros)


def test_moments_of_small_weights_are_quantized_down_to_moment_min_numel_when_set(
    tmp_path: Path,
) -> None:
    model, opt = _adam_model()  # biases of 128 and 4 elements, a 512-element weight
    obj = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    # off by default: the moments of small weights stay exact
    default = {e.path: e for e in ckptzip.save(obj, tmp_path / "d.ckz").entries}
    assert default["optimizer/state/1/exp_avg"].reason == "fewer than min_numel=4096 elements"
    low = CompressionConfig(moment_min_numel=128)
    report = ckptzip.save(obj, tmp_path / "a.ckz", config=low)
    by_path = {e.path: e for e in report.entries}
    assert by_path["model/0.bias"].reason == "fewer than min_numel=4096 elements"
    for i in (1, 2):  # 0.bias (128) and 2.weight (512): moments quantized, zeros kept
        m, v = by_path[f"optimizer/state/{i}/exp_avg"], by_path[f"optimizer/state/{i}/exp_avg_sq"]
        assert m.config is not None and not m.config.log_domain
        assert v.config is not None and v.config.log_domain and v.config.prune == 0
    assert by_path["optimizer/state/3/exp_avg"].reason == "fewer than moment_min_numel=128 elements"
    restored = ckptzip.load(tmp_path / "a.ckz")["optimizer"]["state"]
    for i in (1, 2):
        for key in ("exp_avg", "exp_avg_sq"):
            x, y = opt.state_dict()["state"][i][key], restored[i][key]
            assert torch.equal(x == 0, y == 0)  # zeros stay exact zeros, none appear
    # min_numel below the moment floor: moments of quantized weights stay quantized
    lower = CompressionConfig(min_numel=16, moment_min_numel=128)
    assert Planner(lower).quant_for("optimizer/state/3/exp_avg", torch.ones(64))[0] is not None
    # configs round-trip through JSON; an older one (no moment_min_numel) reads as the default
    assert CompressionConfig.from_json(low.to_json()) == low
    doc = CompressionConfig().to_json()
    del doc["moment_min_numel"]
    assert CompressionConfig.from_json(doc) == CompressionConfig()
    with pytest.raises(ConfigError):
        CompressionConfig(moment_min_numel=-1)


def test_first_prune_zeros_the_smallest_first_moments_and_never_a_second_moment() -> None:
    model, opt = _adam_model()
    policy = MomentPolicy(4, False, 16, first_prune=0.5)
    result = search(model, optimizer=opt, moments=policy)
    m_cfg = result.config.quant_for("optimizer/state/0/exp_avg")
    v_cfg = result.config.quant_for("optimizer/state/0/exp_avg_sq")
    assert m_cfg is not None and m_cfg.prune == 0.5 and m_cfg.prune_metric == "magnitude"
    assert v_cfg is not None and v_cfg.prune == 0
    m = opt.state[model[0].weight]["exp_avg"]
    restored = ckptzip.quantize.dequantize(ckptzip.quantize.quantize(m, m_cfg)).reshape(m.shape)
    small = m.abs() < m.abs().flatten().kthvalue(int(0.45 * m.numel())).values
    assert bool((restored[small] == 0).all())  # the smallest by |exp_avg| are exact zeros
    assert bool((restored[m == 0] == 0).all())
    with pytest.raises(ckptzip.ConfigError, match="first_prune"):
        MomentPolicy(first_prune=0.95)


def test_a_pruned_first_moment_keeps_a_level_on_each_side_of_zero() -> None:
    # two levels with a pruned zero level hold one sign only (0 and one more level): refused,
    # and the probe's ladder from a pruning policy stops at three
    with pytest.raises(ckptzip.ConfigError, match="one sign"):
        MomentPolicy(first_bins=2, first_prune=0.5)
    assert MomentPolicy(first_bins=2).first_bins == 2  # unpruned: two levels, both signs
    compact = MomentPolicy(3, second_bins=8, first_prune=0.5)
    assert min(m.first_bins for m in moment_ladder(compact)) == 3
    assert min(m.first_bins for m in moment_ladder(MomentPolicy())) == 2
    m = torch.randn(10_000) * 1e-4
    cfg = compact.first(QuantConfig(), 0.0)
    assert cfg is not None
    q = ckptzip.quantize.quantize(m, cfg)
    assert q.levels.min() < 0 < q.levels.max() and 0.0 in q.levels.tolist()


def test_keep_zeros_never_lowers_the_asked_prune() -> None:
    assert keep_zeros(QuantConfig(prune=0.4), 0.1) == QuantConfig(prune=0.4)


class _Odd(nn.Module):
    """A model with parameters save never quantizes: 0-d, float8, tiny."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(5000))
        self.scale = nn.Parameter(torch.tensor(1.0))
        self.f8 = nn.Parameter(torch.zeros(5000).to(torch.float8_e4m3fn), requires_grad=False)


def test_the_search_only_searches_what_save_may_quantize() -> None:
    model = _Odd()
    result = search(model, base=CompressionConfig(min_numel=0))
    assert set(result.paths) == {"model/w"}
    state = {"model": model.state_dict()}
    plan = Planner(result.config).plan([(f"model/{k}", v) for k, v in state["model"].items()])
    assert [(t.path, t.codec) for t in plan] == [
        ("model/w", "quant"),
        ("model/scale", "exact"),
        ("model/f8", "exact"),
    ]
    assert plan[1].reason == "0-d tensor" and plan[2].reason == "dtype float8_e4m3fn"


def test_a_parent_makes_lossy_tensors_delta_coded_and_leaves_exact_ones_exact() -> None:
    leaves = [("model/w", torch.randn(5000)), ("step", torch.tensor(3))]
    codecs = [t.codec for t in Planner(CompressionConfig(), parent=True).plan(leaves)]
    assert codecs == ["delta", "exact"]


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 64)
        self.head = nn.Linear(64, 100, bias=False)
        self.head.weight = self.emb.weight


def test_tied_weights_get_one_config_under_the_search() -> None:
    model = _Tied()
    result = search(model, base=CompressionConfig(min_numel=1000))
    a = result.config.quant_for("model/emb.weight")
    assert a is not None and a == result.config.quant_for("model/head.weight")
    assert set(result.prequantized) == {"model/emb.weight", "model/head.weight"}


@pytest.mark.parametrize("reverse", [False, True])
def test_shared_storage_gets_one_treatment_whatever_the_key_order(reverse: bool) -> None:
    t = torch.randn(5000)
    leaves = [("model/emb", t), ("model/head", t), ("model/other", torch.randn(5000))]
    if reverse:
        leaves = leaves[::-1]
    cfg = CompressionConfig(exact=("model/head",))
    plan = {x.path: x for x in Planner(cfg).plan(leaves)}
    assert plan["model/emb"].codec == plan["model/head"].codec == "exact"
    assert plan["model/emb"].reason == "matched config.exact (as model/head)"
    assert plan["model/emb"].shares_with == ("model/head",)
    assert plan["model/other"].codec == "quant"
    overrides = (("model/emb", QuantConfig(bins=4)), ("model/head", QuantConfig(bins=8)))
    plan = {x.path: x for x in Planner(CompressionConfig(overrides=overrides)).plan(leaves)}
    # a file standing alone: its weights' configs round stochastically (config.rounding)
    want = QuantConfig(bins=4, rounding="stochastic")
    assert plan["model/emb"].quant == plan["model/head"].quant == want


@pytest.mark.parametrize("parent", [False, True])
def test_stochastic_rounding_goes_to_the_weights_of_files_standing_alone(parent: bool) -> None:
    leaves = [
        ("model/w", torch.randn(5000)),
        ("model/pruned", torch.randn(5000)),
        ("optimizer/state/0/exp_avg", torch.randn(5000)),
        ("optimizer/state/0/exp_avg_sq", torch.rand(5000)),
    ]
    cfg = CompressionConfig(overrides=(("model/pruned", QuantConfig(prune=0.5)),))
    got = {t.path: t.quant for t in Planner(cfg, parent=parent).plan(leaves)}
    assert {p: q.rounding for p, q in got.items() if q is not None} == {
        "model/w": "nearest" if parent else "stochastic",
        "model/pruned": "nearest",  # pruned entries are meant to be zero
        "optimizer/state/0/exp_avg": "nearest",
        "optimizer/state/0/exp_avg_sq": "nearest",
    }
    off = Planner(replace(cfg, rounding="nearest"), parent=parent).plan(leaves)
    assert {t.quant.rounding for t in off if t.quant is not None} == {"nearest"}


@settings(max_examples=40, deadline=None)
@given(
    st.permutations(range(5)),
    st.lists(st.sampled_from(["model/a", "model/b", "model/c", "x", "model/*"]), max_size=2),
    st.lists(st.sampled_from([4, 8, 16]), min_size=5, max_size=5),
)
def test_treatments_never_depend_on_key_order(
    order: list[int], exact: list[str], bins: list[int]
) -> None:
    t, u = torch.randn(5000), torch.randn(6000)
    leaves = [("model/a", t), ("model/b", t), ("model/c", u), ("x", u), ("model/d", t[:4999])]
    overrides = tuple((p, QuantConfig(bins=b)) for (p, _), b in zip(leaves, bins, strict=True))
    planner = Planner(CompressionConfig(exact=tuple(exact), overrides=overrides))
    plain = {x.path: (x.codec, x.quant) for x in planner.plan(leaves)}
    shuffled = {x.path: (x.codec, x.quant) for x in planner.plan([leaves[i] for i in order])}
    assert plain == shuffled
    assert plain["model/a"] == plain["model/b"] and plain["model/c"] == plain["x"]


def test_an_entry_stored_once_is_planned_under_all_its_names() -> None:
    # a structure that stores tied weights once hands the planner one leaf and its other names
    t = torch.randn(5000)
    cfg = CompressionConfig(exact=("model/lm_head.weight",))
    for first, other in (
        ("model/wte", "model/lm_head.weight"),
        ("model/lm_head.weight", "model/wte"),
    ):
        (plan,) = Planner(cfg).plan([(first, t)], aliases={0: [other]})
        assert plan.codec == "exact" and plan.shares_with == (other,)
    (plan,) = Planner(CompressionConfig()).plan([("rng/key", t)], exact={0: "NumPy array"})
    assert (plan.codec, plan.reason) == ("exact", "NumPy array")


def _trained() -> tuple[nn.Module, Any]:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4))
    x = torch.randn(128, 32)
    y = model(x).argmax(1)

    def loss(m: nn.Module) -> float:
        return float(nn.functional.cross_entropy(m(x), y).detach())

    return model, loss


def test_save_stores_what_the_search_evaluated_without_quantizing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, loss = _trained()
    result = search(model, eval_fn=loss, tolerance=0.05)
    assert set(result.prequantized) == set(result.paths)
    calls: list[str] = []
    real = ckptzip.quantize.quantize

    def counting(x: torch.Tensor, cfg: QuantConfig, **kw: Any) -> Any:
        calls.append("q")
        return real(x, cfg, **kw)

    monkeypatch.setattr(ckptzip.quantize, "quantize", counting)
    p = tmp_path / "c.ckz"
    ckptzip.save(
        {"model": model.state_dict()}, p, config=result.config, prequantized=result.prequantized
    )
    assert calls == []
    back = ckptzip.read_quantized(p)
    for path, pre in result.prequantized.items():
        q = back[path]
        assert isinstance(q, ckptzip._types.QuantizedTensor)
        assert (q.indices == pre.quantized.indices).all()
    # the weights changed in place since the search: quantized again, never the stale result
    with torch.no_grad():
        model[0].weight.add_(1.0)
    ckptzip.save(
        {"model": model.state_dict()},
        tmp_path / "d.ckz",
        config=result.config,
        prequantized=result.prequantized,
    )
    assert len(calls) == len(result.prequantized)
    # other scores than the search's: quantized again too
    model, loss = _trained()
    result = search(model, eval_fn=loss, tolerance=0.05)
    calls.clear()
    other = {p: torch.rand(model.state_dict()[p[6:]].shape) for p in result.prequantized}
    ckptzip.save(
        {"model": model.state_dict()},
        tmp_path / "e.ckz",
        config=result.config,
        scores=other,
        prequantized=result.prequantized,
    )
    assert len(calls) == len(result.prequantized)


def test_inspect_reasons_come_from_the_codecs(tmp_path: Path) -> None:
    p = tmp_path / "c.ckz"
    ckptzip.save({"w": torch.randn(5000), "b": torch.randn(3)}, p)
    entries = {e.path: e for e in read_manifest(p).tensors}
    report = ckptzip.save({"w": torch.randn(5000), "b": torch.randn(3)}, p, overwrite=True)
    assert [e.reason for e in report.entries] == [None, "fewer than min_numel=4096 elements"]
    b = get_codec("exact").describe(entries["b"].meta)
    assert b.note == "fewer than min_numel=4096 elements" and b.protected is None
    w = get_codec("quant").describe(entries["w"].meta)
    q = ckptzip.read_quantized(p)["w"]
    assert isinstance(q, ckptzip._types.QuantizedTensor)
    assert w.protected == len(q.protected_positions) > 0
    assert get_codec("quant").describe({"n_protected": "x"}).protected is None  # hostile meta


def test_a_plugin_codec_is_found_through_its_entry_point(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFormatError, match=r"'plugin-null'.*install the package"):
        get_codec("plugin-null")
    (tmp_path / "plugin_codec_mod.py").write_text(
        textwrap.dedent(
            """
            from ckptzip.codecs.exact import ExactCodec

            class PluginNull(ExactCodec):
                id = "plugin-null"
            """
        )
    )
    dist = tmp_path / "plugin_codec-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-codec\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[ckptzip.codecs]\nplugin-null = plugin_codec_mod:PluginNull\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        codec = get_codec("plugin-null")
        assert type(codec).__name__ == "PluginNull"
        assert "plugin-null" in available_codecs()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("plugin_codec_mod", None)
        codecs_base._REGISTRY.pop("plugin-null", None)  # leave the registry as it was


def test_gpt2_tied_embeddings_get_one_treatment_through_the_manager(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=256,
        n_positions=32,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 256, (4, 16))
    for _ in range(3):
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()
    base = CompressionConfig(min_numel=1000)
    mgr = ckptzip.CheckpointManager(tmp_path, model=model, optimizer=opt, config=base)
    report = mgr.save(3)
    assert report.search is not None
    by_path = {e.path: e for e in report.entries}
    wte, head = "model/transformer.wte.weight", "model/lm_head.weight"
    treatments = {(by_path[p].codec, by_path[p].config) for p in (wte, head) if p in by_path}
    assert len(treatments) == 1 and next(iter(treatments))[1] is not None
    state = ckptzip.load(mgr.path(3))["model"]
    assert torch.equal(state["transformer.wte.weight"], state["lm_head.weight"])


@given(
    st.lists(
        st.sampled_from([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-40, 1.0, -3.5]),
        max_size=64,
    ),
    st.sampled_from([torch.float16, torch.float32, torch.float64]),
    st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_zero_fraction_counts_what_torch_counts(
    values: list[float], dtype: Any, strided: bool
) -> None:
    """The planner's NumPy count (the entries == 0) is torch's count of zeros: +-0, subnormals
    the dtype flushes, not NaN; strided views too."""
    x = torch.tensor(values, dtype=torch.float64).to(dtype)
    if strided:
        x = x[::2]
    expected = float(x.numel() - int(torch.count_nonzero(x))) / max(x.numel(), 1)
    assert zero_fraction(x) == expected
