"""An ordinary Hypothesis suite without strict validity, for ``benchmarks/overhead.py``.

The kinds of test a project's suite is made of (round-trips, invariants of the standard
library, a few mild ``assume``/``.filter`` calls that rarely reject, ``st.data()``,
``@st.composite`` with string labels, ``st.recursive``, a stateful machine): guidance
has nothing to learn here, so switching the backend on should cost (almost) nothing.
Every test passes on every backend.
"""

from __future__ import annotations

import base64
import collections
import fractions
import heapq
import itertools
import json
import math
import re
import struct
import zlib

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

settings.register_profile("overhead", deadline=None, database=None)
settings.load_profile("overhead")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_json_round_trip(value: object) -> None:
    assert json.loads(json.dumps(value)) == value


@given(st.binary())
def test_base64_round_trip(data: bytes) -> None:
    assert base64.b64decode(base64.b64encode(data)) == data


@given(st.binary(), st.integers(0, 9))
def test_zlib_round_trip(data: bytes, level: int) -> None:
    assert zlib.decompress(zlib.compress(data, level)) == data


@given(st.lists(st.integers()))
def test_sorted_is_ordered_permutation(xs: list[int]) -> None:
    ys = sorted(xs)
    assert all(a <= b for a, b in itertools.pairwise(ys))
    assert collections.Counter(xs) == collections.Counter(ys)


@given(st.lists(st.integers(), min_size=1))
def test_heap_pops_in_order(xs: list[int]) -> None:
    heap = list(xs)
    heapq.heapify(heap)
    assert [heapq.heappop(heap) for _ in xs] == sorted(xs)


@given(st.text())
def test_utf8_round_trip(s: str) -> None:
    assert s.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass") == s


@given(st.text(alphabet="abc ", max_size=30))
def test_split_join(s: str) -> None:
    assert " ".join(s.split(" ")) == s


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_struct_round_trip(x: float) -> None:
    assert struct.unpack("<d", struct.pack("<d", x))[0] == x


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), st.floats(0.0, 1.0))
def test_lerp_stays_between(a: float, t: float) -> None:
    b = a + 1.0
    value = a + (b - a) * t
    assert min(a, b) - 1e-6 <= value <= max(a, b) + 1e-6


@given(st.integers(), st.integers().filter(lambda n: n != 0))
def test_divmod_identity(a: int, b: int) -> None:
    q, r = divmod(a, b)
    assert q * b + r == a


@given(st.fractions(), st.fractions())
def test_fraction_addition_commutes(a: fractions.Fraction, b: fractions.Fraction) -> None:
    assert a + b == b + a


@given(st.integers(1, 10**6), st.integers(1, 10**6))
def test_gcd_divides(a: int, b: int) -> None:
    g = math.gcd(a, b)
    assert a % g == 0 and b % g == 0


@given(st.dictionaries(st.text(max_size=5), st.integers(), max_size=10))
def test_dict_copy_equal(d: dict[str, int]) -> None:
    assert dict(d.items()) == d


@given(st.sets(st.integers(0, 100)), st.sets(st.integers(0, 100)))
def test_set_algebra(a: set[int], b: set[int]) -> None:
    assert (a | b) - (a & b) == a ^ b


@given(st.lists(st.integers(), max_size=20), st.data())
def test_data_index(xs: list[int], data: st.DataObject) -> None:
    assume(xs)  # rejects only the empty list
    i = data.draw(st.integers(0, len(xs) - 1), label="index")
    assert xs[i] in xs


@st.composite
def intervals(draw: st.DrawFn) -> tuple[int, int]:
    lo = draw(st.integers(-1000, 1000), label="lo")
    hi = draw(st.integers(lo, lo + 1000), label="hi")
    return lo, hi


@given(intervals(), st.integers())
def test_clamp_in_interval(interval: tuple[int, int], x: int) -> None:
    lo, hi = interval
    assert lo <= min(max(x, lo), hi) <= hi


@given(st.from_regex(r"[a-z]{1,8}@[a-z]{1,8}\.(com|org)", fullmatch=True))
def test_email_regex(s: str) -> None:
    assert re.fullmatch(r"[a-z]+@[a-z]+\.[a-z]+", s)


@given(st.tuples(st.booleans(), st.integers(0, 3), st.sampled_from("xyz")))
def test_small_tuple(t: tuple[bool, int, str]) -> None:
    assert len(t) == 3


@given(st.lists(st.tuples(st.text(max_size=3), st.integers()), unique_by=lambda p: p[0]))
def test_unique_keys(pairs: list[tuple[str, int]]) -> None:
    assert len(dict(pairs)) == len(pairs)


@given(st.datetimes())
def test_datetime_iso_round_trip(dt: object) -> None:
    import datetime

    assert isinstance(dt, datetime.datetime)
    assert datetime.datetime.fromisoformat(dt.isoformat()) == dt


class Counters(RuleBasedStateMachine):
    """A dict-backed multiset against collections.Counter."""

    keys = Bundle("keys")

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, int] = {}
        self.real: collections.Counter[str] = collections.Counter()

    @rule(target=keys, key=st.text(max_size=4))
    def new_key(self, key: str) -> str:
        return key

    @rule(key=keys, n=st.integers(1, 5))
    def add(self, key: str, n: int) -> None:
        self.model[key] = self.model.get(key, 0) + n
        self.real[key] += n

    @rule(key=keys)
    def remove(self, key: str) -> None:
        self.model.pop(key, None)
        del self.real[key]

    @invariant()
    def agree(self) -> None:
        assert {k: v for k, v in self.real.items() if v} == self.model


TestCounters = Counters.TestCase
