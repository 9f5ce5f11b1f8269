"""Benchmark: would a format version with wider ANS interleaving decode faster? (issue #21)

The largest part of a load's time (about 40 %, README, "Speed") is the ANS lanes decoder:
four 64-bit states, 24-bit precision, a scalar step per symbol, about 2 ns a symbol on one
core. This runs a
prototype (``benchmarks/ans_wide/ans_wide.c``, built here with gcc; not the library's
format) of the usual alternative: 32 interleaved 32-bit states, 16-bit refills, 12-bit
precision, in two layouts (a stream per lane, or the lanes' refills interleaved into one
stream), decoded by scalar C, AVX2 and AVX-512 (where the CPU has them), on the symbol
streams the library itself codes for a real checkpoint (a manager keyframe and three deltas
of ``throughput.py --quick``'s state, each stream taken as one context), against the
library's own decoder on the same streams (``entropy.decode_ans_into``, one thread, levels
written into a float32 tensor, as a load does). Every decoder's output is checked against
the levels of the symbols. Prints a table and writes JSON.

Usage::

    python benchmarks/ans_wide.py [--json benchmarks/results/ans_wide.json]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import ckptzip
from ckptzip import entropy, kernels

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import print_table, write_json
from throughput import Run

HERE = Path(__file__).resolve().parent
PRECISION = 12
LANES = 32


def has_cpu(flag: str) -> bool:
    """Whether /proc/cpuinfo lists ``flag`` (False where there is no such file)."""
    info = Path("/proc/cpuinfo")
    return info.exists() and f" {flag}" in info.read_text()


def cpu_features() -> dict[str, bool]:
    """The instruction sets the prototype's decoders need, as this CPU has them."""
    return {
        "avx2": has_cpu("avx2"),
        "avx512": has_cpu("avx512f"),
        "avx512_vbmi2": has_cpu("avx512_vbmi2") and has_cpu("bmi2"),
    }


def build() -> ctypes.CDLL:
    """Compile the prototype into a temporary shared library."""
    out = Path(tempfile.mkdtemp(prefix="ans-wide-")) / "ans_wide.so"
    src = HERE / "ans_wide" / "ans_wide.c"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    lib = ctypes.CDLL(str(out))
    lib.wide_encode.restype = ctypes.c_int64
    lib.wide_encode_il.restype = ctypes.c_int64
    return lib


def capture_streams() -> list[np.ndarray]:
    """The symbol streams the library codes with ANS lanes (``"ans-lanes"``, or since it
    exists ``"ans-wide"``) for a manager keyframe and three deltas of the --quick throughput
    state."""
    streams: list[np.ndarray] = []
    lanes, wide = kernels.ans_lanes_encode, kernels.ans_wide_encode

    def spy_lanes(symbols: Any, *args: Any, **kwargs: Any) -> Any:
        streams.append(np.array(symbols, dtype=np.uint8, copy=True))
        return lanes(symbols, *args, **kwargs)

    def spy_wide(symbols: Any, *args: Any, **kwargs: Any) -> Any:
        streams.append(np.array(symbols, dtype=np.uint8, copy=True))
        return wide(symbols, *args, **kwargs)

    entropy.kernels.ans_lanes_encode = spy_lanes  # type: ignore[attr-defined]
    entropy.kernels.ans_wide_encode = spy_wide  # type: ignore[attr-defined]
    try:
        run = Run(8192, 256, 4)
        for _ in range(3):
            run.step()
        with tempfile.TemporaryDirectory() as d:
            manager = ckptzip.CheckpointManager(d, keyframe_every=10)
            for step in range(4):
                manager.save(step, run.state())
                run.step()
    finally:
        entropy.kernels.ans_lanes_encode = lanes  # type: ignore[attr-defined]
        entropy.kernels.ans_wide_encode = wide  # type: ignore[attr-defined]
    return streams


def model(symbols: np.ndarray, alphabet: int) -> tuple[np.ndarray, np.ndarray]:
    """Frequencies summing to 2**PRECISION, every symbol of the alphabet at least 1, by the
    library's rule (left[i] = floor(cum_i * scale) + i)."""
    counts = np.bincount(symbols, minlength=alphabet).astype(np.float64)
    scale = ((1 << PRECISION) - alphabet) / counts.sum()
    cum = np.concatenate([[0.0], np.cumsum(counts)])
    left = (np.floor(cum[:-1] * scale) + np.arange(alphabet)).astype(np.uint32)
    left = np.append(left, np.uint32(1 << PRECISION))
    return np.diff(left).astype(np.uint32), left[:-1].copy()


