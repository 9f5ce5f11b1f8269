"""ckptzip.dcp under torch.distributed.checkpoint: FSDP2 on gloo, CPU, 2 and 4 processes (a
model with tied weights); the JSON metadata under attack; tied and shared tensors."""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import io
import itertools
import json
import os
import pickle
import re
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from _attack import scaled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed.checkpoint import FileSystemWriter, Metadata
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import WriteItemType
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.storage import WriteResult
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import ckptzip
from ckptzip import api
from ckptzip.dcp import METADATA_NAME, Reader, Writer, _metadata_bytes, rank_file_name

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
        {"train": _train, "save": _save, "load": _load, "probe": _probe}[task](
            rank, world, Path(tmp)
        )
        dist.barrier()  # every rank is done with the group before any destroys it
    finally:
        dist.destroy_process_group()
    _leave()


def _leave() -> NoReturn:
    """End a rank that finished cleanly without the interpreter's teardown.

    Under FSDP2 ``destroy_process_group`` does not free the gloo group: DTensor's sharding
    caches hold ``DeviceMesh`` objects, whose ``_pg_registry`` holds the ``ProcessGroup``, so
    its C++ threads (two gloo workers, gloo's TCP loop, rank 0's TCPStore server) still run
    after it (listed in ``/proc/self/task``; a plain group without DTensors has none left).
    They were then torn down inside the interpreter's finalization, while the peers exit too,
    and a rank died there now and then with SIGABRT, "terminate called without an active
    exception" (seen once in CI; the same abort torch reports for a group never destroyed).
    Nothing is left to run at that point: leave before it. A failing rank still raises
    (``mp.spawn`` reports its traceback) and takes the ordinary exit.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _probe(rank: int, world: int, tmp: Path) -> None:
    atexit.register((tmp / f"teardown{rank}").touch)  # runs only in the interpreter's teardown


class _TiedMLP(torch.nn.Module):
    """An MLP whose input projection and output head are one weight, tied as GPT-2 ties its
    embedding and ``lm_head`` (``head.weight is emb.weight``): both names in the state dict."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(32, 256)  # used as a dense input projection
        torch.nn.init.normal_(self.emb.weight, std=32**-0.5)
        self.mid = torch.nn.Linear(256, 256)
        self.head = torch.nn.Linear(256, 32, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.mid(torch.relu(x @ self.emb.weight))))


def _model(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = _TiedMLP()
    fully_shard(model.mid)  # the tied pair stays in the root's group, as FSDP2 requires
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
    assert model.head.weight is model.emb.weight  # type: ignore[union-attr]
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
        assert torch.equal(full["model.head.weight"], full["model.emb.weight"])


@pytest.mark.slow
def test_fsdp2_tied_model_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
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
        for manifest in (full, delta):  # the tied head is its embedding's entry, saved once
            paths = [e.path for e in manifest.tensors]
            assert "model/emb.weight" in paths and "model/head.weight" not in paths
    # step6 restores on its own: its parents were linked next to it
    for name in os.listdir(tmp_path / "step4"):
        os.unlink(tmp_path / "step4" / name)
    for rank in range(world):
        ckptzip.load(tmp_path / "step6" / rank_file_name(rank))


@pytest.mark.slow
def test_spawned_ranks_leave_before_the_interpreter_teardown(tmp_path: Path) -> None:
    """The ranks of these tests end once their group is destroyed, without the teardown in
    which FSDP2's surviving gloo threads aborted a rank (see ``_leave``): an ``atexit``
    handler a rank registers never runs."""
    _spawn("probe", 2, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize(("saved_on", "loaded_on"), [(4, 2), (2, 4)])
def test_fsdp2_tied_model_reshard_restores_the_same_values(
    tmp_path: Path, saved_on: int, loaded_on: int
) -> None:
    _spawn("save", saved_on, tmp_path)
    names = sorted(os.listdir(tmp_path / "ckpt"))
    assert names == sorted([METADATA_NAME] + [rank_file_name(r) for r in range(saved_on)])
    reference = _read_whole(tmp_path / "ckpt")  # resharded onto one process
    assert any(
        api.read_manifest(tmp_path / "ckpt" / "__0.ckz").tensors[i].codec == "quant"
        for i in range(3)
    )
    for rank in range(saved_on):  # the tied head is saved once, as its embedding
        assert "model/head.weight" not in _stored_paths(tmp_path / "ckpt" / rank_file_name(rank))
    torch.save(reference, tmp_path / "reference.pt")
    _spawn("load", loaded_on, tmp_path)  # the same values, bit for bit, on another world size


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("true",))


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
def test_reader_threads_decode_the_same_values(tmp_path: Path) -> None:
    torch.manual_seed(0)
    state = {f"w{i}": torch.randn(256, 512) for i in range(3)}
    dcp.save(state, storage_writer=Writer(tmp_path, config=CONFIG, threads=2), no_dist=True)
    loaded = []
    for threads in (None, 1, 3):
        out = {k: torch.zeros_like(v) for k, v in state.items()}
        dcp.load(out, storage_reader=Reader(tmp_path, threads=threads), no_dist=True)
        loaded.append(out)
    for out in loaded[1:]:
        assert all(torch.equal(out[k], loaded[0][k]) for k in state)
    assert not torch.equal(loaded[0]["w0"], torch.zeros(256, 512))
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ckptzip.ConfigError, match="threads"):
            Reader(tmp_path, threads=bad)  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_strict_bytes_refuses_pickled_objects(tmp_path: Path) -> None:
    state = {"obj": io.BytesIO(pickle.dumps(_Evil()))}
    dcp.save(state, storage_writer=Writer(tmp_path / "c"), no_dist=True)
    with pytest.raises(CheckpointException, match="weights_only"):
        dcp.load({"obj": io.BytesIO()}, storage_reader=Reader(tmp_path / "c"), no_dist=True)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_an_unfinished_directory_says_its_save_did_not_finish(tmp_path: Path) -> None:
    # a save killed before DCP wrote .metadata: the reader says so, not only "no checkpoint
    # at .../.metadata" (which torch wraps in an AssertionError of its own)
    dcp.save({"w": torch.randn(64)}, storage_writer=Writer(tmp_path / "s"))
    (tmp_path / "s" / METADATA_NAME).unlink()
    with pytest.raises(ckptzip.errors.CheckpointNotFoundError, match="did not finish"):
        Reader(tmp_path / "s").read_metadata()
    with pytest.raises(CheckpointException) as info:
        dcp.load({"w": torch.zeros(64)}, storage_reader=Reader(tmp_path / "s"))
    assert "did not finish" in str(info.value.failures[0]), info.value.failures


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


