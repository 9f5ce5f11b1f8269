"""Domain bucketing: the coarse, learnable actions of the backend's wide draws.

A tabular learner needs small action sets, so a draw over a large domain is learned
through a coarse choice and the rest drawn at random:

* wide integers: a magnitude bucket (offsets 0, 1, 2-3, 4-7, ... from zero, or from the
  bound nearest to it), with Hypothesis's own distribution of integers: each bucket's
  prior is its mass under that distribution, and a value inside it is drawn from the
  distribution restricted to it (:func:`integer_masses`), so a cold policy draws
  integers as Hypothesis does;
* floats: a magnitude bucket per sign (log-uniform inside), plus the special values the
  constraints permit (zeros, infinities, NaN, the bounds and their neighbours);
* strings: a character class (digits, ASCII letters, punctuation, control, the rest of
  the BMP, astral planes), or the character itself for alphabets of at most
  :data:`SMALL_ALPHABET` characters, with Hypothesis's 80/20 prior;
* bytes: a byte class (NUL, control, printable, high).

Examples
--------
>>> integer_buckets(0, 10)
[(0, 0), (1, 1), (2, 3), (4, 7), (8, 10)]
"""

from __future__ import annotations

import itertools
import math
import random
import struct
from typing import Any

from rlcheck.hypothesis.compat import (
    IntervalSet,
    choice_permitted,
    integer_distribution,
    next_down,
    next_up,
)

__all__ = [
    "BYTE_CLASSES",
    "BYTE_PRIOR",
    "SMALL_ALPHABET",
    "SMALL_DOMAIN",
    "char_classes",
    "float_buckets",
    "float_key",
    "integer_bounds",
    "integer_buckets",
    "integer_masses",
    "integer_prior",
    "sample_integer",
    "sample_range",
]

SMALL_DOMAIN = 32
"""Integer ranges with at most this many values are learned value by value."""
SMALL_ALPHABET = 16
"""Alphabets with at most this many characters are learned character by character."""

# Integer magnitude buckets: offsets 0, 1, 2-3, 4-7, ... 256-1023, then wide steps.
_INT_EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1 << 10, 1 << 16, 1 << 24, 1 << 32, 1 << 64)
# Float magnitude buckets (positive side; mirrored for negatives).
_FLOAT_EDGES = (5e-324, 1e-6, 1.0, 1e3, 1e9, 1.7976931348623157e308)
BYTE_CLASSES = ((0, 0), (1, 31), (32, 126), (127, 255))
"""Byte classes: NUL, control, printable ASCII, high bytes."""
BYTE_PRIOR = [float(b - a + 1) for a, b in BYTE_CLASSES]
"""Their prior: uniform bytes."""
_CHAR_CLASSES = tuple(
    IntervalSet(iv)
    for iv in (
        ((48, 57),),  # digits
        ((97, 122),),  # lowercase ASCII
        ((65, 90),),  # uppercase ASCII
        ((32, 47), (58, 64), (91, 96), (123, 126)),  # space and punctuation
        ((0, 31), (127, 127)),  # ASCII control
        ((128, 0xFFFF),),  # rest of the BMP
        ((0x10000, 0x10FFFF),),  # astral planes
    )
)
_LATIN1 = IntervalSet(((0, 255),))


def integer_bounds(min_value: int | None, max_value: int | None) -> tuple[int, int]:
    # The same caps as Hypothesis's own provider for unbounded sides.
    if min_value is None and max_value is None:
        return -(2**128), 2**128
    if min_value is None:
        assert max_value is not None
        return -max(2**128, 2 * abs(max_value)), max_value
    if max_value is None:
        return min_value, max(2**128, 2 * abs(min_value))
    return min_value, max_value


def _offset_buckets(span: int) -> list[tuple[int, int]]:
    """Offsets ``0..span`` cut at powers of two: [0,0], [1,1], [2,3], [4,7], ..."""
    out = [(0, 0)]
    lo = 1
    for edge in _INT_EDGES[1:]:
        if lo > span:
            return out
        out.append((lo, min(edge - 1, span)))
        lo = edge
    if lo <= span:
        out.append((lo, span))
    return out


def integer_buckets(lo: int, hi: int) -> list[tuple[int, int]]:
    """Value ranges by magnitude: around zero when the range holds it, else from the
    bound nearest to zero (where Hypothesis shrinks towards)."""
    if lo >= 0:
        return [(lo + a, lo + b) for a, b in _offset_buckets(hi - lo)]
    if hi <= 0:
        return [(hi - b, hi - a) for a, b in _offset_buckets(hi - lo)]
    positive = [(a, b) for a, b in _offset_buckets(hi)[1:]]
    negative = [(-b, -a) for a, b in _offset_buckets(-lo)[1:]]
    return [(0, 0), *positive, *negative]


def float_key(f: float) -> int:
    """Bit pattern of a float: distinguishes -0.0 from 0.0 and is JSON-safe."""
    return int(struct.unpack("<q", struct.pack("<d", f))[0])


