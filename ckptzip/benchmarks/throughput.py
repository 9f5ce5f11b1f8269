"""Benchmark: ckptzip's speed against ``torch.save`` / ``torch.load`` on one state, one disk.

A small GPT-style transformer (default about 17M parameters) trained a few steps with AdamW;
its ``{"model", "optimizer"}`` state (about 200 MB of fp32) is saved and loaded side by side,
interleaved, best of ``--repeat``, in one temp directory:

* ``torch.save`` / ``ckptzip.save`` (default config) and ``torch.load`` / ``ckptzip.load``,
  ckptzip with its default threads and with 1 and 2, and ``ckptzip.save`` with
  ``CompressionConfig(rounding="nearest")`` (what the default's stochastic rounding costs)
  and, on one thread, with Adam's first moment not fitted to its step (``unfitted``: what
  that fit costs);
* a ``CheckpointManager`` delta save (object given, parent in the manager's cache) and the
  restore of the last step of a full chain (``keyframe_every`` files) by a fresh manager
  (``--layout skip``: written with ``CheckpointManager(layout="skip")``; by default with
  ``error_feedback=True``, the manager's default, weights as residuals; ``--no-error-feedback``:
  bin-index deltas of every weight), interleaved with ``torch.load`` and
  ``ckptzip.load`` of the chain's keyframe;
* a manager save with the configuration search (model, optimizer and a held-out ``eval_fn``),
  the first (full search) and the better of the next two (neighbourhood), split into the
  ``eval_fn`` calls, the rest of the search (quantizing the trials, swapping them in) and
  the write (encoding and publishing the file);
* the per-core rate of the tensor path alone (one thread): quantize + pack + entropy coding
  of every float tensor, and decoding them back, in GB/s of fp32 input.

Every time comes with the process's CPU time during that call (all threads), so a run on a
loaded machine shows whether a second thread got a second core; a control (zlib, which
releases the GIL, on one and on two threads) says how many cores the process could get at
all. ``python benchmarks/throughput.py`` (``--quick``: a 5M-parameter model); prints a table
and writes ``benchmarks/results/throughput.json`` (``--json``), with the load average before
and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import os
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import RESULTS, print_table, write_json

import ckptzip
from ckptzip import CheckpointManager
from ckptzip._parallel import encoding_pool
from ckptzip.codecs.base import DecodeContext
from ckptzip.codecs.quantized import QuantCodec, decode_quantized, encode_quantized
from ckptzip.config import CompressionConfig, StandaloneConfig
from ckptzip.quantize import dequantize, quantize


class GPT(nn.Module):
    """A decoder-only transformer (pre-norm blocks, learned positions)."""

    def __init__(self, vocab: int, width: int, depth: int, context: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        layer = nn.TransformerEncoderLayer(
            width, max(1, width // 64), 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.context = context

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        h = self.tok(x) + self.pos(torch.arange(t))
        return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))


class Run:
    """The model, AdamW and a fixed stream of synthetic token batches."""

    def __init__(self, vocab: int, width: int, depth: int) -> None:
        torch.manual_seed(0)
        self.vocab = vocab
        self.model = GPT(vocab, width, depth, context=64)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.gen = torch.Generator().manual_seed(1)
        self.heldout = torch.randint(0, vocab, (4, 65), generator=torch.Generator().manual_seed(2))

    def loss(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        logits = model(batch[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, self.vocab), batch[:, 1:].reshape(-1))

    def step(self) -> None:
        batch = torch.randint(0, self.vocab, (4, 65), generator=self.gen)
        loss = self.loss(self.model, batch)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def eval_fn(self, model: nn.Module) -> float:
        with torch.no_grad():
            return float(self.loss(model, self.heldout))

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict()}

    @property
    def params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def benchmark_run(quick: bool) -> Run:
    """The benchmark's model and AdamW after three steps (``quick``: the 5M-parameter one)."""
    width, depth = (256, 4) if quick else (384, 8)
    run = Run(8192, width, depth)
    for _ in range(3):
        run.step()
    return run


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def cpu_time() -> float:
    """CPU seconds of this process so far, every thread."""
    return time.process_time()


def interleaved(
    fns: dict[str, Callable[[], Any]], repeat: int, cpu: dict[str, float] | None = None
) -> dict[str, float]:
    """Best wall time of each function over ``repeat`` rounds, one call of each per round
    (``cpu``: filled with the CPU seconds of each best call)."""
    best = dict.fromkeys(fns, math.inf)
    for _ in range(repeat):
        for name, fn in fns.items():
            c0 = cpu_time()
            t = timed(fn)
            if t < best[name]:
                best[name] = t
                if cpu is not None:
                    cpu[name] = cpu_time() - c0
    return best