def test_delta_weights_carry_error_feedback_and_moments_stay_bin_index_deltas(
    tmp_path: Path,
) -> None:
    # the default, as CheckpointManager's: a weight shard of a delta is its change against the
    # parent's reconstruction (what the parent's quantization left is corrected), the moments
    # bin-index deltas; error_feedback=False gives bin-index deltas of every shard
    torch.manual_seed(0)
    w, m, v = torch.randn(64, 128), torch.randn(64, 128) * 1e-3, torch.rand(64, 128) * 1e-6
    steps = [
        {"model/w": w + 0.01 * k, "optim/state/w/exp_avg": m * 0.9**k,
         "optim/state/w/exp_avg_sq": v * 0.99**k}
        for k in range(3)
    ]  # fmt: skip
    codecs: dict[bool, dict[str, str]] = {}
    errors: dict[bool, float] = {}
    for feedback in (True, False):
        d = tmp_path / str(feedback)
        for k, state in enumerate(steps):
            parent = d / f"s{k - 1}" if k else None
            writer = Writer(d / f"s{k}", config=CONFIG, parent=parent, error_feedback=feedback)
            dcp.save(dict(state), storage_writer=writer, no_dist=True)
        entries = api.read_manifest(d / "s2" / "__0.ckz").tensors
        codecs[feedback] = {e.path: e.codec for e in entries}
        out = {key: torch.zeros_like(t) for key, t in steps[2].items()}
        dcp.load(out, storage_reader=Reader(d / "s2"), no_dist=True)
        want = steps[2]["model/w"]
        errors[feedback] = float((out["model/w"] - want).norm() / want.norm())
    assert codecs[True]["model/w"] == "residual"
    assert codecs[True]["optim/state/w/exp_avg_sq"] == "delta"
    assert "residual" not in codecs[False].values()
    assert errors[True] < errors[False]  # 4 levels of change against 16 of the values
    with pytest.raises(ckptzip.ConfigError, match="error_feedback"):
        Writer(tmp_path / "x", error_feedback=1)  # type: ignore[arg-type]


# --- DCP files are held to the same rules: no pickle read from a checkpoint -----------------

GOLDEN_DCP = Path(__file__).parent / "golden" / "dcp"
_spec = importlib.util.spec_from_file_location("make_dcp_golden", GOLDEN_DCP / "make_dcp_golden.py")
assert _spec is not None and _spec.loader is not None
make_dcp_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_dcp_golden)

GOLDEN_SHA256 = {
    "json_v1/.metadata": "f54178eb598851e2e80d2a86684da95edd45a4cede77fd7c2198cbf4f96d2ff3",
    "json_v1/__0.ckz": "ddbd8a7e8cbe42ea3d74b3279010694782c634465fabdf2160b1730b6a103a48",
    "legacy_pickle/.metadata": "c5f928c07a6faa8779d367ee87992b4f9d2847b3ebf0f2418cffd0373f356fea",
    "legacy_pickle/__0.ckz": "ddbd8a7e8cbe42ea3d74b3279010694782c634465fabdf2160b1730b6a103a48",
}


