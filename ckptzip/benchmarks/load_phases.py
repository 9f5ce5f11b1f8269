"""Benchmark: where a keyframe's ``ckptzip.load`` spends its time, against ``torch.load``.

The state of ``throughput.py`` (a GPT-style model and AdamW after three steps; ``--quick``:
the 5M-parameter one) is saved once by ``ckptzip.save`` (default config) and by
``torch.save``; then, interleaved, ``torch.load``, ``ckptzip.load`` on one thread
(``threads=1``) and ``ckptzip.load`` at its default threads, least wall time over
``--repeat`` rounds. A load with every entry decoded in the calling thread (``api._threads`` held at
0: no pool, so the phases do not overlap; ``threads=1`` hands the large entries to one pool
thread while the caller decodes the small ones) is split by phase, each the sum over the load
of its calls, least over the rounds:

* ``open``: the header and the manifest (``container.Reader``: its digest, the JSON, every
  check of it);
* ``chunks``: every entry's chunks read and checked against their digests
  (``Reader.tensor_chunks``);
* ``decode``: the codecs, into the output tensors (``api._decode_entry``);
* ``build``: the state put together from the tensors (``api._materialize``);
* ``rest``: the load's own time outside those (the order of entries, the timers).

With ``--fresh N``, also each load as a restore after a crash makes it: the first load of a
process that has loaded nothing yet (its memory all fresh pages, where a loop of loads reuses
what the last one freed; its garbage collector never run), ``N`` processes per kind,
interleaved, least and median, after one process per kind that is not counted. The
processes write and read bytecode (in a temporary ``PYTHONPYCACHEPREFIX``), as an installed
package has it: with ``PYTHONDONTWRITEBYTECODE`` set, each would compile ckptzip's modules
from source first, tens of milliseconds no user pays.

Then the file's chunk bytes hashed by each digest a version has used (sha256 until version 4,
CRC-32 from version 5), one thread, least of ``--repeat``. The machine's load moves these
figures (two cores shared with other jobs here): read them as ratios within one run.

``python benchmarks/load_phases.py --quick``; prints a table and writes
``benchmarks/results/load_phases.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import RESULTS, print_table, write_json
from throughput import benchmark_run

import ckptzip
from ckptzip import api, container

PHASES: tuple[tuple[str, Any, str], ...] = (
    ("open", container.Reader, "__init__"),
    ("chunks", container.Reader, "tensor_chunks"),
    ("decode", api, "_decode_entry"),
    ("build", api, "_materialize"),
)
"""A load's phases: (name, the object whose function it is, the function)."""


@contextmanager
def timed_phases(totals: dict[str, float]) -> Iterator[None]:
    """Add each phase's wall seconds (every call, any thread) to ``totals`` while inside."""
    originals = [(owner, fn, getattr(owner, fn)) for _, owner, fn in PHASES]

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                totals[name] += time.perf_counter() - t

        return call

    for (name, _, _), (owner, fn, original) in zip(PHASES, originals, strict=True):
        setattr(owner, fn, timed(name, original))
    try:
        yield
    finally:
        for owner, fn, original in originals:
            setattr(owner, fn, original)


def in_caller(fn: Callable[[], Any]) -> Any:
    """``fn()`` with every decoding in the calling thread (no pool)."""
    original = api._threads
    api._threads = lambda threads, n: 0
    try:
        return fn()
    finally:
        api._threads = original