def cores_available(repeat: int) -> dict[str, float]:
    """CPU time / wall time of GIL-free work (zlib) on one and on two threads: the cores this
    process gets, which bounds any thread scaling measured in the same run."""
    data = os.urandom(1 << 20) * 4

    def work(_: int) -> None:
        zlib.compress(data, 6)

    out = {}
    for threads in (1, 2):
        best = 0.0
        for _ in range(repeat):
            c0, t0 = cpu_time(), time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(work, range(4)))
            best = max(best, (cpu_time() - c0) / (time.perf_counter() - t0))
        out[f"control: cores used by zlib on {threads} thread(s)"] = best
    return out


UNFITTED = CompressionConfig(standalone=StandaloneConfig(first_fit="values"))
"""The default config with Adam's first moment fitted to its values, not to Adam's step."""


def save_load(run: Run, d: Path, repeat: int, cpu: dict[str, float]) -> dict[str, Any]:
    state = run.state()
    pt, ckz = d / "s.pt", d / "s.ckz"
    saves = interleaved(
        {
            "torch.save": lambda: torch.save(state, pt),
            "ckptzip.save": lambda: ckptzip.save(state, ckz, overwrite=True),
            "ckptzip.save threads=1": lambda: ckptzip.save(state, ckz, overwrite=True, threads=1),
            "ckptzip.save threads=2": lambda: ckptzip.save(state, ckz, overwrite=True, threads=2),
            # the default rounds the weights stochastically: what that pass costs
            "ckptzip.save nearest": lambda: ckptzip.save(
                state, d / "n.ckz", overwrite=True, config=CompressionConfig(rounding="nearest")
            ),
            # Adam's first moment at its levels without the fit to Adam's step: what it costs
            "ckptzip.save threads=1 unfitted": lambda: ckptzip.save(
                state, d / "u.ckz", overwrite=True, threads=1, config=UNFITTED
            ),
        },
        repeat,
        cpu,
    )
    ratio = pt.stat().st_size / ckz.stat().st_size
    loads = interleaved(
        {
            "torch.load": lambda: torch.load(pt, weights_only=True),
            "ckptzip.load": lambda: ckptzip.load(ckz),
            "ckptzip.load threads=1": lambda: ckptzip.load(ckz, threads=1),
            "ckptzip.load threads=2": lambda: ckptzip.load(ckz, threads=2),
        },
        repeat,
        cpu,
    )
    return {**saves, **loads, "ratio": ratio, "bytes_in": pt.stat().st_size}


