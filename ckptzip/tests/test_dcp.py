"""ckptzip.dcp under torch.distributed.checkpoint: FSDP2 on gloo, CPU, 2 and 4 processes."""

from __future__ import annotations

import io
import json
import os
import pickle
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import ckptzip
from ckptzip import api
from ckptzip.dcp import METADATA_NAME, Reader, Writer, rank_file_name

# Small enough to be quick, large enough that every weight shard on 4 ranks is quantized.
CONFIG = ckptzip.CompressionConfig(min_numel=256)
TOLERANCE = 0.05


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(task: str, world: int, tmp: Path) -> None:
    mp.spawn(_entry, args=(world, _free_port(), task, str(tmp)), nprocs=world, join=True)


def _entry(rank: int, world: int, port: int, task: str, tmp: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        {"train": _train, "save": _save, "load": _load}[task](rank, world, Path(tmp))
        # Every rank reaches teardown before any rank leaves: gloo aborts a process
        # ("terminate called without an active exception") whose peer closed the
        # connection while its own group was still being torn down.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _model(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 32))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int, rank: int) -> float:
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own batch
    x = torch.randn(64, 32, generator=g)
    y = torch.sin(x)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    total = loss.detach().clone()
    dist.all_reduce(total)
    return float(total) / dist.get_world_size()


def _state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd, "step": 6}


def _restore(model: torch.nn.Module, opt: torch.optim.Optimizer, path: Path) -> dict[str, Any]:
    state = _state(model, opt)
    dcp.load(state, storage_reader=Reader(path))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return state


def _train(rank: int, world: int, tmp: Path) -> None:
    model, opt = _model(0)
    for step in range(4):
        _step(model, opt, step, rank)
    dcp.save(_state(model, opt), storage_writer=Writer(tmp / "step4", config=CONFIG, threads=1))
    for step in range(4, 6):
        _step(model, opt, step, rank)
    writer = Writer(tmp / "step6", config=CONFIG, parent=tmp / "step4", threads=1)
    dcp.async_save(_state(model, opt), storage_writer=writer).result()
    reference = [_step(model, opt, step, rank) for step in range(6, 10)]

    model, opt = _model(1)  # the live state is gone: another initialisation
    state = _restore(model, opt, tmp / "step6")
    resumed = [_step(model, opt, step, rank) for step in range(6, 10)]
    if rank == 0:
        out = {"reference": reference, "resumed": resumed, "step": state["step"]}
        (tmp / "losses.json").write_text(json.dumps(out))


def _full(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Every tensor of a state dict, gathered whole, by its DCP FQN."""
    out: dict[str, torch.Tensor] = {}

    def walk(x: Any, path: str) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(x, DTensor):
            out[path] = x.full_tensor()
        elif isinstance(x, torch.Tensor):
            out[path] = x.clone()

    walk(state, "")
    return out


def _read_whole(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint, assembled whole by DCP in this one process."""
    metadata = Reader(path).read_metadata()
    whole = {
        fqn: torch.empty(md.size, dtype=md.properties.dtype)
        for fqn, md in metadata.state_dict_metadata.items()
        if isinstance(md, TensorStorageMetadata)
    }
    dcp.load(whole, storage_reader=Reader(path), no_dist=True)
    return whole


def _save(rank: int, world: int, tmp: Path) -> None:
    model, opt = _model(0)
    for step in range(3):
        _step(model, opt, step, rank)
    dcp.save(_state(model, opt), storage_writer=Writer(tmp / "ckpt", config=CONFIG, threads=1))


def _load(rank: int, world: int, tmp: Path) -> None:
    model, opt = _model(2)
    full = _full(_restore(model, opt, tmp / "ckpt"))
    if rank == 0:
        reference = torch.load(tmp / "reference.pt")
        assert sorted(full) == sorted(reference)
        for k, v in reference.items():
            assert torch.equal(full[k], v), k


@pytest.mark.slow
def test_fsdp2_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    world = 2  # 4 processes run in the reshard test
    _spawn("train", world, tmp_path)
    losses = json.loads((tmp_path / "losses.json").read_text())
    assert losses["step"] == 6  # a plain value round-trips through DCP's byte items
    for ref, got in zip(losses["reference"], losses["resumed"], strict=True):
        assert abs(got - ref) <= TOLERANCE * abs(ref), losses
    for rank in range(world):
        full = api.read_manifest(tmp_path / "step4" / rank_file_name(rank))
        delta = api.read_manifest(tmp_path / "step6" / rank_file_name(rank))
        assert full.parent is None and delta.parent is not None
        assert any(e.codec == "quant" for e in full.tensors)
        assert any(e.codec == "delta" for e in delta.tensors)
    # step6 restores on its own: its parents were linked next to it
    for name in os.listdir(tmp_path / "step4"):
        os.unlink(tmp_path / "step4" / name)
    for rank in range(world):
        ckptzip.load(tmp_path / "step6" / rank_file_name(rank))


@pytest.mark.slow
@pytest.mark.parametrize(("saved_on", "loaded_on"), [(4, 2), (2, 4)])
def test_reshard_restores_the_same_values(tmp_path: Path, saved_on: int, loaded_on: int) -> None:
    _spawn("save", saved_on, tmp_path)
    names = sorted(os.listdir(tmp_path / "ckpt"))
    assert names == sorted([METADATA_NAME] + [rank_file_name(r) for r in range(saved_on)])
    reference = _read_whole(tmp_path / "ckpt")  # resharded onto one process
    assert any(
        api.read_manifest(tmp_path / "ckpt" / "__0.ckz").tensors[i].codec == "quant"
        for i in range(3)
    )
    torch.save(reference, tmp_path / "reference.pt")
    _spawn("load", loaded_on, tmp_path)  # the same values, bit for bit, on another world size


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("true",))


