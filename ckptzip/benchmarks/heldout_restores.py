"""Benchmark: CheckpointManager's restores on two architectures the project never trained.

The workloads, their settings and the protocol were written by a reviewer who had not seen
the project's own models (from the README's description of the fault-tolerant protocol only)
and were fixed before any ckptzip run; nothing here was tuned to ckptzip, and nothing should
be. The code below is the reviewer's, reformatted and typed, with the project's helpers where
they do the same (``_workloads.failure_steps``, ``_report.torch_save_bytes``); the project's own
workloads and baselines are ``fault_tolerant.py``'s.

Workloads (the data is drawn here, from a fixed seed; nothing is downloaded):

* ``vit``: a tiny ViT (4×4 patches, width 64, 3 pre-norm blocks, 4 heads, a class token) on
  16×16 synthetic shapes in 10 classes (squares, rings, bars, crosses …) at random positions,
  sizes and intensities on a noisy, sloped background; cross-entropy, accuracy reported;
* ``conv1d``: a Conv1d forecaster (3 blocks of two convolutions with BatchNorm, GELU and
  dropout, then a 2-layer head) predicting the next 8 values of a noisy mixture of three
  sinusoids from the previous 96; mean squared error.

Both train with AdamW (lr 2e-3, weight decay 0.05, batch 128, gradients clipped at norm 1) under
a linear-warmup / cosine LambdaLR for ``T = 600`` steps; held-out loss on 1024 samples.

Protocol, for each model and seed: checkpoint every ``K = T/20`` steps; 10 failures, each
half-way between two checkpoints: the live model, optimizer and scheduler are thrown away,
fresh ones are built, the latest checkpoint is restored and the lost steps are redone with the
same data order and dropout masks (both keyed by step).

Methods:

* ``exact``: ``torch.save`` / ``torch.load`` of ``{model, optimizer, sched, step}``;
* ``ckptzip``: ``ckptzip.CheckpointManager(dir, model=, optimizer=, eval_fn=)`` at its
  defaults; the scheduler saved through ``save(step, extra={"sched": ...})`` and restored from
  ``mgr.extra``.

Measured per run: final held-out loss (and accuracy), the held-out loss right after every
restore, the ratio (Σ bytes in / Σ bytes out as the manager reports it, and Σ ``torch.save``
bytes / Σ ``.ckz`` bytes on disk), save and run times, warnings raised. Per model, the table:
the exact runs' final losses and their spread over seeds, the noise floor
``(max - min) / median``; per seed, ckptzip's final loss against the exact run's (relative
difference, within the floor or not), the ratio, the post-restore jumps (held-out loss right
after a ckptzip restore against the exact run's right after the same restore: the largest and
the median), and each restore's own cost (held-out loss of the restored state against the live
state its checkpoint was saved from). The summary also says whether every exact restore gave
back the held-out loss measured when its checkpoint was saved (it must).

An ablation, ``--restore-exact weights exp_avg exp_avg_sq`` (any of them): after every ckptzip
restore the named parts are replaced by the live state the checkpoint was saved from, so the
run shows what the other parts cost.

Run ``python benchmarks/heldout_restores.py`` (both models × seeds 0 1 2 × both methods, 12
runs of 1-3 min each on a shared 2-core machine; ``--jobs 2`` runs two at a time) or
``--quick`` (one seed, 40 steps, 2 failures: under a minute). Writes ``benchmarks/results/
heldout_restores[-quick].json`` (a subset of ``--models`` and ``--restore-exact`` add to the
name; ``--out`` to change), rewritten after every run: every run's record, the summary, the
settings and the machine. Every run uses one torch thread; losses are deterministic for a seed
(``.ckz`` sizes to a few bytes), timings on a shared machine are not.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import math
import multiprocessing
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import _workloads

import ckptzip

DATA_SEED = 20240611
MODELS = ("vit", "conv1d")
METHODS = ("exact", "ckptzip")
SEEDS = (0, 1, 2)
RESTORE_EXACT = ("weights", "exp_avg", "exp_avg_sq")
CHECKPOINTS = 20  # K = T / 20
FAILURES = 10
QUICK_STEPS, QUICK_FAILURES, QUICK_SEEDS = 40, 2, (0,)  # --quick

# --------------------------------------------------------------------------- data


def make_shapes(
    n: int, rng: np.random.Generator, size: int = 16, noise: float = 0.6
) -> tuple[torch.Tensor, torch.Tensor]:
    """10 classes of shapes at random position/scale/intensity on a noisy background."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    X = np.zeros((n, size, size), np.float32)
    y = rng.integers(0, 10, n)
    for i in range(n):
        c = y[i]
        cx, cy = rng.uniform(4.5, size - 4.5, 2)
        s = rng.uniform(2.0, 4.0)
        dx, dy = xx - cx, yy - cy
        r = np.sqrt(dx**2 + dy**2)
        if c == 0:  # filled square
            m = (np.abs(dx) <= s) & (np.abs(dy) <= s)
        elif c == 1:  # hollow square
            m = ((np.abs(dx) <= s) & (np.abs(dy) <= s)) & ~(
                (np.abs(dx) <= s - 1.2) & (np.abs(dy) <= s - 1.2)
            )
        elif c == 2:  # disk
            m = r <= s
        elif c == 3:  # ring
            m = (r <= s) & (r >= s - 1.3)
        elif c == 4:  # plus
            m = ((np.abs(dx) <= 0.6) & (np.abs(dy) <= s)) | (
                (np.abs(dy) <= 0.6) & (np.abs(dx) <= s)
            )
        elif c == 5:  # X
            m = (
                ((np.abs(dx - dy) <= 0.8) | (np.abs(dx + dy) <= 0.8))
                & (np.abs(dx) <= s)
                & (np.abs(dy) <= s)
            )
        elif c == 6:  # horizontal bar
            m = (np.abs(dy) <= 0.8) & (np.abs(dx) <= s + 1)
        elif c == 7:  # vertical bar
            m = (np.abs(dx) <= 0.8) & (np.abs(dy) <= s + 1)
        elif c == 8:  # triangle pointing up
            m = (dy <= s) & (dy >= -s) & (np.abs(dx) <= (dy + s) / 2)
        else:  # two dots
            m = (np.sqrt((dx - s) ** 2 + dy**2) <= 1.1) | (np.sqrt((dx + s) ** 2 + dy**2) <= 1.1)
        amp = rng.uniform(0.6, 1.2)
        grad = (
            rng.normal(0, 0.3) * (xx - size / 2) / size
            + rng.normal(0, 0.3) * (yy - size / 2) / size
        )
        X[i] = amp * m + grad + rng.normal(0, noise, (size, size))
    return torch.from_numpy(X).unsqueeze(1), torch.from_numpy(y).long()