def coded_bits(symbols: np.ndarray, precision: int) -> float:
    """The bits an ideal coder spends on ``symbols`` with frequencies quantized to
    ``2**precision`` by the library's rule (the cost of the precision alone)."""
    alphabet = int(symbols.max()) + 1
    counts = np.bincount(symbols, minlength=alphabet).astype(np.float64)
    scale = ((1 << precision) - alphabet) / counts.sum()
    cum = np.concatenate([[0.0], np.cumsum(counts)])
    left = np.append(np.floor(cum[:-1] * scale) + np.arange(alphabet), 1 << precision)
    width = np.diff(left)
    used = counts > 0
    return float((counts[used] * (precision - np.log2(width[used]))).sum())


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def encode_interleaved(
    lib: ctypes.CDLL, s: np.ndarray, freq: np.ndarray, cum: np.ndarray
) -> tuple[np.ndarray, int]:
    """The prototype's interleaved stream of ``s``: its words (in a buffer 64 words longer, as
    the AVX2 decoders' loads want) and their count."""
    n = s.size
    one = np.zeros(n + 2 * LANES + 64, dtype=np.uint16)
    used = lib.wide_encode_il(
        _ptr(s), ctypes.c_int64(n), _ptr(freq), _ptr(cum), _ptr(one), ctypes.c_int64(n + 2 * LANES)
    )
    assert used > 0
    return one, int(used)


