"""benchmarks/ans_wide.py: the prototype decoders give back what was coded, and the model
is the library's."""

from __future__ import annotations

import ctypes
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
    timings, library_bytes, wide_bytes, built = ans_wide.measure(lib, symbols, has, repeat=1)
    assert {"library", "library ans-wide", "scalar", "interleaved, scalar"} <= timings.keys()
    assert abs(built / library_bytes - 1) < 0.05
    assert ("avx2" in timings) == has["avx2"]
    assert ("interleaved, avx2, no gathers" in timings) == (has["avx2"] and alphabet <= 16)
    assert abs(wide_bytes / library_bytes - 1) < 0.05


def _interleaved(
    lib: ctypes.CDLL, seed: int, n: int = 10_000
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """n uniform symbols of 12, their prototype model and its interleaved stream:
    (symbols, freq, cum, words, words used)."""
    symbols = np.random.default_rng(seed).integers(0, 12, n).astype(np.uint8)
    freq, cum = ans_wide.model(symbols, 12)
    one, used = ans_wide.encode_interleaved(lib, symbols, freq, cum)
    return symbols, freq, cum, one, used


def test_an_interleaved_stream_that_ends_early_or_runs_on_is_refused() -> None:
    lib = ans_wide.build()
    symbols, freq, cum, one, used = _interleaved(lib, 7)
    n = symbols.size
    slots = np.zeros(1 << ans_wide.PRECISION, dtype=np.uint32)
    lib.wide_table(ans_wide._ptr(freq), ans_wide._ptr(cum), ctypes.c_int(12), ans_wide._ptr(slots))
    levels = np.linspace(-1.0, 1.0, 16).astype(np.float32)
    names = ["wide_decode_il_scalar"]
    if ans_wide.cpu_features()["avx2"]:
        names.append("wide_decode_il_avx2_table")
    for name in names:
        out = np.empty(n, dtype=np.float32)

        def decode(words: int, name: str = name, out: np.ndarray = out) -> int:
            return int(
                getattr(lib, name)(
                    ans_wide._ptr(one),
                    ctypes.c_int64(words),
                    ctypes.c_int64(n),
                    ans_wide._ptr(slots),
                    ans_wide._ptr(levels),
                    ans_wide._ptr(out),
                )
            )

        assert decode(used) == 0 and np.array_equal(out, levels[symbols])
        assert decode(used - 1) == 1  # the last refill is past the end
        assert decode(used + 1) == 2  # a word left over
        assert decode(10) == 1  # not even the initial states


def test_the_library_layout_is_the_prototype_s_interleaved_stream_block_by_block() -> None:
    # "ans-wide" is this prototype's interleaved layout, cut into blocks: a stream of one
    # block holds the same words
    from ckptzip import kernels

    symbols, _, _, one, used = _interleaved(ans_wide.build(), 3)
    counts = np.bincount(symbols, minlength=12).astype(np.uint32)
    lengths, words = kernels.ans_wide_encode(symbols, counts, 1 << 18)
    assert lengths.tolist() == [used] and np.array_equal(words, one[:used])
