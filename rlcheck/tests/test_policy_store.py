"""Policy files: atomic writes, and reads that warn and ignore instead of failing."""

from __future__ import annotations

import json
import os
import warnings
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase

from rlcheck.errors import InvalidArgument, PolicyFileError, RLCheckWarning
from rlcheck.learner import Policy
from rlcheck.policy_store import (
    COMPACT_AT,
    FILE_FORMAT,
    FILE_VERSION,
    KEY_SUFFIX,
    VALUE_MAGIC,
    DatabasePolicy,
    encode_value,
    load_policy,
    save_policy,
)


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


# -- parse cost (RELIABILITY rlcheck #9) ---------------------------------------------------

_COST_PROBE = """
import sys, time, warnings
from rlcheck.learner import Policy
from rlcheck.policy_store import load_policy
path = sys.argv[1]
start = time.process_time()  # CPU seconds: the shared machine's load does not count
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ok = load_policy(path, Policy())
seconds = time.process_time() - start
# VmHWM: this process's peak (ru_maxrss would also count the forked parent's pages)
with open("/proc/self/status") as status:
    peak_mb = next(int(l.split()[1]) for l in status if l.startswith("VmHWM")) / 1024
print(ok, round(seconds, 3), round(peak_mb), repr(str(caught[0].message) if caught else ""))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="VmHWM: Linux")
@pytest.mark.parametrize("shape", ["empty-lists", "empty-rows-under-items-cap"])
def test_a_just_under_cap_file_of_empty_lists_costs_little(tmp_path: Path, shape: str) -> None:
    import subprocess
    import sys

    from rlcheck.policy_store import MAX_BYTES, MAX_ITEMS

    path = tmp_path / "p.json"
    if shape == "empty-lists":  # the attack: 11 million empty lists in 32 MiB
        n = (MAX_BYTES - 2) // 3
        path.write_bytes(b"[" + b"[]," * (n - 1) + b"[]]")
        assert MAX_BYTES - 3 < path.stat().st_size <= MAX_BYTES
    else:  # the most values the bound lets through, as small as a row can be
        head = (
            b'{"format":"rlcheck-policy-file","version":1,"meta":{},"policy":{"format":'
            b'"rlcheck-policy","version":1,"epsilon":0.25,"tables":[["x",['
        )
        rows = b",".join(b"[%d,[]]" % i for i in range(MAX_ITEMS // 4 - 20))
        path.write_bytes(head + rows + b"]]]}}")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    out = subprocess.run(
        [sys.executable, "-c", _COST_PROBE, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    ).stdout.split(maxsplit=3)
    ok, seconds, peak_mb = out[0] == "True", float(out[1]), int(out[2])
    assert seconds < 2.0 and peak_mb < 200, out
    if shape == "empty-lists":
        assert not ok and "refused without parsing" in out[3]
    else:
        assert ok


def test_saving_refuses_what_loading_would_refuse(tmp_path: Path) -> None:
    import rlcheck.policy_store as store

    p = Policy(seed=0)
    for i in range(200):
        p.learn([("point", (i,), 0)], 1.0)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(store, "MAX_ITEMS", 100)
        with pytest.raises(PolicyFileError, match="too large to be read back"):
            store.encode_value(p.to_dict(), None, max_items=100)
    assert not list(tmp_path.iterdir())


# -- policies in example databases (RELIABILITY rlcheck #11) -------------------------------

META = {"kind": "test"}


def _store(db: object, **kwargs: object) -> DatabasePolicy:
    return DatabasePolicy(db, b"test-key", meta=META, **kwargs)  # type: ignore[arg-type]


def _writer(
    db: object, table: str, state: tuple[int, ...], reward: float, *, final: bool = False
) -> tuple[Policy, DatabasePolicy]:
    """A learner that loads what ``db`` holds, learns one episode (action 0 in ``state`` of
    ``table``, ``reward``) and saves it (the last save of its run when ``final``); returns
    its policy and store, to go on with."""
    p = Policy()
    s = _store(db)
    s.load(p)
    p.learn([(table, state, 0)], reward)
    s.save(p, final=final)
    return p, s


def _merged(db: object) -> Policy:
    """A fresh policy loaded from ``db``: what every writer saved there, merged."""
    merged = Policy()
    _store(db).load(merged)
    return merged


def _visits(p: Policy) -> float:
    return sum(sum(row[1::2]) for t in p._tables.values() for _, row in t.items())


def test_merge_is_the_learning_rule_over_both_sets_of_episodes() -> None:
    episodes = [([("a", (i % 3,), i % 2)], float(i % 5) - 1.0) for i in range(60)]
    one, left, right = Policy(seed=0), Policy(seed=0), Policy(seed=0)
    for visits, reward in episodes:
        one.learn(visits, reward)
    for visits, reward in episodes[:25]:
        left.learn(visits, reward)
    for visits, reward in episodes[25:]:
        right.learn(visits, reward)
    left.merge_dict(right.to_dict())
    for state in range(3):
        for action in range(2):
            q, n = left.table("a").value((state,), action)
            q1, n1 = one.table("a").value((state,), action)
            assert n == n1 and q == pytest.approx(q1)


def test_interleaved_saves_keep_every_contribution() -> None:
    db = InMemoryExampleDatabase()
    learners = [(Policy(seed=i), _store(db)) for i in range(3)]
    for policy, store in learners:
        assert not store.load(policy)
    for round_ in range(5):  # each learner saves five times, interleaved with the others
        for i, (policy, store) in enumerate(learners):
            policy.learn([("p", ("s",), i)], 20.0 - round_)
            store.save(policy)
    merged = Policy()
    assert _store(db).load(merged)
    for i in range(3):
        assert merged.table("p").value(("s",), i) == (18.0, 5)
    assert len(list(db.fetch(b"test-key" + KEY_SUFFIX))) <= COMPACT_AT  # compacted


def test_a_second_learner_starts_from_the_first_and_adds_only_its_own_visits() -> None:
    db = InMemoryExampleDatabase()
    first, store = _writer(db, "p", (), 20.0)
    saved = set(db.fetch(b"test-key" + KEY_SUFFIX))
    store.save(first)  # nothing new: nothing written
    assert set(db.fetch(b"test-key" + KEY_SUFFIX)) == saved and len(saved) == 1
    second = Policy()
    again = _store(db)
    assert again.load(second) and second.table("p").value((), 0) == (20.0, 1)
    second.learn([("p", (), 0)], 10.0)
    again.save(second)
    assert _merged(db).table("p").value((), 0) == (15.0, 2)  # not 3 visits: no double count


def _finished_writer(db: object, i: int) -> None:
    _writer(db, "p", (i,), 1.0, final=True)


def _finished_writers(db: object, n: int) -> set[bytes]:
    """``n`` writers one after the other (:func:`_finished_writer` ``0 .. n-1``); the values
    under the policy's key after the last."""
    for i in range(n):
        _finished_writer(db, i)
    return set(db.fetch(b"test-key" + KEY_SUFFIX))  # type: ignore[attr-defined]


