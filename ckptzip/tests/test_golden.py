"""Golden files: every release decodes the committed files of every format version exactly.

The files in ``tests/golden/`` were written once by ``make_golden.py``; the inputs are
recomputed here from the same integer arithmetic, exact parts compared bit for bit, lossy
parts checked against their recorded error, and every decoded tensor's bytes against the
sha256 recorded when the file was made (so decoding never drifts).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from _checks import assert_same

import ckptzip
from ckptzip.api import read_manifest, read_quantized
from ckptzip.codecs.exact import tensor_to_bytes
from ckptzip.structure import flatten

GOLDEN = Path(__file__).parent / "golden"
_spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
assert _spec is not None and _spec.loader is not None
make_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_golden)

EXPECTED: dict[str, dict[str, object]] = {"files": {}}
for _version_file in sorted(GOLDEN.glob("expected_v*.json")):
    EXPECTED["files"].update(json.loads(_version_file.read_text())["files"])


def test_every_golden_file_is_listed() -> None:
    on_disk = {p.name for p in GOLDEN.glob("*.ckz")}
    assert on_disk == set(EXPECTED["files"])


@pytest.mark.parametrize("name", sorted(EXPECTED["files"]))
def test_file_bytes_unchanged_and_decoding_stable(name: str) -> None:
    want = EXPECTED["files"][name]
    path = GOLDEN / name
    assert hashlib.sha256(path.read_bytes()).hexdigest() == want["file_sha256"]
    _, leaves = flatten(ckptzip.load(path))
    got = {p: hashlib.sha256(tensor_to_bytes(t)).hexdigest() for p, t in leaves}
    assert got == want["decoded_sha256"]
    q = read_quantized(path)
    kinds = {p: "exact" if isinstance(v, torch.Tensor) else "quant" for p, v in q.items()}
    assert kinds == want["codecs"]
    assert read_manifest(path).version == int(name.split("_")[0].removeprefix("v"))


def test_exact_golden_equals_recomputed_input() -> None:
    assert_same(make_golden.exact_object(), ckptzip.load(GOLDEN / "v1_exact.ckz"))


def test_quant_golden_is_within_recorded_error_of_recomputed_input() -> None:
    original = make_golden.quant_object()
    path = GOLDEN / "v1_quant.ckz"
    back = ckptzip.load(path)
    entries = {e.path: e for e in read_manifest(path).tensors}
    assert back["epoch"] == 3
    assert_same(original["model"]["bias"], back["model"]["bias"])
    for key, x in original["model"].items():
        entry = entries[f"model/{key}"]
        if entry.codec == "exact":
            continue
        y = back["model"][key]
        assert y.dtype == x.dtype and y.shape == x.shape
        fin = torch.isfinite(x)
        assert tensor_to_bytes(x[~fin]) == tensor_to_bytes(y[~fin])
        a, b = x[fin].double(), y[fin].double()
        err = float((a - b).norm() / a.norm())
        assert entry.rel_error is not None and err <= entry.rel_error * (1 + 1e-6) + 1e-9
    pruned = entries["model/w4_pruned"]
    assert pruned.config == {
        "bins": 4,
        "prune": 0.3,
        "prune_metric": "magnitude",
        "protect": 0.01,
        "log_domain": False,
    }
    assert float((back["model"]["w4_pruned"] == 0).float().mean()) >= 0.29


def test_planes_golden_equals_recomputed_input() -> None:
    path = GOLDEN / "v1_planes.ckz"
    assert_same(make_golden.planes_object(), ckptzip.load(path))
    stages = [e.meta["stage"]["enc"] for e in read_manifest(path).tensors]
    assert stages == ["planes"] * 3  # the file exercises the byte-plane stage


def test_shared_golden_keeps_its_storage_shared_and_exact_parts_bitwise() -> None:
    path = GOLDEN / "v2_shared.ckz"
    original = make_golden.shared_object()
    back = ckptzip.load(path)
    model = back["model"]
    ptr = model["wte.weight"].untyped_storage().data_ptr()
    for t in (model["lm_head.weight"], model["wte_rows"], back["emb_t"]):
        assert t.untyped_storage().data_ptr() == ptr
    assert torch.equal(model["wte_rows"], model["wte.weight"][5:9])
    assert torch.equal(back["emb_t"], model["wte.weight"].t())
    entries = {e.path: e for e in read_manifest(path).tensors}
    assert entries["model/wte.weight"].codec == "quant" and len(entries) == 3
    for key in ("ids", "ids_col", "ids_expanded", "span_a", "span_b"):
        assert_same(original[key], back[key])
        assert back[key].stride() == original[key].stride()
    assert back["ids_col"].untyped_storage().data_ptr() == back["ids"].data_ptr()


def test_numpy_golden_equals_recomputed_input() -> None:
    np = pytest.importorskip("numpy")
    original = make_golden.numpy_object()
    back = ckptzip.load(GOLDEN / "v2_numpy.ckz")
    rs = np.random.RandomState()
    rs.set_state(back["numpy"])
    assert rs.randint(1 << 30) == np.random.RandomState(5).randint(1 << 30)
    assert back["generator"] == original["generator"]
    assert back["numpy_dict"]["state"]["pos"] == original["numpy_dict"]["state"]["pos"]
    for key, a in original["arrays"].items():
        b = back["arrays"][key]
        assert isinstance(b, np.ndarray) and b.dtype == a.dtype.newbyteorder("=")
        assert np.array_equal(a, b), key
    assert_same(original["torch_rng"], back["torch_rng"])


def test_ans_golden_holds_ans_index_streams() -> None:
    # the golden file of the "ans" index layout must keep exercising it
    manifest = read_manifest(GOLDEN / "v1_quant_ans.ckz")
    layouts = {e.path: e.meta.get("index_layout") for e in manifest.tensors}
    assert layouts["model/w16"] == layouts["model/w4_pruned"] == "ans"


@pytest.mark.parametrize(
    ("name", "layout"), [("v4_quant_lanes.ckz", "ans-lanes"), ("v4_quant_wide.ckz", "ans-wide")]
)
def test_lane_goldens_hold_their_index_layout_both_implementations_decode(
    name: str, layout: str
) -> None:
    # the golden files of the "ans-lanes" and "ans-wide" index layouts must keep exercising
    # them, over two blocks; the reference decodes what the reader decoded
    from ckptzip import entropy
    from ckptzip.container import Reader
    from ckptzip.kernels import reference

    path = GOLDEN / name
    q = read_quantized(path)
    with open(path, "rb") as f:
        reader = Reader(f)
        for entry in reader.manifest.tensors:
            if entry.codec != "quant":
                continue
            assert entry.meta["index_layout"] == layout
            n = math.prod(entry.shape)
            stage = entry.meta["index_stage"]
            chunk = reader.tensor_chunks(entry)[1]
            if layout == "ans-lanes":
                p = entropy._ans_lanes_parse(chunk, stage, n, None)
                args = (p.bounds, p.counts, n, p.block, p.lanes)
                want = reference.ans_lanes_decode(p.words, p.lengths, *args)
            else:
                w = entropy._ans_wide_parse(chunk, stage, n, None)
                want = reference.ans_wide_decode(w.words, w.lengths, w.counts, n, w.block)
            assert np.array_equal(q[entry.path].indices, want)
    assert math.prod(reader.manifest.tensors[0].shape) > 2**18 >= stage["block"]


def test_v3_golden_stores_its_manifest_compressed() -> None:
    from ckptzip.container import MANIFEST_ZSTD, Reader

    with open(GOLDEN / "v3_zstd_manifest.ckz", "rb") as f:
        reader = Reader(f)
        assert reader.flags == MANIFEST_ZSTD and reader.manifest.version == 3
    original, back = make_golden.many_object(), ckptzip.load(GOLDEN / "v3_zstd_manifest.ckz")
    assert back["step"] == 11
    for key, x in original["model"].items():
        if key.endswith(".bias"):  # below min_numel: exact
            assert_same(x, back["model"][key])
    w, y = original["model"]["w16"], back["model"]["w16"]
    assert float((w - y).norm() / w.norm()) < 0.1  # 16 levels


def test_v4_golden_files_store_64_bit_chunk_digests() -> None:
    from ckptzip.container import CHUNK_DIGEST_HEX, MANIFEST_ZSTD, Reader

    for name, flags in (("v4_quant.ckz", 0), ("v4_zstd_manifest.ckz", MANIFEST_ZSTD)):
        with open(GOLDEN / name, "rb") as f:
            reader = Reader(f)
            assert reader.flags == flags and reader.manifest.version == 4
            assert {len(c.digest) for c in reader.manifest.chunks} == {CHUNK_DIGEST_HEX}


def test_v5_golden_files_store_crc32_chunk_digests() -> None:
    from ckptzip.container import CRC_DIGEST_HEX, MANIFEST_ZSTD, Reader

    for name in ("v5_quant.ckz", "v5_zstd_manifest.ckz"):
        with open(GOLDEN / name, "rb") as f:
            reader = Reader(f)
            assert reader.manifest.version == 5
            assert reader.flags == MANIFEST_ZSTD or name == "v5_quant.ckz"
            for i, (_, data) in enumerate(reader.iter_chunks()):
                assert reader.manifest.chunks[i].digest == f"{zlib.crc32(data):08x}"
            assert {len(c.digest) for c in reader.manifest.chunks} == {CRC_DIGEST_HEX}