def float_buckets(
    constraints: dict[str, Any],
) -> tuple[list[float], list[tuple[float, float]]]:
    lo, hi = constraints["min_value"], constraints["max_value"]
    smallest = constraints["smallest_nonzero_magnitude"]
    ranges: list[tuple[float, float]] = []
    for sign in (1.0, -1.0):
        for a, b in itertools.pairwise(_FLOAT_EDGES):
            a = max(a, smallest)
            if a > b:
                continue
            x, y = (a, b) if sign > 0 else (-b, -a)
            x, y = max(x, lo), min(y, hi)
            if x <= y and not (x == 0 and y == 0):
                ranges.append((x, y))
    candidates = [0.0, -0.0, math.inf, -math.inf, math.nan, lo, hi]
    if math.isfinite(lo):
        candidates.append(next_up(lo))
    if math.isfinite(hi):
        candidates.append(next_down(hi))
    specials = [f for f in candidates if choice_permitted(f, constraints)]  # type: ignore[arg-type]
    if not ranges and not specials:
        # Degenerate constraints (e.g. a single subnormal): fall back to the clamper.
        specials = [lo]
    return specials, ranges


def sample_range(rng: random.Random, x: float, y: float) -> float:
    """Log-uniform in [x, y] (both of one sign); uniform where the range crosses zero."""
    if x == y:
        return x
    if x > 0:
        value = math.exp(rng.uniform(math.log(x), math.log(y)))
    elif y < 0:
        value = -math.exp(rng.uniform(math.log(-y), math.log(-x)))
    else:
        value = rng.uniform(x, y)
    return min(max(value, x), y)


def char_classes(intervals: IntervalSet) -> tuple[list[IntervalSet], list[float] | None]:
    """The learned character classes of an alphabet and their prior weights.

    The prior mirrors Hypothesis's own string draws: 80 % of characters from the first
    256 code points of the alphabet, 20 % from the rest.
    """
    if len(intervals) <= SMALL_ALPHABET:
        return [IntervalSet(((c, c),)) for c in intervals], None
    classes = [c for c in (intervals & cls for cls in _CHAR_CLASSES) if len(c)]
    low_total = len(intervals & _LATIN1)
    high_total = len(intervals) - low_total
    weights = []
    for c in classes:
        low = len(c & _LATIN1)
        w = 0.8 * low / low_total if low_total else 0.0
        w += 0.2 * (len(c) - low) / high_total if high_total else 0.0
        weights.append(w + 1e-3)  # every class stays reachable
    return classes, weights


_MIN_MASS = 1e-13  # Hypothesis draws uniformly where its cdf's span is below this


def integer_masses(buckets: list[tuple[int, int]]) -> list[tuple[float, float]] | None:
    """Each bucket's span of Hypothesis's integer distribution: ``(cdf(a - 0.5),
    cdf(b + 0.5))``, as its provider draws a value in ``[a, b]``; ``None`` where the
    installed Hypothesis has no such distribution or the range's span is too small to
    sample in (Hypothesis then draws uniformly, and so does :func:`sample_integer`)."""
    dist = integer_distribution()
    if dist is None or not buckets:
        return None
    try:
        spans = [(dist.cdf(a - 0.5), dist.cdf(b + 0.5)) for a, b in buckets]
    except OverflowError:
        return None
    if max(s[1] for s in spans) - min(s[0] for s in spans) < _MIN_MASS:
        return None
    return spans


def sample_integer(
    rng: random.Random, a: int, b: int, span: tuple[float, float] | None = None
) -> int:
    """A value of ``[a, b]``: from Hypothesis's integer distribution restricted to it
    (``span``: :func:`integer_masses`'s), else uniform.

    >>> sample_integer(random.Random(0), 3, 3)
    3
    """
    if a == b:
        return a
    if span is not None and span[1] - span[0] >= _MIN_MASS:
        dist = integer_distribution()
        if dist is not None:
            u = span[0] + rng.random() * (span[1] - span[0])
            if 0.0 < u < 1.0:
                return min(max(round(dist.inverse_cdf(u)), a), b)
    return rng.randint(a, b)


def integer_prior(buckets: list[tuple[int, int]], lo: int, hi: int) -> list[float]:
    """Prior weights of magnitude buckets: their mass under Hypothesis's distribution of
    integers (:func:`integer_masses`), by size where it draws uniformly; on versions
    without that distribution, about 80 % uniform within 256 of the origin (zero, or the
    bound nearest to it) and the rest spread over the wider buckets, as they drew."""
    if integer_distribution() is not None:
        spans = integer_masses(buckets)
        if spans is None:  # uniform over the range
            sizes = [b - a + 1 for a, b in buckets]
            count = sum(sizes)
            return [max(s / count, 1e-6) for s in sizes]
        mass = sum(y - x for x, y in spans) or 1.0
        return [max((y - x) / mass, 1e-6) for x, y in spans]  # every bucket reachable
    origin = 0 if lo < 0 < hi else (lo if lo >= 0 else hi)
    core = [max(0, min(b, origin + 256) - max(a, origin - 256) + 1) for a, b in buckets]
    outer = [i for i, w in enumerate(core) if w == 0]
    total = sum(core) or 1
    weights = [0.8 * w / total if outer else w / total for w in core]
    for i in outer:
        weights[i] = 0.2 / len(outer)
    return weights
