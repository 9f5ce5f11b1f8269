"""Whatever ``save`` writes, ``load`` reads: read limits come from the manifest and the caller.

Constant, near-constant and sparse tensors compress far beyond any fixed ratio (a constant
tensor's ANS index stream takes no bits at all), so they are where a reader's size rules
met legitimate files: every codec path (exact, quant, delta, moments) and every lossless
stage (zstd, raw, byte planes, packed / byte / ANS indices, and each delta back end) is
taken through ``save``/``load`` and the manager here.
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _attack import scaled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptzip
from ckptzip import bindiff, container, entropy
from ckptzip.api import read_manifest
from ckptzip.codecs import delta as delta_codec
from ckptzip.codecs import quantized as quant_codec
from ckptzip.errors import DecodeLimitError
from ckptzip.packing import bits_for, pack_indices

KINDS = ("constant", "near-constant", "sparse")
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
PATHS = {"exact": "w", "quant": "w", "moments": "optimizer/state/0/exp_avg_sq"}


def tensor(kind: str, n: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """A tensor of ``n`` elements that is one value (``constant``), one value but for about
    one in a thousand (``near-constant``), or zero but for about one in a thousand."""
    g = torch.Generator().manual_seed(seed)
    base = 0.0 if kind == "sparse" else 0.375
    x = torch.full((n,), base, dtype=dtype)
    if kind != "constant" and n:
        k = max(1, n // 1000)
        # unique positions: with repeats, which value an index_put keeps is not determined
        pos = torch.unique(torch.randint(0, n, (k,), generator=g))
        x[pos] = (torch.rand(pos.numel(), generator=g) + 0.5).to(dtype)
    return x


def stages(entry: Any) -> set[str]:
    """The lossless stages an entry's meta names (``exact:planes``, ``quant:ans`` ...)."""
    found: set[str] = set()

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("enc"), str):
                found.add(f"{where}:{node['enc']}")
            if isinstance(node.get("index_layout"), str):
                found.add(f"{where}:{node['index_layout']}")
            if isinstance(node.get("method"), str):
                found.add(f"{where}:{node['method']}")
            for v in node.values():
                walk(v, where)
        elif isinstance(node, list):
            for v in node:
                walk(v, where)

    walk(entry.meta, entry.codec)
    return found


def config_for(path: str) -> ckptzip.CompressionConfig:
    if path == "exact":
        return ckptzip.CompressionConfig(exact=("*",))
    return ckptzip.CompressionConfig(min_numel=1)


def check_loaded(x: torch.Tensor, back: torch.Tensor, rel_error: float | None, exact: bool) -> None:
    assert back.shape == x.shape and back.dtype == x.dtype
    if exact:
        assert torch.equal(back.view(torch.uint8), x.view(torch.uint8))
        return
    err = float(torch.linalg.vector_norm((back - x).double()))
    norm = float(torch.linalg.vector_norm(x.double()))
    # the error the file records is the error the reader gets
    assert rel_error is not None
    # (to 1 %: the writer measures it in float32 sums)
    assert err <= rel_error * norm * 1.01 + 1e-6 * norm + 1e-30


def round_trip(
    kind: str, n: int, dtype: torch.dtype, path: str, out: Path, **load_kw: Any
) -> set[str]:
    x = tensor(kind, n, dtype)
    f = out / f"{path}-{kind}-{n}-{str(dtype)[6:]}.ckz"
    key = PATHS[path]
    obj: dict[str, Any] = {"w": x} if key == "w" else {"optimizer": {"state": {0: {}}}}
    if key != "w":
        obj["optimizer"]["state"][0]["exp_avg_sq"] = x.abs()
        x = x.abs()
    ckptzip.save(obj, f, config=config_for(path), overwrite=True)
    (entry,) = read_manifest(f).tensors
    back = ckptzip.load(f, **load_kw)
    got = back["w"] if key == "w" else back["optimizer"]["state"][0]["exp_avg_sq"]
    check_loaded(x, got, entry.rel_error, entry.codec == "exact")
    assert ckptzip.verify(f).tensors and ckptzip.verify(f, decode=True).tensors
    # the caller's limit: exactly the declared bytes pass, one less is refused
    ckptzip.load(f, max_bytes=entry.nbytes)
    if entry.nbytes:
        with pytest.raises(DecodeLimitError, match=f"max_bytes={entry.nbytes}"):
            ckptzip.load(f, max_bytes=entry.nbytes - 1)
    f.unlink()
    return stages(entry)