def make_sines(
    n: int, rng: np.random.Generator, length: int = 104, noise: float = 0.2
) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy mixture of 3 sinusoids with random frequencies/phases/amplitudes."""
    t = np.arange(length, dtype=np.float64)
    f = rng.uniform(0.02, 0.15, (n, 3, 1))
    a = rng.uniform(0.3, 1.0, (n, 3, 1))
    p = rng.uniform(0, 2 * np.pi, (n, 3, 1))
    x = (a * np.sin(2 * np.pi * f * t + p)).sum(1) + rng.normal(0, noise, (n, length))
    x = torch.from_numpy(x.astype(np.float32))
    return x[:, :96].unsqueeze(1), x[:, 96:]


# --------------------------------------------------------------------------- models


class Block(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        qkv = self.qkv(self.ln1(x)).view(B, N, 3, self.heads, D // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(B, N, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyViT(nn.Module):
    def __init__(
        self, d: int = 64, depth: int = 3, heads: int = 4, patch: int = 4, size: int = 16
    ) -> None:
        super().__init__()
        self.patch = nn.Conv2d(1, d, patch, patch)
        n = (size // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, 2 * d) for _ in range(depth))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x[:, 0]))


class Conv1dNet(nn.Module):
    def __init__(self, p: float = 0.1) -> None:
        super().__init__()

        def blk(ci: int, co: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv1d(ci, co, 5, padding=2),
                nn.BatchNorm1d(co),
                nn.GELU(),
                nn.Conv1d(co, co, 5, stride=2, padding=2),
                nn.BatchNorm1d(co),
                nn.GELU(),
                nn.Dropout(p),
            )

        self.body = nn.Sequential(blk(1, 32), blk(32, 64), blk(64, 64))  # 96 -> 48 -> 24 -> 12
        self.fc1 = nn.Linear(64 * 12, 128)
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(128, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x).flatten(1)
        return self.fc2(self.drop(F.gelu(self.fc1(h))))


# --------------------------------------------------------------------------- workload

SPECS: dict[str, dict[str, Any]] = {
    # model: (lr, weight decay, batch, default steps)
    "vit": {"lr": 2e-3, "wd": 0.05, "batch": 128, "steps": 600},
    "conv1d": {"lr": 2e-3, "wd": 0.05, "batch": 128, "steps": 600},
}


@functools.cache
def data(
    kind: str,
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``kind``'s training set (16384 samples) and held-out set (1024), drawn once a process."""
    rng = np.random.default_rng(DATA_SEED)
    if kind == "vit":
        tr = make_shapes(16384, rng)
        ho = make_shapes(1024, rng)
    else:
        tr = make_sines(16384, rng)
        ho = make_sines(1024, rng)
    return tr, ho


