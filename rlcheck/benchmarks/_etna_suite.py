"""The Etna benchmark's workloads: four vendored libraries and their properties.

Each library is loaded from ``benchmarks/etna/<name>/`` (sdists from PyPI, each with its
licence) into a fresh in-memory package, optionally with one mutant applied to one of its
modules (:mod:`_mutate`). A *workload* is one library, one property and one generator:

* the property's oracle is a reference written here (semver.org's grammar and precedence,
  RFC 6901's resolution, a dict model of a search tree, a plain ISO 8601 subset), so a
  mutant is caught by what the library returns, not by the library's own view of itself;
* validity is decided by the reference too (``reject()``: Hypothesis's ``assume``):
  *strict* workloads draw token strings or operation sequences that the reference mostly
  rejects; the others (``strict=False``) draw inputs that are valid by construction, the
  "rest" on which guidance should cost nothing.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _mutate import Mutant, apply, enumerate_mutants
from hypothesis import assume
from hypothesis import strategies as st

VENDOR = Path(__file__).resolve().parent / "etna"


@dataclass(frozen=True)
class Library:
    """A vendored library: its files in load order, and the one whose code is mutated."""

    name: str
    files: tuple[str, ...]
    target: str
    functions: tuple[str, ...] | None = None  # None: every function of the target

    def source(self, stem: str) -> str:
        return (VENDOR / self.name / f"{stem}.py").read_text(encoding="utf-8")

    def mutants(self) -> list[Mutant]:
        return enumerate_mutants(self.source(self.target), self.target, self.functions)


LIBRARIES = {
    lib.name: lib
    for lib in (
        Library(
            "semver",
            ("_types", "version"),
            "version",
            (
                "_cmp",
                "Version.__init__",
                "Version._nat_cmp",
                "Version.to_tuple",
                "Version.bump_major",
                "Version.bump_minor",
                "Version.bump_patch",
                "Version.compare",
                "Version.__str__",
                "Version.finalize_version",
                "Version.parse",
                "Version.is_valid",
            ),
        ),
        Library("iso8601", ("iso8601",), "iso8601"),
        Library(
            "jsonpointer",
            ("jsonpointer",),
            "jsonpointer",
            (
                "set_pointer",
                "resolve_pointer",
                "JsonPointer.__init__",
                "JsonPointer.to_last",
                "JsonPointer.resolve",
                "JsonPointer.set",
                "JsonPointer.get_part",
                "JsonPointer.walk",
                "JsonPointer.contains",
                "JsonPointer.path",
                "JsonPointer.from_parts",
                "escape",
                "unescape",
            ),
        ),
        Library("bintrees", ("treeslice", "abctree", "avltree"), "avltree"),
    )
}

_loaded = itertools.count()


def load(library: Library, mutant: Mutant | None = None) -> types.ModuleType:
    """A fresh copy of ``library`` as a package (``mutant`` applied to its target file)."""
    name = f"_etna_{library.name}_{next(_loaded)}"
    package = types.ModuleType(name)
    package.__path__ = [str(VENDOR / library.name)]
    sys.modules[name] = package
    for stem in library.files:
        path = VENDOR / library.name / f"{stem}.py"
        source = library.source(stem)
        if mutant is not None and stem == library.target:
            code = compile(apply(source, mutant, library.functions), str(path), "exec")
        else:
            code = compile(source, str(path), "exec")
        module = types.ModuleType(f"{name}.{stem}")
        module.__file__ = str(path)
        module.__package__ = name
        sys.modules[module.__name__] = module
        exec(code, module.__dict__)
        setattr(package, stem, module)
    return package


def reject() -> None:
    """The input is invalid (the reference says so): Hypothesis's ``assume(False)``."""
    assume(False)


# -- semver: semver.org's grammar and precedence ------------------------------------

_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
_SEMVER_OTHERS = (
    "0.9.9",
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1",
    "1.1.0",
    "2.0.0",
    "10.1.2-0a",
)


def _semver_key(text: str) -> tuple[Any, ...]:
    """semver.org's precedence as a sort key (build metadata ignored)."""
    m = _SEMVER.fullmatch(text)
    assert m is not None
    core = (int(m[1]), int(m[2]), int(m[3]))
    if m[4] is None:
        return (core, 1, ())
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in m[4].split("."))
    return (core, 0, ids)


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def _semver_property(lib: types.ModuleType, text: str) -> None:
    m = _SEMVER.fullmatch(text)
    if m is None:
        reject()
        return
    version_cls = lib.version.Version
    assert version_cls.is_valid(text)
    v = version_cls.parse(text)
    major, minor, patch = int(m[1]), int(m[2]), int(m[3])
    assert v.to_tuple() == (major, minor, patch, m[4], m[5]), v.to_tuple()
    assert str(v) == text, str(v)
    key = _semver_key(text)
    for other in _SEMVER_OTHERS:
        ref = (key > _semver_key(other)) - (key < _semver_key(other))
        assert _sign(v.compare(other)) == ref, (other, v.compare(other))
    assert str(v.bump_major()) == f"{major + 1}.0.0"
    assert str(v.bump_minor()) == f"{major}.{minor + 1}.0"
    assert str(v.bump_patch()) == f"{major}.{minor}.{patch + 1}"
    assert str(v.finalize_version()) == f"{major}.{minor}.{patch}"


