"""benchmarks/ans_wide.py: the prototype decoders give back what was coded, and the model
is the library's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ans_wide


def test_the_model_sums_to_the_precision_and_keeps_every_symbol() -> None:
    symbols = np.array([0] * 1000 + [2] * 10 + [3], dtype=np.uint8)
    freq, cum = ans_wide.model(symbols, 5)
    assert int(freq.sum()) == 1 << ans_wide.PRECISION
    assert freq.min() >= 1  # symbol 1 and 4 never occur, and still decode to themselves
    assert cum.tolist() == np.concatenate([[0], np.cumsum(freq)[:-1]]).tolist()


@pytest.mark.parametrize("alphabet", [2, 12, 40])
def test_every_decoder_gives_back_the_coded_levels(alphabet: int) -> None:
    lib = ans_wide.build()
    rng = np.random.default_rng(alphabet)
    # a bell-shaped stream, as quantized weights' bins are, of a length that leaves a tail
    symbols = np.clip(rng.normal(alphabet / 2, alphabet / 6, 70_001), 0, alphabet - 1)
    symbols = symbols.astype(np.uint8)
    has = ans_wide.cpu_features()
    # measure() checks each decoder's output against the levels of the symbols
    timings, library_bytes, wide_bytes = ans_wide.measure(lib, symbols, has, repeat=1)
    assert {"library", "scalar", "interleaved, scalar"} <= timings.keys()
    assert ("avx2" in timings) == has["avx2"]
    assert ("interleaved, avx2, no gathers" in timings) == (has["avx2"] and alphabet <= 16)
    assert abs(wide_bytes / library_bytes - 1) < 0.05
