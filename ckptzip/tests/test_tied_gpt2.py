"""A Hugging Face GPT-2 (built from a tiny config, no download) with tied embeddings: trained,
saved, loaded and resumed with its weights still tied, lossy and exact."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

import ckptzip

transformers = pytest.importorskip("transformers")

STEPS, RESUME_AT = 6, 3


@pytest.fixture(scope="module")
def pristine() -> Any:
    """One freshly initialised model (building one costs seconds); tests deep-copy it, which
    keeps the tie (deepcopy copies a shared parameter once)."""
    return _build()


def _build() -> Any:
    config = transformers.GPT2Config(
        vocab_size=256,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        tie_word_embeddings=True,
        resid_pdrop=0.0,  # no dropout: a resumed run sees the same computation
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def _batch(step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + step)  # the same data order after a restore
    return torch.randint(0, 256, (4, 16), generator=g)


def _train(model: Any, opt: torch.optim.Optimizer, steps: range) -> float:
    loss = torch.tensor(0.0)
    for step in steps:
        ids = _batch(step)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    return float(loss.detach())


def _tied(model: Any) -> bool:
    return model.lm_head.weight is model.transformer.wte.weight


@pytest.mark.parametrize("exact", [False, True])
def test_gpt2_resumes_tied_from_a_ckptzip_checkpoint(
    pristine: Any, tmp_path: Path, exact: bool
) -> None:
    model = copy.deepcopy(pristine)
    assert _tied(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    _train(model, opt, range(RESUME_AT))
    config = ckptzip.CompressionConfig(exact=("*",) if exact else ())
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": RESUME_AT}
    report = ckptzip.save(state, tmp_path / "ckpt.ckz", config=config)
    uninterrupted = _train(model, opt, range(RESUME_AT, STEPS))

    # the tied pair is one entry, named after the first of its paths
    paths = [e.path for e in report.entries]
    assert "model/transformer.wte.weight" in paths and "model/lm_head.weight" not in paths
    wte = next(e for e in report.entries if e.path == "model/transformer.wte.weight")
    assert wte.codec == ("exact" if exact else "quant")

    restored = ckptzip.load(tmp_path / "ckpt.ckz", weights_only=True)
    sd = restored["model"]
    assert sd["lm_head.weight"].data_ptr() == sd["transformer.wte.weight"].data_ptr()
    model2 = copy.deepcopy(pristine)
    model2.load_state_dict(sd)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=3e-3)
    opt2.load_state_dict(restored["optimizer"])
    assert _tied(model2)
    assert model2.lm_head.weight.data_ptr() == model2.transformer.wte.weight.data_ptr()
    resumed = _train(model2, opt2, range(restored["step"], STEPS))
    assert _tied(model2)  # still one parameter after optimizer steps
    if exact:
        assert resumed == pytest.approx(uninterrupted, rel=1e-5)
    else:
        assert resumed == pytest.approx(uninterrupted, rel=0.05)