class _Call:
    """Pickles as a call of ``fn(*args)``, the way an attacker's object does."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.fn, self.args)


def _global_call(module: str, name: str, arg: str, proto: int, *, stack: bool) -> bytes:
    """A hand-made pickle calling ``module.name(arg)``, the name looked up as written (dotted
    names resolve through attributes under protocol >= 4): GLOBAL or STACK_GLOBAL."""
    head = bytes([0x80, proto]) if proto >= 2 else b""
    if stack:
        m, n = module.encode(), name.encode()
        ref = b"\x8c" + bytes([len(m)]) + m + b"\x8c" + bytes([len(n)]) + n + b"\x93"
    else:
        ref = b"c" + module.encode() + b"\n" + name.encode() + b"\n"
    return head + ref + b"(V" + arg.encode() + b"\ntR."


_DOTTED_VIA = [  # modules a ckptzip metadata names, each importing os somewhere under it
    ("torch.distributed.checkpoint.metadata", "os.system"),
    ("torch", "serialization.os.system"),
    ("torch.serialization", "os.system"),
    ("torch", "distributed.checkpoint.metadata.os.system"),
]


def _payloads(canary: Path, proto: int) -> dict[str, tuple[bytes, bool]]:
    """Attack pickles at one protocol: name -> (bytes, whether plain ``pickle.loads`` runs it)."""
    cmd = f"touch {canary}"
    code = f"open({str(canary)!r}, 'w').close()"
    legit = Metadata(
        state_dict_metadata={"x": BytesStorageMetadata()},
        storage_data={MetadataIndex("x"): ("__0.ckz", "x")},
        storage_meta=StorageMeta(checkpoint_id=_Call(os.system, cmd)),  # type: ignore[arg-type]
    )
    out = {
        "os.system": (pickle.dumps(_Call(os.system, cmd), protocol=proto), True),
        "builtins.exec": (pickle.dumps(_Call(exec, code), protocol=proto), True),
        "posix.system": (_global_call("posix", "system", cmd, proto, stack=False), True),
        "inside real Metadata": (pickle.dumps(legit, protocol=proto), True),
    }
    for module, name in _DOTTED_VIA:
        out[f"GLOBAL {module} {name}"] = (
            _global_call(module, name, cmd, proto, stack=False),
            proto >= 4,
        )
        if proto >= 4:
            out[f"STACK_GLOBAL {module} {name}"] = (
                _global_call(module, name, cmd, proto, stack=True),
                True,
            )
    return out


def _attack_cases() -> list[tuple[str, int]]:
    return [(name, proto) for proto in range(6) for name in _payloads(Path("c"), proto)]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize(("payload", "proto"), _attack_cases())
def test_dcp_metadata_pickle_attack_never_runs(tmp_path: Path, payload: str, proto: int) -> None:
    """A crafted ``.metadata`` never runs: not through ``read_metadata``, not through
    ``dcp.load``, with or without ``allow_pickled_metadata``, at any pickle protocol."""
    canary = tmp_path / "canary"
    raw, live = _payloads(canary, proto)[payload]
    if live:  # the payload is real: a plain unpickler runs it
        pickle.loads(raw)
        assert canary.exists(), payload
        canary.unlink()
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / METADATA_NAME).write_bytes(raw)
    for allow in (False, True):
        with pytest.raises(Exception) as info:
            Reader(d, allow_pickled_metadata=allow).read_metadata()
        assert not canary.exists(), ("read_metadata ran it", payload, allow)
        assert isinstance(info.value, ckptzip.CorruptCheckpointError), info.value
        assert str(d) in str(info.value)  # the error names the file
        if not allow:
            assert isinstance(info.value, ckptzip.UnsupportedFormatError)
            assert "allow_pickled_metadata=True" in str(info.value)
        with pytest.raises((CheckpointException, AssertionError)) as info:
            dcp.load(
                {"x": torch.zeros(1)},
                storage_reader=Reader(d, allow_pickled_metadata=allow),
                no_dist=True,
            )
        assert not canary.exists(), ("dcp.load ran it", payload, allow)
        assert "metadata" in str(info.value)


def _trusted_unpickle(path: Path) -> Metadata:
    """A golden file made by this test suite's own script: trusted, for comparison only."""
    md = pickle.loads(path.read_bytes())
    assert isinstance(md, Metadata)
    return md


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("name", ["json_v1", "legacy_pickle"])
def test_dcp_golden_directories_restore_exactly(name: str) -> None:
    """Committed DCP directories (JSON metadata v1; the pickled metadata of ckptzip before it)
    restore bit for bit; the pickled one only when asked for."""
    for rel, sha in GOLDEN_SHA256.items():
        assert hashlib.sha256((GOLDEN_DCP / rel).read_bytes()).hexdigest() == sha, rel
    d = GOLDEN_DCP / name
    legacy = name == "legacy_pickle"
    if legacy:
        with pytest.raises(ckptzip.UnsupportedFormatError, match="allow_pickled_metadata=True"):
            Reader(d).read_metadata()
        md = Reader(d, allow_pickled_metadata=True).read_metadata()
        assert md == _trusted_unpickle(d / METADATA_NAME)
    want = make_dcp_golden.state(name)
    out = {
        "model": {k: torch.zeros_like(v) for k, v in want["model"].items()},
        "step": 0,
        "extra": {"lr": 0.0, "betas": []},
    }
    dcp.load(out, storage_reader=Reader(d, allow_pickled_metadata=legacy), no_dist=True)
    assert out["step"] == want["step"] and out["extra"] == want["extra"]
    for k, v in want["model"].items():
        assert out["model"][k].dtype == v.dtype and torch.equal(out["model"][k], v), k


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_dcp_pickled_metadata_directory_saved_again_has_json_metadata(tmp_path: Path) -> None:
    """What the refusal message says to do: load with allow_pickled_metadata, save again."""
    want = make_dcp_golden.state("legacy_pickle")
    state = {
        "model": {k: torch.zeros_like(v) for k, v in want["model"].items()},
        "step": 0,
        "extra": {"lr": 0.0, "betas": []},
    }
    old = Reader(GOLDEN_DCP / "legacy_pickle", allow_pickled_metadata=True)
    dcp.load(state, storage_reader=old, no_dist=True)
    dcp.save(state, storage_writer=Writer(tmp_path / "new"), no_dist=True)
    assert json.loads((tmp_path / "new" / METADATA_NAME).read_bytes())["version"] == 1
    out = {"model": {k: torch.zeros_like(v) for k, v in want["model"].items()}, "step": 0}
    out["extra"] = {"lr": 0.0, "betas": []}
    dcp.load(out, storage_reader=Reader(tmp_path / "new"), no_dist=True)
    assert out["step"] == 7 and out["extra"] == want["extra"]
    assert all(torch.equal(out["model"][k], v) for k, v in want["model"].items())


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_dcp_metadata_is_json_and_round_trips_a_real_save(tmp_path: Path) -> None:
    """What the Writer hands DCP's ``Metadata`` to is JSON, and reads back equal to it
    (model + Adam state, byte items, bf16, a channels-last tensor, a 0-d tensor)."""
    seen: list[Metadata] = []

    class Spy(Writer):
        def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
            super().finish(metadata, results)
            seen.append(metadata)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(16, 2)
    )
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 3, 4, 4)).sum().backward()
    opt.step()
    state = {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "half": torch.randn(5).to(torch.bfloat16),
        "cl": torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
        "scalar": torch.tensor(1.5),
        "step": 3,
    }
    dcp.save(state, storage_writer=Spy(tmp_path / "c", config=CONFIG), no_dist=True)
    raw = (tmp_path / "c" / METADATA_NAME).read_bytes()
    doc = json.loads(raw)
    assert doc["format"] == "ckptzip.dcp.metadata" and doc["version"] == 1
    assert b"\x80" not in raw  # no pickle opcode anywhere
    assert Reader(tmp_path / "c").read_metadata() == seen[0]


