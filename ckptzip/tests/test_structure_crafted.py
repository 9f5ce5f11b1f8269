"""Crafted files and odd states against the structure and container layers: hostile views
and manifests, and states whose values did not come back as they were saved (or crashed the
save).

Each test failed before its fix; the module it guards is named in its docstring.
"""

from __future__ import annotations

import collections
import io
import json
import random
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
import zstandard
from _crafted import seal, split

import ckptzip
from ckptzip.container import (
    _MAX_INFLATION,
    _PARSE_BYTES_PER_STORED_BYTE,
    HEADER,
    MANIFEST_ZSTD,
    Manifest,
    Reader,
    _parse_cost,
    write,
)
from ckptzip.errors import CorruptCheckpointError, DecodeLimitError, UnsupportedValueError
from ckptzip.structure import MAX_NUMEL, flatten, unflatten


def _saved(obj: Any, **kw: Any) -> bytes:
    buf = io.BytesIO()
    ckptzip.save(obj, buf, **kw)
    return buf.getvalue()


def _round_trip(obj: Any) -> Any:
    return ckptzip.load(io.BytesIO(_saved(obj)))


def _with_view(node: dict[str, Any]) -> bytes:
    """A file of one 4-element entry ``a`` and the view node ``v`` of it."""
    doc, body = split(_saved({"a": torch.ones(4)}))
    skeleton = {"$": "dict", "k": ["a", "v"], "v": [{"$": "tensor", "i": 0}, node]}
    return seal(dict(doc, skeleton=skeleton), body)


@pytest.mark.parametrize(
    ("offset", "shape", "stride"),
    [
        (2**63, [0], [1]),  # an empty view skipped the reach check
        (0, [1], [2**64]),  # a dim of 1 never multiplies its stride
        (0, [2**70, 0], [1, 1]),  # the capped product was 0
        (0, [2**32, 2**32, 25, 0], [1, 1, 1, 1]),  # torch: "integer multiplication overflow"
    ],
)
def test_views_past_int64_are_refused_typed_at_verify_and_load(
    offset: int, shape: list[int], stride: list[int]
) -> None:
    """structure.unflatten: every offset, stride and dim within int64 and MAX_NUMEL."""
    data = _with_view({"$": "view", "i": 0, "offset": offset, "shape": shape, "stride": stride})
    with pytest.raises(CorruptCheckpointError, match="malformed structure node"):
        ckptzip.verify(io.BytesIO(data), decode=True)
    with pytest.raises(CorruptCheckpointError, match="malformed structure node"):
        ckptzip.load(io.BytesIO(data))


def test_entry_shapes_whose_nonzero_dims_overflow_are_refused_typed() -> None:
    """container._entry_from_json: [0, 2**70] has 0 elements but torch cannot make it."""
    doc, body = split(_saved({"a": torch.ones(4)}))
    doc["tensors"][0]["shape"] = [0, 2**70]
    with pytest.raises(CorruptCheckpointError, match="non-zero dims"):
        ckptzip.load(io.BytesIO(seal(doc, body)))


def test_empty_views_within_int64_still_load() -> None:
    node = {"$": "view", "i": 0, "offset": 4, "shape": [0, MAX_NUMEL], "stride": [2**63 - 1, 1]}
    back = ckptzip.load(io.BytesIO(_with_view(node)))["v"]
    assert back.shape == (0, MAX_NUMEL) and back.clone().numel() == 0


def test_a_stride_zero_view_counts_all_its_elements_against_max_bytes() -> None:
    """container.Reader.check_limit: a 2**48-element view of a 4-element entry."""
    node = {"$": "view", "i": 0, "offset": 0, "shape": [2**48], "stride": [0]}
    data = _with_view(node)
    with pytest.raises(DecodeLimitError, match=r"of them views.*max_bytes=2048"):
        ckptzip.load(io.BytesIO(data), max_bytes=2048)
    with pytest.raises(DecodeLimitError, match="views"):
        ckptzip.verify(io.BytesIO(data), max_bytes=2048)
    with pytest.raises(DecodeLimitError, match="views"):
        ckptzip.load(io.BytesIO(data))  # the default limit: no machine has 2**50 bytes