def test_metadata_refuses_foreign_pickles(tmp_path: Path) -> None:
    (tmp_path / METADATA_NAME).write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(ckptzip.CorruptCheckpointError, match=r"(posix|os)\.system"):
        Reader(tmp_path).read_metadata()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_single_process_round_trip_with_byte_items(tmp_path: Path) -> None:
    """No process group: DCP runs one rank; byte items (plain values) come back as saved."""
    torch.manual_seed(0)
    state = {"w": torch.randn(64, 128), "step": torch.tensor(3), "extra": {"lr": 0.1, "n": [1, 2]}}
    dcp.save(state, storage_writer=Writer(tmp_path / "c", config=CONFIG), no_dist=True)
    out = {"w": torch.zeros(64, 128), "step": torch.tensor(0), "extra": {"lr": 0.0, "n": []}}
    dcp.load(out, storage_reader=Reader(tmp_path / "c"), no_dist=True)
    assert out["extra"] == {"lr": 0.1, "n": [1, 2]} and int(out["step"]) == 3
    err = (out["w"] - state["w"]).norm() / state["w"].norm()
    assert 0 < float(err) < 0.2  # quantized, with the default 16 bins
    with pytest.raises(CheckpointException, match="CheckpointExistsError"):
        dcp.save(state, storage_writer=Writer(tmp_path / "c"), no_dist=True)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_strict_bytes_refuses_pickled_objects(tmp_path: Path) -> None:
    state = {"obj": io.BytesIO(pickle.dumps(_Evil()))}
    dcp.save(state, storage_writer=Writer(tmp_path / "c"), no_dist=True)
    with pytest.raises(CheckpointException, match="weights_only"):
        dcp.load({"obj": io.BytesIO()}, storage_reader=Reader(tmp_path / "c"), no_dist=True)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_delta_chain_keyframes_and_unfinished_parents(tmp_path: Path) -> None:
    torch.manual_seed(0)
    w = torch.randn(64, 128)
    kinds = []
    for step in range(4):
        parent = tmp_path / f"s{step - 1}" if step else None
        writer = Writer(tmp_path / f"s{step}", config=CONFIG, parent=parent, keyframe_every=3)
        dcp.save({"w": w + 0.01 * step}, storage_writer=writer, no_dist=True)
        kinds.append(api.read_manifest(tmp_path / f"s{step}" / "__0.ckz").parent is not None)
    assert kinds == [False, True, True, False]  # a full file every 3
    out = {"w": torch.zeros(64, 128)}
    dcp.load(out, storage_reader=Reader(tmp_path / "s2"), no_dist=True)
    assert float((out["w"] - w - 0.02).norm() / w.norm()) < 0.2
    os.unlink(tmp_path / "s3" / METADATA_NAME)  # as if that save had been killed
    dcp.save({"w": w}, storage_writer=Writer(tmp_path / "s4", parent=tmp_path / "s3"), no_dist=True)
    assert api.read_manifest(tmp_path / "s4" / "__0.ckz").parent is None