@settings(max_examples=scaled(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(0, 1 << 20),
    dtype=st.sampled_from(DTYPES),
    path=st.sampled_from(sorted(PATHS)),
)
def test_save_then_load_reads_every_constant_near_constant_and_sparse_tensor(
    tmp_path_factory: pytest.TempPathFactory, kind: str, n: int, dtype: torch.dtype, path: str
) -> None:
    round_trip(kind, n, dtype, path, tmp_path_factory.mktemp("p"))


@settings(max_examples=scaled(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(0, 1 << 18),
    path=st.sampled_from(["exact", "quant"]),
    keyframe_every=st.integers(1, 3),
)
def test_save_then_load_through_the_manager(
    tmp_path_factory: pytest.TempPathFactory, kind: str, n: int, path: str, keyframe_every: int
) -> None:
    d = tmp_path_factory.mktemp("m")
    mgr = ckptzip.CheckpointManager(
        d, keyframe_every=keyframe_every, keep=2, config=config_for(path)
    )
    for step in range(3):
        mgr.save(step, {"w": steps_of(kind, n, step)})
    (entry,) = read_manifest(mgr.path(2)).tensors
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = ckptzip.CheckpointManager(d).load()["w"]
    check_loaded(steps_of(kind, n, 2), back, entry.rel_error, path == "exact")


def test_the_reported_cases(tmp_path: Path) -> None:
    # a zero-initialised Linear(1152, 6912): 7.96 M equal values in a 123-byte entry
    lin = torch.nn.Linear(1152, 6912)
    torch.nn.init.zeros_(lin.weight)
    f = tmp_path / "lin.ckz"
    ckptzip.save(lin.state_dict(), f)
    for call in (
        ckptzip.load,
        ckptzip.verify,
        functools.partial(ckptzip.load, max_bytes=1 << 40),
    ):
        call(f)
    assert torch.equal(ckptzip.load(f)["weight"], lin.weight.detach())
    # ones(20M) bit-exact through the manager: a 2 KB file of 80 MB
    mgr = ckptzip.CheckpointManager(tmp_path / "run", config=config_for("exact"))
    mgr.save(1, {"w": torch.ones(20_000_000)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(mgr.load()["w"], torch.ones(20_000_000))
    assert mgr.skipped == ()


@pytest.mark.parametrize("layout", ["packed", "bytes", "ans"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_index_layout_of_a_huge_ratio_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, kind: str
) -> None:
    real = quant_codec.encode_indices

    def forced(
        indices: np.ndarray, n_levels: int, level: int, *, packed: Any = None
    ) -> tuple[bytes, dict[str, Any]]:  # a packed stream coded beforehand is not the layout forced
        flat = np.ascontiguousarray(indices, dtype=np.uint8).reshape(-1)
        bits = bits_for(n_levels)
        if layout == "packed":
            payload, info = entropy.encode(pack_indices(flat, bits), level)
        elif layout == "bytes":
            payload, info = entropy.encode(flat.data, level)
        else:
            (payload,), info = entropy.encode_symbols(flat, "ans")
        meta = {"bits": bits, "index_layout": layout, "index_stage": info}
        assert real is not forced
        return payload, meta

    monkeypatch.setattr(quant_codec, "encode_indices", forced)
    # over the 3.5 M elements the old capacity rule allowed a 13-byte ANS table
    found = round_trip(kind, 4_000_000, torch.float32, "quant", tmp_path)
    assert f"quant:{layout}" in found


def steps_of(kind: str, n: int, step: int) -> torch.Tensor:
    """Step ``step`` of a run: the step-0 tensor with its first ``100 * step`` values moved
    (what deltas are for: few weights change bin between checkpoints)."""
    x = tensor(kind, n, torch.float32)
    x[: 100 * step] = 0.875
    return x


def delta_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, kind: str, n: int
) -> None:
    monkeypatch.setattr(
        delta_codec,
        "encode_smallest",
        functools.partial(bindiff.encode_smallest, methods=(method,)),
    )
    mgr = ckptzip.CheckpointManager(
        tmp_path, keyframe_every=4, keep=2, config=config_for("quant"), error_feedback=False
    )  # bin-index deltas, the back ends under test (error feedback stores residuals)
    for step in range(3):
        mgr.save(step, {"w": steps_of(kind, n, step)})
    (entry,) = read_manifest(mgr.path(2)).tensors
    assert entry.codec == "delta"
    # a constant tensor's full ANS encoding takes no bits: no delta is smaller than that
    assert kind == "constant" or f"delta:{method}" in stages(entry), entry.meta
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = ckptzip.CheckpointManager(tmp_path).load()["w"]
    check_loaded(steps_of(kind, n, 2), back, entry.rel_error, False)


@pytest.mark.parametrize("method", sorted(set(entropy.SYMBOL_METHODS) - entropy.ONE_CONTEXT))
@pytest.mark.parametrize("kind", KINDS)
def test_every_delta_back_end_loads_through_the_manager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, kind: str
) -> None:
    delta_round_trip(tmp_path, monkeypatch, method, kind, 1 << 18)


@pytest.mark.slow
@pytest.mark.parametrize(("method", "kind"), [("ans", "near-constant"), ("rle+lzma", "sparse")])
def test_a_delta_of_eighty_megabytes_in_a_few_kilobytes_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, kind: str
) -> None:
    # over the old default limit of 4096x the file (at least 64 MiB)
    delta_round_trip(tmp_path, monkeypatch, method, kind, 20_000_000)


def test_the_writer_takes_every_stage_on_these_tensors(tmp_path: Path) -> None:
    """Unforced, the writer's own choices over these tensors cover each lossless stage."""
    found: set[str] = set()
    for kind in KINDS:
        for path in PATHS:
            for n, dtype in ((3000, torch.float32), (300_000, torch.bfloat16)):
                found |= round_trip(kind, n, dtype, path, tmp_path)
    assert {"exact:planes", "exact:zstd", "quant:ans", "quant:zstd"} <= found, found


def test_the_manager_passes_its_limit_and_never_skips_a_step_for_it(tmp_path: Path) -> None:
    mgr = ckptzip.CheckpointManager(tmp_path, max_bytes=1000, keyframe_every=1)
    mgr.save(1, {"w": torch.zeros(100)})
    mgr.save(2, {"w": torch.zeros(1000)})  # 4000 bytes decoded: over the manager's limit
    with pytest.raises(DecodeLimitError, match="max_bytes=1000"):
        mgr.load()  # not step 1 instead
    assert mgr.load(max_bytes=4000)["w"].shape == (1000,)
    with pytest.raises(DecodeLimitError):
        mgr.read_quantized(2)
    with pytest.raises(ckptzip.ConfigError, match="max_bytes"):
        ckptzip.CheckpointManager(tmp_path, max_bytes=-1)
    # restore() takes it too
    model = torch.nn.Linear(64, 64)
    torch.nn.init.zeros_(model.weight)
    run = ckptzip.CheckpointManager(tmp_path / "model", model=model, window=None)
    run.save(1)
    with pytest.raises(DecodeLimitError, match="max_bytes=100"):
        run.restore(max_bytes=100)
    assert run.restore() == 1


def test_the_default_limit_is_the_memory_this_process_can_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    available = container._available_memory()
    assert available is not None and available > 0  # this machine says how much it has
    monkeypatch.setattr(container, "_available_memory", lambda: 1 << 30)
    assert container.decoded_limit() == (1 << 30) // container.DECODE_OVERHEAD
    f = tmp_path / "c.ckz"
    ckptzip.save({"w": torch.zeros(1 << 20)}, f)  # 4 MiB in a few hundred bytes
    monkeypatch.setattr(container, "_available_memory", lambda: 3 << 20)
    with pytest.raises(DecodeLimitError, match="memory available"):
        ckptzip.load(f)
    assert ckptzip.verify(f).tensors  # nothing decoded: no memory needed
    ckptzip.load(f, max_bytes=4 << 20)  # the caller knows better
    monkeypatch.setattr(container, "_available_memory", lambda: None)
    assert ckptzip.load(f)["w"].shape == (1 << 20,)  # unknown: no limit


_PEAK = """
import sys, ckptzip

def status(field):  # per address space (ru_maxrss would carry the parent's over exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

ckptzip.load(sys.argv[2])  # a small file of the same kind: every lazy import is done
before = status("VmRSS:")
x = ckptzip.load(sys.argv[1])
print((status("VmHWM:") - before) * 1024)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("path", ["exact", "quant"])
def test_decoding_peak_memory_fits_the_default_overhead(
    tmp_path: Path, dtype: torch.dtype, path: str
) -> None:
    """:data:`ckptzip.container.DECODE_OVERHEAD` against a measured peak (one large tensor:
    its working copies are the largest share)."""
    n = 20_000_000
    f = tmp_path / "c.ckz"
    ckptzip.save({"w": tensor("near-constant", n, dtype)}, f, config=config_for(path))
    small = tmp_path / "small.ckz"
    ckptzip.save({"w": tensor("near-constant", 1 << 16, dtype)}, small, config=config_for(path))
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, str(f), str(small)],
        capture_output=True,
        text=True,
        check=True,
    )
    peak = int(out.stdout.split()[-1])
    decoded = n * dtype.itemsize
    print(json.dumps({"path": path, "dtype": str(dtype), "peak_over_decoded": peak / decoded}))
    assert peak <= container.DECODE_OVERHEAD * decoded


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "path", "dtype"),
    [("constant", "quant", torch.bfloat16), ("sparse", "exact", torch.bfloat16)],
)
def test_a_hundred_million_elements_round_trip(
    tmp_path: Path, kind: str, path: str, dtype: torch.dtype
) -> None:
    n = 10**8
    assert math.prod((n,)) * dtype.itemsize == 2 * 10**8  # 200 MB: sane on a shared machine
    round_trip(kind, n, dtype, path, tmp_path)


@pytest.mark.slow
def test_a_hundred_million_constant_elements_through_the_manager(tmp_path: Path) -> None:
    # exact (200 MB in a few KB: over the old 4096x rule); the lossy and delta paths at this
    # ratio are the cases above (quantizing 10^8 elements per save would take minutes here)
    n = 10**8
    mgr = ckptzip.CheckpointManager(tmp_path, keep=1, config=config_for("exact"))
    for step in range(2):
        mgr.save(step, {"w": torch.full((n,), float(step), dtype=torch.bfloat16)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = ckptzip.CheckpointManager(tmp_path).load()["w"]
    assert back.shape == (n,) and bool((back == 1.0).all())
