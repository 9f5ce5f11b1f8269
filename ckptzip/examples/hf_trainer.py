"""ckptzip with the Hugging Face Trainer: compressed checkpoint-N/ directories and a resume.

    python ckptzip/examples/hf_trainer.py        # pip install ckptzip[hf]; --quick: 20 steps

Trains a small GPT-2 built from a config (no download) on a toy next-token task made in
code for 30 steps, checkpointing every 10 through :class:`CkptzipTrainer`; then a fresh
trainer resumes from ``checkpoint-20`` and trains to the end. Prints what the checkpoints cost
(bytes of the Trainer's own files against the ckptzip files, and the conversion time).
"""

from __future__ import annotations

import os
import tempfile

import torch
from _common import parse_args
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

from ckptzip.integrations.transformers import CkptzipTrainer

EVERY = 10


def model(seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    return GPT2LMHeadModel(
        GPT2Config(vocab_size=256, n_positions=32, n_embd=96, n_layer=2, n_head=2)
    )


def dataset() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(512):  # sequences with a rule to learn: each token is the previous + a step
        start, stride = torch.randint(0, 256, (2,), generator=g).tolist()
        ids = (start + (stride % 7 + 1) * torch.arange(32)) % 256
        rows.append({"input_ids": ids, "labels": ids.clone()})
    return rows


def trainer(out: str, seed: int, steps: int) -> CkptzipTrainer:
    args = TrainingArguments(
        output_dir=out,
        max_steps=steps,
        save_steps=EVERY,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        logging_steps=5,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    return CkptzipTrainer(model=model(seed), args=args, train_dataset=dataset())


if __name__ == "__main__":
    steps = 20 if parse_args(__doc__).quick else 30
    resume = f"checkpoint-{steps - EVERY}"
    with tempfile.TemporaryDirectory() as out:
        first = trainer(out, 0, steps)
        first.train()
        print(f"uninterrupted: final loss {first.state.log_history[-2]['loss']:.4f}")
        print(f"{resume}:", sorted(os.listdir(os.path.join(out, resume))))
        resumed = trainer(out, 1, steps)
        resumed.train(resume_from_checkpoint=os.path.join(out, resume))
        print(f"resumed from {resume}: final loss {resumed.state.log_history[-2]['loss']:.4f}")
        reports = [r for rs in first.ckptzip_callback.reports.values() for r in rs]

    raw, packed = sum(r.bytes_in for r in reports), sum(r.bytes_out for r in reports)
    ms = sum(r.seconds for r in reports) / (steps // EVERY) * 1000
    print(
        f"cost: {steps // EVERY} checkpoints, Trainer files {raw:,} B, ckptzip {packed:,} B "
        f"({raw / packed:.1f}x smaller); conversion {ms:.0f} ms per checkpoint, after the "
        "Trainer's own save"
    )
