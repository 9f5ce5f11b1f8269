"""Benchmark: the compiled passes of one ``ckptzip.save``, replayed alone on one thread.

The ``throughput.py --quick`` state (7.4M parameters + AdamW, 88 MB) is saved once at the
default config with ``threads=1`` while every call of the kernel layer's per-element passes
is recorded (the sketch scan, the members of the protect/prune buckets, the first moment's
fit sums, k-means, the fused assignment, stochastic rounding, the measured error, bit
packing, bin counts and the ``"ans-wide"`` encoder), and of the index coding stage that calls
the last two (``codecs.quantized.encode_indices``: the choice among packed+zstd, ANS and one
byte an index, zstd included; its row is not in the passes' total). Each kind of call is then
replayed on one thread, best of ``--repeat`` by the process's CPU time (the figure other
processes on the machine move least), in nanoseconds per value; the sha256 of their outputs
says whether two runs computed the same results (a run with ``CKPTZIP_NO_AVX512=1`` or
``CKPTZIP_NO_AVX2=1`` takes the other loops: the digests must not move, the times do).

``--delta``: the same for a default ``CheckpointManager``'s delta save of the step after its
keyframe, with the passes that save adds (requantizing to the parent's levels, the residual's
reconstruction and error, the bin-index delta, its run-length split and ANS counts and
coders, and the stage that rebuilds each weight from its parent and quantized change,
``codecs.residual.reconstruct``); ``benchmarks/results/save_kernels-delta.json``.

``python benchmarks/save_kernels.py [--delta]`` (under a minute); prints a table and writes
``benchmarks/results/save_kernels.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _replay import Call, copy_args, least_cpu_row
from _report import RESULTS, print_table, write_json
from throughput import Run

import ckptzip
import ckptzip.codecs.quantized  # the stages' modules, looked up by name
import ckptzip.codecs.residual
from ckptzip import kernels

PASSES = (
    "key_scan",
    "members",
    "fit_sums",
    "kmeans",
    "assign_fused",
    "round_stochastic",
    "squared_error",
    "pack",
    "bin_counts",
    "ans_wide_encode",
    "encode_indices",
)
"""The kernel layer's functions a default save calls, in the order a tensor meets them, and
the index coding stage that calls the last two (:data:`STAGES`)."""

DELTA_PASSES = (
    *PASSES,
    "requantize",
    "residual_error",
    "gather",
    "delta_encode",
    "rle_split",
    "ans_counts",
    "ans_encode",
    "ans_lanes_encode",
    "zero_runs_encode",
    "reconstruct",
)
"""And those a manager's delta save adds: requantizing to the parent's levels, the residual's
reconstruction and error, the bin-index delta and its back ends (a kernel the library under
test lacks is left out, so an older tree runs the same script)."""


STAGES = {"encode_indices": "ckptzip.codecs.quantized", "reconstruct": "ckptzip.codecs.residual"}
"""Stages above the kernel layer, recorded and replayed the same way (name: module): the
index coding's choice among packed+zstd, ANS and the one-byte layout (each candidate a pass
over the indices, zstd's among them), and a delta save's rebuilding of each weight from its
parent and quantized change (what the next residual is taken against)."""


def owner(name: str) -> Any:
    """The module whose attribute ``name`` the save looks up: a stage's, or the kernels."""
    return sys.modules[STAGES[name]] if name in STAGES else kernels


def _size(name: str, args: tuple[Any, ...]) -> int:
    """The values a call passes over: its first argument's element count (``gather``'s
    indices, its second)."""
    first = args[1] if name == "gather" else args[0]
    return int(first.numel() if isinstance(first, torch.Tensor) else np.asarray(first).size)


def record(save: Callable[[], Any], passes: tuple[str, ...] = PASSES) -> dict[str, list[Call]]:
    """Every call of ``passes`` while ``save()`` runs: (function, copies of its arguments,
    values); the save itself runs as it would."""
    passes = tuple(name for name in passes if hasattr(owner(name), name))
    calls: dict[str, list[Call]] = {name: [] for name in passes}
    originals = {name: getattr(owner(name), name) for name in passes}

    def spy(name: str) -> Callable[..., Any]:
        fn = originals[name]

        def call(*args: Any, **kw: Any) -> Any:
            if name in ("ans_wide_encode", "ans_lanes_encode"):
                kw = {**kw, "threads": 1}
            calls[name].append((fn, copy_args(args), copy_args(kw), _size(name, args)))
            return fn(*args, **kw)

        return call

    for name in passes:
        setattr(owner(name), name, spy(name))
    try:
        save()
    finally:
        for name, fn in originals.items():
            setattr(owner(name), name, fn)
    return calls


