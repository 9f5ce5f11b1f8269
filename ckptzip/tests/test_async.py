"""Asynchronous saves: a consistent snapshot, one save in flight, errors never lost."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ckptzip import CheckpointManager, CompressionConfig, QuantConfig, api
from ckptzip.errors import SaveInProgressError, StorageError

CONFIG = CompressionConfig(quant=QuantConfig(bins=8, protect=0.01), min_numel=64)


def test_async_save_snapshots_before_returning(tmp_path: Path) -> None:
    w = torch.linspace(-1, 1, 1000)
    mgr = CheckpointManager(tmp_path, config=CompressionConfig(exact=("*",)))
    assert mgr.save(1, {"w": w, "n": 1}, blocking=False) is None
    expected = w.clone()
    w.mul_(-3)  # training goes on with the live tensor
    report = mgr.wait()
    assert report is not None and report.step == 1 and report.stall is not None
    assert torch.equal(mgr.load(1)["w"], expected)


def test_async_save_keeps_views_views_as_a_blocking_one(tmp_path: Path) -> None:
    # The snapshot copied each tensor on its own: a row and the transpose of a weight
    # became separate tensors (5 entries where a blocking save writes 3), views no more.
    w = torch.randn(300, 100, generator=torch.Generator().manual_seed(0))
    state = {"wte": w, "head": w, "row": w[5], "T": w.t(), "other": torch.ones(70)}
    reports = {}
    for blocking in (True, False):
        with CheckpointManager(tmp_path / str(blocking), config=CONFIG) as mgr:
            reports[blocking] = mgr.save(1, state, blocking=blocking) or mgr.wait()
        got = CheckpointManager(tmp_path / str(blocking)).load(1)
        base = got["wte"].untyped_storage().data_ptr()
        for name in ("head", "row", "T"):
            assert got[name].untyped_storage().data_ptr() == base, (blocking, name)
        assert torch.equal(got["row"], got["wte"][5]) and torch.equal(got["T"], got["wte"].t())
    assert reports[True] is not None and reports[False] is not None
    assert len(reports[False].entries) == len(reports[True].entries) == 2
    assert reports[False].bytes_out == reports[True].bytes_out


def _slow_encode(monkeypatch: pytest.MonkeyPatch, gate: threading.Event) -> None:
    real = api.encode

    def encode(*args: Any, **kwargs: Any) -> Any:
        gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "encode", encode)


def test_one_save_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    _slow_encode(monkeypatch, gate)
    mgr = CheckpointManager(tmp_path, config=CONFIG, if_busy="raise")
    mgr.save(1, {"w": torch.ones(100)}, blocking=False)
    with pytest.raises(SaveInProgressError, match="step 1"):
        mgr.save(2, {"w": torch.ones(100)}, blocking=False)
    gate.set()
    assert mgr.wait() is not None
    waiting = CheckpointManager(tmp_path, config=CONFIG)  # if_busy="wait" (the default)
    gate.clear()
    waiting.save(2, {"w": torch.ones(100)}, blocking=False)
    threading.Timer(0.2, gate.set).start()
    waiting.save(3, {"w": torch.ones(100)})  # waits for step 2, then saves
    assert waiting.steps() == [1, 2, 3]


def test_background_error_is_raised_by_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = CheckpointManager(tmp_path, config=CONFIG)
    mgr.save(1, {"w": torch.ones(100)})

    def fail(*args: Any, **kwargs: Any) -> int:
        raise StorageError("writing failed: no space left on the device")

    monkeypatch.setattr(mgr.store, "publish", fail)
    mgr.save(2, {"w": torch.ones(100)}, blocking=False)
    if mgr._pending is not None and mgr._pending.thread is not None:
        mgr._pending.thread.join()
    with pytest.raises(StorageError, match="no space"):
        mgr.steps()  # any call reports it
    assert mgr.steps() == [1]  # once; the manager stays usable
    monkeypatch.undo()
    mgr.save(2, {"w": torch.ones(100)}, blocking=False)
    mgr.close()
    assert mgr.steps() == [1, 2]


def test_close_and_with_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    _slow_encode(monkeypatch, gate)
    with CheckpointManager(tmp_path, config=CONFIG) as mgr:
        mgr.save(1, {"w": torch.ones(100)}, blocking=False)
        threading.Timer(0.2, gate.set).start()
    assert CheckpointManager(tmp_path).steps() == [1]


def _model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _train(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(16, 32, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_model_snapshot_in_the_background_is_consistent(tmp_path: Path) -> None:
    model, opt = _model()
    _train(model, opt, 3)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    seen: list[int] = []

    def eval_fn(m: nn.Module) -> float:
        seen.append(id(m))
        time.sleep(0.01)  # a slow held-out evaluation: training must not wait for it
        with torch.no_grad():
            return float(m(torch.ones(4, 32)).pow(2).mean())

    exact = CompressionConfig(exact=("*",))
    mgr = CheckpointManager(tmp_path, model=model, optimizer=opt, eval_fn=eval_fn, config=exact)
    mgr.save(3, blocking=False)
    _train(model, opt, 5)  # the first step waits for the copy, then training runs on
    report = mgr.wait()
    assert report is not None and report.search is not None
    assert seen and id(model) not in seen  # the search ran on a copy, never the live model
    state = mgr.load(3)
    for k, v in expected.items():
        assert torch.equal(state["model"][k], v), k
    live = {k: v.clone() for k, v in model.state_dict().items()}
    mgr.restore(3)
    for k, v in expected.items():
        assert torch.equal(model.state_dict()[k], v), k
    assert any(not torch.equal(live[k], expected[k]) for k in expected)
    mgr.close()


def test_async_model_save_matches_a_blocking_one(tmp_path: Path) -> None:
    model, opt = _model()
    _train(model, opt, 2)
    a = CheckpointManager(tmp_path / "a", model=model, optimizer=opt, config=CONFIG)
    b = CheckpointManager(tmp_path / "b", model=model, optimizer=opt, config=CONFIG)
    ra = a.save(2)
    b.save(2, blocking=False)
    rb = b.wait()
    assert rb is not None and ra.search is not None and rb.search is not None
    assert rb.search.config == ra.search.config  # the same search on the copy
    sa, sb = a.load(2), b.load(2)
    for k in sa["model"]:
        assert torch.equal(sa["model"][k], sb["model"][k])
    for i, s in sa["optimizer"]["state"].items():
        for key, v in s.items():
            assert torch.equal(v, sb["optimizer"]["state"][i][key]), (i, key)
    a.close()
    b.close()


def test_parallel_encoding_writes_the_same_file(tmp_path: Path) -> None:
    import ckptzip

    g = torch.Generator().manual_seed(3)
    state = {f"layer{i}": torch.randn(3000, generator=g) for i in range(6)}
    state["step"] = torch.tensor(7)
    one = ckptzip.save(state, tmp_path / "one.ckz", config=CONFIG, threads=1)
    four = ckptzip.save(state, tmp_path / "four.ckz", config=CONFIG, threads=4)
    assert one.sha256 == four.sha256 and one.bytes_in == four.bytes_in
    with pytest.raises(ckptzip.ConfigError, match="threads=0"):
        ckptzip.save(state, tmp_path / "zero.ckz", threads=0)
    # and loads the same, on as many decoding threads as asked
    seen: set[str] = set()
    real = ckptzip.api._decode_entry

    def decode_entry(*args: Any, **kwargs: Any) -> Any:
        seen.add(threading.current_thread().name)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ckptzip.api, "_decode_entry", decode_entry)
        for threads in (1, 2):
            seen.clear()
            back = ckptzip.load(tmp_path / "one.ckz", threads=threads)
            assert back.keys() == state.keys() and torch.equal(back["step"], state["step"])
            # entries under api._POOL_MIN_BYTES decode on the caller's thread, the rest on the
            # pool's (these are all small: one pool-less thread)
            caller = threading.current_thread().name
            pool = {n for n in seen if n != caller}
            assert len(pool) <= threads and all(n.startswith("ckptzip-decode") for n in pool)
            for key in state:
                assert torch.equal(back[key], ckptzip.load(tmp_path / "four.ckz")[key])
    with pytest.raises(ckptzip.ConfigError, match="threads=0"):
        ckptzip.load(tmp_path / "one.ckz", threads=0)


def test_encoding_threads_start_the_largest_tensors_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In state order the largest tensors (an output head and its two moments, last in a
    # model's and optimizer's state) ran alone at the end while the other threads idled.
    import ckptzip

    started: list[int] = []
    real = api.get_codec

    def get_codec(codec_id: str) -> Any:
        codec = real(codec_id)

        class Recording:
            id = codec.id

            def encode(self, x: torch.Tensor, ctx: Any) -> Any:
                started.append(x.numel())
                return codec.encode(x, ctx)

        return Recording()

    monkeypatch.setattr(api, "get_codec", get_codec)
    sizes = [500, 70_000, 3, 2_000, 40_000, 900]
    state = {f"t{i}": torch.randn(n) for i, n in enumerate(sizes)}
    progress: list[int] = []
    report = ckptzip.save(
        state,
        tmp_path / "a.ckz",
        config=CONFIG,
        threads=1,
        progress=lambda d, t: progress.append(d),
    )
    # one pool thread: started in the order submitted; entries under api._INLINE_NUMEL are
    # encoded by the caller's thread as their turn comes, in state order
    big = [n for n in started if n >= api._INLINE_NUMEL]
    assert big == sorted((n for n in sizes if n >= api._INLINE_NUMEL), reverse=True)
    assert [n for n in started if n < api._INLINE_NUMEL] == [
        n for n in sizes if n < api._INLINE_NUMEL
    ]
    assert progress == [4 * sum(sizes[: i + 1]) for i in range(len(sizes))]  # file order
    assert [e.path for e in report.entries] == list(state)
    monkeypatch.undo()
    assert report.sha256 == ckptzip.save(state, tmp_path / "b.ckz", config=CONFIG).sha256
    assert ckptzip.verify(tmp_path / "a.ckz") is not None


def test_parallel_decoding_reads_the_same_tensors(tmp_path: Path) -> None:
    import ckptzip

    g = torch.Generator().manual_seed(4)
    state = {f"layer{i}": torch.randn(70_000 + i, generator=g) for i in range(5)}
    state["big"] = torch.randn(600_000, generator=g)  # three ANS blocks, decoded in parallel too
    state["exact"] = torch.arange(10)
    ckptzip.save(state, tmp_path / "s.ckz", config=CONFIG)
    one = ckptzip.load(tmp_path / "s.ckz", threads=1)
    seen: set[str] = set()
    real = ckptzip.api._decode_entry

    def decode_entry(*args: Any, **kwargs: Any) -> Any:
        seen.add(threading.current_thread().name)
        return real(*args, **kwargs)

    for threads in (2, 5, None):
        seen.clear()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ckptzip.api, "_decode_entry", decode_entry)
            back = ckptzip.load(tmp_path / "s.ckz", threads=threads)
        assert all(torch.equal(back[k], one[k]) for k in state)
        # the large entries on the pool, the small exact one on the caller's thread
        assert threading.current_thread().name in seen
        assert any(n.startswith("ckptzip-decode") for n in seen)
    with pytest.raises(ckptzip.ConfigError, match="threads=0"):
        ckptzip.load(tmp_path / "s.ckz", threads=0)


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="per-thread nice is Linux/BSD")
def test_background_save_yields_the_cpu_to_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckptzip import manager

    seen: list[int] = []
    real = api.encode

    def encode(*args: Any, **kwargs: Any) -> Any:
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "encode", encode)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    mgr = CheckpointManager(tmp_path, config=CONFIG)
    mgr.save(1, {"w": torch.ones(100)}, blocking=False)
    mgr.close()
    assert seen and seen[0] >= manager.BACKGROUND_NICE
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine  # training's


def test_a_failed_background_save_does_not_cost_the_next_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The next save() raised the failed save's error before starting its own: a loop that
    # logs and carries on lost two steps per storage error and logged one.
    mgr = CheckpointManager(tmp_path, config=CONFIG)
    real = mgr.store.publish
    calls = {"n": 0}

    def once(*args: Any, **kwargs: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            raise StorageError("writing failed: no space left on the device")
        return real(*args, **kwargs)

    monkeypatch.setattr(mgr.store, "publish", once)
    mgr.save(1, {"w": torch.ones(100)}, blocking=False)
    assert mgr._pending is not None and mgr._pending.thread is not None
    mgr._pending.thread.join()
    with pytest.raises(StorageError, match="no space") as info:
        mgr.save(2, {"w": torch.full((100,), 2.0)})
    assert any("step 1" in n and "step 2 was saved" in n for n in info.value.__notes__)
    assert mgr.steps() == [2]
    assert torch.equal(mgr.load(2)["w"], torch.full((100,), 2.0))


def test_an_async_model_save_without_an_optimizer_copies_before_returning(
    tmp_path: Path,
) -> None:
    # With no optimizer to gate, the worker copied the weights whenever it ran: training's
    # next in-place update (or part of it) reached the file of the step before.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    mgr = CheckpointManager(tmp_path, model=model, config=CompressionConfig(exact=("*",)))
    for step in range(1, 4):
        expected = {k: v.clone() for k, v in model.state_dict().items()}
        assert mgr.save(step, blocking=False) is None
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)  # at once, while the worker may not have started
        mgr.wait()
        saved = mgr.load(step)["model"]
        for k, v in expected.items():
            assert torch.equal(saved[k], v), (step, k)
    mgr.close()


def test_a_background_save_pending_at_exit_is_finished(tmp_path: Path) -> None:
    # The worker was a daemon thread: a script ending without close() lost its last step
    # (or died inside torch at interpreter shutdown).
    import subprocess
    import sys

    script = f"""
import torch
from ckptzip import CheckpointManager
mgr = CheckpointManager({str(tmp_path)!r})
mgr.save(1, {{"w": torch.randn(200_000)}})
mgr.save(2, {{"w": torch.randn(200_000)}}, blocking=False)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert CheckpointManager(tmp_path).steps() == [1, 2]


def test_a_background_save_that_fails_at_exit_is_reported(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = f"""
import torch
from ckptzip import CheckpointManager
from ckptzip.errors import StorageError
mgr = CheckpointManager({str(tmp_path)!r})
def fail(*a, **k):
    raise StorageError("writing failed: no space left on the device")
mgr.store.publish = fail
mgr.save(1, {{"w": torch.randn(1000)}}, blocking=False)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert "background save of step 1" in done.stderr and "no space" in done.stderr
