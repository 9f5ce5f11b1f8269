"""Tests of structure: flatten/unflatten round trips, refusals with paths, hostile skeletons."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import ckptzip
from ckptzip.errors import CorruptCheckpointError, UnsupportedValueError
from ckptzip.structure import (
    DTYPES,
    MAX_DEPTH,
    MAX_INT_BITS,
    dtype_from_name,
    dtype_name,
    flatten,
    ndarray_entries,
    skeleton_version,
    unflatten,
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
tensors = st.builds(lambda n: torch.arange(n, dtype=torch.float32), st.integers(0, 4))
keys = st.one_of(st.text(alphabet="abc.", min_size=1, max_size=4), st.integers(0, 5))
nested = st.recursive(
    st.one_of(scalars, tensors),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=20,
)


def same(a: Any, b: Any) -> bool:
    """Structural equality that treats NaN as equal to NaN and checks container types."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@given(nested)
def test_round_trip_through_json(obj: Any) -> None:
    skel, entries = flatten(obj)
    text = json.dumps(skel, allow_nan=False)  # the skeleton is strict JSON
    back = unflatten(json.loads(text), [t for _, t in entries])
    assert same(obj, back)


def test_paths_use_slashes_and_keep_order() -> None:
    sd = OrderedDict([("fc.weight", torch.ones(2)), ("fc.bias", torch.zeros(2))])
    obj = {"model": sd, "optimizer": {"state": {3: {"exp_avg": torch.ones(1)}}}, "epoch": 3}
    _, entries = flatten(obj)
    assert [p for p, _ in entries] == [
        "model/fc.weight",
        "model/fc.bias",
        "optimizer/state/3/exp_avg",
    ]


def test_int_keys_tuples_and_nonfinite_are_preserved() -> None:
    obj = {0: (1, 2.0), "x": [math.inf, -math.inf, -0.0]}
    back = unflatten(*[flatten(obj)[0], []])
    assert same(obj, back)
    assert isinstance(back[0], tuple) and 0 in back


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        ({"a": {"b": object()}}, "'a/b'"),
        ({"a": [1, {2.5: 1}]}, "key 2.5"),
        ({"a": b"bytes"}, "builtins.bytes"),
        ({"s": torch.zeros(3).to_sparse()}, "layout"),
        ({True: 1}, "key True"),
    ],
)
def test_unsupported_values_name_their_path(obj: Any, fragment: str) -> None:
    with pytest.raises(UnsupportedValueError, match=fragment.replace(".", r"\.")):
        flatten(obj)


def test_cycles_depth_and_duplicate_paths_are_refused() -> None:
    cyc: list[Any] = []
    cyc.append(cyc)
    with pytest.raises(UnsupportedValueError, match="cycle"):
        flatten(cyc)
    deep: Any = 1
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(UnsupportedValueError, match="deeper"):
        flatten(deep)


def test_shared_object_is_not_a_cycle() -> None:
    shared = [1, 2]
    back = unflatten(flatten({"a": shared, "b": shared})[0], [])
    assert back == {"a": [1, 2], "b": [1, 2]}


@pytest.mark.parametrize(
    "skel",
    [
        [1, 2],
        {"$": "list"},
        {"$": "tensor", "i": 5},
        {"$": "tensor", "i": True},
        {"$": "dict", "k": ["a", "a"], "v": [1, 2]},
        {"$": "dict", "k": [1.5], "v": [1]},
        {"$": "dict", "k": ["a"], "v": []},
        {"$": "float", "v": "huge"},
        {"$": "pickle", "v": "gASV"},
        {"$": "list", "v": [1], "extra": 0},
        math.nan,
    ],
)
def test_malformed_skeletons_raise_corrupt(skel: Any) -> None:
    with pytest.raises(CorruptCheckpointError):
        unflatten(skel, [torch.zeros(1)] if "tensor" in repr(skel) else [])


def test_unreferenced_and_doubly_referenced_tensors() -> None:
    with pytest.raises(CorruptCheckpointError, match="never referenced"):
        unflatten({"$": "list", "v": []}, [torch.zeros(1)])
    ref = {"$": "tensor", "i": 0}
    with pytest.raises(CorruptCheckpointError, match="twice"):
        unflatten({"$": "list", "v": [ref, ref]}, [torch.zeros(1)], version=1)
    # version 2: two names of one entry (tied weights) share its storage
    a, b = unflatten({"$": "list", "v": [ref, ref]}, [torch.zeros(1)])
    assert a is not b and a.data_ptr() == b.data_ptr()