def test_dcp_native_file_system_writer_dirs_are_refused_with_the_reader_to_use(
    tmp_path: Path,
) -> None:
    """A ``FileSystemWriter`` checkpoint is not ckptzip's: both modes name FileSystemReader
    (the pickled-metadata mode stops at DCP's ``_StorageInfo`` before building anything)."""
    with pytest.warns(UserWarning):
        dcp.save({"w": torch.ones(3)}, storage_writer=FileSystemWriter(tmp_path), no_dist=True)
    for allow in (False, True):
        with pytest.raises(ckptzip.UnsupportedFormatError, match="FileSystemReader"):
            Reader(tmp_path, allow_pickled_metadata=allow).read_metadata()


def _golden_doc() -> dict[str, Any]:
    return json.loads((GOLDEN_DCP / "json_v1" / METADATA_NAME).read_text())


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


_W = ("state_dict", "model.emb.weight")
_MALFORMED: dict[str, Any] = {  # one hand-made document per rule the reader checks
    "chunk outside its tensor": lambda d: _set(d, (*_W, "chunks"), [[[0, 1], [12, 4]]]),
    "chunk of another rank": lambda d: _set(d, (*_W, "chunks"), [[[0], [12]]]),
    "negative size": lambda d: _set(d, (*_W, "size"), [-12, 4]),
    "bool as a size": lambda d: _set(d, (*_W, "size"), [True, 4]),
    "float as a size": lambda d: _set(d, (*_W, "size"), [12.0, 4]),
    "unknown dtype": lambda d: _set(d, (*_W, "dtype"), "os.system"),
    "unknown field": lambda d: _set(d, (*_W, "extra"), 1),
    "missing field": lambda d: (d["state_dict"]["model.emb.weight"].pop("chunks"), d)[1],
    "unknown item type": lambda d: _set(d, (*_W, "type"), "object"),
    "storage offset no chunk has": lambda d: _set(d, ("storage_data", 0, 1), [1, 0]),
    "storage of an unknown FQN": lambda d: _set(d, ("storage_data", 0, 0), "nope"),
    "file outside the directory": lambda d: _set(d, ("storage_data", 0, 3), "../x.ckz"),
    "absolute file": lambda d: _set(d, ("storage_data", 0, 3), "/etc/passwd"),
    "duplicate storage entry": lambda d: _set(d, ("storage_data", 1), d["storage_data"][0]),
    "bytes item with an offset": lambda d: _set(d, ("storage_data", 4, 1), [0]),
    "planner path of floats": lambda d: _set(d, ("planner_data", "step"), [1.5]),
    "storage_meta modules": lambda d: _set(d, ("storage_meta", "modules"), [1]),
    "wrong format": lambda d: _set(d, ("format",), "other"),
    "version 0": lambda d: _set(d, ("version",), 0),
    "top level is a list": lambda d: [d],
}