def test_finished_writers_are_compacted_and_compactors_agree() -> None:
    db = InMemoryExampleDatabase()
    key = b"test-key" + KEY_SUFFIX
    parts = _finished_writers(db, COMPACT_AT + 1)
    assert len(parts) == COMPACT_AT + 1
    twin = InMemoryExampleDatabase()
    for v in parts:
        twin.save(key, v)
    _finished_writer(db, COMPACT_AT + 1)  # one more: this save compacts the others
    _finished_writer(twin, COMPACT_AT + 1)
    values = set(db.fetch(key))
    assert len(values) == 2  # the merge of the others, and the last writer's own
    # A second compactor over the same set writes the same bytes (a set holds them once).
    assert values & set(twin.fetch(key)) and len(values & set(twin.fetch(key))) == 1
    merged = _merged(db)
    assert all(merged.table("p").value((i,), 0) == (1.0, 1) for i in range(COMPACT_AT + 2))


def test_a_merge_whose_parts_were_not_deleted_counts_them_once() -> None:
    db = InMemoryExampleDatabase()
    key = b"test-key" + KEY_SUFFIX
    parts = _finished_writers(db, COMPACT_AT + 1)
    _finished_writer(db, 99)  # compacts
    for v in parts:  # as if the compactor had died between its save and its deletes
        db.save(key, v)
    merged = _merged(db)
    assert all(merged.table("p").value((i,), 0) == (1.0, 1) for i in range(COMPACT_AT + 1))


