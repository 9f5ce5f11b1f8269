"""ckptzip.integrations.lightning: ModelCheckpoint, resume, load_from_checkpoint, async saves,
under both Lightning packages (``pytorch_lightning`` and the unified ``lightning``)."""

from __future__ import annotations

import functools
import importlib
import pickle
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import ckptzip

try:
    from ckptzip.integrations.lightning import (
        PACKAGES,
        CkptzipCheckpointIO,
        CkptzipLoading,
        is_ckptzip_file,
        load_from_checkpoint,
    )
except ImportError:  # neither pytorch_lightning nor lightning
    pytest.skip("needs ckptzip[lightning]", allow_module_level=True)

# Rounded to nearest at quant's 16 levels everywhere: this module checks the plugin's plumbing
# (resume, callbacks, hparams) and that the resumed losses follow the uninterrupted run step by
# step within TOLERANCE. The defaults for files standing alone perturb one restore of this
# 64-wide regressor more, in exchange for no drift over many restores, which the fault-tolerant
# benchmark measures (README, "Files standing alone"): the stochastic rounding's first resumed
# loss came 7 % below the reference's; the standalone levels (8 for the first moment) ran
# 1-5 % ahead of it for all 8 resumed steps (16 first-moment levels: within 2 %).
CONFIG = ckptzip.CompressionConfig(min_numel=256, rounding="nearest", standalone=None)
TOLERANCE = 0.05


@functools.cache
def flavour(package: str) -> SimpleNamespace:
    """The test's module, callback and Lightning classes from ``package`` (skip if absent)."""
    pl = pytest.importorskip(package)
    callbacks = importlib.import_module(f"{package}.callbacks")
    plugins = importlib.import_module(f"{package}.plugins.io")

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
            data = torch.utils.data.TensorDataset(x, y)
            return torch.utils.data.DataLoader(data, batch_size=32)

    class Counter(callbacks.Callback):
        """A callback with state: the number of batches it has seen over the whole run."""

        def __init__(self) -> None:
            self.seen = 0

        def on_train_batch_end(self, *args: Any) -> None:
            self.seen += 1

        def state_dict(self) -> dict[str, Any]:
            return {"seen": self.seen, "note": "batches"}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.seen = state["seen"]

    return SimpleNamespace(
        pl=pl,
        Regressor=Regressor,
        Counter=Counter,
        ModelCheckpoint=callbacks.ModelCheckpoint,
        AsyncCheckpointIO=plugins.AsyncCheckpointIO,
    )


def _trainer(f: SimpleNamespace, root: Path, epochs: int, io: Any, counter: Any) -> Any:
    return f.pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[io],
        callbacks=[
            f.ModelCheckpoint(dirpath=root, save_top_k=-1, every_n_epochs=1, save_last=True),
            counter,
        ],
    )


@pytest.mark.slow
@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("package", ["pytorch_lightning", "lightning.pytorch"])
def test_resume_and_load_from_checkpoint(tmp_path: Path, package: str, asynchronous: bool) -> None:
    f = flavour(package)
    Regressor, Counter, pl = f.Regressor, f.Counter, f.pl

    def plugin() -> Any:
        io = CkptzipCheckpointIO(CONFIG)
        return f.AsyncCheckpointIO(io) if asynchronous else io

    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    pl.seed_everything(0)
    whole = Regressor(hidden=64, name="whole")
    _trainer(f, tmp_path / "whole", 4, plugin(), Counter()).fit(whole)
    reference = whole.losses[8:]  # epochs 3 and 4 (4 batches an epoch)

    pl.seed_everything(0)
    first = Regressor(hidden=64, name="whole")
    _trainer(f, tmp_path / "run", 2, plugin(), Counter()).fit(first)
    ckpt = tmp_path / "run" / "epoch=1-step=8.ckpt"
    assert ckpt.exists() and (tmp_path / "run" / "last.ckpt").exists()
    assert ckptzip.api.read_manifest(ckpt).tensors  # a ckptzip file under Lightning's name

    pl.seed_everything(1)  # the live state is gone: another initialisation
    resumed = Regressor(hidden=64, name="whole")
    counter = Counter()
    trainer = _trainer(f, tmp_path / "run", 4, plugin(), counter)
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


def test_one_plugin_class_for_every_installed_package() -> None:
    io = CkptzipCheckpointIO()
    for package in ("pytorch_lightning", "lightning.pytorch"):
        try:
            base = importlib.import_module(f"{package}.plugins.io").CheckpointIO
        except ImportError:
            assert package not in PACKAGES
            continue
        assert package in PACKAGES and isinstance(io, base)


@pytest.mark.parametrize("package", ["pytorch_lightning", "lightning.pytorch"])
def test_module_load_from_checkpoint_reads_ckptzip_files(tmp_path: Path, package: str) -> None:
    f = flavour(package)

    class Loadable(CkptzipLoading, f.Regressor):  # type: ignore[misc,name-defined]
        pass

    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    f.pl.seed_everything(0)
    model = Loadable(hidden=32, name="mixed")
    _trainer(f, tmp_path, 1, CkptzipCheckpointIO(CONFIG), f.Counter()).fit(model)
    last = tmp_path / "last.ckpt"
    assert is_ckptzip_file(last)
    # what Lightning alone does with a ckptzip file (the module docstring quotes it)
    with pytest.raises(pickle.UnpicklingError, match="Unsupported operand 67"):
        f.Regressor.load_from_checkpoint(last)
    got = Loadable.load_from_checkpoint(last, map_location="cpu")
    assert type(got) is Loadable and got.hparams["name"] == "mixed"
    for a, b in zip(got.parameters(), model.parameters(), strict=True):
        assert (a - b).norm() <= 0.2 * b.norm()
    plain = tmp_path / "plain.ckpt"  # Lightning's own files go through unchanged
    torch.save(CkptzipCheckpointIO().load_checkpoint(last), plain)
    assert not is_ckptzip_file(plain)
    again = Loadable.load_from_checkpoint(plain)
    for a, b in zip(again.parameters(), got.parameters(), strict=True):
        assert torch.equal(a, b)
