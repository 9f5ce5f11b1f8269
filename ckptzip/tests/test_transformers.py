"""ckptzip.integrations.transformers: a tiny GPT-2 trained, checkpointed, resumed."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from click.testing import CliRunner  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments  # noqa: E402
from transformers.trainer_pt_utils import safe_globals  # noqa: E402

import ckptzip  # noqa: E402
from ckptzip.cli import main as cli  # noqa: E402
from ckptzip.integrations.transformers import (  # noqa: E402
    CkptzipCallback,
    CkptzipTrainer,
    compress_checkpoint,
    load_model,
    materialize,
    resumable,
)

CONFIG = ckptzip.CompressionConfig(min_numel=256)
TOLERANCE = 0.05


def _model(seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    return GPT2LMHeadModel(config)


def _dataset() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(48):  # a learnable pattern: each row counts up from a random start
        start = int(torch.randint(0, 48, (1,), generator=g))
        ids = torch.arange(start, start + 16) % 64
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out


def _trainer(out: Path, seed: int, **options: Any) -> CkptzipTrainer:
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=12,
        save_steps=6,
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        logging_steps=1,
        report_to=[],
        seed=0,
        use_cpu=True,
        disable_tqdm=True,
        **options,
    )
    return CkptzipTrainer(
        model=_model(seed), args=args, train_dataset=_dataset(), ckptzip_config=CONFIG
    )


def _losses(trainer: Any) -> dict[int, float]:
    return {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}


@pytest.mark.slow
def test_trainer_resumes_from_compressed_checkpoints(tmp_path: Path) -> None:
    out = tmp_path / "run"
    whole = _trainer(out, seed=0)
    whole.train()
    reference = _losses(whole)
    ckpt = out / "checkpoint-6"
    names = sorted(os.listdir(ckpt))
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
        assert name + ".ckz" in names and name not in names, names
    assert "training_args.json" in names and "training_args.bin" not in names
    assert json.loads((ckpt / "training_args.json").read_text())["max_steps"] == 12

    resumed = _trainer(out, seed=1)  # the live state is gone: another initialisation
    resumed.train(resume_from_checkpoint=str(ckpt))
    got = {step: loss for step, loss in _losses(resumed).items() if step > 6}  # history too
    assert sorted(got) == list(range(7, 13))
    for step, loss in got.items():
        assert abs(loss - reference[step]) <= TOLERANCE * reference[step], (reference, got)

    # the model stays readable by from_pretrained after `ckptzip decompress`
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(out / "checkpoint-12" / "config.json", plain)
    result = CliRunner().invoke(
        cli,
        [
            "decompress",
            str(out / "checkpoint-12" / "model.safetensors.ckz"),
            "-o",
            str(plain / "model.safetensors"),
        ],
    )
    assert result.exit_code == 0, result.output
    model = GPT2LMHeadModel.from_pretrained(plain)
    stored = ckptzip.load(out / "checkpoint-12" / "model.safetensors.ckz")
    for name, p in model.state_dict().items():
        if name in stored:
            assert torch.equal(p, stored[name]), name


@pytest.mark.slow
def test_two_processes_resume_from_compressed_checkpoints(tmp_path: Path) -> None:
    """DDP on 2 CPU processes (torchrun, gloo): each process converts the files it wrote,
    every process resumes from the converted checkpoint."""
    out = tmp_path / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    for mode in ("whole", "resume"):
        done = subprocess.run(
            [*torchrun, str(Path(__file__).with_name("_hf_ddp.py")), str(out), mode],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert done.returncode == 0, done.stderr[-4000:]
        if mode == "whole":
            names = sorted(os.listdir(out / "checkpoint-6"))
            for name in ("model.safetensors", "optimizer.pt", "rng_state_0.pth", "rng_state_1.pth"):
                assert name + ".ckz" in names and name not in names, names
            assert "training_args.json" in names and "training_args.bin" not in names
    reference = json.loads((out / "losses-whole.json").read_text())
    resumed = json.loads((out / "losses-resume.json").read_text())
    got = {int(step): loss for step, loss in resumed.items() if int(step) > 6}
    assert sorted(got) == list(range(7, 13))
    for step, loss in got.items():
        assert abs(loss - reference[str(step)]) <= TOLERANCE * reference[str(step)], (
            reference,
            got,
        )


def test_each_process_converts_only_the_files_it_wrote(tmp_path: Path) -> None:
    for name in ("rng_state_0.pth", "rng_state_1.pth", "optimizer.pt"):
        torch.save({"cpu": torch.random.get_rng_state()}, tmp_path / name)
    compress_checkpoint(tmp_path, process_index=1)
    assert sorted(os.listdir(tmp_path)) == [
        "optimizer.pt",
        "rng_state_0.pth",
        "rng_state_1.pth.ckz",
    ]
    compress_checkpoint(tmp_path, process_index=0)
    assert sorted(os.listdir(tmp_path)) == [
        "optimizer.pt.ckz",
        "rng_state_0.pth.ckz",
        "rng_state_1.pth.ckz",
    ]


def test_rng_state_round_trips_through_a_converted_directory(tmp_path: Path) -> None:
    random.seed(3)
    np.random.seed(4)
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.random.get_rng_state(),
    }
    torch.save(state, tmp_path / "rng_state.pth")
    compress_checkpoint(tmp_path)
    assert os.listdir(tmp_path) == ["rng_state.pth.ckz"]
    materialize(tmp_path, tmp_path / "plain")
    with safe_globals():  # how the Trainer reads it
        back = torch.load(tmp_path / "plain" / "rng_state.pth", weights_only=True)
    assert back["python"] == state["python"]
    assert all(np.array_equal(a, b) for a, b in zip(back["numpy"], state["numpy"], strict=True))
    assert torch.equal(back["cpu"], state["cpu"])


def _best_first_args(out: Path) -> TrainingArguments:
    """load_best_model_at_end where the best checkpoint is not the last: the "best" eval
    loss is the highest (the first evaluation's, as the loss falls)."""
    return TrainingArguments(
        output_dir=str(out),
        max_steps=12,
        save_steps=6,
        eval_strategy="steps",
        eval_steps=6,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
        greater_is_better=True,
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        report_to=[],
        seed=0,
        use_cpu=True,
        disable_tqdm=True,
    )


def _assert_holds_best_weights(trainer: Any, out: Path) -> None:
    best = trainer.state.best_model_checkpoint
    assert best is not None and os.path.basename(best) == "checkpoint-6", best
    assert (out / "checkpoint-12" / "model.safetensors.ckz").exists()
    stored = ckptzip.load(os.path.join(best, "model.safetensors.ckz"))
    own = trainer.model.state_dict()
    assert stored and all(torch.equal(own[k], v) for k, v in stored.items())
    # GPT-2's lm_head is tied to wte and absent from the file: it came back through the tie
    assert "lm_head.weight" not in stored and torch.equal(
        own["lm_head.weight"], stored["transformer.wte.weight"]
    )


def test_ckptzip_trainer_loads_the_best_model_at_end(tmp_path: Path) -> None:
    # was refused with ConfigError; the Trainer now loads the decoded best checkpoint
    trainer = CkptzipTrainer(
        model=_model(0),
        args=_best_first_args(tmp_path),
        train_dataset=_dataset(),
        eval_dataset=_dataset()[:16],
        ckptzip_config=CONFIG,
    )
    trainer.train()
    _assert_holds_best_weights(trainer, tmp_path)


def test_a_plain_trainer_with_the_callback_loads_the_best_model_at_end(tmp_path: Path) -> None:
    # the plain Trainer finds no model.safetensors in the best checkpoint and kept the last
    # weights with only a logged warning; the callback loads the best ones at on_train_end
    from transformers import Trainer

    trainer = Trainer(
        model=_model(0),
        args=_best_first_args(tmp_path),
        train_dataset=_dataset(),
        eval_dataset=_dataset()[:16],
        callbacks=[CkptzipCallback(CONFIG)],
    )
    trainer.train()
    _assert_holds_best_weights(trainer, tmp_path)


def test_load_model_refuses_another_models_weights(tmp_path: Path) -> None:
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    other = GPT2LMHeadModel(config)
    ckptzip.save(dict(other.state_dict()), tmp_path / "model.safetensors.ckz", config=CONFIG)
    with pytest.raises(ckptzip.CorruptCheckpointError, match=r"unexpected|missing"):
        load_model(_model(0), tmp_path)
    with pytest.raises(ckptzip.CorruptCheckpointError, match="no model weights"):
        load_model(_model(0), tmp_path / "..")


@pytest.mark.slow
def test_a_plain_trainer_with_the_callback_resumes_through_resumable(tmp_path: Path) -> None:
    from transformers import Trainer

    def plain(seed: int) -> Trainer:
        args = _trainer(tmp_path / "run", seed).args  # the same arguments, a plain Trainer
        return Trainer(
            model=_model(seed),
            args=args,
            train_dataset=_dataset(),
            callbacks=[CkptzipCallback(CONFIG)],
        )

    whole = plain(0)
    whole.train()
    reference = _losses(whole)
    ckpt = tmp_path / "run" / "checkpoint-6"
    assert (ckpt / "model.safetensors.ckz").exists()
    # what the Trainer alone says about a converted directory (the module docstring quotes it)
    with pytest.raises(ValueError, match="Can't find a valid checkpoint"):
        plain(1).train(resume_from_checkpoint=str(ckpt))
    resumed = plain(1)
    with resumable(ckpt) as path:
        resumed.train(resume_from_checkpoint=path)
    got = {step: loss for step, loss in _losses(resumed).items() if step > 6}
    assert sorted(got) == list(range(7, 13))
    for step, loss in got.items():
        assert abs(loss - reference[step]) <= TOLERANCE * reference[step], (reference, got)
    with resumable(True, str(tmp_path / "run")) as last:
        assert last is not None and os.path.exists(os.path.join(last, "model.safetensors"))