class Workload:
    def __init__(self, kind: str, seed: int, steps: int) -> None:
        self.kind, self.seed, self.steps = kind, seed, steps
        spec = SPECS[kind]
        self.batch = spec["batch"]
        (self.Xtr, self.ytr), (self.Xho, self.yho) = data(kind)
        torch.manual_seed(seed)
        self.model: nn.Module = TinyViT() if kind == "vit" else Conv1dNet()
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=spec["lr"], weight_decay=spec["wd"]
        )
        warm = max(1, steps // 20)

        def lam(s: int) -> float:
            if s < warm:
                return (s + 1) / warm
            prog = (s - warm) / max(1, steps - warm)
            return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, prog)))

        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lam)

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out, y) if self.kind == "vit" else F.mse_loss(out, y)

    def train_step(self, step: int) -> float:
        g = np.random.default_rng([self.seed, step, 7])
        idx = torch.from_numpy(g.integers(0, len(self.Xtr), self.batch))
        torch.manual_seed(self.seed * 1_000_003 + step)  # dropout masks keyed by step
        self.model.train()
        out = self.model(self.Xtr[idx])
        loss = self.loss(out, self.ytr[idx])
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
        return loss.item()

    def eval_fn(self, model: nn.Module) -> float:
        was = model.training
        model.eval()
        with torch.no_grad():
            tot = 0.0
            for i in range(0, len(self.Xho), 512):
                out = model(self.Xho[i : i + 512])
                tot += float(self.loss(out, self.yho[i : i + 512])) * len(out)
        model.train(was)
        return tot / len(self.Xho)

    def accuracy(self) -> float | None:
        if self.kind != "vit":
            return None
        self.model.eval()
        with torch.no_grad():
            acc = float((self.model(self.Xho).argmax(1) == self.yho).float().mean())
        self.model.train()
        return acc


# --------------------------------------------------------------------------- methods


class Exact:
    def __init__(self, d: Path) -> None:
        self.d = d
        self.info: dict[str, Any] = {}

    def attach(self, w: Workload) -> None:
        pass

    def save(self, step: int, w: Workload) -> dict[str, Any]:
        st = {
            "model": w.model.state_dict(),
            "optimizer": w.opt.state_dict(),
            "sched": w.sched.state_dict(),
            "step": step,
        }
        p = self.d / f"step-{step:06d}.pt"
        torch.save(st, p)
        return {"step": step, "bytes_in": p.stat().st_size, "bytes_out": p.stat().st_size}

    def restore(self, w: Workload) -> int:
        latest = sorted(self.d.glob("step-*.pt"))[-1]
        st = torch.load(latest, weights_only=True)
        w.model.load_state_dict(st["model"])
        w.opt.load_state_dict(st["optimizer"])
        w.sched.load_state_dict(st["sched"])
        return int(st["step"])

    def close(self) -> None:
        pass