_SEMVER_IDS = st.sampled_from(["alpha", "beta", "rc", "0", "1", "2", "11", "x-y", "0a"])
_SEMVER_VALID = st.builds(
    lambda core, pre, build: (
        ".".join(map(str, core))
        + (f"-{'.'.join(pre)}" if pre else "")
        + (f"+{'.'.join(build)}" if build else "")
    ),
    st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12)),
    st.lists(_SEMVER_IDS, max_size=3),
    st.lists(st.sampled_from(["b", "001", "exp", "sha-5"]), max_size=2),
)


# -- iso8601: a plain subset of ISO 8601, parsed by hand ----------------------------

_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?(Z|([+-])(\d{2}):(\d{2}))?)?"
)


def _iso_reference(text: str) -> datetime.datetime | None:
    m = _ISO.fullmatch(text)
    if m is None:
        return None
    tz: datetime.tzinfo = datetime.timezone.utc
    if m[9] is not None:
        sign = -1 if m[9] == "-" else 1
        offset = datetime.timedelta(hours=int(m[10]), minutes=int(m[11]))
        if offset >= datetime.timedelta(hours=24):
            return None
        tz = datetime.timezone(sign * offset)
    try:
        return datetime.datetime(
            int(m[1]),
            int(m[2]),
            int(m[3]),
            int(m[4] or 0),
            int(m[5] or 0),
            int(m[6] or 0),
            int((m[7] or "0").ljust(6, "0")),
            tzinfo=tz,
        )
    except ValueError:
        return None


def _iso_property(lib: types.ModuleType, text: str) -> None:
    expected = _iso_reference(text)
    if expected is None:
        reject()
        return
    got = lib.iso8601.parse_date(text)
    assert got == expected, (got, expected)
    assert got.utcoffset() == expected.utcoffset(), got.utcoffset()
    assert got.replace(tzinfo=None) == expected.replace(tzinfo=None)
    naive = lib.iso8601.parse_date(text, default_timezone=None)
    has_zone = "Z" in text or "+" in text[10:] or "-" in text[10:]
    assert (naive.tzinfo is None) == (not has_zone)
    assert lib.iso8601.is_iso8601(text)


_ISO_VALID = st.builds(
    lambda dt, spec, zone: dt.replace(tzinfo=zone).isoformat(timespec=spec),
    st.datetimes(datetime.datetime(1, 1, 1), datetime.datetime(9999, 12, 31)),
    st.sampled_from(["minutes", "seconds", "milliseconds", "microseconds"]),
    st.sampled_from(
        [
            None,
            datetime.timezone.utc,
            datetime.timezone(datetime.timedelta(hours=5, minutes=30)),
            datetime.timezone(datetime.timedelta(hours=-11)),
        ]
    ),
)


# -- jsonpointer: RFC 6901 resolution over one document ------------------------------

_DOC: Any = {
    "a": {"b": [10, {"c": 3}, [4, 5]], "~": 4, "/": 5, "": 6, "~1": 7},
    "0": [0, 1, [2, {"a": 8}]],
    "x-y": None,
    "c": "text",
}
_ARRAY_INDEX = re.compile("0|[1-9][0-9]*")
_MISSING = object()


def _pointer_reference(doc: Any, pointer: str) -> Any:
    if pointer == "":
        return doc
    if not pointer.startswith("/"):
        return _MISSING
    for raw in pointer[1:].split("/"):
        if re.search("~[^01]|~$", raw):
            return _MISSING
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict):
            if part not in doc:
                return _MISSING
            doc = doc[part]
        elif isinstance(doc, list):
            if not _ARRAY_INDEX.fullmatch(part) or int(part) >= len(doc):
                return _MISSING
            doc = doc[int(part)]
        else:
            return _MISSING
    return doc


def _pointer_property(lib: types.ModuleType, pointer: str) -> None:
    expected = _pointer_reference(_DOC, pointer)
    if expected is _MISSING:
        reject()
        return
    jp = lib.jsonpointer
    p = jp.JsonPointer(pointer)
    assert p.resolve(_DOC) == expected
    assert jp.resolve_pointer(_DOC, pointer) == expected
    assert p.path == pointer, p.path
    assert jp.JsonPointer.from_parts(p.parts).path == pointer
    if pointer:
        doc = copy.deepcopy(_DOC)
        jp.set_pointer(doc, pointer, "NEW")
        assert jp.resolve_pointer(doc, pointer) == "NEW"
    if p.parts:
        parent = jp.JsonPointer.from_parts(p.parts[:-1])
        assert p.contains(parent)
        assert not parent.contains(p) or parent == p