def test_a_live_writer_is_never_compacted() -> None:
    db = InMemoryExampleDatabase()
    live, store = _writer(db, "live", (), 3.0)  # not final
    assert store._saved in _finished_writers(db, COMPACT_AT + 1)
    live.learn([("live", (), 0)], 5.0)
    store.save(live, final=True)
    assert _merged(db).table("live").value((), 0) == (4.0, 2)


def test_values_of_other_metadata_are_left_alone() -> None:
    db = InMemoryExampleDatabase()
    other = Policy()
    other.learn([("theirs", (), 0)], 1.0)
    foreign = encode_value(other.to_dict(), {"kind": "other"})
    db.save(b"test-key" + KEY_SUFFIX, foreign)
    mine = Policy()
    s = _store(db)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not s.load(mine)
    for i in range(COMPACT_AT + 2):
        mine.learn([("mine", (i,), 0)], 1.0)
        s.save(mine)
    assert foreign in set(db.fetch(b"test-key" + KEY_SUFFIX))
    assert "theirs" not in mine.points


@pytest.mark.parametrize(
    "value",
    [
        VALUE_MAGIC + b"not zlib at all",
        VALUE_MAGIC + zlib.compress(b"[" * 1000)[:-4],
        VALUE_MAGIC + zlib.compress(b" " * (2 << 20) + b"{}"),  # inflates past max_bytes
        b'{"format": "rlcheck-policy-file"',
        b"[" + b"[]," * 1000 + b"[]]",
        encode_value(Policy().to_dict(), META),
    ],
    ids=["not-zlib", "truncated", "bomb", "truncated-json", "too-many-items", "no-writer"],
)
def test_bad_database_values_are_skipped_with_a_warning(value: bytes) -> None:
    db = InMemoryExampleDatabase()
    good = Policy()
    store = _store(db)
    store.load(good)
    good.learn([("p", (), 0)], 20.0)
    store.save(good)
    db.save(b"test-key" + KEY_SUFFIX, value)
    loaded = Policy()
    with pytest.warns(RLCheckWarning, match="stored value was skipped"):
        assert _store(db, max_bytes=1 << 20, max_items=500).load(loaded)
    assert loaded.table("p").value((), 0) == (20.0, 1)
    assert value not in set(db.fetch(b"test-key" + KEY_SUFFIX))  # writable: deleted


def test_reads_are_bounded_over_all_contributions() -> None:
    db = InMemoryExampleDatabase()
    for i in range(10):
        p = Policy()
        s = _store(db)
        s.load(p)
        p.learn([("p", (i,), 0)], 1.0)
        s.save(p)  # live writers: never compacted
    loaded = Policy()
    _store(db, max_values=4).load(loaded)
    assert len(loaded.table("p")) == 4
    one = max(len(zlib.decompress(v[5:])) for v in db.fetch(b"test-key" + KEY_SUFFIX))
    loaded = Policy()
    with pytest.warns(RLCheckWarning, match="7 of 10 values were not read"):
        _store(db, max_bytes=3 * one + one // 2).load(loaded)
    assert len(loaded.table("p")) == 3
    assert len(list(db.fetch(b"test-key" + KEY_SUFFIX))) == 10  # unread, not deleted


def test_save_before_load_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="load"):
        _store(InMemoryExampleDatabase()).save(Policy())


def test_a_database_refusing_writes_is_said_once_and_then_only_read() -> None:
    class Refusing(InMemoryExampleDatabase):
        def save(self, key: bytes, value: bytes) -> None:
            raise RuntimeError("This database is read-only.")

    db = Refusing()
    policy, store = Policy(), _store(db)
    store.load(policy)
    with pytest.warns(RLCheckWarning, match="refused a write") as caught:
        for i in range(3):
            policy.learn([("p", (i,), 0)], 1.0)
            store.save(policy)
        store.save(policy, final=True)
    assert len([w for w in caught if "refused" in str(w.message)]) == 1
    assert not store.writable