@pytest.mark.parametrize("case", sorted(_MALFORMED))
def test_dcp_metadata_malformed_documents_are_refused(tmp_path: Path, case: str) -> None:
    (tmp_path / METADATA_NAME).write_text(json.dumps(_MALFORMED[case](_golden_doc())))
    with pytest.raises(ckptzip.CorruptCheckpointError, match=re.escape(str(tmp_path))):
        Reader(tmp_path).read_metadata()


@pytest.mark.parametrize(
    ("raw", "error", "match"),
    [
        (b'{"format": "ckptzip.dcp.metadata", "version": 1, "version": 1}', "corrupt", "repeats"),
        (b'{"format": "ckptzip.dcp.metadata", "version": NaN}', "corrupt", "NaN"),
        (b'{"format": "ckptzip.dcp.metadata", "version": 2}', "unsupported", "upgrade"),
        (b'{"x":' * 100_000 + b"1" + b"}" * 100_000, "corrupt", "JSON"),
        (b'{"format": "\xff"}', "corrupt", "JSON"),
        (b"", "corrupt", "empty"),
        (b"hello", "unsupported", "if it is a pickle"),
    ],
)
def test_dcp_metadata_malformed_bytes_are_refused(
    tmp_path: Path, raw: bytes, error: str, match: str
) -> None:
    (tmp_path / METADATA_NAME).write_bytes(raw)
    errors = {
        "corrupt": ckptzip.CorruptCheckpointError,
        "unsupported": ckptzip.UnsupportedFormatError,
    }
    with pytest.raises(errors[error], match=match):
        Reader(tmp_path).read_metadata()


def test_dcp_metadata_size_is_capped_before_parsing(tmp_path: Path) -> None:
    (tmp_path / METADATA_NAME).write_bytes(b" " * 1001)
    with pytest.raises(ckptzip.DecodeLimitError, match="max_metadata_bytes=1000"):
        Reader(tmp_path, max_metadata_bytes=1000).read_metadata()
    with pytest.raises(ckptzip.ConfigError, match="max_metadata_bytes"):
        Reader(tmp_path, max_metadata_bytes=0)


def test_dcp_metadata_pickle_opcodes_and_memo_are_checked_before_unpickling(
    tmp_path: Path,
) -> None:
    """With ``allow_pickled_metadata``, a far memo slot (which CPython's unpickler would grow
    its memo to) and opcodes a metadata pickle never needs are refused unrun."""
    legacy = (GOLDEN_DCP / "legacy_pickle" / METADATA_NAME).read_bytes()
    cases = {
        "memo": b"\x80\x04N\x94r\xff\xff\xff\x7f.",  # LONG_BINPUT slot 2**31 - 1
        "persistent id": b"\x80\x04\x8c\x01xQ.",
        "extension code": b"\x80\x04\x82\x01.",
        "trailing bytes": legacy + b"junk",
    }
    for name, raw in cases.items():
        (tmp_path / METADATA_NAME).write_bytes(raw)
        with pytest.raises(ckptzip.CorruptCheckpointError) as info:
            Reader(tmp_path, allow_pickled_metadata=True).read_metadata()
        assert "refused pickled DCP metadata" in str(info.value), name


def test_dcp_pickled_metadata_sharing_one_object_many_times_is_refused_fast(
    tmp_path: Path,
) -> None:
    """A pickle can name one object from many places: one chunk list from 20 000 tensors in
    0.3 MB (40 million chunks to walk), one 10^6-long key path from 2 000 FQNs. With
    ``allow_pickled_metadata`` both are refused before the walk."""
    chunks = [ChunkStorageMetadata(torch.Size([i]), torch.Size([1])) for i in range(2000)]
    shared = TensorStorageMetadata(TensorProperties(), torch.Size([2000]), chunks)
    path = tuple(range(10**6))
    cases = {
        "shared": Metadata({f"t{i}": shared for i in range(20_000)}, storage_data={}),
        "over 256": Metadata(
            {}, planner_data={f"t{i}": path for i in range(2000)}, storage_data={}
        ),
    }
    for match, md in cases.items():
        raw = pickle.dumps(md, protocol=4)
        assert len(raw) < 5_000_000
        (tmp_path / METADATA_NAME).write_bytes(raw)
        t0 = time.perf_counter()
        with pytest.raises(ckptzip.CorruptCheckpointError, match=match):
            Reader(tmp_path, allow_pickled_metadata=True).read_metadata()
        assert time.perf_counter() - t0 < 20, match  # 0.25 s, 2.2 s measured at load 14


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in a JSON document, containers included."""
    out = [path] if path else []
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for k, v in items:
        out += _paths(v, (*path, k))
    return out


def _write_doc(directory: Path, doc: Any) -> Path:
    (directory / METADATA_NAME).write_text(json.dumps(doc))
    return directory


_ODD_VALUES = [None, True, -1, 2**64, 1.5, "", "x", [], [1], [[0]], {}, {"a": 1}]


def test_dcp_metadata_every_field_replaced_by_any_json_raises_only_ckptzip_errors(
    tmp_path: Path,
) -> None:
    """Each value of the golden document, at every depth, replaced by each of a dozen JSON
    values of other types: read back, or refused with one of ckptzip's errors."""
    doc = _golden_doc()  # one item of each kind (the others have the same fields)
    keep = ("model.emb.weight", "step")
    doc["state_dict"] = {k: doc["state_dict"][k] for k in keep}
    doc["planner_data"] = {k: doc["planner_data"][k] for k in keep}
    doc["storage_data"] = [e for e in doc["storage_data"] if e[0] in keep]
    Reader(_write_doc(tmp_path, doc)).read_metadata()  # valid as cut
    paths = _paths(doc)
    assert len(paths) > 40
    refused = 0
    for path in paths:
        for value in _ODD_VALUES:
            _write_doc(tmp_path, _set(json.loads(json.dumps(doc)), path, value))
            try:
                Reader(tmp_path).read_metadata()
            except ckptzip.CkptzipError:
                refused += 1
    assert refused > len(paths) * len(_ODD_VALUES) // 2