def best(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def measure(
    lib: ctypes.CDLL, s: np.ndarray, has: dict[str, bool], repeat: int
) -> tuple[dict[str, float], int, int]:
    """One stream's best decoding times per decoder (each output checked, and each
    interleaved decoder's status: the whole stream read, no more), and its bytes coded by the
    library and by the prototype."""
    n = s.size
    alphabet = int(s.max()) + 1
    levels = np.linspace(-1.0, 1.0, 16 if alphabet <= 16 else 256).astype(np.float32)
    expect = levels[s]
    # the library's decoder, one thread, straight into a float32 tensor
    chunks, meta = entropy.encode_symbols(s, "ans-lanes")
    out = torch.empty(n, dtype=torch.float32)
    decode = functools.partial(
        entropy.decode_ans_into, chunks[0], meta, torch.from_numpy(levels), out
    )
    timings = {"library": best(decode, repeat)}
    assert np.array_equal(out.numpy(), expect)
    # the library's "ans-wide" layout, built from this prototype's interleaved layout
    wide_chunks, wide_meta = entropy.encode_symbols(s, "ans-wide")
    decode = functools.partial(
        entropy.decode_ans_into, wide_chunks[0], wide_meta, torch.from_numpy(levels), out,
        method="ans-wide",
    )  # fmt: skip
    timings["library ans-wide"] = best(decode, repeat)
    assert np.array_equal(out.numpy(), expect)
    wide_library_bytes = sum(len(c) for c in wide_chunks)
    # the prototype, each lane's words a stream of its own (one spare word: a refill
    # gather reads 32 bits)
    freq, cum = model(s, alphabet)
    freq16 = np.zeros(16, dtype=np.uint32)
    cum16 = np.zeros(16, dtype=np.uint32)
    if alphabet <= 16:
        freq16[:alphabet], cum16[:alphabet] = freq, cum
    words = np.zeros(n + 2 * LANES + 2, dtype=np.uint16)
    start = np.zeros(LANES + 1, dtype=np.int64)
    used = lib.wide_encode(
        _ptr(s), ctypes.c_int64(n), _ptr(freq), _ptr(cum), _ptr(words),
        ctypes.c_int64(n + 2 * LANES), _ptr(start),
    )  # fmt: skip
    assert used > 0
    slots = np.zeros(1 << PRECISION, dtype=np.uint32)
    lib.wide_table(_ptr(freq), _ptr(cum), ctypes.c_int(alphabet), _ptr(slots))
    stream = (_ptr(words), _ptr(start), ctypes.c_int64(n))
    calls: dict[str, tuple[str, tuple[Any, ...]]] = {
        "scalar": ("wide_decode_scalar", (*stream, _ptr(slots), _ptr(levels)))
    }
    if has["avx2"]:
        calls["avx2"] = ("wide_decode_avx2", (*stream, _ptr(slots), _ptr(levels)))
    if has["avx512"]:
        calls["avx512"] = ("wide_decode_avx512", (*stream, _ptr(slots), _ptr(levels)))
    if has["avx512"] and alphabet <= 16:
        model16 = (*stream, _ptr(freq16), _ptr(cum16), ctypes.c_int32(alphabet), _ptr(levels))
        calls["avx512, no table gather"] = ("wide_decode_avx512_cmp", model16)
    # the interleaved layout: one stream, refills in the order the decoder takes them
    one, used_il = encode_interleaved(lib, s, freq, cum)
    assert used_il == used  # the same words, in another order
    interleaved = (_ptr(one), ctypes.c_int64(used_il), ctypes.c_int64(n))
    calls["interleaved, scalar"] = (
        "wide_decode_il_scalar",
        (*interleaved, _ptr(slots), _ptr(levels)),
    )
    if has["avx2"]:
        calls["interleaved, avx2, table gathers"] = (
            "wide_decode_il_avx2_table",
            (*interleaved, _ptr(slots), _ptr(levels)),
        )
    if has["avx2"] and alphabet <= 16:
        calls["interleaved, avx2, no gathers"] = (
            "wide_decode_il_avx2",
            (*interleaved, _ptr(freq16), _ptr(cum16), ctypes.c_int32(alphabet), _ptr(levels)),
        )
    if has["avx512_vbmi2"] and alphabet <= 16:
        calls["interleaved, avx512, no gathers"] = (
            "wide_decode_il_avx512",
            (*interleaved, _ptr(freq16), _ptr(cum16), ctypes.c_int32(alphabet), _ptr(levels)),
        )
    for name, (symbol, arguments) in calls.items():
        if name == "avx512" and alphabet > 16:
            continue  # its levels come from a 16-entry register permute
        got = np.empty(n, dtype=np.float32)
        decode = functools.partial(getattr(lib, symbol), *arguments, _ptr(got))
        timings[name] = best(decode, repeat)
        assert np.array_equal(got, expect), name
        assert not name.startswith("interleaved") or decode() == 0, name
    return timings, sum(len(c) for c in chunks), 2 * used + 2 * alphabet, wide_library_bytes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, default=HERE / "results" / "ans_wide.json")
    args = ap.parse_args(argv)
    lib = build()
    has = cpu_features()
    streams = [s for s in capture_streams() if s.size >= 1 << 16 and int(s.max()) >= 1]
    totals: dict[str, float] = {
        "symbols": 0.0, "library bytes": 0.0, "wide bytes": 0.0, "library ans-wide bytes": 0.0
    }  # fmt: skip
    for s in streams:
        timings, library_bytes, wide_bytes, wide_library = measure(lib, s, has, args.repeat)
        totals["library ans-wide bytes"] += wide_library
        for name, seconds in timings.items():
            totals[f"{name} s"] = totals.get(f"{name} s", 0.0) + seconds
            # the library's time over the same streams, for decoders that skip some
            totals[f"{name} symbols"] = totals.get(f"{name} symbols", 0.0) + s.size
            totals[f"{name} library s"] = totals.get(f"{name} library s", 0.0) + timings["library"]
        totals["symbols"] += s.size
        totals["library bytes"] += library_bytes
        totals["wide bytes"] += wide_bytes
    names = [k[: -len(" symbols")] for k in totals if k.endswith(" symbols") and k != "symbols"]
    rows = [
        {"decoder": name, "symbols": totals[f"{name} symbols"],
         "ns": 1e9 * totals[f"{name} s"] / totals[f"{name} symbols"],
         "x": totals[f"{name} library s"] / totals[f"{name} s"]}
        for name in names
    ]  # fmt: skip
    print(
        f"{len(streams)} streams, {totals['symbols'] / 1e6:.1f}M symbols; bytes: library "
        f"{totals['library bytes'] / 1e6:.3f} MB, prototype {totals['wide bytes'] / 1e6:.3f} MB "
        f"({(totals['wide bytes'] / totals['library bytes'] - 1) * 100:+.2f} %), the library's "
        f"ans-wide {totals['library ans-wide bytes'] / 1e6:.3f} MB "
        f"({(totals['library ans-wide bytes'] / totals['library bytes'] - 1) * 100:+.2f} %)"
    )
    bits = {p: sum(coded_bits(s, p) for s in streams) for p in (PRECISION, 24)}
    totals["precision cost %"] = (bits[PRECISION] / bits[24] - 1) * 100
    print(
        f"the precision's own cost: {totals['precision cost %']:.4f} % more bits at "
        f"{PRECISION} bits than at 24"
    )
    print_table(
        "decoding into float32 levels, one thread (best of each stream's repeats)",
        rows,
        [
            ("decoder", "decoder", ""),
            ("symbols", "symbols", ".0f"),
            ("ns", "ns a symbol", ".3f"),
            ("x", "x library on the same streams", ".2f"),
        ],
    )
    # larger alphabets than the library's streams above have (its bins go up to 256): bell-
    # shaped synthetic streams, where only the table-gather decoders apply
    rng = np.random.default_rng(0)
    wide: list[dict[str, Any]] = []
    for alphabet in (32, 64, 256):
        s = np.clip(rng.normal(alphabet / 2, alphabet / 6, 1 << 22), 0, alphabet - 1)
        symbols = s.astype(np.uint8)
        timings, _, _, _ = measure(lib, symbols, has, args.repeat)
        cost = (coded_bits(symbols, PRECISION) / coded_bits(symbols, 24) - 1) * 100
        for name, seconds in timings.items():
            wide.append(
                {"alphabet": alphabet, "decoder": name, "ns": 1e9 * seconds / (1 << 22),
                 "x": timings["library"] / seconds, "precision cost %": cost}
            )  # fmt: skip
    print_table(
        "synthetic bell-shaped streams of 4M symbols, larger alphabets",
        wide,
        [
            ("alphabet", "alphabet", "d"),
            ("decoder", "decoder", ""),
            ("ns", "ns a symbol", ".3f"),
            ("x", "x library", ".2f"),
            ("precision cost %", "bits at 12 over 24, %", ".3f"),
        ],
    )
    write_json(
        args.json,
        {"totals": totals, "rows": rows, "larger alphabets": wide, "cpu": has,
         "streams": len(streams)},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