def state_sha256(state: Any) -> str:
    """A sha256 over the state's tensors: training on two torch threads does not always end
    in the same bits (here 2 runs in 12 ended elsewhere), so two trees' files compare only
    where their states do."""
    h = hashlib.sha256()
    for t in _floats(state):
        h.update(t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_cpu(run: Run, d: Path, repeat: int) -> dict[str, Any]:
    """The least CPU seconds of each one-thread save (default config, and ``unfitted``) and
    of ``torch.save`` over ``repeat`` interleaved rounds, the figure other processes on the
    machine move least, the sha256 of the default's file (the same bytes across trees) and
    of the state (:func:`state_sha256`)."""
    state = run.state()
    ckz = d / "s.ckz"
    fns: dict[str, Callable[[], Any]] = {
        "torch.save": lambda: torch.save(state, d / "s.pt"),
        "ckptzip.save threads=1": lambda: ckptzip.save(state, ckz, overwrite=True, threads=1),
        "ckptzip.save threads=1 unfitted": lambda: ckptzip.save(
            state, d / "u.ckz", overwrite=True, threads=1, config=UNFITTED
        ),
    }
    least = dict.fromkeys(fns, math.inf)
    for _ in range(repeat):
        for name, fn in fns.items():
            c0 = cpu_time()
            fn()
            least[name] = min(least[name], cpu_time() - c0)
    ratio = (d / "s.pt").stat().st_size / ckz.stat().st_size
    sha = hashlib.sha256(ckz.read_bytes()).hexdigest()
    return {
        "least cpu s": least,
        "ratio": ratio,
        "sha256 ckptzip.save": sha,
        "sha256 state": state_sha256(state),
    }


def delta_save_cpu(run: Run, d: Path, saves: int) -> dict[str, Any]:
    """The least and the median CPU seconds of ``saves`` consecutive manager delta saves
    (default manager: one chain, error feedback) after a keyframe, one sha256 over the
    chain's files (the same bytes across trees) and one over the states saved
    (:func:`state_sha256`)."""
    mgr = CheckpointManager(d / "delta-cpu", keyframe_every=saves + 1)
    mgr.save(0, run.state())
    took = []
    states = hashlib.sha256(state_sha256(run.state()).encode())
    for step in range(1, saves + 1):
        run.step()
        state = run.state()
        states.update(state_sha256(state).encode())
        c0 = cpu_time()
        mgr.save(step, state)
        took.append(cpu_time() - c0)
    mgr.close()
    files = sorted((d / "delta-cpu").rglob("*.ckz"))
    digest = hashlib.sha256(b"".join(hashlib.sha256(f.read_bytes()).digest() for f in files))
    return {
        "delta save least cpu s": min(took),
        "delta save median cpu s": sorted(took)[len(took) // 2],
        "files": len(files),
        "sha256 chain": digest.hexdigest(),
        "sha256 states": states.hexdigest(),
    }


def manager_times(
    run: Run,
    d: Path,
    repeat: int,
    keyframe_every: int,
    cpu: dict[str, float] | None = None,
    layout: str = "chain",
    error_feedback: bool = True,
    pt: Path | None = None,
) -> dict[str, Any]:
    """Delta saves of consecutive training steps, then a fresh manager's restore of the
    chain's end and ``ckptzip.load`` of its keyframe, interleaved (with ``torch.load`` of
    ``pt`` when given) (``cpu``: filled with the CPU seconds of the fastest of each)."""
    out: dict[str, Any] = {}
    mgr = CheckpointManager(
        d / "chain",
        keyframe_every=keyframe_every,
        layout=layout,  # type: ignore[arg-type]
        error_feedback=error_feedback,
    )
    deltas, step = [], 0
    mgr.save(step, run.state())
    ratios = []
    for _ in range(keyframe_every - 1):
        run.step()
        step += 1
        state = run.state()
        c0, t0 = cpu_time(), time.perf_counter()
        report = mgr.save(step, state)
        deltas.append((time.perf_counter() - t0, cpu_time() - c0))
        ratios.append(report.ratio)
    mgr.close()
    out["manager delta save"], delta_cpu = min(deltas)
    out["delta ratio"] = float(sum(ratios) / len(ratios))
    keyframe = mgr.path(0)
    fns: dict[str, Callable[[], Any]] = {
        "restore chain end": lambda: CheckpointManager(
            d / "chain", keyframe_every=keyframe_every
        ).load(step),
        "ckptzip.load keyframe": lambda: ckptzip.load(keyframe),
    }
    if pt is not None:
        fns = {"torch.load": lambda: torch.load(pt, weights_only=True), **fns}
    restore_cpu: dict[str, float] = {}
    out.update(interleaved(fns, repeat, restore_cpu))
    out["chain length"] = len(CheckpointManager(d / "chain").chain(step))
    if cpu is not None:
        cpu["manager delta save"] = delta_cpu
        cpu.update(restore_cpu)
    return out


def search_save(run: Run, d: Path, cpu: dict[str, float]) -> dict[str, Any]:
    """Manager saves with the search: the first (full search) and the better of the next two
    (neighbourhood), each split into ``eval_fn`` calls, the rest of the search and the write."""
    calls: list[float] = []

    def eval_fn(model: nn.Module) -> float:
        t0 = time.perf_counter()
        try:
            return run.eval_fn(model)
        finally:
            calls.append(time.perf_counter() - t0)

    out: dict[str, Any] = {}
    with CheckpointManager(
        d / "search", model=run.model, optimizer=run.opt, eval_fn=eval_fn, window=None
    ) as mgr:
        for step, name in enumerate(("first", "next", "next"), start=1):
            calls.clear()
            c0 = cpu_time()
            t0 = time.perf_counter()
            report = mgr.save(step)
            wall = time.perf_counter() - t0
            key = f"manager save + search ({name})"
            run.step()
            if wall >= out.get(key, math.inf):
                continue
            assert report is not None and report.search is not None
            out[key] = wall
            cpu[key] = cpu_time() - c0
            out[f"search split ({name})"] = {
                "trials": report.search.trials,
                "strategy": report.search.strategy,
                "eval_fn calls": len(calls),
                "eval_fn s": sum(calls),
                "rest of search s": report.search.seconds - sum(calls),
                "write s": wall - report.search.seconds,
                "ratio": report.ratio,
            }
    return out


def tensor_rates(run: Run, repeat: int) -> dict[str, Any]:
    """GB/s of fp32 input through the tensor path, best of ``repeat`` rounds.

    One thread, each phase in turn: quantize, encode (pack + entropy coding), decode to
    indices, dequantize, and decode straight into the tensor (what ``load`` does onto the
    CPU), each rated by wall time and by the process's CPU time (on a machine shared with
    other jobs a process gets a fraction of a core: CPU time is what a core does per byte).
    Then encoding and decoding straight into the tensor on 1 and 2 threads (the tensors spread
    over a pool), by wall time: how the path scales with threads.
    """
    cfg = CompressionConfig()
    tensors = [t for t in _floats(run.state()) if t.numel() >= cfg.min_numel]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    ctxs = [DecodeContext("x", t.shape, t.dtype, cfg.quant) for t in tensors]
    into = [dataclasses.replace(c, values=True) for c in ctxs]
    codec = QuantCodec()
    qs = [quantize(t, cfg.quant) for t in tensors]
    encoded = [encode_quantized(q, cfg.zstd_level) for q in qs]
    decoded = [decode_quantized(m, c, ctx) for (m, c), ctx in zip(encoded, ctxs, strict=True)]
    jobs: dict[str, Callable[[int], Any]] = {
        "quantize": lambda i: quantize(tensors[i], cfg.quant),
        "encode": lambda i: encode_quantized(qs[i], cfg.zstd_level),
        "decode": lambda i: decode_quantized(*encoded[i], ctxs[i]),
        "dequantize": lambda i: dequantize(decoded[i]),
        "decode into the tensor": lambda i: codec.decode(*encoded[i], into[i]).materialize(),
    }
    wall = dict.fromkeys(jobs, math.inf)
    cpu = dict.fromkeys(jobs, math.inf)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(repeat):
            for name, job in jobs.items():
                t0, c0 = time.perf_counter(), time.process_time()
                for i in range(len(tensors)):
                    job(i)
                wall[name] = min(wall[name], time.perf_counter() - t0)
                cpu[name] = min(cpu[name], time.process_time() - c0)
        scaling = {}
        for workers in (1, 2):
            with encoding_pool(workers) as pool:
                for name in ("encode", "decode into the tensor"):
                    key = f"{name} GB/s, {workers} thread{'s' * (workers > 1)}"
                    fn = jobs[name]
                    every = {key: lambda fn=fn: list(pool.map(fn, range(len(tensors))))}
                    scaling[key] = interleaved(every, repeat)[key]
    finally:
        torch.set_num_threads(threads)
    out = {f"{k} GB/s per core": nbytes / v / 1e9 for k, v in wall.items()}
    out.update({f"{k} GB/s per core (CPU time)": nbytes / v / 1e9 for k, v in cpu.items()})
    out.update({k: nbytes / v / 1e9 for k, v in scaling.items()})
    for suffix, t in (("", wall), (" (CPU time)", cpu)):
        out[f"quantize+encode GB/s per core{suffix}"] = nbytes / (t["quantize"] + t["encode"]) / 1e9
        out[f"decode+dequantize GB/s per core{suffix}"] = (
            nbytes / (t["decode"] + t["dequantize"]) / 1e9
        )
    return out


def _kernels() -> str:
    try:
        from ckptzip import kernels
    except ImportError:  # before the kernel layer
        return "none"
    return kernels.IMPLEMENTATION


def _floats(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.is_floating_point() else []
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _floats(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _floats(v)]
    return []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a 5M-parameter model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keyframe-every", type=int, default=10)
    ap.add_argument(
        "--layout",
        choices=["chain", "skip"],
        default="chain",
        help="the manager's delta layout (CheckpointManager(layout=))",
    )
    ap.add_argument(
        "--error-feedback",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the manager's chain with CheckpointManager(error_feedback=...) (default on, as the "
        "manager's own default; --no-error-feedback: bin-index deltas of every weight)",
    )
    ap.add_argument("--no-search", action="store_true", help="skip the manager search save")
    ap.add_argument(
        "--rates-only", action="store_true", help="only the one-thread tensor path (GB/s)"
    )
    ap.add_argument(
        "--search-only",
        action="store_true",
        help="only torch.save and the manager saves with the search (for a tree before/after)",
    )
    ap.add_argument(
        "--manager-only",
        action="store_true",
        help="only torch.save/load, the manager delta saves and the chain restore (before/after)",
    )
    ap.add_argument(
        "--save-cpu",
        action="store_true",
        help="only the one-thread saves' least CPU seconds, default and unfitted, with the "
        "file's sha256 (a before/after on a loaded machine)",
    )
    ap.add_argument(
        "--delta-cpu",
        type=int,
        default=0,
        metavar="N",
        help="only N manager delta saves after a keyframe: their least and median CPU seconds "
        "and a sha256 over the chain's files (a before/after on a loaded machine)",
    )
    ap.add_argument("--json", type=Path, default=RESULTS / "throughput.json")
    args = ap.parse_args()
    run = benchmark_run(args.quick)
    d = Path(tempfile.mkdtemp(prefix="ckptzip-throughput-"))
    cpu: dict[str, float] = {}
    try:
        res: dict[str, Any] = {
            "params": run.params,
            "kernels": _kernels(),
            "load average before": os.getloadavg()[0],
        }
        if args.delta_cpu:
            res.update(delta_save_cpu(run, d, args.delta_cpu))
            res["load average after"] = os.getloadavg()[0]
            print(
                f"{res['params'] / 1e6:.1f}M parameters + AdamW, kernels={res['kernels']}: "
                f"{args.delta_cpu} delta saves, least CPU {res['delta save least cpu s']:.3f} s, "
                f"median {res['delta save median cpu s']:.3f} s, sha256 of the chain's "
                f"{res['files']} files {res['sha256 chain'][:16]} (states "
                f"{res['sha256 states'][:16]})"
            )
            write_json(args.json, res)
            return
        if args.save_cpu:
            res.update(save_cpu(run, d, args.repeat))
            res["load average after"] = os.getloadavg()[0]
            least = res["least cpu s"]
            print_table(
                f"{res['params'] / 1e6:.1f}M parameters + AdamW, kernels={res['kernels']}, "
                f"ratio {res['ratio']:.2f}x, sha256 {res['sha256 ckptzip.save'][:16]} (state "
                f"{res['sha256 state'][:16]})",
                [{"what": k, "cpu": v, "x": v / least["torch.save"]} for k, v in least.items()],
                [("what", "what", ""), ("cpu", "least cpu s", ".3f"), ("x", "x torch", ".2f")],
            )
            print(
                f"load average {res['load average before']:.1f} before, "
                f"{res['load average after']:.1f} after"
            )
            write_json(args.json, res)
            return
        if args.rates_only:
            res.update(tensor_rates(run, args.repeat))
            print({k: round(v, 4) for k, v in res.items() if "GB/s" in k})
            write_json(args.json, res)
            return
        if args.search_only:
            state = run.state()
            fns = {"torch.save": lambda: torch.save(state, d / "s.pt")}
            res.update(interleaved(fns, args.repeat, cpu))
            res.update(search_save(run, d, cpu))
            res["load average after"] = os.getloadavg()[0]
            res["cpu s"] = cpu
            print({k: v for k, v in res.items() if "search" in k})
            write_json(args.json, res)
            return
        if args.manager_only:
            state = run.state()
            pt = d / "s.pt"
            fns = {
                "torch.save": lambda: torch.save(state, pt),
                "torch.load": lambda: torch.load(pt, weights_only=True),
            }
            res.update(interleaved(fns, args.repeat, cpu))
            res["layout"] = args.layout
            res["error feedback"] = args.error_feedback
            before = {k: (res[k], cpu[k]) for k in fns}
            res.update(
                manager_times(
                    run,
                    d,
                    args.repeat,
                    args.keyframe_every,
                    cpu,
                    layout=args.layout,
                    error_feedback=args.error_feedback,
                    pt=pt,
                )
            )
            # torch's best of all its calls: before the chain, beside the restores and after
            # (the load moves within a run)
            after_cpu: dict[str, float] = {}
            after = interleaved(fns, args.repeat, after_cpu)
            for k in fns:
                for wall, c in (before[k], (after[k], after_cpu[k])):
                    if wall < res[k]:
                        res[k], cpu[k] = wall, c
            res["load average after"] = os.getloadavg()[0]
            res["cpu s"] = cpu
            res["delta save x torch.save"] = res["manager delta save"] / res["torch.save"]
            res["restore x torch.load"] = res["restore chain end"] / res["torch.load"]
            res["load x torch.load"] = res["ckptzip.load keyframe"] / res["torch.load"]
            ts, tl = res["torch.save"], res["torch.load"]
            print_table(
                f"{res['params'] / 1e6:.1f}M parameters + AdamW, kernels={res['kernels']}, "
                f"delta ratio {res['delta ratio']:.2f}x, layout {args.layout}, "
                f"error feedback {'on' if args.error_feedback else 'off'}, "
                f"the last step's chain {res['chain length']} files",
                [
                    {
                        "what": k,
                        "s": res[k],
                        "x": res[k] / (tl if "load" in k or "restore" in k else ts),
                        "cpu": cpu.get(k),
                    }
                    for k in (
                        "torch.save",
                        "torch.load",
                        "ckptzip.load keyframe",
                        "manager delta save",
                        "restore chain end",
                    )
                ],
                [
                    ("what", "what", ""),
                    ("s", "seconds", ".3f"),
                    ("x", "x torch", ".2f"),
                    ("cpu", "cpu s", ".3f"),
                ],
            )
            before, after_load = res["load average before"], res["load average after"]
            print(f"load average {before:.1f} before, {after_load:.1f} after")
            write_json(args.json, res)
            return
        res.update(cores_available(args.repeat))
        res.update(save_load(run, d, args.repeat, cpu))
        res.update(tensor_rates(run, args.repeat))
        res["error feedback"] = args.error_feedback
        res.update(
            manager_times(
                run,
                d,
                args.repeat,
                args.keyframe_every,
                cpu,
                layout=args.layout,
                error_feedback=args.error_feedback,
            )
        )
        if not args.no_search:
            res.update(search_save(run, d, cpu))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    res["load average after"] = os.getloadavg()[0]
    res["cpu s"] = cpu
    ts, tl = res["torch.save"], res["torch.load"]
    rows = [
        {
            "what": k,
            "s": v,
            "x": v / (tl if "load" in k or "restore" in k else ts),
            "cpu": cpu.get(k),
        }
        for k, v in res.items()
        if k.startswith(("ckptzip", "manager", "restore", "torch"))
    ]
    print_table(
        f"{res['params'] / 1e6:.1f}M parameters + AdamW, {res['bytes_in'] / 1e6:.0f} MB, "
        f"kernels={res['kernels']}, ratio {res['ratio']:.2f}x (delta {res['delta ratio']:.2f}x)",
        rows,
        [
            ("what", "what", ""),
            ("s", "seconds", ".3f"),
            ("x", "x torch", ".2f"),
            ("cpu", "cpu s", ".3f"),
        ],
    )
    splits = [{"save": k, **v} for k, v in res.items() if k.startswith("search split")]
    if splits:
        print_table(
            "manager saves with the search, split",
            [
                {**r, "eval x": r["eval_fn s"] / ts, "rest x": r["rest of search s"] / ts}
                for r in splits
            ],
            [
                ("save", "save", ""),
                ("strategy", "strategy", ""),
                ("trials", "trials", "d"),
                ("eval_fn calls", "eval_fn calls", "d"),
                ("eval_fn s", "eval_fn s", ".3f"),
                ("eval x", "x torch.save", ".2f"),
                ("rest of search s", "rest of search s", ".3f"),
                ("rest x", "x torch.save", ".2f"),
                ("write s", "write s", ".3f"),
            ],
        )
    before, after = res["load average before"], res["load average after"]
    print(f"load average {before:.1f} before, {after:.1f} after")
    one, two = (res[f"control: cores used by zlib on {n} thread(s)"] for n in (1, 2))
    print(f"cores this process got (zlib control): {one:.2f} on one thread, {two:.2f} on two")
    print(
        f"\nper core: quantize + encode {res['quantize+encode GB/s per core']:.3f} GB/s, "
        f"decode + dequantize {res['decode+dequantize GB/s per core']:.3f} GB/s"
    )
    cpu = " GB/s per core (CPU time)"
    into = res["decode into the tensor" + cpu]
    print(
        f"per core by CPU time: quantize {res['quantize' + cpu]:.3f}, encode "
        f"{res['encode' + cpu]:.3f}, decode into the tensor {into:.3f} GB/s"
    )
    for name in ("encode", "decode into the tensor"):
        one, two = res[f"{name} GB/s, 1 thread"], res[f"{name} GB/s, 2 threads"]
        print(f"{name}: {one:.3f} GB/s on 1 thread, {two:.3f} on 2 ({two / one:.2f}x)")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
