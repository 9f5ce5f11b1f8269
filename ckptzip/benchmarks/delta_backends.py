"""Benchmark: the delta codec's symbol back ends on the deltas a ``CheckpointManager`` writes.

For ``gru`` and ``lm`` (``_workloads``: 5 checkpoints 20 steps apart) and the transformer of
``throughput.py --quick`` (4 consecutive training steps) a ``CheckpointManager`` saves a
delta chain; every delta-coded tensor's parent and child indices are read back from the
files (``read_quantized``) and its rearranged differences coded by each back end:
``ans`` (one context per parent bin), ``rle+ans``, ``rle+lzma``, ``ans-lanes`` (ANS in
independent lanes, the same contexts), ``rle+zstd`` (level 9), ``ans-wide-ctx`` (32 wide
lanes, the same contexts), ``rle+ans-wide`` (``rle+ans`` with its long inner streams in those
lanes), and the choices, the
smaller of ``ans`` and ``rle+lzma`` (the delta codec before ``rle+ans``), the smaller of
``ans`` and ``rle+ans``, the smallest of those and ``rle+zstd``, and what
``bindiff.encode_smallest`` writes (``bindiff.delta_methods``: today ``ans-wide-ctx`` or
``rle+ans-wide`` from 2^16 symbols on, else ``ans`` or ``rle+ans``, each coded only where its
size from the counts is within ``ANS_MARGIN`` of the other's, or ``rle+zstd`` where its probe
puts it below them).
Bytes are payloads; times are the one-thread encode and decode of the differences
(``bindiff.encode_delta`` / ``decode_delta``; for the codec's choice ``encode_smallest``
and the decode of what it chose), summed over the tensors. Also the smallest ratio of a
tensor's full index encoding to its indices' order-0 entropy (the delta codec skips that
comparison below ``codecs.delta.FULL_TRIAL``).

One more row is a what-if, not a back end: ``ans-wide per context (what-if)``, the
rearranged differences coded as one ``"ans-wide"`` stream per parent bin (each with its own
count table and blocks; ``"ans"`` for a context under ``entropy.ANS_LANES_MIN`` symbols),
decoded context by context and applied: what a wide layout with the delta codec's contexts
could write, and how fast it could decode, without a new kernel.

Run ``python benchmarks/delta_backends.py`` (about 3 minutes on one core); writes
``benchmarks/results/delta_backends.json`` (``--out`` for another path). Sizes are
deterministic; times are not.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads
from _report import RESULTS, print_table, write_json
from throughput import Run

from ckptzip import CheckpointManager, kernels
from ckptzip._types import QuantizedTensor
from ckptzip.api import read_manifest, read_quantized
from ckptzip.bindiff import decode_delta, encode_delta, encode_smallest
from ckptzip.codecs.quantized import encode_indices
from ckptzip.entropy import ANS_LANES_MIN, decode_symbols, encode_symbols, order0_entropy_bits

METHODS = ("ans", "rle+ans", "rle+lzma", "ans-lanes", "rle+zstd", "ans-wide-ctx", "rle+ans-wide")
CODEC = "encode_smallest (the codec's choice)"
CHOICES = {
    "old choice (ans | rle+lzma)": ("ans", "rle+lzma"),
    "ans | rle+ans": METHODS[:2],
    "ans | rle+ans | rle+zstd": ("ans", "rle+ans", "rle+zstd"),
}


def _states(name: str) -> Iterator[dict[str, Any]]:
    if name == "throughput":
        run = Run(8192, 256, 4)  # throughput.py --quick
        for _ in range(3):
            run.step()
        for _ in range(4):
            yield run.state()
            run.step()
        return
    w = _workloads.make(name, 0)
    for i, (_, state) in enumerate(_workloads.train(w, 100, every=20)):
        yield state
        if i == 4:
            return


def _pairs(name: str, d: Path) -> list[tuple[np.ndarray, np.ndarray, int, int]]:
    """(parent indices, child indices, bins, the child's levels) of every delta-coded tensor."""
    # bin-index deltas of every tensor (the default's error feedback would store the weights'
    # residuals instead, leaving only the moments delta-coded)
    with CheckpointManager(d, keyframe_every=10, error_feedback=False) as mgr:
        for step, state in enumerate(_states(name)):
            mgr.save(step, state)
        files = [mgr.path(step) for step in mgr.steps()]
    out = []
    cache: dict[str, Any] = {}
    tables = [read_quantized(f, cache=cache) for f in files]
    for f, parent, child in zip(files[1:], tables, tables[1:], strict=False):
        for e in read_manifest(f).tensors:
            p, c = parent.get(e.path), child.get(e.path)
            if e.meta.get("mode") == "delta" and isinstance(p, QuantizedTensor):
                assert isinstance(c, QuantizedTensor)
                bins = max(len(p.levels), len(c.levels))
                out.append((p.indices.reshape(-1), c.indices.reshape(-1), bins, len(c.levels)))
    return out


WIDE = "ans-wide per context (what-if)"


def _wide_per_context(
    prev: np.ndarray, now: np.ndarray, bins: int
) -> tuple[int, float, float, int]:
    """Bytes, encode and decode seconds of :data:`WIDE` for one tensor's differences, and
    how many of its symbols lie in contexts too short for ``"ans-wide"``."""
    t0 = time.perf_counter()
    symbols, _ = kernels.delta_encode(prev, now, bins, True)
    sizes = [int(c) for c in kernels.bin_counts(prev)[:bins]]
    coded, at = [], 0
    for size in sizes:
        method = "ans-wide" if size >= ANS_LANES_MIN else "ans"
        chunks, meta = encode_symbols(symbols[at : at + size], method)
        coded.append((chunks, meta, size, method))
        at += size
    t1 = time.perf_counter()
    parts = [decode_symbols(chunks, meta, size, method) for chunks, meta, size, method in coded]
    back = kernels.delta_decode(prev, np.concatenate(parts), bins, True)
    t2 = time.perf_counter()
    assert np.array_equal(back, now)
    short = sum(size for *_, size, method in coded if method == "ans")
    return sum(len(c) for chunks, *_ in coded for c in chunks), t1 - t0, t2 - t1, short


def measure(name: str) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(prefix="ckptzip-delta-backends-"))
    try:
        pairs = _pairs(name, d / "chain")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    size = dict.fromkeys([*METHODS, WIDE], 0)
    enc = dict.fromkeys([*METHODS, WIDE, CODEC], 0.0)
    dec = dict.fromkeys([*METHODS, WIDE, CODEC], 0.0)
    chosen = dict.fromkeys([*CHOICES, CODEC], 0)
    full_ratio, delta_ratio = [], []
    short_symbols = 0
    for prev, now, bins, levels in pairs:
        # the full index encoding the codec compares against, over the order-0 entropy
        entropy = order0_entropy_bits(now) / 8
        full = len(encode_indices(now, levels, 3)[0])
        full_ratio.append(full / entropy if entropy else math.inf)
        got = {}
        for m in METHODS:
            t0 = time.perf_counter()
            payload = encode_delta(prev, now, bins, method=m)
            t1 = time.perf_counter()
            back = decode_delta(payload.meta, payload.chunks, prev)
            t2 = time.perf_counter()
            assert np.array_equal(back, now)
            got[m] = payload.nbytes
            size[m] += payload.nbytes
            enc[m] += t1 - t0
            dec[m] += t2 - t1
        nbytes, t_enc, t_dec, short = _wide_per_context(prev, now, bins)
        short_symbols += short
        size[WIDE] += nbytes
        enc[WIDE] += t_enc
        dec[WIDE] += t_dec
        for label, methods in CHOICES.items():
            chosen[label] += min(got[m] for m in methods)
        delta_ratio.append(min(got["ans"], got["rle+ans"]) / entropy if entropy else math.inf)
        t0 = time.perf_counter()
        best = encode_smallest(prev, now, bins)
        t1 = time.perf_counter()
        back = decode_delta(best.meta, best.chunks, prev)
        t2 = time.perf_counter()
        assert np.array_equal(back, now)
        chosen[CODEC] += best.nbytes
        enc[CODEC] += t1 - t0
        dec[CODEC] += t2 - t1
    return {
        "tensors": len(pairs),
        "symbols": int(sum(p[0].size for p in pairs)),
        "bytes": {**size, **chosen},
        "encode_s": enc,
        "decode_s": dec,
        "what-if: symbols in contexts under ANS_LANES_MIN": short_symbols,
        "full / entropy, min": min(full_ratio),
        "delta / entropy, max": max(delta_ratio),
        "delta / entropy where not smaller than full, min": min(
            (d for d, f in zip(delta_ratio, full_ratio, strict=True) if d * 1.0 >= f),
            default=None,
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "delta_backends.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for name in ("gru", "lm", "throughput"):
        r = out[name] = measure(name)
        base = r["bytes"]["old choice (ans | rle+lzma)"]
        rows = [
            {
                "what": k,
                "kib": v / 1024,
                "rel": v / base,
                "enc": r["encode_s"].get(k),
                "dec": r["decode_s"].get(k),
            }
            for k, v in r["bytes"].items()
        ]
        print_table(
            f"{name}: {r['tensors']} delta tensors, {r['symbols'] / 1e6:.1f}M symbols",
            rows,
            [
                ("what", "back end", ""),
                ("kib", "KiB", ".1f"),
                ("rel", "x old choice", ".4f"),
                ("enc", "encode s", ".3f"),
                ("dec", "decode s", ".3f"),
            ],
        )
        print(
            f"full index encoding / order-0 entropy: min {r['full / entropy, min']:.3f}; "
            f"delta / entropy: max {r['delta / entropy, max']:.3f}; what-if: "
            f"{r['what-if: symbols in contexts under ANS_LANES_MIN'] / r['symbols']:.1%} of "
            "the symbols in contexts too short for ans-wide"
        )
    write_json(args.out, out)


if __name__ == "__main__":
    main()