def record_delta(run: Run, tmp: Path) -> dict[str, list[Call]]:
    """The calls of :data:`DELTA_PASSES` during a default ``CheckpointManager``'s save of the
    step after its keyframe (error feedback, one chain; the manager's own threads, each call
    replayed on one)."""
    mgr = ckptzip.CheckpointManager(tmp / "chain", keyframe_every=10)
    try:
        mgr.save(0, run.state())
        run.step()
        state = run.state()
        calls = record(lambda: mgr.save(1, state), DELTA_PASSES)
    finally:
        mgr.close()
    # the manager's threads made the calls in whatever order they ran: by their inputs, so
    # two runs replay (and digest) the same sequence
    for these in calls.values():
        these.sort(key=_inputs_key)
    return calls


def _inputs_key(call: Call) -> str:
    h = hashlib.sha256()
    for arg in [*call[1], *call[2].values()]:
        if isinstance(arg, np.random.Generator):  # its state, not its repr (an address)
            h.update(repr(arg.bit_generator.state).encode())
        else:
            _digest_into(h, arg)
    return h.hexdigest()


def _digest_into(h: Any, out: Any) -> None:
    if isinstance(out, bytes):
        h.update(out)
    elif isinstance(out, torch.Tensor):
        h.update(out.contiguous().view(torch.uint8).numpy().tobytes())
    elif isinstance(out, np.ndarray):
        h.update(np.ascontiguousarray(out).tobytes())
    elif isinstance(out, (tuple, list)):
        for part in out:
            _digest_into(h, part)
    else:  # the passes' float sums: to 12 digits (the vector loops add in another order)
        h.update(f"{out:.12g}".encode() if isinstance(out, float) else repr(out).encode())


def _fresh(x: Any) -> Any:
    """A random generator as it was recorded (k-means draws from it: each replay must start
    from the recorded state); anything else as it is."""
    return copy.deepcopy(x) if isinstance(x, np.random.Generator) else x


def replay(calls: list[Call], digest: bool = False) -> str:
    """Run every call once; with ``digest``, a sha256 of what they returned."""
    h = hashlib.sha256()
    for fn, args, kw, _ in calls:
        out = fn(*(_fresh(a) for a in args), **{k: _fresh(v) for k, v in kw.items()})
        if digest:
            _digest_into(h, out)
    return h.hexdigest()


def measure(calls: dict[str, list[Call]], repeat: int) -> list[dict[str, Any]]:
    """One row per pass: calls, values, least CPU seconds over ``repeat`` replays."""
    return [
        {"pass": name, **least_cpu_row(these, replay, repeat, "value")}
        for name, these in calls.items()
        if these
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument(
        "--delta",
        action="store_true",
        help="the passes of a manager's delta save (the step after a keyframe) instead",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    out = args.json or RESULTS / ("save_kernels-delta.json" if args.delta else "save_kernels.json")
    if args.delta:
        # one torch thread for the training steps: two may sum the embedding's gradient in
        # another order from run to run (a delta save's inputs then differ in the last bits)
        torch.set_num_threads(1)
    run = Run(8192, 256, 4)
    for _ in range(3):
        run.step()
    with TemporaryDirectory() as tmp:
        if args.delta:
            calls = record_delta(run, Path(tmp))
        else:
            state = run.state()
            calls = record(lambda: ckptzip.save(state, Path(tmp) / "s.ckz", threads=1))
    rows = measure(calls, args.repeat)
    # a stage calls kernels of its own rows: the total is the kernels'
    total = sum(r["cpu s"] for r in rows if r["pass"] not in STAGES)
    switches = {
        k: os.environ[k] for k in ("CKPTZIP_NO_AVX2", "CKPTZIP_NO_AVX512") if k in os.environ
    }
    print_table(
        f"the passes of {'a manager delta save' if args.delta else 'one ckptzip.save'} of "
        f"the --quick state, replayed on one thread "
        f"({kernels.IMPLEMENTATION}{', ' + str(switches) if switches else ''}); "
        f"all passes (the stages call some of them): {total:.4f} CPU s",
        rows,
        [
            ("pass", "pass", ""),
            ("calls", "calls", "d"),
            ("values", "values", "d"),
            ("cpu s", "cpu s", ".4f"),
            ("ns/value", "ns/value", ".2f"),
            ("sha256", "sha256", ""),
        ],
    )
    write_json(
        out,
        {
            "kernels": kernels.IMPLEMENTATION,
            "switches": switches,
            "save": "manager delta" if args.delta else "ckptzip.save",
            "cpu s": total,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