def test_deep_skeleton_is_refused() -> None:
    node: Any = 1
    for _ in range(MAX_DEPTH + 2):
        node = {"$": "list", "v": [node]}
    with pytest.raises(CorruptCheckpointError, match="deeper"):
        unflatten(node, [])


def test_dtype_names_round_trip() -> None:
    for name, dtype in DTYPES.items():
        assert dtype_name(dtype) == name and dtype_from_name(name) is dtype
    with pytest.raises(CorruptCheckpointError):
        dtype_from_name("float128")


def test_numpy_scalars_and_subclasses_become_plain_values() -> None:
    import collections

    import numpy as np

    Point = collections.namedtuple("Point", "x y")
    obj = {
        "i": np.int64(3),
        "f": np.float32(0.5),
        "b": np.bool_(True),
        "nan": np.float64("nan"),
        "p": Point(1, 2),
        "size": torch.Size([2, 3]),
        "dd": collections.defaultdict(int, a=1),
    }
    back = unflatten(json.loads(json.dumps(flatten(obj)[0])), [])
    assert back["i"] == 3 and type(back["i"]) is int
    assert back["f"] == 0.5 and type(back["f"]) is float
    assert back["b"] is True
    assert math.isnan(back["nan"])
    assert back["p"] == (1, 2) and type(back["p"]) is tuple
    assert back["size"] == (2, 3) and type(back["dd"]) is dict


json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=4)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["$", "v", "k", "i", "x"]), inner, max_size=3),
        st.builds(
            lambda tag, rest: {"$": tag, **rest},
            st.sampled_from(["list", "tuple", "dict", "tensor", "float", "bogus"]),
            st.dictionaries(st.sampled_from(["v", "k", "i"]), inner, max_size=3),
        ),
    ),
    max_leaves=15,
)


@given(json_values, st.integers(0, 3))
def test_unflatten_of_arbitrary_json_only_raises_corrupt(node: Any, n: int) -> None:
    try:
        obj = unflatten(node, [torch.zeros(1) for _ in range(n)])
    except CorruptCheckpointError:
        return
    # accepted: a well-formed structure that uses each leaf exactly once
    assert len(flatten(obj)[1]) == n


def _through_json(obj: Any) -> tuple[Any, Any, list[tuple[str, torch.Tensor]]]:
    """``obj`` flattened, sent through JSON and rebuilt over copies of its entries."""
    skel, entries = flatten(obj)
    skel = json.loads(json.dumps(skel, allow_nan=False))
    return unflatten(skel, [t.clone() for _, t in entries]), skel, entries


def test_tied_tensors_are_one_entry_and_come_back_shared() -> None:
    w = torch.randn(5, 3)
    back, skel, entries = _through_json({"wte": w, "lm_head": w, "other": torch.ones(2)})
    assert [p for p, _ in entries] == ["wte", "other"]
    assert skeleton_version(skel) == 2
    assert back["wte"] is not back["lm_head"]
    assert back["wte"].data_ptr() == back["lm_head"].data_ptr()
    back["wte"].add_(1)
    assert torch.equal(back["lm_head"], w + 1)


def test_state_dict_of_a_tied_module_shares_storage() -> None:
    emb = torch.nn.Embedding(7, 4)
    head = torch.nn.Linear(4, 7, bias=False)
    head.weight = emb.weight
    sd = torch.nn.Sequential(emb, head).state_dict()
    back, _, entries = _through_json(sd)
    assert [p for p, _ in entries] == ["0.weight"]
    assert back["0.weight"].data_ptr() == back["1.weight"].data_ptr()


@pytest.mark.parametrize(
    "make",
    [
        lambda w: {"w": w, "row": w[2], "col": w[:, 1], "t": w.t(), "flat": w.view(-1)},
        lambda w: {"row": w[2], "w": w},  # the view comes first: the base is still the entry
        lambda w: {"a": w.view(-1)[3:9], "b": w.view(-1)[6:14]},  # views without their base
        lambda w: {"x": w.expand(2, 6, 4), "y": w[1:3]},  # stride 0
    ],
)
def test_views_come_back_as_views_of_one_entry(make: Any) -> None:
    w = torch.arange(24.0).reshape(6, 4)
    obj = make(w)
    back, _, entries = _through_json(obj)
    assert len(entries) == 1
    base = entries[0][1]
    assert base.numel() <= w.numel()
    for k, v in obj.items():
        assert torch.equal(back[k], v) and back[k].stride() == v.stride(), k
    # one storage behind every name, as torch.save gives back
    ptrs = {t.untyped_storage().data_ptr() for t in back.values()}
    assert len(ptrs) == 1


