"""ckptzip with PyTorch Lightning: ModelCheckpoint through CkptzipCheckpointIO, then a resume.

    python ckptzip/examples/lightning_trainer.py        # pip install ckptzip[lightning]

Trains a small regressor for 3 epochs with a checkpoint each epoch, resumes from the
epoch-2 file into a fresh module for 3 more, and rebuilds the module from ``last.ckpt``.
Every checkpoint is also written with Lightning's own ``TorchCheckpointIO`` next to it, to
print what ckptzip costs against it on the same dicts (bytes and seconds per save).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, ClassVar

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins import TorchCheckpointIO
from pytorch_lightning.callbacks import ModelCheckpoint

from ckptzip.integrations.lightning import CkptzipCheckpointIO, load_from_checkpoint


class Regressor(pl.LightningModule):
    def __init__(self, hidden: int = 512, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, hidden),
            torch.nn.GELU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.GELU(),
            torch.nn.Linear(hidden, 1),
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)

    def train_dataloader(self) -> Any:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2048, 32, generator=g)
        y = torch.sin(x[:, :8].sum(1, keepdim=True))
        data = torch.utils.data.TensorDataset(x, y)
        return torch.utils.data.DataLoader(data, batch_size=64, num_workers=0)


class Compared(CkptzipCheckpointIO):
    """CkptzipCheckpointIO that also times Lightning's own writer on the same checkpoint."""

    costs: ClassVar[list[tuple[int, int, float, float]]] = []  # all saves of the script

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None
    ) -> None:
        t0 = time.perf_counter()
        TorchCheckpointIO().save_checkpoint(checkpoint, f"{path}.torch")
        t_torch = time.perf_counter() - t0
        super().save_checkpoint(checkpoint, path)
        report = self.last_report
        assert report is not None
        self.costs.append(
            (os.path.getsize(f"{path}.torch"), report.bytes_out, report.seconds, t_torch)
        )
        os.unlink(f"{path}.torch")


def trainer(root: str, epochs: int) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[Compared()],
        callbacks=[ModelCheckpoint(dirpath=root, save_top_k=-1, save_last=True)],
    )


with tempfile.TemporaryDirectory() as root:
    pl.seed_everything(0)
    trainer(root, 3).fit(Regressor())
    first = sorted(n for n in os.listdir(root) if n.startswith("epoch=1"))[0]
    pl.seed_everything(1)
    t = trainer(root, 6)
    t.fit(Regressor(), ckpt_path=os.path.join(root, first))  # a fresh module resumes
    print(
        f"resumed from {first}: epoch {t.current_epoch}, "
        f"loss {float(t.callback_metrics['loss']):.4f}"
    )
    model = load_from_checkpoint(Regressor, os.path.join(root, "last.ckpt"))
    print(f"load_from_checkpoint: hparams {dict(model.hparams)}")

costs = Compared.costs
raw, out = sum(c[0] for c in costs), sum(c[1] for c in costs)
print(
    f"cost: {len(costs)} checkpoints, TorchCheckpointIO {raw:,} B, ckptzip {out:,} B "
    f"({raw / out:.1f}x smaller); save {sum(c[2] for c in costs) / len(costs) * 1000:.0f} ms "
    f"vs {sum(c[3] for c in costs) / len(costs) * 1000:.0f} ms (per checkpoint)"
)
