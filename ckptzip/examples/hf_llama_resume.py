"""A Llama-style model under the Hugging Face Trainer, killed mid-run, resumed from ckptzip files.

    python ckptzip/examples/hf_llama_resume.py        # pip install ckptzip[hf]; --quick: 30 steps

What a user's job looks like, beyond ``hf_trainer.py``: a ``LlamaForCausalLM`` from a config
(no download), gradient accumulation, a cosine schedule with warm-up, evaluation with
``metric_for_best_model`` and ``load_best_model_at_end``, ``save_total_limit=2``. The job
runs in a child process, SIGKILLed after its checkpoint in the middle of the run (step 30 of
60, 20 of 30 with ``--quick``); a fresh process resumes it with
``resume_from_checkpoint=True`` and trains to the end. A plain ``Trainer`` run without ckptzip,
uninterrupted, is the reference. Checks and prints:

* the resumed run's learning rates equal the reference's (the scheduler came back), its losses
  are within 5 % of the reference's step by step;
* the decoded optimizer step counters, scheduler state and RNG states equal what the Trainer
  wrote (a copy of the Trainer's own files is kept for the comparison), the Adam moments within
  the quantizer's error;
* every checkpoint ``save_total_limit`` left decodes and is a complete ``Trainer`` checkpoint;
* at the end the model holds the best checkpoint's weights (``load_best_model_at_end``);
* bytes and seconds: the Trainer's own save against the conversion, per checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
from _common import parse_args
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

import ckptzip
from ckptzip.integrations.transformers import CkptzipTrainer, materialize

EVERY = 10
ORIGINALS = "originals"  # copies of the Trainer's own files, made before the conversion


def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg)


def rows(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):  # each token is the previous plus a small stride, modulo the vocabulary
        start, stride = torch.randint(0, 256, (2,), generator=g).tolist()
        ids = (start + (stride % 5 + 1) * torch.arange(32)) % 256
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out


def args(out: str, steps: int) -> TrainingArguments:
    return TrainingArguments(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=2e-3,
        lr_scheduler_type="cosine",
        warmup_steps=5,
        weight_decay=0.01,
        save_steps=EVERY,
        save_total_limit=2,
        eval_strategy="steps",
        eval_steps=EVERY,
        metric_for_best_model="eval_loss",
        load_best_model_at_end=True,
        per_device_eval_batch_size=16,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )


class Keep(TrainerCallback):
    """Copies each checkpoint before ckptzip converts it (runs first: callbacks given to the
    Trainer come before the one CkptzipTrainer adds) and writes the run's timings."""

    def __init__(self, out: str, kill: int | None) -> None:
        self.out, self.kill = out, kill
        self.first_step: int | None = None

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        src = os.path.join(self.out, f"checkpoint-{state.global_step}")
        shutil.copytree(src, os.path.join(self.out, ORIGINALS, os.path.basename(src)))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.first_step is None:
            self.first_step = state.global_step + 1  # the first step this process trains

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.kill is not None and state.global_step == self.kill + 1:
            os.kill(os.getpid(), signal.SIGKILL)  # a node lost after the checkpoint at KILL


class Timed(CkptzipTrainer):
    """Times the Trainer's own checkpoint save (before the conversion the callback does)."""

    save_seconds: list[float]

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        t0 = time.perf_counter()
        super()._save_checkpoint(model, trial)
        self.save_seconds.append(time.perf_counter() - t0)


def job(out: str, steps: int, kill: int | None, resume: bool) -> None:
    keep = Keep(out, kill)
    trainer = Timed(
        model=model(),
        args=args(out, steps),
        train_dataset=rows(1024, 0),
        eval_dataset=rows(64, 1),
        callbacks=[keep],
    )
    trainer.save_seconds = []
    trainer.train(resume_from_checkpoint=True if resume else None)
    reports = trainer.ckptzip_callback.reports
    best = trainer.state.best_model_checkpoint
    assert best is not None
    stored = ckptzip.load(os.path.join(best, "model.safetensors.ckz"))
    own = trainer.model.state_dict()
    holds_best = all(torch.equal(own[k], v) for k, v in stored.items())
    stats = {
        "first_step": keep.first_step,
        "best": os.path.basename(best),
        "holds_best": holds_best,
        "log": trainer.state.log_history,
        "save_seconds": trainer.save_seconds,
        "convert_seconds": [sum(r.seconds for r in rs) for rs in reports.values()],
        "bytes_in": [sum(r.bytes_in for r in rs) for rs in reports.values()],
        "bytes_out": [sum(r.bytes_out for r in rs) for rs in reports.values()],
    }
    with open(os.path.join(out, "stats.json"), "w") as f:
        json.dump(stats, f)


def reference(out: str, steps: int) -> list[dict[str, Any]]:
    trainer = Trainer(
        model=model(),
        args=args(out, steps),
        train_dataset=rows(1024, 0),
        eval_dataset=rows(64, 1),
    )
    trainer.train()
    return list(trainer.state.log_history)


def child(*argv: str) -> int:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, __file__, *argv], env=env, check=False).returncode


def by_step(log: list[dict[str, Any]], key: str) -> dict[int, float]:
    return {e["step"]: e[key] for e in log if key in e}