# -- bintrees: an AVL tree against a dict model --------------------------------------


def _avl_height(node: Any) -> int:
    if node is None:
        return -1
    left, right = _avl_height(node.left), _avl_height(node.right)
    assert abs(left - right) <= 1, f"unbalanced at {node.key}"
    assert node.balance == max(left, right) + 1, f"stale height at {node.key}"
    return node.balance


def _avl_run(lib: types.ModuleType, ops: list[tuple[bool, int]], by_rank: bool) -> None:
    tree = lib.avltree.AVLTree()
    model: dict[int, str] = {}
    for insert, key in ops:
        if insert:
            tree.insert(key, str(key))
            model[key] = str(key)
        else:
            if by_rank:
                if not model:
                    continue
                key = sorted(model)[key % len(model)]
            elif key not in model:
                reject()
                return
            tree.remove(key)
            del model[key]
    assert list(tree.keys()) == sorted(model), (list(tree.keys()), sorted(model))
    assert len(tree) == len(model)
    _avl_height(tree._root)
    for key in (-1, 3, 8, 16):
        assert (key in tree) == (key in model)
        below = [k for k in model if k <= key]
        if below:
            assert tree.floor_key(key) == max(below)
    if model:
        assert tree.min_key() == min(model) and tree.max_key() == max(model)


def _avl_property(lib: types.ModuleType, ops: list[tuple[bool, int]]) -> None:
    _avl_run(lib, ops, by_rank=False)


def _avl_rank_property(lib: types.ModuleType, ops: list[tuple[bool, int]]) -> None:
    _avl_run(lib, ops, by_rank=True)


# -- workloads -----------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """One library, one property, one generator; ``trivial``: inputs every mutant passes."""

    name: str
    library: str
    strategy: Any
    check: Callable[[types.ModuleType, Any], None]
    strict: bool
    trivial: tuple[Any, ...]


_DIGITS = "0123456789"
# Strict generators: each piece drawn plainly (digits, small integers, short texts over a
# grammar's alphabet), so a random input breaks the grammar or the calendar somewhere.
_SEMVER_STRICT = st.builds(
    lambda core, pre, build: ".".join(core) + (f"-{pre}" if pre else "") + build,
    st.tuples(*[st.text(_DIGITS, min_size=1, max_size=3)] * 3),
    st.text("0.1a", max_size=8),
    st.sampled_from(["", "+b", "+0.1", "+-", "+.x", "+"]),
)
_ISO_STRICT = st.builds(
    lambda y, mo, d, time, zone: f"{y}-{mo:02d}-{d:02d}" + (f"T{time}{zone}" if time else ""),
    st.text(_DIGITS, min_size=4, max_size=4),
    st.integers(0, 19),
    st.integers(0, 39),
    st.one_of(
        st.just(""),
        st.builds(
            lambda h, m, s, frac: (
                f"{h:02d}:{m:02d}"
                + ("" if s is None else f":{s:02d}" + ("" if frac is None else f".{frac}"))
            ),
            st.integers(0, 29),
            st.integers(0, 69),
            st.none() | st.integers(0, 69),
            st.none() | st.text(_DIGITS, max_size=7),
        ),
    ),
    st.sampled_from(["", "Z", "+05:30", "-11:00", "+24:00", "+5:30", "-00:60", "z"]),
)
_POINTER_STRICT = st.lists(
    st.sampled_from(["a", "b", "c", "0", "1", "2", "01", "~0", "~1", "~", "-", "x-y", "", "~01"]),
    max_size=4,
).map(lambda parts: "".join("/" + p for p in parts))


_OPS = st.lists(st.tuples(st.booleans(), st.integers(0, 15)), max_size=24)

WORKLOADS = {
    w.name: w
    for w in (
        Workload(
            "semver",
            "semver",
            _SEMVER_STRICT,
            _semver_property,
            True,
            ("1.2.3", "0.0.0"),
        ),
        Workload(
            "iso8601",
            "iso8601",
            _ISO_STRICT,
            _iso_property,
            True,
            ("2007-01-25",),
        ),
        Workload(
            "jsonpointer",
            "jsonpointer",
            _POINTER_STRICT,
            _pointer_property,
            True,
            ("", "/a"),
        ),
        Workload(
            "avl",
            "bintrees",
            _OPS,
            _avl_property,
            True,
            ([], [(True, 1)]),
        ),
        Workload(
            "semver-built", "semver", _SEMVER_VALID, _semver_property, False, ("1.2.3", "0.0.0")
        ),
        Workload("iso8601-built", "iso8601", _ISO_VALID, _iso_property, False, ("2007-01-25",)),
        Workload("avl-rank", "bintrees", _OPS, _avl_rank_property, False, ([], [(True, 1)])),
    )
}
