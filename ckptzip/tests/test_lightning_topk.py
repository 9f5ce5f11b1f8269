"""A Lightning job beyond examples/lightning_trainer.py: ModelCheckpoint keeping the 2 best
checkpoints by a monitored validation loss, through CkptzipCheckpointIO (also asynchronous),
then ``validate(ckpt_path="best")`` and a resume from ``last.ckpt``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

import ckptzip

pl = pytest.importorskip("pytorch_lightning")
from pytorch_lightning.callbacks import ModelCheckpoint  # noqa: E402
from pytorch_lightning.plugins.io import AsyncCheckpointIO  # noqa: E402

from ckptzip.integrations.lightning import CkptzipCheckpointIO  # noqa: E402

CONFIG = ckptzip.CompressionConfig(min_numel=256)


class Net(pl.LightningModule):
    def __init__(self, lr: float = 2e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)
        )

    def _loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._loss(batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return [opt], [torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=8)]

    def _data(self, seed: int) -> Any:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(96, 16, generator=g)
        data = torch.utils.data.TensorDataset(x, x[:, :4].sum(1, keepdim=True).sin())
        return torch.utils.data.DataLoader(data, batch_size=32)

    def train_dataloader(self) -> Any:
        return self._data(0)

    def val_dataloader(self) -> Any:
        return self._data(1)


def _trainer(root: Path, epochs: int, io: Any) -> Any:
    top = ModelCheckpoint(
        dirpath=root, save_top_k=2, monitor="val_loss", mode="min", save_last=True
    )
    return pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[io],
        callbacks=[top],
    ), top


@pytest.mark.slow
@pytest.mark.parametrize("asynchronous", [False, True])
def test_top_k_by_a_monitored_metric(tmp_path: Path, asynchronous: bool) -> None:
    def io() -> Any:
        plugin = CkptzipCheckpointIO(CONFIG)
        return AsyncCheckpointIO(plugin) if asynchronous else plugin

    pl.seed_everything(0)
    trainer, top = _trainer(tmp_path, 5, io())
    trainer.fit(Net())
    kept = sorted(os.listdir(tmp_path))
    # the two best by val_loss and last.ckpt; every worse one removed through the plugin
    assert len(kept) == 3 and "last.ckpt" in kept, kept
    assert sorted(os.path.basename(p) for p in top.best_k_models) == sorted(
        n for n in kept if n != "last.ckpt"
    )
    for name in kept:
        ckptzip.verify(tmp_path / name)  # raises on a damaged file
    best = trainer.validate(ckpt_path="best", verbose=False)[0]["val_loss"]
    assert best == pytest.approx(float(top.best_model_score), rel=0.05)

    # resume: ModelCheckpoint's top-k state comes back, so a worse epoch removes nothing kept
    pl.seed_everything(1)
    resumed, top2 = _trainer(tmp_path, 7, io())
    resumed.fit(Net(), ckpt_path=str(tmp_path / "last.ckpt"))
    assert resumed.current_epoch == 7
    assert top2.best_model_score <= top.best_model_score
    kept = sorted(os.listdir(tmp_path))
    assert len(kept) == 3 and "last.ckpt" in kept, kept
    state = ckptzip.load(tmp_path / "last.ckpt")
    # the cosine schedule stepped once an epoch, through the resume (5 epochs, then 2 more)
    assert state["lr_schedulers"][0]["last_epoch"] == 7, state["lr_schedulers"]
    assert state["epoch"] == resumed.current_epoch


def _state() -> dict[str, Any]:
    return {"state_dict": {"w": torch.randn(64, 64)}, "epoch": 1}


def test_a_removal_before_a_queued_save_finishes_still_removes_its_file(tmp_path: Path) -> None:
    # AsyncCheckpointIO's order: the save is queued on its thread, the removal runs on the
    # caller's before the file exists (ckptzip publishes only complete files)
    import threading

    plugin = CkptzipCheckpointIO(CONFIG)
    path = tmp_path / "epoch=1.ckpt"
    plugin.remove_checkpoint(path)
    worker = threading.Thread(target=plugin.save_checkpoint, args=(_state(), path))
    worker.start()
    worker.join()
    assert not path.exists()
    # the mark is used once: a later save of the same path (a new checkpoint) is kept
    worker = threading.Thread(target=plugin.save_checkpoint, args=(_state(), path))
    worker.start()
    worker.join()
    assert path.exists()


def test_a_synchronous_save_after_removing_a_missing_file_is_kept(tmp_path: Path) -> None:
    plugin = CkptzipCheckpointIO(CONFIG)
    path = tmp_path / "epoch=1.ckpt"
    plugin.remove_checkpoint(path)  # nothing there: a plain plugin's later save is new
    plugin.save_checkpoint(_state(), path)
    assert path.exists()
    plugin.remove_checkpoint(path)
    assert not path.exists()