def loads(ckz: Path, pt: Path, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    """Least wall ms of each load, and of each phase of ``ckptzip.load`` in the caller's
    thread."""
    calls: dict[str, Callable[[], Any]] = {
        "torch.load": lambda: torch.load(pt, weights_only=True),
        "ckptzip.load, 1 thread": lambda: ckptzip.load(ckz, threads=1),
        "ckptzip.load, default threads": lambda: ckptzip.load(ckz),
        "ckptzip.load, in the caller's thread": lambda: in_caller(lambda: ckptzip.load(ckz)),
    }
    best = dict.fromkeys(calls, float("inf"))
    phases = dict.fromkeys([name for name, _, _ in PHASES] + ["rest"], float("inf"))
    for fn in calls.values():  # warm: the page cache, the kernels' first calls
        fn()
    for _ in range(repeat):
        for name, fn in calls.items():
            totals: dict[str, float] = collections.defaultdict(float)
            if name == "ckptzip.load, in the caller's thread":
                with timed_phases(totals):
                    t = time.perf_counter()
                    fn()
                    whole = time.perf_counter() - t
                # the phase timers' own cost is in the whole: the untimed loads' figure
                # below is the one to compare with torch.load
                totals["rest"] = whole - sum(totals.values())
                for phase, seconds in totals.items():
                    phases[phase] = min(phases[phase], seconds)
                t = time.perf_counter()
                fn()
                whole = time.perf_counter() - t
            else:
                t = time.perf_counter()
                fn()
                whole = time.perf_counter() - t
            best[name] = min(best[name], whole)
    return {k: 1e3 * v for k, v in best.items()}, {k: 1e3 * v for k, v in phases.items()}


_FIRST_LOAD = """
import gc, sys, time, torch, ckptzip
kind, path = sys.argv[1], sys.argv[2]
full = []  # full collections: their wall seconds
def count(phase, info, clock=[0.0]):
    if info["generation"] == 2:
        if phase == "start":
            clock[0] = time.perf_counter()
        else:
            full.append(time.perf_counter() - clock[0])
t = time.perf_counter()
if kind != "torch.load":  # import ckptzip loads no submodule: the first load imports them
    import ckptzip.api, ckptzip.codecs.exact, ckptzip.codecs.quantized
imported = time.perf_counter()
gc.callbacks.append(count)
if kind == "torch.load":
    torch.load(path, weights_only=True)
else:
    ckptzip.load(path, threads=None if kind == "ckptzip.load" else int(kind.rsplit(" ", 2)[1]))
loaded = time.perf_counter()
print(len(full), sum(full), imported - t, loaded - imported)
"""


def first_loads(ckz: Path, pt: Path, processes: int) -> dict[str, dict[str, float]]:
    """Least and median wall ms of the first load of a fresh process, per kind, and of the
    imports of ckptzip's modules it makes (``import ckptzip`` itself loads none); the full
    garbage collections inside the loads (``gc.callbacks``), how many and their ms."""
    kinds = {"torch.load": pt, "ckptzip.load": ckz, "ckptzip.load, 1 thread": ckz}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    imports: list[float] = []
    full: dict[str, list[float]] = {k: [] for k in kinds}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(ckz.parent / "pycache")
    for i in range(processes + 1):
        for kind, path in kinds.items():
            arg = "ckptzip.load 1 thread" if kind.endswith("1 thread") else kind
            out = subprocess.run(
                [sys.executable, "-c", _FIRST_LOAD, arg, str(path)],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            )
            if i:  # the first round compiled the bytecode
                n, spent, imported, loaded = map(float, out.stdout.split()[-4:])
                times[kind].append(1e3 * loaded)
                full[kind] += [1e3 * spent] * bool(n)
                if kind != "torch.load":
                    imports.append(1e3 * imported)
    times["ckptzip's modules imported"] = imports
    out = {k: {"least": min(v), "median": statistics.median(v)} for k, v in times.items()}
    for kind, spent in full.items():  # loads with a full collection inside, and its ms
        out[kind] |= {"loads with a full collection": len(spent), "its ms": spent}
    return out


def digests(ckz: Path, repeat: int) -> dict[str, float]:
    """Least ms to hash the file's chunks with each chunk digest a format version has used."""
    with open(ckz, "rb") as f:
        reader = container.Reader(f)
        chunks = [reader.read_chunk(i) for i in range(len(reader.manifest.chunks))]
    kinds: dict[str, Callable[[bytes], Any]] = {
        "sha256 (versions 1-4)": lambda c: hashlib.sha256(c).digest(),
        "CRC-32 (version 5)": zlib.crc32,
    }
    best = dict.fromkeys(kinds, float("inf"))
    for _ in range(repeat):
        for name, fn in kinds.items():
            t = time.perf_counter()
            for c in chunks:
                fn(c)
            best[name] = min(best[name], time.perf_counter() - t)
    return {k: 1e3 * v for k, v in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the 5M-parameter model")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--fresh", type=int, default=0, metavar="N", help="N fresh processes a kind")
    ap.add_argument("--json", type=Path, default=RESULTS / "load_phases.json")
    args = ap.parse_args()
    run = benchmark_run(args.quick)
    with tempfile.TemporaryDirectory(prefix="ckptzip-load-phases-") as tmp:
        ckz, pt = Path(tmp) / "k.ckz", Path(tmp) / "k.pt"
        ckptzip.save(run.state(), ckz)
        torch.save(run.state(), pt)
        version = container.Reader(open(ckz, "rb")).manifest.version  # noqa: SIM115
        best, phases = loads(ckz, pt, args.repeat)
        hashing = digests(ckz, args.repeat)
        fresh = first_loads(ckz, pt, args.fresh) if args.fresh else {}
        sizes = {"ckz bytes": os.path.getsize(ckz), "pt bytes": os.path.getsize(pt)}
    base = best["torch.load"]
    rows = [{"what": k, "ms": v, "x torch.load": v / base} for k, v in best.items()]
    rows += [{"what": f"  phase: {k}", "ms": v, "x torch.load": v / base}
             for k, v in phases.items()]  # fmt: skip
    rows += [{"what": f"hash the chunks: {k}", "ms": v, "x torch.load": v / base}
             for k, v in hashing.items()]  # fmt: skip
    if fresh:
        first = fresh["torch.load"]["least"]
        rows += [{"what": f"first load of a process: {k} (median {v['median']:.1f}"
                  + (f"; {v['loads with a full collection']} of {args.fresh} with a full "
                     "collection" if "its ms" in v else "") + ")",
                  "ms": v["least"], "x torch.load": v["least"] / first}
                 for k, v in fresh.items()]  # fmt: skip
    print_table(
        f"a keyframe's load, {run.params / 1e6:.1f}M parameters, format version {version}, "
        f"{sizes['ckz bytes'] / 1e6:.1f} MB (torch.save {sizes['pt bytes'] / 1e6:.1f} MB), "
        f"least of {args.repeat}",
        rows,
        [("what", "what", ""), ("ms", "ms", ".2f"), ("x torch.load", "x torch.load", ".2f")],
    )
    write_json(
        args.json,
        {
            "params": run.params,
            "format version": version,
            **sizes,
            "loads ms": best,
            "one-thread phases ms": phases,
            "chunk hashing ms": hashing,
            "first load of a process ms": fresh,
            "load average": os.getloadavg()[0],
        },
    )


if __name__ == "__main__":
    main()