def _mutations(data: bytes) -> st.SearchStrategy[bytes]:
    """``data`` with a few bytes replaced, inserted or deleted, or cut short."""
    edit = st.tuples(st.integers(0, max(len(data) - 1, 0)), st.integers(0, 255), st.integers(0, 2))

    def apply(edits: list[tuple[int, int, int]], cut: int | None) -> bytes:
        b = bytearray(data)
        for pos, byte, kind in edits:
            pos = min(pos, len(b))
            if kind == 0 and pos < len(b):
                b[pos] = byte
            elif kind == 1:
                b.insert(pos, byte)
            elif pos < len(b):
                del b[pos]
        return bytes(b[:cut])

    return st.builds(
        apply, st.lists(edit, min_size=1, max_size=8), st.none() | st.integers(0, len(data))
    )


_JSON_LEAF = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8)
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def _mutated_documents(draw: st.DrawFn) -> bytes:
    """The golden JSON document with a few of its values (at any depth) replaced."""
    doc: Any = _golden_doc()
    for _ in range(draw(st.integers(1, 3))):
        node, path = doc, []
        while isinstance(node, (dict, list)) and node and draw(st.booleans()):
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            key = draw(st.sampled_from(keys))
            path.append(key)
            node = node[key]
        if path:
            _set(doc, tuple(path), draw(_JSON))
    return json.dumps(doc).encode()


_LEGACY_RAW = (GOLDEN_DCP / "legacy_pickle" / METADATA_NAME).read_bytes()
_JSON_RAW = (GOLDEN_DCP / "json_v1" / METADATA_NAME).read_bytes()


@settings(max_examples=scaled(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raw=st.binary(max_size=512)
    | _mutations(_JSON_RAW)
    | _mutated_documents()
    | _mutations(_LEGACY_RAW),
    allow=st.booleans(),
)
def test_dcp_metadata_reader_fuzz_raises_only_ckptzip_errors(raw: bytes, allow: bool) -> None:
    """Random bytes, mutated real JSON (bytes and values) and mutated real pickled metadata:
    the reader returns DCP ``Metadata`` or raises one of ckptzip's errors, nothing else."""
    with tempfile.TemporaryDirectory() as d:
        Path(d, METADATA_NAME).write_bytes(raw)
        try:
            md = Reader(d, allow_pickled_metadata=allow).read_metadata()
        except ckptzip.CkptzipError:
            return
        assert isinstance(md, Metadata)


_FQN = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)


@st.composite
def _metadata(draw: st.DrawFn) -> Metadata:
    """Realistic DCP metadata: tensors cut into a grid of chunks over files, bytes items,
    DefaultSavePlanner's flattening map and the writer's storage_meta."""
    items: dict[str, Any] = {}
    storage: dict[MetadataIndex, tuple[str, str]] = {}
    for fqn in draw(st.lists(_FQN, min_size=1, max_size=6, unique=True)):
        file = draw(st.sampled_from([rank_file_name(r) for r in range(4)]))
        if draw(st.booleans()):
            items[fqn] = BytesStorageMetadata()
            storage[MetadataIndex(fqn)] = (file, fqn.replace(".", "/"))
            continue
        size = draw(st.lists(st.integers(0, 2**40), max_size=4))
        cuts = [draw(st.integers(1, 3)) if n else 1 for n in size]
        chunks = []
        for cell in itertools.product(*(range(c) for c in cuts)):
            offsets = [n * i // c for n, i, c in zip(size, cell, cuts, strict=True)]
            ends = [n * (i + 1) // c for n, i, c in zip(size, cell, cuts, strict=True)]
            sizes = [e - o for o, e in zip(offsets, ends, strict=True)]
            chunks.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
            index = MetadataIndex(fqn, offsets, draw(st.none() | st.integers(0, 10)))
            storage[index] = (draw(st.sampled_from([rank_file_name(r) for r in range(4)])), fqn)
        properties = TensorProperties(
            dtype=draw(st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.bool])),
            requires_grad=draw(st.booleans()),
            memory_format=draw(st.sampled_from([torch.contiguous_format, torch.channels_last])),
        )
        items[fqn] = TensorStorageMetadata(properties, torch.Size(size), chunks)
    return Metadata(
        state_dict_metadata=items,
        planner_data={k: ("model", *k.split(".")) for k in items} if draw(st.booleans()) else None,
        storage_data=storage,
        storage_meta=draw(st.builds(StorageMeta, checkpoint_id=_FQN, save_id=st.none() | _FQN)),
        version=draw(st.none() | st.just("1.0.0")),
    )