# -- the compact layout (what saves write since VALUE_MAGIC_V2) ----------------------------

_atoms = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)
_keys = st.recursive(_atoms, lambda inner: st.tuples() | st.lists(inner, max_size=4).map(tuple))


def _typed(key: object) -> object:
    """A key with the type of every atom beside it (``1``, ``True`` and ``1.0`` are equal
    as keys; a round trip must keep them apart anyway), and ``-0.0`` told from ``0.0``."""
    if isinstance(key, tuple):
        return ("tuple", tuple(_typed(k) for k in key))
    if isinstance(key, float):
        return ("float", key.hex())
    return (type(key).__name__, key)


def _compact(tables: object, writer: dict[str, object] | None = None) -> bytes:
    from rlcheck.policy_store import _encode_tables, _record

    record = writer or _record("w", 1, True, 0.0, [])
    return _encode_tables(tables, 0.25, META, record)[0]  # type: ignore[arg-type]


def _read_back(value: bytes) -> object:
    read = _store(InMemoryExampleDatabase())._read(value, float("inf"), float("inf"))
    assert read is not None
    return read.tables


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(
        st.tuples(
            _keys,
            st.lists(
                st.tuples(
                    _keys,
                    st.lists(
                        st.tuples(
                            st.floats(-1e9, 1e9, allow_nan=False),
                            st.integers(0, 2**53).map(float),
                        ),
                        max_size=4,
                    ).map(lambda pairs: [v for pair in pairs for v in pair]),
                ),
                max_size=5,
            ),
        ),
        max_size=4,
    )
)
def test_a_compact_value_gives_back_its_tables_keys_typed_as_saved(tables: list) -> None:
    back = _read_back(_compact(tables))
    assert back == tables
    assert [
        (_typed(p), [(_typed(s), row) for s, row in rows])
        for p, rows in back  # type: ignore[attr-defined]
    ] == [(_typed(p), [(_typed(s), row) for s, row in rows]) for p, rows in tables]


def test_saves_write_the_compact_layout_and_old_values_are_still_merged() -> None:
    from rlcheck.policy_store import VALUE_MAGIC_V2, _record

    db = InMemoryExampleDatabase()
    old = Policy()
    old.learn([("p", ("s", (1, 2)), 0)], 20.0)
    # a value written before the compact layout: zlib-compressed JSON
    db.save(
        b"test-key" + KEY_SUFFIX,
        encode_value(old.to_dict(), META, writer=_record("old", 1, True, 0.0, [])),
    )
    _, store = _writer(db, "p", ("s", (1, 2)), 10.0)
    assert store._saved is not None and store._saved.startswith(VALUE_MAGIC_V2)
    assert _merged(db).table("p").value(("s", (1, 2)), 0) == (15.0, 2)


def test_compact_and_json_values_load_the_same_policy() -> None:
    from rlcheck.policy_store import _record

    p = Policy(seed=0)
    for i in range(200):
        p.learn([("value", (i % 7, ("LEFT", i % 3)), i % 4), ("more", (), i % 2)], i % 5 - 1.0)
    writer = _record("w", 1, True, 0.0, [])
    loaded = []
    for value in (encode_value(p.to_dict(), META, writer=writer), _compact(p.tables_since())):
        db = InMemoryExampleDatabase()
        db.save(b"test-key" + KEY_SUFFIX, value)
        q = Policy(seed=0)
        assert _store(db).load(q)
        loaded.append(q.to_dict())
    assert loaded[0] == loaded[1] == p.to_dict()