class Ckptzip:
    def __init__(self, d: Path, restore_exact: tuple[str, ...] = ()) -> None:
        self.d = d
        self.mgr: ckptzip.CheckpointManager | None = None
        self.restore_exact = restore_exact
        self.live: dict[str, Any] | None = None
        self.info: dict[str, Any] = {}

    def attach(self, w: Workload) -> None:
        if self.mgr is not None:
            self.mgr.close()
        # defaults: only model=, optimizer=, eval_fn=
        self.mgr = ckptzip.CheckpointManager(
            self.d, model=w.model, optimizer=w.opt, eval_fn=w.eval_fn
        )

    def save(self, step: int, w: Workload) -> dict[str, Any]:
        assert self.mgr is not None
        r = self.mgr.save(step, extra={"sched": w.sched.state_dict()})
        self.live = {
            "step": step,
            "model": copy.deepcopy(w.model.state_dict()),
            "optimizer": copy.deepcopy(w.opt.state_dict()),
        }
        codecs: dict[str, int] = {}
        for e in r.entries:
            codecs[e.codec] = codecs.get(e.codec, 0) + 1
        s = r.search
        search = None
        if s is not None:
            keys = ("trials", "baseline", "quality", "limit", "note")
            search = {k: getattr(s, k, None) for k in keys}
        return {
            "step": step,
            "bytes_in": r.bytes_in,
            "bytes_out": r.bytes_out,
            "ratio": r.ratio,
            "codecs": codecs,
            "search": search,
            "max_rel_error": max((e.rel_error or 0.0) for e in r.entries),
        }

    def restore(self, w: Workload) -> int:
        assert self.mgr is not None
        step = self.mgr.restore()
        w.sched.load_state_dict(self.mgr.extra["sched"])
        assert self.live is not None and self.live["step"] == step
        info: dict[str, Any] = {}
        # own cost of the restore: restored weights vs the live weights it was saved from
        twin = copy.deepcopy(w.model)
        twin.load_state_dict(self.live["model"])
        info["own_gap"] = w.eval_fn(w.model) / w.eval_fn(twin) - 1
        if "weights" in self.restore_exact:
            w.model.load_state_dict(self.live["model"])
        parts = [k for k in ("exp_avg", "exp_avg_sq") if k in self.restore_exact]
        if parts:
            st = w.opt.state_dict()
            for i, row in st["state"].items():
                for k in parts:
                    row[k] = self.live["optimizer"]["state"][i][k].clone()
            w.opt.load_state_dict(st)
        self.info = info
        return step

    def close(self) -> None:
        if self.mgr is not None:
            self.mgr.close()


# --------------------------------------------------------------------------- run


def plan(kind: str, *, quick: bool = False, steps: int | None = None) -> tuple[int, int, int]:
    """``(T, K, failures)`` for ``kind``: the reviewer's ``T = 600``, ``K = T/20`` and 10
    failures, or the quick mode's; ``steps`` overrides ``T``."""
    default = QUICK_STEPS if quick else SPECS[kind]["steps"]
    t = steps or default
    return t, t // CHECKPOINTS, QUICK_FAILURES if quick else FAILURES


def one_thread() -> None:
    """One torch thread, as the reviewer ran: deterministic, and the machine is shared."""
    torch.set_num_threads(1)
    with contextlib.suppress(RuntimeError):  # allowed only before inter-op work has started
        torch.set_num_interop_threads(1)


