"""Run by ``tests/test_transformers.py`` under ``torchrun`` (2 CPU processes, gloo): train
(``whole``) or resume from ``checkpoint-6`` (``resume``); the main process writes the losses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist
from test_transformers import _losses, _trainer

out, mode = Path(sys.argv[1]), sys.argv[2]
trainer = _trainer(out, seed=0 if mode == "whole" else 1, ddp_backend="gloo")
trainer.train(resume_from_checkpoint=str(out / "checkpoint-6") if mode == "resume" else None)
if trainer.is_world_process_zero():
    (out / f"losses-{mode}.json").write_text(json.dumps(_losses(trainer)))

# Leave together: a gloo group torn down by interpreter exit while the peer's connection is
# already closed can abort the process ("terminate called without an active exception").
if dist.is_initialized():
    dist.barrier()
    dist.destroy_process_group()
