"""Bit packing of quantization indices: round trips, exact sizes, the stream layout, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptzip.errors import ConfigError, CorruptCheckpointError
from ckptzip.packing import bits_for, pack_indices, packed_size, unpack_indices


@st.composite
def _indices(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    bits = draw(st.integers(1, 8))
    values = draw(st.lists(st.integers(0, (1 << bits) - 1), max_size=300))
    return np.array(values, dtype=np.uint8), bits


@given(_indices())
def test_round_trip_every_width_and_length(case: tuple[np.ndarray, int]) -> None:
    idx, bits = case
    data = pack_indices(idx, bits)
    assert len(data) == packed_size(idx.size, bits) == -(-idx.size * bits // 8)
    out = unpack_indices(data, bits, idx.size)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, idx)


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 63, 64, 65, 1001])
def test_round_trip_grid(bits: int, n: int) -> None:
    rng = np.random.default_rng(bits * 1000 + n)
    idx = rng.integers(0, 1 << bits, n, dtype=np.uint8)
    np.testing.assert_array_equal(unpack_indices(pack_indices(idx, bits), bits, n), idx)


def test_layout_is_lsb_first_bit_stream() -> None:
    # index i occupies stream bits [3i, 3i+3); bit b is bit b%8 of byte b//8
    idx = np.array([0b101, 0b011, 0b110], dtype=np.uint8)
    stream = 0b101 | (0b011 << 3) | (0b110 << 6)
    assert pack_indices(idx, 3) == stream.to_bytes(2, "little")
    assert pack_indices(np.array([1, 2, 3], dtype=np.uint8), 4) == bytes([0x21, 0x03])
    assert pack_indices(np.array([1, 0, 1, 1], dtype=np.uint8), 1) == bytes([0b1101])


def test_multidimensional_input_is_read_in_c_order() -> None:
    idx = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert unpack_indices(pack_indices(idx, 4), 4, 12).tolist() == list(range(12))


@pytest.mark.parametrize(
    ("n_levels", "bits"),
    [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (16, 4), (17, 5), (256, 8)],
)
def test_bits_for(n_levels: int, bits: int) -> None:
    assert bits_for(n_levels) == bits


@pytest.mark.parametrize("bits", [0, 9, -1, 2.0, True])
def test_bad_bits_rejected(bits: object) -> None:
    with pytest.raises(ConfigError, match="bits="):
        pack_indices(np.zeros(3, dtype=np.uint8), bits)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="bits="):
        unpack_indices(b"\x00", bits, 1)  # type: ignore[arg-type]


def test_index_too_wide_names_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"index 9 does not fit in bits=3; use bits=4"):
        pack_indices(np.array([1, 9], dtype=np.uint8), 3)


def test_wrong_dtype_rejected() -> None:
    with pytest.raises(ConfigError, match="uint8"):
        pack_indices(np.array([1, 2], dtype=np.int64), 4)


@pytest.mark.parametrize("delta", [-1, 1])
def test_wrong_stream_length_is_corruption(delta: int) -> None:
    data = pack_indices(np.arange(10, dtype=np.uint8), 4)
    bad = data[:delta] if delta < 0 else data + b"\x00"
    with pytest.raises(CorruptCheckpointError, match="expected 5"):
        unpack_indices(bad, 4, 10)


def test_bad_count_and_levels_rejected() -> None:
    with pytest.raises(ConfigError):
        unpack_indices(b"", 4, -1)
    with pytest.raises(ConfigError):
        bits_for(257)