def run(
    kind: str,
    seed: int,
    method: str,
    plan: tuple[int, int, int],
    restore_exact: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One model, seed and method under the protocol; ``plan`` is ``(T, K, failures)``."""
    steps, every, failures = plan
    fail_at = set(_workloads.failure_steps(steps, every, failures))
    caught: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix=f"heldout-{kind}-{method}-") as tmp,
        warnings.catch_warnings(record=True) as wlist,
    ):
        warnings.simplefilter("always")
        m: Exact | Ckptzip = (
            Exact(Path(tmp)) if method == "exact" else Ckptzip(Path(tmp), tuple(restore_exact))
        )
        w = Workload(kind, seed, steps)
        m.attach(w)
        saves, restores = [], []
        t0 = time.perf_counter()
        step = 0
        while step < steps:
            if step in fail_at:
                fail_at.discard(step)
                w = Workload(kind, seed, steps)  # crash: fresh model/optimizer/scheduler
                m.attach(w)
                tr = time.perf_counter()
                to = m.restore(w)
                rec = {
                    "at": step,
                    "to": to,
                    "seconds": time.perf_counter() - tr,
                    "loss": w.eval_fn(w.model),
                    "lr": w.opt.param_groups[0]["lr"],
                }
                rec.update(m.info)
                restores.append(rec)
                step = to
                continue
            w.train_step(step)
            step += 1
            if step % every == 0:
                ts = time.perf_counter()
                s = m.save(step, w)
                s["seconds"] = time.perf_counter() - ts
                s["eval"] = w.eval_fn(w.model)
                s["torch_save_bytes"] = _report.torch_save_bytes(
                    {
                        "model": w.model.state_dict(),
                        "optimizer": w.opt.state_dict(),
                        "sched": w.sched.state_dict(),
                        "step": step,
                    }
                )
                saves.append(s)
        total = time.perf_counter() - t0
        m.close()
        final = w.eval_fn(w.model)
        ckz_files = sum(p.stat().st_size for p in Path(tmp).glob("*.ckz"))
        for x in wlist:
            caught.append(f"{x.category.__name__}: {str(x.message)[:300]}")
    bi = sum(s["bytes_in"] for s in saves)
    bo = sum(s["bytes_out"] for s in saves)
    tsb = sum(s["torch_save_bytes"] for s in saves)
    return {
        "kind": kind,
        "seed": seed,
        "method": method,
        "steps": steps,
        "every": every,
        "failures": failures,
        "restore_exact": list(restore_exact),
        "final_loss": final,
        "final_acc": w.accuracy(),
        "seconds": total,
        "ratio_reported": bi / bo,
        "ratio_files": (tsb / ckz_files) if ckz_files else None,
        "ckz_bytes": ckz_files,
        "torch_save_bytes": tsb,
        "saves": saves,
        "restores": restores,
        "warnings": caught,
    }


# --------------------------------------------------------------------------- summary


def restores_reproduce(r: dict[str, Any]) -> bool:
    """Whether every restore of run ``r`` gave back the held-out loss measured when its
    checkpoint was saved (bit for bit: what an exact restore must do)."""
    saved = {s["step"]: s["eval"] for s in r["saves"]}
    return all(x["loss"] == saved[x["to"]] for x in r["restores"])


def compare(e: dict[str, Any], c: dict[str, Any], floor: float) -> dict[str, Any]:
    """One seed: ckptzip's run ``c`` against the exact run ``e``."""
    if [x["to"] for x in e["restores"]] != [x["to"] for x in c["restores"]]:
        raise RuntimeError(f"{c['kind']} seed {c['seed']}: the two runs restored other steps")
    d = c["final_loss"] / e["final_loss"] - 1
    jumps = [b["loss"] / a["loss"] - 1 for a, b in zip(e["restores"], c["restores"], strict=True)]
    own = [b["own_gap"] for b in c["restores"]]
    ratios = [s["ratio"] for s in c["saves"]]
    return {
        "rel_diff": d,
        "within_floor": abs(d) <= floor,
        "below_floor": d <= floor,
        "ckptzip_final": c["final_loss"],
        "ckptzip_acc": c["final_acc"],
        "ratio_reported": c["ratio_reported"],
        "ratio_files": c["ratio_files"],
        "save_ratio_range": [min(ratios), max(ratios)] if ratios else None,
        "jumps": jumps,
        "max_jump": max(jumps, default=None),
        "max_jump_to": c["restores"][jumps.index(max(jumps))]["to"] if jumps else None,
        "median_jump": statistics.median(jumps) if jumps else None,
        "own_gaps": own,
        "max_own_gap": max(own, default=None),
        "ckptzip_seconds": c["seconds"],
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per model: the exact runs' finals and noise floor; per seed, ckptzip against them."""
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(r["kind"] for r in runs):
        exact = {r["seed"]: r for r in runs if r["kind"] == kind and r["method"] == "exact"}
        zipped = {r["seed"]: r for r in runs if r["kind"] == kind and r["method"] == "ckptzip"}
        finals = [exact[s]["final_loss"] for s in sorted(exact)]
        median = statistics.median(finals) if finals else None
        floor = (max(finals) - min(finals)) / median if median else None
        seeds = []
        for seed in sorted(exact):
            e = exact[seed]
            row: dict[str, Any] = {
                "seed": seed,
                "exact_final": e["final_loss"],
                "exact_acc": e["final_acc"],
                "exact_restores_reproduce": restores_reproduce(e),
                "exact_seconds": e["seconds"],
                "warnings": e["warnings"],
            }
            if seed in zipped and floor is not None:
                row.update(compare(e, zipped[seed], floor))
                row["warnings"] = zipped[seed]["warnings"] + e["warnings"]
            seeds.append(row)
        out[kind] = {"exact_finals": finals, "median": median, "floor": floor, "seeds": seeds}
    return out


def _pct(x: float | None) -> float | None:
    return None if x is None else 100 * x


_COLUMNS = [
    ("seed", "seed", "d"),
    ("exact_final", "exact final", ".5f"),
    ("ckptzip_final", "ckptzip final", ".5f"),
    ("rel_diff", "rel diff %", "+.2f"),
    ("within_floor", "within floor", ""),
    ("ratio_reported", "ratio", ".2f"),
    ("ratio_files", "file ratio", ".2f"),
    ("max_jump", "max jump %", "+.2f"),
    ("max_jump_to", "(restore to)", "d"),
    ("median_jump", "median jump %", "+.2f"),
    ("max_own_gap", "max own cost %", "+.2f"),
    ("exact_acc", "exact acc", ".4f"),
    ("ckptzip_acc", "ckptzip acc", ".4f"),
    ("exact_restores_reproduce", "exact restores reproduce", ""),
    ("warnings", "warnings", "d"),
]


def print_table(summary: dict[str, Any]) -> None:
    """Per model: the exact finals and floor, a row per seed, and every restore's figures."""
    for kind, m in summary.items():
        floor = "n/a" if m["floor"] is None else f"{100 * m['floor']:.2f} %"
        median = "n/a" if m["median"] is None else f"{m['median']:.5f}"
        rows = [
            {
                **r,
                **{
                    k: _pct(r.get(k))
                    for k in ("rel_diff", "max_jump", "median_jump", "max_own_gap")
                },
                "within_floor": None if "within_floor" not in r else str(r["within_floor"]),
                "exact_restores_reproduce": str(r["exact_restores_reproduce"]),
                "warnings": len(r["warnings"]),
            }
            for r in m["seeds"]
        ]
        _report.print_table(
            f"== {kind}: exact finals {[round(x, 5) for x in m['exact_finals']]}, "
            f"median {median}, floor (max-min)/median {floor}",
            rows,
            _COLUMNS,
        )
        for r in m["seeds"]:
            if "jumps" in r:
                print(f"seed {r['seed']}")
                print("  jumps %:    ", " ".join(f"{100 * j:+.2f}" for j in r["jumps"]))
                print("  own cost %: ", " ".join(f"{100 * j:+.2f}" for j in r["own_gaps"]))
                lo, hi = r["save_ratio_range"] or (float("nan"),) * 2
                print(
                    f"  exact {r['exact_seconds']:.0f} s, ckptzip {r['ckptzip_seconds']:.0f} s, "
                    f"per-save ratio {lo:.1f}-{hi:.1f}"
                )
            for w in r["warnings"]:
                print(f"  warning: {w}")


# --------------------------------------------------------------------------- main


def _line(r: dict[str, Any], elapsed: float) -> str:
    rx = "+" + ",".join(r["restore_exact"]) if r["restore_exact"] else ""
    acc = "n/a" if r["final_acc"] is None else f"{r['final_acc']:.4f}"
    files = "n/a" if r["ratio_files"] is None else f"{r['ratio_files']:.2f}"
    return (
        f"[{elapsed:7.1f}s] {r['kind']} seed {r['seed']} {r['method']}{rx}: "
        f"final {r['final_loss']:.5f} acc {acc} ratio {r['ratio_reported']:.2f} "
        f"(files {files}) {r['seconds']:.0f}s warnings {len(r['warnings'])}"
    )


def _save(out: Path, runs: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    order = {(k, s, m): i for i, (k, s, m) in enumerate(meta["runs"])}
    runs.sort(key=lambda r: order[(r["kind"], r["seed"], r["method"])])
    _report.write_json(out, {"meta": meta, "summary": summarize(runs), "runs": runs})


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--seeds", nargs="+", type=int, default=None, help="default 0 1 2 (--quick: 0)")
    ap.add_argument(
        "--methods",
        nargs="+",
        choices=METHODS,
        default=list(METHODS),
        help="exact always runs: it is every comparison's reference",
    )
    ap.add_argument(
        "--jobs", type=int, default=1, help="runs in parallel processes (one torch thread each)"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_STEPS} steps, {QUICK_FAILURES} failures, one seed (< 1 min)",
    )
    ap.add_argument(
        "--steps", type=int, default=None, help="T (default 600; --quick: 40); K stays T/20"
    )
    ap.add_argument(
        "--restore-exact",
        nargs="+",
        choices=RESTORE_EXACT,
        default=[],
        help="an ablation: after every ckptzip restore these parts come from the live state "
        "the checkpoint was saved from",
    )
    ap.add_argument(
        "--out", default=None, help="JSON path (default: results/heldout_restores*.json)"
    )
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs}: must be at least 1")
    if args.steps is not None and args.steps < 2 * CHECKPOINTS:
        ap.error(f"--steps {args.steps}: must be at least {2 * CHECKPOINTS} (K = T/20 >= 2)")
    seeds = args.seeds if args.seeds is not None else list(QUICK_SEEDS if args.quick else SEEDS)
    methods = ["exact", *(m for m in args.methods if m != "exact")]
    restore_exact = tuple(args.restore_exact)
    name = "heldout_restores" + ("-quick" if args.quick else "")
    if args.models != list(MODELS):
        name += "-" + "-".join(args.models)
    if restore_exact:
        name += "-restore-exact-" + "-".join(restore_exact)
    out = _report.results_path(args.out, name + ".json")
    plans = {k: plan(k, quick=args.quick, steps=args.steps) for k in args.models}
    todo = [(k, s, m) for k in args.models for s in seeds for m in methods]
    meta: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "plans": {
            k: dict(zip(("steps", "every", "failures"), p, strict=True)) for k, p in plans.items()
        },
        "specs": {k: SPECS[k] for k in args.models},
        "data_seed": DATA_SEED,
        "seeds": seeds,
        "methods": methods,
        "restore_exact": list(restore_exact),
        "runs": todo,
        "jobs": args.jobs,
        "torch_threads": 1,
        "versions": {
            "ckptzip": ckptzip.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }
    one_thread()
    runs: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    def done(r: dict[str, Any]) -> None:
        runs.append(r)
        print(_line(r, time.perf_counter() - t0), flush=True)
        meta["seconds"] = time.perf_counter() - t0
        _save(out, runs, meta)  # after every run: a stopped benchmark keeps what it finished

    jobs = [(k, s, m, plans[k], restore_exact if m == "ckptzip" else ()) for k, s, m in todo]
    if args.jobs == 1:
        for job in jobs:
            done(run(*job))
    else:
        spawn = multiprocessing.get_context("spawn")  # no fork of a process torch has threaded
        with ProcessPoolExecutor(args.jobs, mp_context=spawn, initializer=one_thread) as pool:
            for future in as_completed([pool.submit(run, *job) for job in jobs]):
                done(future.result())
    print_table(summarize(runs))
    print(f"\n{len(runs)} runs in {meta['seconds']:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