def _damaged(kind: str) -> bytes:
    """A compact value damaged one way (inside a well-formed zlib stream)."""
    import struct

    from rlcheck.policy_store import VALUE_MAGIC_V2

    good = _compact([("p", [(("a", (1, 2)), [1.0, 1.0]), (("b", (1, 2)), [2.0, 1.0])])])
    header, atoms, numbers = zlib.decompress(good[len(VALUE_MAGIC_V2) :]).split(b"\n", 2)
    counts = list(struct.unpack("<3I", numbers[:12]))
    ints = list(struct.unpack(f"<{(len(numbers) - 12) // 4}I", numbers[12:]))
    if kind == "bad-atom":
        atoms = b'[[1],"a"]'
    elif kind == "nan-row":
        numbers = numbers[:-8] + struct.pack("<d", float("nan"))
    elif kind == "half-count":
        numbers = numbers[:-8] + struct.pack("<d", 0.5)
    elif kind == "forward-ref":  # the first group (of atoms only) names a tuple
        ints[2] = len(json.loads(atoms)) + 5
        numbers = numbers[:12] + struct.pack(f"<{len(ints)}I", *ints)
    elif kind == "bad-counts":
        counts[2] += 1
        numbers = struct.pack("<3I", *counts) + numbers[12:]
    elif kind == "no-layout":
        return VALUE_MAGIC_V2 + zlib.compress(header)
    elif kind == "other-meta":
        header = header.replace(b'"kind":"test"', b'"kind":"other"')
    return VALUE_MAGIC_V2 + zlib.compress(b"\n".join((header, atoms, numbers)))


@pytest.mark.parametrize(
    "kind", ["bad-atom", "nan-row", "half-count", "forward-ref", "bad-counts", "no-layout"]
)
def test_damaged_compact_values_are_skipped_with_a_warning_and_deleted(kind: str) -> None:
    test_bad_database_values_are_skipped_with_a_warning(_damaged(kind))


def test_a_compact_value_of_other_metadata_or_a_later_layout_is_kept_quietly() -> None:
    from rlcheck.policy_store import VALUE_MAGIC_V2

    db = InMemoryExampleDatabase()
    key = b"test-key" + KEY_SUFFIX
    later = b"RLCP\x03" + zlib.compress(b"a layout of a later rlcheck")
    foreign = _damaged("other-meta")
    db.save(key, later)
    db.save(key, foreign)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, store = _writer(db, "p", (), 1.0)
        assert _merged(db).table("p").value((), 0) == (1.0, 1)  # the foreign one not merged
    assert {later, foreign} <= set(db.fetch(key))
    assert store._saved is not None and store._saved.startswith(VALUE_MAGIC_V2)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.data())