@settings(max_examples=scaled(150), deadline=None)
@given(md=_metadata())
def test_dcp_metadata_json_round_trip(md: Metadata) -> None:
    """The JSON form rebuilds DCP's ``Metadata`` equal to the one written, index hints included."""
    with tempfile.TemporaryDirectory() as d:
        Path(d, METADATA_NAME).write_bytes(_metadata_bytes(md))
        got = Reader(d).read_metadata()
    assert got == md
    assert [i.index for i in got.storage_data] == [i.index for i in md.storage_data]
    assert got.planner_data == md.planner_data  # tuples, as DCP's planner made them


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_dcp_byte_items_reach_the_planner_only_as_bytes_ckptzip_made(tmp_path: Path) -> None:
    """DCP's planner unpickles byte items unrestricted: it is handed the value that
    ``weights_only=True`` loaded, saved again, never the bytes in the checkpoint."""
    stored: list[bytes] = []

    class LegacySave(dcp.DefaultSavePlanner):
        def transform_object(self, write_item: Any, object: Any) -> Any:
            if write_item.type != WriteItemType.BYTE_IO:
                return super().transform_object(write_item, object)
            b = io.BytesIO()
            torch.save(object, b, _use_new_zipfile_serialization=False)  # not what DCP writes
            stored.append(b.getvalue())
            return b

    class Spy(dcp.DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            handed.append(value.getvalue())
            super().load_bytes(read_item, io.BytesIO(handed[-1]))

    handed: list[bytes] = []
    dcp.save({"lr": 0.5}, storage_writer=Writer(tmp_path), planner=LegacySave(), no_dist=True)
    out: dict[str, Any] = {"lr": 0.0}
    dcp.load(out, storage_reader=Reader(tmp_path), planner=Spy(), no_dist=True)
    assert out == {"lr": 0.5}
    assert len(handed) == 1 and len(stored) == 1 and handed[0] != stored[0]


# --- DCP files are held to the same rules: tied and shared tensors saved once ----------------


class _TiedLM(torch.nn.Module):
    """GPT-2's tie (``head.weight is emb.weight``) and a block shared by two names (ALBERT)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(64, 32)
        self.block = torch.nn.Linear(32, 32)
        self.block_again = self.block  # one module, two names in the state dict
        self.head = torch.nn.Linear(32, 64, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.block_again(torch.tanh(self.block(self.emb(ids)))))
        return self.head(h)


def _tied_state(model: _TiedLM, opt: torch.optim.Optimizer) -> dict[str, Any]:
    base = torch.arange(96, dtype=torch.float32)  # views of one storage, without the whole
    return {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "views": {"lo": base[:40].view(5, 8), "hi": base[48:]},
    }


def _train_tied(model: _TiedLM, opt: torch.optim.Optimizer, steps: range) -> None:
    for step in steps:
        ids = torch.randint(0, 64, (8, 6), generator=torch.Generator().manual_seed(step))
        loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()


def _stored_paths(path: Path) -> list[str]:
    return [e.path for e in api.read_manifest(path).tensors]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("lossy", [False, True])
def test_dcp_tied_and_shared_tensors_are_saved_once_and_restored_tied(
    tmp_path: Path, lossy: bool
) -> None:
    """Tied weights, a shared module and views of one storage: one stored entry each, every
    name restored (exactly, or lossy with the tied names equal), and the file's own load ties
    them again. ``Writer`` raised ``KeyError: 'model/head.weight'`` here before."""
    torch.manual_seed(0)
    model = _TiedLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    _train_tied(model, opt, range(2))
    config = CONFIG if lossy else ckptzip.CompressionConfig(min_numel=1 << 30)
    state = _tied_state(model, opt)
    dcp.save(state, storage_writer=Writer(tmp_path / "c", config=config), no_dist=True)

    stored = _stored_paths(tmp_path / "c" / "__0.ckz")
    for alias in ("model/head.weight", "model/block_again.weight", "model/block_again.bias"):
        assert alias not in stored  # saved once, under the first name
    assert "model/emb.weight" in stored and "model/block.weight" in stored
    assert sum(p.startswith("views/") for p in stored) == 1  # the span the two views cover
    raw = ckptzip.load(tmp_path / "c" / "__0.ckz")  # the rank file restores the ties itself
    assert raw["model/head.weight"].data_ptr() == raw["model/emb.weight"].data_ptr()
    assert (
        raw["views/hi"].untyped_storage().data_ptr() == raw["views/lo"].untyped_storage().data_ptr()
    )

    torch.manual_seed(1)
    fresh = _TiedLM()
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1e-2)
    _train_tied(fresh, fresh_opt, range(1))  # so the optimizer has state to load into
    out = _tied_state(fresh, fresh_opt)
    out["views"] = {"lo": torch.zeros(5, 8), "hi": torch.zeros(48)}
    dcp.load(out, storage_reader=Reader(tmp_path / "c"), no_dist=True)
    fresh.load_state_dict(out["model"])
    fresh_opt.load_state_dict(out["optim"])
    assert fresh.head.weight is fresh.emb.weight and fresh.block_again is fresh.block
    assert torch.equal(out["views"]["lo"], state["views"]["lo"])  # small: exact either way
    assert torch.equal(out["views"]["hi"], state["views"]["hi"])
    assert torch.equal(out["model"]["head.weight"], out["model"]["emb.weight"])
    for k, v in state["model"].items():
        err = float((out["model"][k] - v).norm() / v.norm())
        assert err < 0.2 if lossy else err == 0, (k, err)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_dcp_delta_saves_of_a_tied_model_restore_tied(tmp_path: Path) -> None:
    """A chain of a tied model: the delta stores the tied weight once, against its parent's
    (its residual by default, bin indices without error feedback)."""
    torch.manual_seed(0)
    model = _TiedLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    config = ckptzip.CompressionConfig(min_numel=256)
    _train_tied(model, opt, range(2))
    dcp.save(
        _tied_state(model, opt), storage_writer=Writer(tmp_path / "s1", config=config), no_dist=True
    )
    _train_tied(model, opt, range(2, 4))
    state = _tied_state(model, opt)
    for feedback, codec in ((True, "residual"), (False, "delta")):
        d = tmp_path / f"s2-{feedback}"
        writer = Writer(d, config=config, parent=tmp_path / "s1", error_feedback=feedback)
        dcp.save(state, storage_writer=writer, no_dist=True)

        manifest = api.read_manifest(d / "__0.ckz")
        assert manifest.parent is not None
        codecs = {e.path: e.codec for e in manifest.tensors}
        assert codecs["model/emb.weight"] == codec and "model/head.weight" not in codecs
        fresh = _TiedLM()
        out = {"model": fresh.state_dict()}
        dcp.load(out, storage_reader=Reader(d), no_dist=True)
        assert fresh.head.weight is fresh.emb.weight
        w = state["model"]["emb.weight"]
        assert float((fresh.emb.weight.detach() - w).norm() / w.norm()) < 0.2


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_writer_cache_skips_decoding_the_parent_and_writes_the_same_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Writer(cache=recent_files())``: a delta takes its parent's tensors from the cache the
    parent's save filled (no link of the chain is read to decode it), and every file is the
    same as without the cache; a cache whose entry is gone decodes from disk again."""
    from ckptzip import chains
    from ckptzip.dcp import recent_files

    torch.manual_seed(0)
    model = _TiedLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    config = ckptzip.CompressionConfig(min_numel=256)
    _train_tied(model, opt, range(2))
    first = _tied_state(model, opt)
    _train_tied(model, opt, range(2, 4))
    second = _tied_state(model, opt)
    decoded: list[str] = []
    real = chains.Link.reader

    def reader(link: chains.Link, **kw: Any) -> Any:
        decoded.append(link.name)
        return real(link, **kw)

    monkeypatch.setattr(chains.Link, "reader", reader)

    def files(d: Path) -> dict[str, bytes]:
        return {f.name: f.read_bytes() for f in sorted(d.iterdir()) if f.suffix == ".ckz"}

    cache = recent_files(2)
    for feedback in (True, False):
        for cached in (None, cache):
            p, d = tmp_path / f"p-{feedback}-{cached is None}", tmp_path / f"d-{feedback}"
            writer = Writer(p, config=config, cache=cached, error_feedback=feedback)
            dcp.save(first, storage_writer=writer, no_dist=True)
            decoded.clear()
            d = d.with_name(f"{d.name}-{cached is None}")
            writer = Writer(d, config=config, parent=p, cache=cached, error_feedback=feedback)
            dcp.save(second, storage_writer=writer, no_dist=True)
            assert len(decoded) == (0 if cached is not None else 1)  # the parent, linked
        assert files(tmp_path / f"d-{feedback}-True") == files(tmp_path / f"d-{feedback}-False")
    assert len(cache) == 2  # bounded: the last two files saved
    cache.clear()  # evicted: the parent is decoded from disk
    decoded.clear()
    again = Writer(tmp_path / "again", config=config, parent=tmp_path / "p-True-False", cache=cache)
    dcp.save(second, storage_writer=again, no_dist=True)
    assert len(decoded) == 1
    assert files(tmp_path / "again") == files(tmp_path / "d-True-True")
    with pytest.raises(ckptzip.ConfigError):
        Writer(tmp_path / "x", cache=[])  # type: ignore[arg-type]
    with pytest.raises(ckptzip.ConfigError):
        recent_files(0)