def test_views_reaching_outside_their_entry_are_corrupt() -> None:
    base = [torch.zeros(6)]
    node = {"$": "view", "i": 0, "offset": 2, "shape": [3], "stride": [2]}
    with pytest.raises(CorruptCheckpointError, match="reaches element 6"):
        unflatten(node, base)
    for bad in (
        {**node, "offset": -1},
        {**node, "shape": [1, 2]},
        {**node, "stride": [True]},
        {**node, "shape": [1 << 30] * 3, "stride": [0, 0, 0], "offset": 0},
        {**node, "extra": 1},
    ):
        with pytest.raises(CorruptCheckpointError):
            unflatten(bad, base)
    with pytest.raises(CorruptCheckpointError, match="unknown node tag 'view'"):
        unflatten({**node, "offset": 0}, base, version=1)


def test_numpy_arrays_and_rng_states_round_trip_exactly() -> None:
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(5)
    obj = {
        "legacy": np.random.RandomState(3).get_state(),
        "legacy_dict": np.random.RandomState(4).get_state(legacy=False),
        "generator": rng.bit_generator.state,
        "philox": np.random.Philox(7).state,
        "arrays": [
            np.arange(6, dtype=">i4").reshape(2, 3),  # big-endian: stored by value
            np.linspace(0, 1, 5)[::2],  # not contiguous
            np.array(3.5, dtype=np.float16),
            np.array([True, False]),
            np.array([1 + 2j], dtype=np.complex64),
            np.array([2**64 - 1], dtype=np.uint64),
        ],
    }
    back, skel, entries = _through_json(obj)
    assert ndarray_entries(skel) == set(range(len(entries)))
    assert skeleton_version(skel) == 2
    state = np.random.RandomState()
    state.set_state(back["legacy"])
    assert state.randint(1 << 30) == np.random.RandomState(3).randint(1 << 30)
    state.set_state(back["legacy_dict"])
    g = np.random.Generator(np.random.PCG64())
    g.bit_generator.state = back["generator"]
    assert g.integers(1 << 40) == rng.integers(1 << 40)
    assert back["philox"]["state"]["counter"].dtype == np.uint64
    for a, b in zip(obj["arrays"], back["arrays"], strict=True):
        assert isinstance(b, np.ndarray) and b.shape == a.shape
        assert b.dtype == a.dtype.newbyteorder("=") and np.array_equal(a, b)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (lambda np: np.array(["a"]), "dtype <U1"),
        (lambda np: np.array([object()]), "dtype object"),
        (lambda np: np.zeros(2, dtype=[("a", "i4")]), "dtype"),
    ],
)
def test_numpy_arrays_that_need_pickle_are_refused(value: Any, fragment: str) -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(UnsupportedValueError, match=fragment):
        flatten({"x": value(np)})


def test_huge_integers_are_refused_before_any_work() -> None:
    flatten({"ok": 1 << MAX_INT_BITS - 1, "pcg": 2**128 - 1})
    with pytest.raises(UnsupportedValueError, match=r"'big'.*bits"):
        flatten({"big": 10**5000})
    with pytest.raises(UnsupportedValueError, match="integer key"):
        flatten({10**5000: 1})


def test_keys_whose_paths_coincide_round_trip_with_their_types() -> None:
    t, u, v = torch.ones(2), torch.zeros(3), torch.arange(4.0)
    obj = {1: t, "1": u, "a/b": v, "a": {"b": t + 1}}
    skeleton, leaves = flatten(obj)
    assert [p for p, _ in leaves] == ["1", "1#2", "a/b", "a/b#2"]
    back = unflatten(skeleton, [x for _, x in leaves])
    assert list(back) == [1, "1", "a/b", "a"]
    assert torch.equal(back[1], t) and torch.equal(back["1"], u)
    assert torch.equal(back["a/b"], v) and torch.equal(back["a"]["b"], t + 1)


def test_keys_whose_paths_coincide_through_save_and_load(tmp_path: Path) -> None:
    obj = {1: torch.randn(5000), "1": torch.randn(5000), "1#2": torch.ones(3)}
    ckptzip.save(obj, tmp_path / "c.ckz", config=ckptzip.CompressionConfig(exact=("*",)))
    back = ckptzip.load(tmp_path / "c.ckz")
    assert list(back) == [1, "1", "1#2"] and [type(k) for k in back] == [int, str, str]
    assert all(torch.equal(back[k], obj[k]) for k in obj)
    # the entries are named apart, each with its own decision
    paths = [e.path for e in ckptzip.api.read_manifest(tmp_path / "c.ckz").tensors]
    assert paths == ["1", "1#2", "1#2#2"]
