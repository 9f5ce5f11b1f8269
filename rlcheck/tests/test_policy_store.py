"""Policy files: atomic writes, and reads that warn and ignore instead of failing."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlcheck.errors import InvalidArgument, RLCheckWarning
from rlcheck.learner import Policy
from rlcheck.policy_store import FILE_FORMAT, FILE_VERSION, load_policy, save_policy


def _trained() -> Policy:
    p = Policy(seed=0)
    p.learn([("value", ("LEFT", 3), 2), ("has_left", (), 1)], 20.0)
    p.learn([("value", ("LEFT", 3), 0)], -1.0)
    return p


def _load_quietly(path: Path, **kwargs: object) -> tuple[bool, list[warnings.WarningMessage]]:
    q = Policy(seed=0)
    q.learn([("marker", (), 0)], 5.0)
    before = q.to_dict()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = load_policy(path, q, **kwargs)  # type: ignore[arg-type]
    if not ok:
        assert q.to_dict() == before, "a failed load must leave the policy unchanged"
    return ok, caught


def test_round_trip_with_meta(tmp_path: Path) -> None:
    p = _trained()
    path = tmp_path / "p.json"
    save_policy(path, p, meta={"generator": "bst", "k": 4, "labels": ("LEFT", "RIGHT")})
    q = Policy(seed=1)
    ok, caught = _load_quietly(path, expect_meta={"generator": "bst", "labels": ("LEFT", "RIGHT")})
    assert ok and not caught
    assert load_policy(path, q)
    assert q.to_dict() == p.to_dict()
    document = json.loads(path.read_text())
    assert document["format"] == FILE_FORMAT and document["version"] == FILE_VERSION
    assert document["meta"]["k"] == 4


def test_missing_file_is_silent(tmp_path: Path) -> None:
    ok, caught = _load_quietly(tmp_path / "nope.json")
    assert not ok and not caught


def _good_text(tmp_path: Path) -> str:
    path = tmp_path / "good.json"
    save_policy(path, _trained(), meta={"generator": "bst"})
    return path.read_text()


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda s: s[: len(s) // 2], "not valid JSON"),
        (lambda s: "", "not valid JSON"),
        (lambda s: "\x00\xff garbage", "not valid JSON"),
        (lambda s: "[1, 2, 3]", "not an rlcheck policy file"),
        (lambda s: s.replace(f'"version":{FILE_VERSION}', '"version":99'), "version 99"),
        (lambda s: s.replace('"format":"rlcheck-policy"', '"format":"x"'), "not an rlcheck"),
        (
            lambda s: s.replace('"meta":{', '"meta":[{').replace('"},"policy"', '"}],"policy"'),
            "meta",
        ),
        (lambda s: s.replace('"tables":[', '"tables":[7,'), "malformed"),
    ],
)
def test_corrupt_file_warns_once_and_is_ignored(
    mutate: object, reason: str, tmp_path: Path
) -> None:
    path = tmp_path / "p.json"
    path.write_text(mutate(_good_text(tmp_path)))  # type: ignore[operator]
    ok, caught = _load_quietly(path)
    assert not ok
    assert len(caught) == 1
    assert issubclass(caught[0].category, RLCheckWarning)
    assert reason in str(caught[0].message)
    assert str(path) in str(caught[0].message)


def test_meta_mismatch_is_ignored_with_warning(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    save_policy(path, _trained(), meta={"generator": "bst", "state": "ancestor"})
    ok, caught = _load_quietly(path, expect_meta={"state": "sequence"})
    assert not ok and len(caught) == 1
    assert "state='ancestor'" in str(caught[0].message)
    ok, caught = _load_quietly(path, expect_meta={"absent_key": 1})
    assert not ok and "<missing>" in str(caught[0].message)


def test_directory_instead_of_file_warns(tmp_path: Path) -> None:
    ok, caught = _load_quietly(tmp_path)
    assert not ok and len(caught) == 1


def test_unserialisable_meta_rejected_and_nothing_written(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with pytest.raises(InvalidArgument, match="meta="):
        save_policy(path, _trained(), meta={"f": object()})
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_previous_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.json"
    save_policy(path, _trained(), meta={"n": 1})
    before = path.read_bytes()

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space"):
        save_policy(path, Policy(), meta={"n": 2})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_overwrite_replaces_file(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    save_policy(path, Policy(), meta={"n": 1})
    save_policy(path, _trained(), meta={"n": 2})
    q = Policy()
    assert load_policy(path, q, expect_meta={"n": 2})
    assert q.to_dict() == _trained().to_dict()


@settings(
    max_examples=150,
    deadline=None,  # a loaded CI machine is not what this test measures
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_arbitrary_bytes_never_raise(tmp_path: Path, data: st.DataObject) -> None:
    good = _good_text(tmp_path).encode()
    blob = data.draw(
        st.one_of(
            st.binary(max_size=300),
            # mutated real files: flip a byte or cut the tail
            st.integers(0, len(good) - 1).map(lambda i: good[:i]),
            st.tuples(st.integers(0, len(good) - 1), st.integers(0, 255)).map(
                lambda t: good[: t[0]] + bytes([t[1]]) + good[t[0] + 1 :]
            ),
        )
    )
    path = tmp_path / "fuzz.json"
    path.write_bytes(blob)
    ok, caught = _load_quietly(path)
    assert ok or len(caught) == 1


# -- bounds and validation (issue: loosely bounded policy files) -------------------------


def test_size_cap_is_checked_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.json"
    save_policy(path, _trained())
    read_bytes_called = False

    def spy(self: Path) -> bytes:
        nonlocal read_bytes_called
        read_bytes_called = True
        return b""

    monkeypatch.setattr(Path, "read_bytes", spy)
    ok, caught = _load_quietly(path, max_bytes=10)
    assert not ok and not read_bytes_called
    assert "233 bytes, more than the 10 allowed" in str(caught[0].message)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "fifo.json"
    os.mkfifo(path)
    ok, caught = _load_quietly(path)
    assert not ok and "not a regular file" in str(caught[0].message)


@pytest.mark.parametrize(
    "row",
    [["1.5", 1], [True, 1], [1e308, 1], [20.0, 1.5], [20.0, -1], [float("nan"), 1]],
    ids=["string", "bool", "huge", "fractional-count", "negative-count", "nan"],
)
def test_wrong_value_types_are_refused(tmp_path: Path, row: list[object]) -> None:
    document = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "meta": {},
        "policy": {"format": "rlcheck-policy", "version": 1, "tables": [["p", [["s", row]]]]},
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps(document))
    ok, caught = _load_quietly(path)
    assert not ok and "ignoring policy file" in str(caught[0].message)


def test_table_count_is_bounded_like_rows(tmp_path: Path) -> None:
    p = Policy(seed=0)
    for i in range(50):
        p.learn([(f"point{i}", (), 0)], 20.0)
    path = tmp_path / "p.json"
    save_policy(path, p)
    q = Policy(seed=0, max_tables=10)
    assert load_policy(path, q)
    assert len(q.points) == 10
    for i in range(5):  # and at run time: the oldest table goes
        q.table(f"new{i}")
    assert len(q.points) == 10


def test_non_finite_keys_are_refused_when_saving_with_a_precise_message(tmp_path: Path) -> None:
    p = Policy(seed=0)
    p.learn([("value", (float("nan"),), 0)], 20.0)
    with pytest.raises(InvalidArgument, match=r"point 'value'.*nan.*not a finite float"):
        save_policy(tmp_path / "p.json", p, meta={"generator": "g"})
    # and a file holding one (NaN is not JSON) is refused on load
    text = _good_text(tmp_path).replace('"LEFT"', "NaN", 1)
    (tmp_path / "nan.json").write_text(text)
    ok, caught = _load_quietly(tmp_path / "nan.json")
    assert not ok and "NaN" in str(caught[0].message)


def test_rewriting_a_policy_keeps_the_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    save_policy(path, _trained())
    os.chmod(path, 0o644)
    save_policy(path, _trained())
    assert (path.stat().st_mode & 0o777) == 0o644
    fresh = tmp_path / "new.json"
    save_policy(fresh, _trained())
    umask = os.umask(0)
    os.umask(umask)
    assert (fresh.stat().st_mode & 0o777) == 0o666 & ~umask


def test_a_policy_of_another_generator_is_kept_aside_not_overwritten(tmp_path: Path) -> None:
    import rlcheck
    from rlcheck.guides import RLGuide

    path = tmp_path / "policy.json"

    def pair(g: rlcheck.Gen) -> tuple[int, int]:
        return g.integer(0, 9, label="a"), g.integer(0, 9, label="b")

    def triple(g: rlcheck.Gen) -> tuple[int, int, int]:
        return g.integer(0, 9, label="a"), g.integer(0, 9, label="b"), g.integer(0, 9)

    rlcheck.run(pair, lambda p: p[0] < p[1], guide=RLGuide(seed=0, policy_file=path), trials=300)
    learned = path.read_bytes()
    with pytest.warns(RLCheckWarning, match=r"kept aside as .*policy\.json\.foreign-1"):
        rlcheck.run(triple, lambda t: True, guide=RLGuide(seed=0, policy_file=path), trials=50)
    assert (tmp_path / "policy.json.foreign-1").read_bytes() == learned
    assert path.read_bytes() != learned  # the new generator's policy