def test_any_change_to_a_compact_value_never_raises(data: st.DataObject) -> None:
    from rlcheck.policy_store import VALUE_MAGIC_V2

    good = _compact([("p", [(("a", (1, 2)), [1.0, 1.0]), (("b", (1, 2), None), [2.0, 1.0])])])
    payload = bytearray(zlib.decompress(good[len(VALUE_MAGIC_V2) :]))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(payload)))
    db = InMemoryExampleDatabase()
    db.save(b"test-key" + KEY_SUFFIX, VALUE_MAGIC_V2 + zlib.compress(bytes(payload[:cut])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RLCheckWarning)
        _store(db, max_items=10_000).load(Policy())


def test_a_store_decodes_each_value_once_however_often_it_saves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import rlcheck.policy_store as store_module

    db = InMemoryExampleDatabase()
    for i in range(3):
        _writer(db, "p", (i,), 1.0, final=True)
    calls = []
    parse = store_module._parse_compact
    monkeypatch.setattr(
        store_module, "_parse_compact", lambda *a, **k: calls.append(1) or parse(*a, **k)
    )
    p, s = Policy(), _store(db)
    assert s.load(p)
    assert len(calls) == 3  # the load reads each value once
    for i in range(20):  # a save's compaction check reads no value it knows again
        p.learn([("p", (i,), 0)], 2.0)
        s.save(p)
    assert len(calls) == 3


def test_a_compact_load_costs_a_fraction_of_a_json_load() -> None:
    import time

    from rlcheck.policy_store import _record

    # about the size of the Etna benchmark's iso8601 policy (1 500 states)
    p = Policy(seed=0)
    for i in range(1500):
        p.learn([(("i", 0, i % 9), ((i * 7919) % 5003, (i % 11, i % 5)), i % 6)], i % 5 - 1.0)
    writer = _record("w", 1, True, 0.0, [])
    cost = {}
    for name, value in (
        ("json", encode_value(p.to_dict(), META, writer=writer)),
        ("compact", _compact(p.tables_since(), writer)),
    ):
        db = InMemoryExampleDatabase()
        db.save(b"test-key" + KEY_SUFFIX, value)
        best = float("inf")
        for _ in range(5):
            start = time.process_time()
            _store(db).load(Policy())
            best = min(best, time.process_time() - start)
        cost[name] = best
    assert cost["compact"] < cost["json"] / 1.5, cost


def _crafted(numbers: list[int], atoms: list[object] | None = None) -> bytes:
    """A compact value of the given uint32 numbers (counts, then the lists), no rows."""
    import struct

    from rlcheck.policy_store import VALUE_MAGIC_V2, VALUE_VERSION, _record

    header = {
        "format": FILE_FORMAT,
        "version": VALUE_VERSION,
        "meta": META,
        "writer": _record("w", 1, True, 0.0, []),
        "epsilon": 0.25,
    }
    body = struct.pack(f"<{len(numbers)}I", *numbers)
    payload = b"\n".join((json.dumps(header).encode(), json.dumps(atoms or []).encode(), body))
    return VALUE_MAGIC_V2 + zlib.compress(payload)


def _deep_key_value(depth: int) -> bytes:
    # atom 0, then one group per level: a 1-tuple of the entry before it
    tuples: list[int] = []
    for level in range(depth):
        tuples += [1, 1, level]
    # one table at point 0 whose one row's state is the deepest key
    return _crafted([len(tuples), 2, 1, *tuples, 0, 1, depth, 0], atoms=["a"])


@pytest.mark.parametrize(
    ("value", "why"),
    [
        # 200 000 levels crashed the interpreter (the tuple hash recursed past the C stack)
        (_deep_key_value(200_000), "nests deeper"),
        # one group of 10^8 empty tuples from 12 bytes: 1.5 GB
        (_crafted([2, 0, 0, 0, 10**8]), "malformed"),
    ],
    ids=["deep-key", "many-empty-keys"],
)
def test_crafted_key_tables_are_refused_before_they_cost(value: bytes, why: str) -> None:
    db = InMemoryExampleDatabase()
    db.save(b"test-key" + KEY_SUFFIX, value)
    with pytest.warns(RLCheckWarning, match="stored value was skipped") as seen:
        _store(db).load(Policy())
    assert any(why in str(w.message) for w in seen), [str(w.message) for w in seen]


def test_one_long_key_named_by_many_rows_is_refused_by_what_hashing_costs() -> None:
    # 4 KB: one key of 30 000 atoms, the state of 30 000 rows; hashing each row's key anew
    # cost rows x atoms (the reviewer's 300 000 x 300 000: about 30 minutes)
    n = 30_000
    tuples = [n, 1, *range(1, n + 1)]  # one n-tuple of the atoms 1..n (atom 0 is the point)
    numbers = [len(tuples), 2, n, *tuples, 0, n, *([n + 1] * n), *([0] * n)]
    value = _crafted(numbers, atoms=["p", *range(n)])
    db = InMemoryExampleDatabase()
    db.save(b"test-key" + KEY_SUFFIX, value)
    with pytest.warns(RLCheckWarning, match="atoms allowed"):
        _store(db, max_items=1_000_000).load(Policy())


def test_bad_values_spend_the_read_bounds_once_over_all_values() -> None:
    # 64 zlib bombs in a read-only database (never deleted) were each inflated to the
    # whole max_bytes before being refused: 64 times the bound, on every run
    from hypothesis.database import ReadOnlyDatabase

    inner = InMemoryExampleDatabase()
    bombs = [VALUE_MAGIC_V2_ + zlib.compress(bytes([i]) + b" " * (2 << 20)) for i in range(8)]
    for bomb in bombs:
        inner.save(b"test-key" + KEY_SUFFIX, bomb)
    store = _store(ReadOnlyDatabase(inner), max_bytes=1 << 20)
    with pytest.warns(RLCheckWarning, match="5 of 8 values were not read"):
        store.load(Policy())
    # each bomb inflated to just past max_bytes and refused: three of them spend the bound
    assert store.inflated <= 3 * ((1 << 20) + 1)


VALUE_MAGIC_V2_ = b"RLCP\x02"
