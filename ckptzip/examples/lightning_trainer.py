"""ckptzip with PyTorch Lightning: ModelCheckpoint through CkptzipCheckpointIO, then a resume.

    python ckptzip/examples/lightning_trainer.py        # pip install ckptzip[lightning]; --quick

Trains a small regressor for 3 epochs with a checkpoint each epoch, resumes from the
epoch-2 file into a fresh module for 3 more, and rebuilds the module from ``last.ckpt``.
Every checkpoint is also written with Lightning's own ``TorchCheckpointIO`` next to it, to
print what ckptzip costs against it on the same dicts (bytes and seconds per save).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, ClassVar

import pytorch_lightning as pl
import torch
from _common import Cost, mlp, parse_args, print_cost, regression_batch, seconds
from lightning_fabric.plugins import TorchCheckpointIO
from pytorch_lightning.callbacks import ModelCheckpoint

from ckptzip.integrations.lightning import CkptzipCheckpointIO, load_from_checkpoint


class Regressor(pl.LightningModule):
    def __init__(self, hidden: int = 512, lr: float = 1e-3, rows: int = 2048) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = mlp(32, hidden)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)

    def train_dataloader(self) -> Any:
        data = torch.utils.data.TensorDataset(*regression_batch(self.hparams.rows, 32, seed=0))
        return torch.utils.data.DataLoader(data, batch_size=64, num_workers=0)


class Compared(CkptzipCheckpointIO):
    """CkptzipCheckpointIO that also times Lightning's own writer on the same checkpoint."""

    costs: ClassVar[list[Cost]] = []  # all saves of the script

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None
    ) -> None:
        t_torch = seconds(lambda: TorchCheckpointIO().save_checkpoint(checkpoint, f"{path}.torch"))
        super().save_checkpoint(checkpoint, path)
        report = self.last_report
        assert report is not None
        size = os.path.getsize(f"{path}.torch")
        self.costs.append(Cost(size, report.bytes_out, t_torch, report.seconds))
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


if __name__ == "__main__":
    rows = 512 if parse_args(__doc__).quick else 2048
    with tempfile.TemporaryDirectory() as root:
        pl.seed_everything(0)
        trainer(root, 3).fit(Regressor(rows=rows))
        first = sorted(n for n in os.listdir(root) if n.startswith("epoch=1"))[0]
        pl.seed_everything(1)
        t = trainer(root, 6)
        t.fit(Regressor(rows=rows), ckpt_path=os.path.join(root, first))  # a fresh module resumes
        print(
            f"resumed from {first}: epoch {t.current_epoch}, "
            f"loss {float(t.callback_metrics['loss']):.4f}"
        )
        model = load_from_checkpoint(Regressor, os.path.join(root, "last.ckpt"))
        print(f"load_from_checkpoint: hparams {dict(model.hparams)}")
    print_cost(Compared.costs, "TorchCheckpointIO")