def test_expanded_views_that_save_writes_still_load_within_their_bytes() -> None:
    x = torch.arange(3.0)
    obj = {"a": x, "e": x.expand(1000, 3)}
    data = _saved(obj)
    assert Reader(io.BytesIO(data)).view_bytes == 1000 * 3 * 4
    back = ckptzip.load(io.BytesIO(data), max_bytes=12 + 12_000)
    assert back["e"].stride() == (0, 1) and torch.equal(back["e"], obj["e"])
    assert back["e"].data_ptr() == back["a"].data_ptr()
    with pytest.raises(DecodeLimitError, match="max_bytes=12012"):
        ckptzip.load(io.BytesIO(data), max_bytes=12_000)


def _compressed_skeleton_file(junk: bytes) -> bytes:
    """A file whose zstd manifest holds ``junk`` (a JSON array) beside a real tensor."""
    doc, body = split(_saved({"w": torch.ones(2)}))
    skeleton = {"$": "dict", "k": ["w", "j"], "v": [{"$": "tensor", "i": 0}, "@@"]}
    raw = json.dumps(dict(doc, skeleton=skeleton)).encode().replace(b'"@@"', junk)
    packed = zstandard.ZstdCompressor(level=3).compress(raw)
    return seal(packed, body, flags=MANIFEST_ZSTD)


@pytest.mark.parametrize("item", [b"0.0", b"null"])
def test_a_compressed_manifest_inflating_past_its_ratio_is_refused_unparsed(item: bytes) -> None:
    """container._inflate_manifest: 64 MB of cheap values from a 6 KB file took 700 MB and
    25 s to load; 16 MB here."""
    n = (16 << 20) // (len(item) + 1)
    data = _compressed_skeleton_file(b'{"$": "list", "v": [' + b",".join([item] * n) + b"]}")
    assert len(data) < 20_000
    with pytest.raises(DecodeLimitError, match="zstd bomb"):
        ckptzip.load(io.BytesIO(data), max_bytes=1 << 20)


def test_a_compressed_manifest_costing_more_than_its_stored_bytes_allow_is_refused() -> None:
    """container._parse_limit: within the inflation ratio, still too many values per stored
    byte (a random value among every 3000 keeps the ratio down)."""
    rng = random.Random(0)
    items = [b"0.0"] * 4_000_000
    for i in range(0, len(items), 3000):
        items[i] = b"%d.0" % rng.randrange(10**9)
    values = b",".join(items)
    data = _compressed_skeleton_file(b'{"$": "list", "v": [' + values + b"]}")
    mlen = HEADER.unpack(data[: HEADER.size])[3]
    assert 500 * mlen < len(values) < 4096 * mlen  # not the ratio rule
    with pytest.raises(DecodeLimitError, match="to parse"):
        ckptzip.load(io.BytesIO(data))


def test_real_compressed_manifests_stay_well_within_both_bounds() -> None:
    """The densest manifests ckptzip writes, constant tensors (their chunks and records
    compress away) under long names, use under a quarter of each bound."""
    obj = {f"model.encoder.layer.{i}." + "x" * 1000: torch.zeros(2) for i in range(2000)}
    data = _saved(obj)
    _, _, flags, mlen = HEADER.unpack(data[: HEADER.size])
    assert flags & MANIFEST_ZSTD
    raw = zstandard.ZstdDecompressor().decompress(data[HEADER.size : HEADER.size + mlen])
    assert len(raw) < _MAX_INFLATION * mlen / 4
    assert _parse_cost(raw) < _PARSE_BYTES_PER_STORED_BYTE * mlen / 4
    assert ckptzip.load(io.BytesIO(data)).keys() == obj.keys()


