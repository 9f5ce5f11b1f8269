"""ckptzip.dcp against crafted files: a parent chain that loops or lies about its depth, and
rank files whose stored tensors do not match ``.metadata`` (views that repeat their bytes,
pieces too small, other dtypes). Each is refused with a ckptzip error or written as a full
file, never a hang, a bare torch error or memory a small file does not hold."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
import zstandard
from _crafted import body_chunks, reseal_chunks, seal, split
from torch.distributed.checkpoint.api import CheckpointException

import ckptzip
from ckptzip import api
from ckptzip.dcp import METADATA_NAME, Reader, Writer

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _rewrite(path: Path, craft: Callable[[dict[str, Any], bytes], bytes]) -> None:
    """Replace a rank file by a crafted one (not in place: other directories link it)."""
    doc, body = split(path.read_bytes())
    data = craft(doc, body)
    path.unlink()
    path.write_bytes(data)


def _inner(info: pytest.ExceptionInfo[CheckpointException]) -> BaseException:
    """The exception a rank raised inside DCP's CheckpointException."""
    (exc, _), *_ = info.value.failures.values()
    return exc


# --- the writer walks its parent's chain: bounded, without cycles, depth counted ------------


def _two_steps(tmp_path: Path) -> torch.Tensor:
    w = torch.randn(5000)
    dcp.save({"w": w}, storage_writer=Writer(tmp_path / "s0", threads=1), no_dist=True)
    writer = Writer(tmp_path / "s1", parent=tmp_path / "s0", threads=1)
    dcp.save({"w": w + 0.01}, storage_writer=writer, no_dist=True)
    return w


@pytest.mark.parametrize("cycle", ["itself", "through its keyframe"])
def test_writer_refuses_a_parent_chain_that_loops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cycle: str
) -> None:
    w = _two_steps(tmp_path)
    delta = tmp_path / "s1" / "__0.ckz"
    if cycle == "itself":

        def craft(doc: dict[str, Any], body: bytes) -> bytes:
            doc["parent"]["name"] = "__0.ckz"
            return seal(doc, body)

        _rewrite(delta, craft)
    else:
        keyframe = tmp_path / "s1" / api.read_manifest(delta).parent["name"]  # type: ignore[index]

        def craft_keyframe(doc: dict[str, Any], body: bytes) -> bytes:
            doc["parent"] = {"name": "__0.ckz", "hash": "0" * 64}
            return seal(doc, body)

        _rewrite(keyframe, craft_keyframe)
    read_manifest = api.read_manifest
    reads = []

    def counted(path: Any) -> Any:
        reads.append(path)
        if len(reads) > 50:  # the unbounded walk this test guards against
            raise AssertionError("the writer walks its parent's chain without end")
        return read_manifest(path)

    monkeypatch.setattr(api, "read_manifest", counted)
    writer = Writer(tmp_path / "s2", parent=tmp_path / "s1", threads=1)
    with pytest.raises(CheckpointException) as info:
        dcp.save({"w": w + 0.02}, storage_writer=writer, no_dist=True)
    exc = _inner(info)
    assert isinstance(exc, ckptzip.errors.MissingParentError), repr(exc)
    assert "cycle" in str(exc)


@pytest.mark.parametrize("depth", ["x", "²", "-50", "0", "9" * 40])
def test_writer_counts_its_parent_chain_instead_of_trusting_its_depth(
    tmp_path: Path, depth: str
) -> None:
    """Whatever ``dcp.chain_depth`` a parent records, a chain keyframes every
    ``keyframe_every`` files."""
    w = torch.randn(5000)
    dcp.save({"w": w}, storage_writer=Writer(tmp_path / "s0", threads=1), no_dist=True)
    dcp.save(
        {"w": w + 0.01},
        storage_writer=Writer(tmp_path / "s1", parent=tmp_path / "s0", threads=1),
        no_dist=True,
    )

    def craft(doc: dict[str, Any], body: bytes) -> bytes:
        doc["metadata"]["dcp.chain_depth"] = depth
        return seal(doc, body)

    _rewrite(tmp_path / "s1" / "__0.ckz", craft)
    deltas = []
    for k in range(2, 6):
        writer = Writer(
            tmp_path / f"s{k}", parent=tmp_path / f"s{k - 1}", keyframe_every=3, threads=1
        )
        dcp.save({"w": w + 0.01 * k}, storage_writer=writer, no_dist=True)
        deltas.append(api.read_manifest(tmp_path / f"s{k}" / "__0.ckz").parent is not None)
    assert deltas == [True, False, True, True]  # s1 is the 2nd file of s0's chain: s2 the 3rd
    assert len(list((tmp_path / "s5").glob("*.ckz"))) == 3
    out = {"w": torch.zeros(5000)}
    dcp.load(out, storage_reader=Reader(tmp_path / "s5", threads=1), no_dist=True)
    assert float((out["w"] - w - 0.05).norm() / w.norm()) < 0.2


# --- the reader checks each stored tensor against .metadata before using it ----------------


def _saved(tmp_path: Path) -> tuple[Path, dict[str, Any], bytes]:
    state = {"w": torch.randn(64), "v": torch.randn(64, dtype=torch.float64), "extra": {"lr": 0.1}}
    dcp.save(state, storage_writer=Writer(tmp_path, threads=1), no_dist=True)
    path = tmp_path / "__0.ckz"
    return (path, *split(path.read_bytes()))


