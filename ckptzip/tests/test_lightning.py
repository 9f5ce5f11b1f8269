"""ckptzip.integrations.lightning: ModelCheckpoint, resume, load_from_checkpoint, async saves."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from pytorch_lightning.callbacks import Callback, ModelCheckpoint  # noqa: E402
from pytorch_lightning.plugins.io import AsyncCheckpointIO  # noqa: E402

import ckptzip  # noqa: E402
from ckptzip.integrations.lightning import CkptzipCheckpointIO, load_from_checkpoint  # noqa: E402

CONFIG = ckptzip.CompressionConfig(min_numel=256)
TOLERANCE = 0.05


class Regressor(pl.LightningModule):
    def __init__(
        self,
        hidden: int = 64,
        lr: float = 1e-2,
        name: str = "mlp",
        betas: tuple[float, float] = (0.9, 0.99),
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
        )
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, betas=self.hparams.betas)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.8)
        return [opt], [sched]

    def train_dataloader(self) -> Any:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(128, 16, generator=g)
        y = (x[:, :4].sum(1, keepdim=True)).tanh()
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)


class Counter(Callback):
    """A callback with state: the number of batches it has seen over the whole run."""

    def __init__(self) -> None:
        self.seen = 0

    def on_train_batch_end(self, *args: Any) -> None:
        self.seen += 1

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "note": "batches"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen = state["seen"]


def _trainer(root: Path, epochs: int, io: Any, counter: Counter) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[io],
        callbacks=[
            ModelCheckpoint(dirpath=root, save_top_k=-1, every_n_epochs=1, save_last=True),
            counter,
        ],
    )


@pytest.mark.slow
@pytest.mark.parametrize("asynchronous", [False, True])
def test_resume_and_load_from_checkpoint(tmp_path: Path, asynchronous: bool) -> None:
    def plugin() -> Any:
        io = CkptzipCheckpointIO(CONFIG)
        return AsyncCheckpointIO(io) if asynchronous else io

    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    pl.seed_everything(0)
    whole = Regressor(hidden=64, name="whole")
    _trainer(tmp_path / "whole", 4, plugin(), Counter()).fit(whole)
    reference = whole.losses[8:]  # epochs 3 and 4 (4 batches an epoch)

    pl.seed_everything(0)
    first = Regressor(hidden=64, name="whole")
    _trainer(tmp_path / "run", 2, plugin(), Counter()).fit(first)
    ckpt = tmp_path / "run" / "epoch=1-step=8.ckpt"
    assert ckpt.exists() and (tmp_path / "run" / "last.ckpt").exists()
    assert ckptzip.api.read_manifest(ckpt).tensors  # a ckptzip file under Lightning's name

    pl.seed_everything(1)  # the live state is gone: another initialisation
    resumed = Regressor(hidden=64, name="whole")
    counter = Counter()
    trainer = _trainer(tmp_path / "run", 4, plugin(), counter)
    trainer.fit(resumed, ckpt_path=ckpt)
    assert trainer.current_epoch == 4 and counter.seen == 16  # the callback's state came back
    assert len(resumed.losses) == len(reference) == 8
    for ref, got in zip(reference, resumed.losses, strict=True):
        assert abs(got - ref) <= TOLERANCE * abs(ref), (reference, resumed.losses)

    model = load_from_checkpoint(Regressor, tmp_path / "run" / "last.ckpt")
    assert dict(model.hparams) == {"hidden": 64, "lr": 1e-2, "name": "whole", "betas": (0.9, 0.99)}
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert (a - b).norm() <= 0.2 * b.norm()
    state = CkptzipCheckpointIO().load_checkpoint(tmp_path / "run" / "last.ckpt")
    callbacks = state["callbacks"]
    assert {"seen": 16, "note": "batches"} in callbacks.values()
    best = next(v for k, v in callbacks.items() if k.startswith("ModelCheckpoint"))
    assert best["dirpath"] == str(tmp_path / "run")


def test_unstorable_hyper_parameter_names_its_key(tmp_path: Path) -> None:
    io = CkptzipCheckpointIO()
    with pytest.raises(ckptzip.UnsupportedValueError, match="hyper_parameters/path"):
        io.save_checkpoint({"hyper_parameters": {"path": tmp_path}}, tmp_path / "c.ckpt")
    io.save_checkpoint({"hyper_parameters": {"lr": 0.1}, "epoch": 2}, tmp_path / "c.ckpt")
    assert io.load_checkpoint(tmp_path / "c.ckpt") == {"hyper_parameters": {"lr": 0.1}, "epoch": 2}
    io.remove_checkpoint(tmp_path / "c.ckpt")
    assert not (tmp_path / "c.ckpt").exists()