def test_a_manifest_that_would_be_a_bomb_compressed_is_written_plain() -> None:
    """container.write: 700k equal floats compress 3000x; stored plain they load."""
    skeleton = {"$": "list", "v": [0.0] * 700_000}
    buf = io.BytesIO()
    write(buf, Manifest(skeleton=skeleton, tensors=(), chunks=()), [])
    assert not HEADER.unpack(buf.getvalue()[: HEADER.size])[2] & MANIFEST_ZSTD
    assert Reader(buf).manifest.skeleton == skeleton


def test_freed_and_fake_storages_are_refused_by_key_not_read() -> None:
    """structure._checked_storage: a freed storage (FSDP's resize_(0)) or a FakeTensor's was
    read: a SIGSEGV in the lossy kernels, heap garbage stored when exact. Run in a child
    process: before the fix it killed the interpreter."""
    code = textwrap.dedent(
        """
        import io, warnings, torch, ckptzip
        from torch._subclasses.fake_tensor import FakeTensorMode

        def refused(x, exact, why):
            cfg = ckptzip.CompressionConfig(exact=("*",)) if exact else None
            try:
                ckptzip.save({"m": {"x": x}}, io.BytesIO(), config=cfg)
            except ckptzip.UnsupportedValueError as e:
                assert "'m/x'" in str(e) and any(w in str(e) for w in why), e
            else:
                raise AssertionError(f"saved {why}")

        for n, exact in ((5000, False), (100, False), (5000, True)):
            x = torch.randn(n)
            x.untyped_storage().resize_(0)
            refused(x, exact, ["freed"])
        with FakeTensorMode():
            fake = torch.randn(5000)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns of reading a FakeTensor's pointer
            refused(fake, False, ["no data", "no storage"])
        print("refused")
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "refused" in run.stdout, run.stderr[-2000:]


def test_a_view_reaching_past_a_shrunk_storage_is_refused() -> None:
    x = torch.randn(100)
    v = x[50:]
    x.untyped_storage().resize_(60 * 4)
    with pytest.raises(UnsupportedValueError, match=r"'v' reaches 400 bytes.*holds 240"):
        ckptzip.save({"v": v}, io.BytesIO())


def test_empty_tensors_over_any_storage_still_save() -> None:
    x = torch.randn(8)
    e = x[8:]
    x.untyped_storage().resize_(0)
    back = _round_trip({"e": e, "z": torch.empty(0, 3)})
    assert back["e"].shape == (0,) and back["z"].shape == (0, 3)


def test_a_counter_comes_back_a_counter_and_a_multisteplr_steps() -> None:
    """structure.flatten / unflatten: the 'counter' node (MultiStepLR's milestones)."""
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [2, 5, 5])
    back = _round_trip({"s": sched.state_dict(), "c": collections.Counter({"b": 2, "a": -1})})
    assert type(back["s"]["milestones"]) is collections.Counter
    assert back["s"]["milestones"] == collections.Counter([2, 5, 5])
    assert list(back["c"].items()) == [("b", 2), ("a", -1)]  # order and counts kept
    opt2 = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    sched2 = torch.optim.lr_scheduler.MultiStepLR(opt2, [1])
    sched2.load_state_dict(back["s"])
    with pytest.warns(UserWarning):  # the deprecated epoch argument, the Counter.elements path
        sched2.step(epoch=6)
    assert opt2.param_groups[0]["lr"] == pytest.approx(0.1 * 0.1**3)


def test_other_dict_subclasses_still_come_back_as_dict() -> None:
    class AttributeDict(dict):  # type: ignore[type-arg]
        pass

    back = _round_trip({"h": AttributeDict(lr=0.1), "d": collections.OrderedDict(a=1)})
    assert type(back["h"]) is dict and type(back["d"]) is dict


def test_a_counter_node_is_refused_in_files_older_than_version_5() -> None:
    skeleton = {"$": "counter", "k": ["a"], "v": [1]}
    assert type(unflatten(skeleton, [])) is collections.Counter  # the newest rules by default
    with pytest.raises(CorruptCheckpointError, match="unknown node tag 'counter'"):
        unflatten(skeleton, [], version=4)


def test_parameters_and_leaves_requiring_grad_come_back_so() -> None:
    """structure.flatten / unflatten: 'param' and 'grad' on tensor and view nodes."""
    p = torch.nn.Parameter(torch.randn(4, 3))
    frozen = torch.nn.Parameter(torch.arange(3), requires_grad=False)
    prompt = torch.randn(5, requires_grad=True)
    back = _round_trip({"p": p, "tied": p, "row": p[0], "frozen": frozen, "prompt": prompt})
    assert type(back["p"]) is torch.nn.Parameter and back["p"].requires_grad
    assert type(back["tied"]) is torch.nn.Parameter
    assert back["tied"].data_ptr() == back["p"].data_ptr()
    # a view of a parameter is not a leaf: it comes back a plain view over the same storage
    assert type(back["row"]) is torch.Tensor and not back["row"].requires_grad
    assert back["row"].data_ptr() == back["p"].data_ptr()
    assert type(back["frozen"]) is torch.nn.Parameter and not back["frozen"].requires_grad
    assert type(back["prompt"]) is torch.Tensor and back["prompt"].is_leaf
    assert back["prompt"].requires_grad and torch.equal(back["prompt"], prompt)
    (back["p"].sum() * back["prompt"].sum()).backward()
    assert back["p"].grad is not None and back["prompt"].grad is not None


def test_a_parameter_over_part_of_a_storage_is_a_parameter_view() -> None:
    flat = torch.randn(20)
    w = torch.nn.Parameter(flat[:10])
    for obj in ({"flat": flat, "w": w}, {"w": w, "flat": flat}):
        back = _round_trip(obj)
        assert type(back["w"]) is torch.nn.Parameter and back["w"].requires_grad
        assert back["w"].data_ptr() == back["flat"].data_ptr()
        assert not back["flat"].requires_grad  # the plain tensor stays plain, in either order


def test_ordinary_state_dicts_write_no_autograd_flags() -> None:
    m = torch.nn.Linear(3, 2)
    skeleton = json.dumps(flatten({"model": m.state_dict(), "x": torch.ones(2)})[0])
    assert '"param"' not in skeleton and '"grad"' not in skeleton
    assert '"param": true' in json.dumps(flatten(m.state_dict(keep_vars=True))[0])


@pytest.mark.parametrize(
    "node",
    [
        {"$": "tensor", "i": 0, "grad": False},
        {"$": "tensor", "i": 0, "param": 1},
        {"$": "ndarray", "i": 0, "grad": True},
    ],
)
def test_malformed_autograd_flags_are_refused(node: dict[str, Any]) -> None:
    with pytest.raises(CorruptCheckpointError, match="malformed structure node"):
        unflatten(node, [torch.ones(2)], version=5)


def test_autograd_flags_are_refused_in_files_older_than_version_5() -> None:
    with pytest.raises(CorruptCheckpointError, match="expected the keys"):
        unflatten({"$": "tensor", "i": 0, "grad": True}, [torch.ones(2)], version=4)


def test_an_integer_tensor_marked_grad_is_refused_typed() -> None:
    with pytest.raises(CorruptCheckpointError, match="cannot require grad"):
        unflatten({"$": "tensor", "i": 0, "grad": True}, [torch.ones(2, dtype=torch.int64)])


def test_a_meta_tensor_is_refused_with_a_message_that_fits() -> None:
    with pytest.raises(UnsupportedValueError, match=r"'m'.*meta.*materialise") as info:
        ckptzip.save({"m": torch.empty(10, device="meta")}, io.BytesIO())
    assert "dequantize" not in str(info.value)