def _node(doc: dict[str, Any], key: str) -> int:
    """The index of ``key``'s node in a file's top-level skeleton."""
    keys = doc["skeleton"]["k"]
    assert key in keys, keys
    return int(keys.index(key))


def _load_refused(tmp_path: Path, match: str) -> None:
    out = {"w": torch.zeros(64), "v": torch.zeros(64, dtype=torch.float64), "extra": {"lr": None}}
    with pytest.raises(CheckpointException) as info:
        dcp.load(out, storage_reader=Reader(tmp_path, threads=1), no_dist=True)
    exc = _inner(info)
    assert isinstance(exc, ckptzip.errors.CorruptCheckpointError), repr(exc)
    assert match in str(exc), str(exc)


_NOT_BYTES = "'extra/lr' is a byte item, which ckptzip.dcp.Writer stores as"


@pytest.mark.parametrize(
    ("shape", "stride", "match"),
    [
        ([1 << 24], [0], _NOT_BYTES),
        # so large that ckptzip.load's read limit may refuse it first (it counts views)
        ([1 << 40], [0], ""),
        ([4], [2], _NOT_BYTES),
        ([2, 4], [4, 1], _NOT_BYTES),
    ],
)
def test_reader_refuses_a_byte_item_stored_as_a_view_before_building_it(
    tmp_path: Path, shape: list[int], stride: list[int], match: str
) -> None:
    """A byte item's node turned into a view of its entry (stride 0 repeats one byte as often
    as the shape says): refused before anything is built, whatever the shape."""
    path, doc, body = _saved(tmp_path)
    node = doc["skeleton"]["v"][_node(doc, "extra/lr")]
    node.update({"$": "view", "offset": 0, "shape": shape, "stride": stride})
    path.write_bytes(seal(doc, body))
    _load_refused(tmp_path, match)


def test_reader_refuses_a_byte_item_stored_as_another_dtype(tmp_path: Path) -> None:
    path, doc, body = _saved(tmp_path)
    chunks = body_chunks(doc, body)
    entry = doc["tensors"][doc["skeleton"]["v"][_node(doc, "extra/lr")]["i"]]
    raw = zstandard.ZstdDecompressor().decompress(chunks[entry["chunks"][0]])
    raw = raw[: len(raw) // 2 * 2]
    chunks[entry["chunks"][0]] = raw
    entry["dtype"], entry["shape"] = "bfloat16", [len(raw) // 2]
    entry["meta"]["stage"] = {"enc": "raw", "size": len(raw)}
    path.write_bytes(reseal_chunks(doc, chunks))
    _load_refused(tmp_path, "holds a torch.bfloat16 tensor")


@pytest.mark.parametrize(
    ("view", "match"),
    [
        ({"shape": [4], "stride": [1]}, "[4]"),  # smaller than its chunk
        ({"shape": [], "stride": []}, "[]"),  # 0-d
        ({"shape": [2, 32], "stride": [32, 1]}, "[2, 32]"),  # another number of dimensions
    ],
)
def test_reader_refuses_a_tensor_piece_of_another_shape_than_its_chunk(
    tmp_path: Path, view: dict[str, Any], match: str
) -> None:
    path, doc, body = _saved(tmp_path)
    doc["skeleton"]["v"][_node(doc, "w")].update({"$": "view", "offset": 0, **view})
    path.write_bytes(seal(doc, body))
    _load_refused(tmp_path, match)


def _edit_metadata(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    meta = tmp_path / METADATA_NAME
    doc = json.loads(meta.read_text())
    edit(doc)
    meta.write_text(json.dumps(doc))


def test_reader_refuses_a_tensor_of_another_dtype_than_metadata_records(tmp_path: Path) -> None:
    _saved(tmp_path)

    def point_w_at_v(doc: dict[str, Any]) -> None:  # w (float32) read from v's float64 entry
        for entry in doc["storage_data"]:
            if entry[0] == "w":
                entry[4] = "v"

    _edit_metadata(tmp_path, point_w_at_v)
    _load_refused(tmp_path, "float64")


def test_reader_refuses_a_chunk_no_file_holds(tmp_path: Path) -> None:
    _saved(tmp_path)

    def drop_w(doc: dict[str, Any]) -> None:
        doc["storage_data"] = [e for e in doc["storage_data"] if e[0] != "w"]

    _edit_metadata(tmp_path, drop_w)
    _load_refused(tmp_path, "'w'")


def test_reader_still_restores_what_the_writer_wrote(tmp_path: Path) -> None:
    torch.manual_seed(0)
    state: dict[str, Any] = {"w": torch.randn(64, 128), "n": torch.arange(7)}
    state["extra"] = {"lr": 0.1, "b": b"xy"}
    dcp.save(state, storage_writer=Writer(tmp_path, threads=1), no_dist=True)
    out: dict[str, Any] = {
        "w": torch.zeros(64, 128),
        "n": torch.zeros(7, dtype=torch.int64),
        "extra": {"lr": None, "b": None},
    }
    dcp.load(out, storage_reader=Reader(tmp_path, threads=1), no_dist=True)
    assert out["extra"] == {"lr": 0.1, "b": b"xy"} and torch.equal(out["n"], state["n"])
    assert os.path.exists(tmp_path / METADATA_NAME)