def same(a: Any, b: Any) -> bool:
    """Exact equality of nested state (tensors, arrays, tuples, dicts)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return bool(torch.equal(torch.as_tensor(a), torch.as_tensor(b)))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "shape"):  # NumPy
        return bool((a == b).all()) and a.dtype == b.dtype
    return bool(a == b)


def check_checkpoint(out: str, name: str) -> dict[str, Any]:
    """Decode ``name`` and compare it with the Trainer's own files kept for it."""
    original = os.path.join(out, ORIGINALS, name)
    with tempfile.TemporaryDirectory() as tmp:
        materialize(os.path.join(out, name), tmp)
        names = {n.replace("training_args.bin", "training_args.json") for n in os.listdir(original)}
        assert set(os.listdir(tmp)) == names, (name, sorted(os.listdir(tmp)), sorted(names))
        load = lambda d, f: torch.load(os.path.join(d, f), weights_only=False)  # noqa: E731
        assert same(load(tmp, "rng_state.pth"), load(original, "rng_state.pth"))
        assert same(load(tmp, "scheduler.pt"), load(original, "scheduler.pt"))
        opt, opt0 = load(tmp, "optimizer.pt"), load(original, "optimizer.pt")
        assert same(opt["param_groups"], opt0["param_groups"])
        worst = 0.0
        for k, s in opt0["state"].items():
            assert same(opt["state"][k]["step"], s["step"])
            for m in ("exp_avg", "exp_avg_sq"):
                err = (opt["state"][k][m] - s[m]).norm() / s[m].norm().clamp_min(1e-30)
                worst = max(worst, float(err))
    return {"moment_rel_err_max": worst}


def main() -> None:
    quick = parse_args(__doc__).quick
    torch.set_num_threads(1)
    steps = 30 if quick else 60
    kill = EVERY * ((steps // EVERY + 1) // 2)  # right after a checkpoint: 20 of 30, 30 of 60
    with tempfile.TemporaryDirectory() as root:
        out, ref = os.path.join(root, "out"), os.path.join(root, "ref")
        rc = child("--job", out, str(steps), str(kill))
        assert rc == -signal.SIGKILL, f"the job should have been killed, rc {rc}"
        assert not os.path.exists(os.path.join(out, "stats.json")), "the killed job finished"
        left = sorted(n for n in os.listdir(out) if n.startswith("checkpoint-"))
        print(f"killed after step {kill + 1}; left {left}")
        assert child("--resume", out, str(steps)) == 0
        with open(os.path.join(out, "stats.json")) as f:
            stats = json.load(f)
        log_ref = reference(ref, steps)

        lr, lr0 = by_step(stats["log"], "learning_rate"), by_step(log_ref, "learning_rate")
        assert stats["first_step"] == kill + 1, f"resumed at step {stats['first_step']}"
        assert all(lr[s] == lr0[s] for s in lr), "the scheduler did not come back"
        loss, loss0 = by_step(stats["log"], "loss"), by_step(log_ref, "loss")
        loss = {s: v for s, v in loss.items() if s > kill}  # the steps trained after the resume
        drift = max(abs(loss[s] / loss0[s] - 1) for s in loss)
        ev, ev0 = by_step(stats["log"], "eval_loss"), by_step(log_ref, "eval_loss")
        print(
            f"resumed steps {min(loss)}-{max(loss)}: learning rates equal the reference's; "
            f"loss within {drift:.2%} of it step by step; final eval_loss {ev[steps]:.4f} "
            f"vs {ev0[steps]:.4f}"
        )
        assert drift < 0.05

        kept = sorted(n for n in os.listdir(out) if n.startswith("checkpoint-"))
        assert len(kept) <= 3, kept  # save_total_limit=2, plus the best when it is older
        errs = [check_checkpoint(out, n)["moment_rel_err_max"] for n in kept]
        with open(os.path.join(out, kept[-1], "trainer_state.json")) as f:
            state = json.load(f)
        print(
            f"kept by save_total_limit=2: {kept} (best {state['best_model_checkpoint']!r}); "
            "each decodes to the Trainer's files: RNG, scheduler, optimizer steps exact, "
            f"Adam moments within {max(errs):.1%} (relative L2)"
        )
        assert stats["holds_best"]
        print(f"load_best_model_at_end: the model holds {stats['best']}'s weights")
        raw, packed = sum(stats["bytes_in"]), sum(stats["bytes_out"])
        n = len(stats["bytes_in"])
        save_ms = 1000 * sum(stats["save_seconds"]) / len(stats["save_seconds"])
        conv_ms = 1000 * sum(stats["convert_seconds"]) / n
        print(
            f"cost: {n} checkpoints after the resume, Trainer files {raw:,} B, ckptzip "
            f"{packed:,} B ({raw / packed:.1f}x smaller); Trainer save {save_ms:.0f} ms, "
            f"conversion +{conv_ms:.0f} ms per checkpoint"
        )
        print(f"checkpoints decoded with ckptzip {ckptzip.__version__}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--job", "--resume"):
        torch.set_num_threads(1)
        where, n = sys.argv[2], int(sys.argv[3])
        if sys.argv[1] == "--job":
            job(where, n, int(sys.argv[4]), resume=False)
        else:
            job(where, n, None, resume=True)
    else:
        main()
