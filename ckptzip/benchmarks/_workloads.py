"""Small, real training workloads that run on a CPU in a minute or two.

No data set can be downloaded here, so every workload trains on data that either ships with
Python (the standard library's own source text, for a character-level language model) or that
the code makes deterministically (a Gaussian-mixture classification task, procedurally drawn
images). Batches are a pure function of ``(seed, step)``, so a run that restores from a
checkpoint and redoes steps sees exactly the same data, as the evaluation protocol requires.

>>> w = make("mlp", seed=0)
>>> loss = w.train_step(0)
>>> isinstance(w.eval_fn(w.model), float)
True
"""

from __future__ import annotations

import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["WORKLOADS", "Workload", "make", "train"]


@dataclass
class Workload:
    """A model, its optimizer, a deterministic data stream and a held-out metric.

    ``train_step(step)`` runs one optimisation step on the batch for ``step`` and returns the
    loss; ``eval_fn(model)`` returns the held-out loss (lower is better) without touching the
    optimizer or the model's training mode afterwards.
    """

    name: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
    heldout: list[tuple[torch.Tensor, torch.Tensor]]

    def train_step(self, step: int) -> float:
        self.model.train()
        x, y = self.batch(step)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model, x, y)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def eval_fn(self, model: nn.Module) -> float:
        was_training = model.training
        model.eval()
        total = sum(float(self.loss_fn(model, x, y)) for x, y in self.heldout)
        model.train(was_training)
        return total / len(self.heldout)

    def state(self) -> dict[str, Any]:
        """What a user passes to ``torch.save`` for a checkpoint."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}


def _gen(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


# -- mlp: Gaussian-mixture classification --------------------------------------------------


def _mlp(seed: int) -> Workload:
    torch.manual_seed(seed)
    dim, classes = 64, 10
    centres = torch.randn(classes, dim, generator=_gen(seed, -1)) * 0.6

    def batch(step: int, n: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
        g = _gen(seed, step)
        y = torch.randint(0, classes, (n,), generator=g)
        x = centres[y] + torch.randn(n, dim, generator=g) * 2.5
        return x, y

    model = nn.Sequential(
        nn.Linear(dim, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, classes)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    heldout = [batch(10_000_000 + i, 512) for i in range(4)]
    return Workload("mlp", model, opt, batch, lambda m, x, y: F.cross_entropy(m(x), y), heldout)


# -- cnn: procedurally drawn images (bars, boxes, blobs) -------------------------------------


def _draw(g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    size = 16
    y = torch.randint(0, 4, (n,), generator=g)
    img = torch.randn(n, 1, size, size, generator=g) * 0.3
    pos = torch.randint(2, size - 6, (n, 2), generator=g)
    for i in range(n):
        r, c = int(pos[i, 0]), int(pos[i, 1])
        k = int(y[i])
        if k == 0:
            img[i, 0, r : r + 5, c + 2] += 1.0  # vertical bar
        elif k == 1:
            img[i, 0, r + 2, c : c + 5] += 1.0  # horizontal bar
        elif k == 2:
            img[i, 0, r : r + 5, c : c + 5] += 0.5  # filled box
        else:
            img[i, 0, r + 1 : r + 4, c + 1 : c + 4] += 1.0  # small blob
            img[i, 0, r + 2, c + 2] -= 1.0
    return img, y


def _cnn(seed: int) -> Workload:
    torch.manual_seed(seed)

    def batch(step: int, n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
        return _draw(_gen(seed, step), n)

    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 16, 128),
        nn.ReLU(),
        nn.Linear(128, 4),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    heldout = [batch(10_000_000 + i, 256) for i in range(2)]
    return Workload("cnn", model, opt, batch, lambda m, x, y: F.cross_entropy(m(x), y), heldout)


# -- lm: character-level transformer on the standard library's source -----------------------

_CORPUS_FILES = ("textwrap.py", "argparse.py", "dataclasses.py", "json/decoder.py", "shlex.py")
_CTX = 64


def _corpus() -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts = []
    for name in _CORPUS_FILES:
        p = stdlib / name
        if p.exists():
            parts.append(p.read_text(encoding="utf-8", errors="replace"))
    if not parts:
        raise RuntimeError(f"no standard-library source found under {stdlib}")
    return "\n".join(parts)


class TinyLM(nn.Module):
    """A two-layer pre-norm transformer over characters."""

    def __init__(self, vocab: int, d: int = 128, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(_CTX, d) * 0.02)
        block = nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        mask = torch.triu(torch.full((_CTX, _CTX), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        h = self.embed(idx) + self.pos[:t]
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(h))  # type: ignore[no-any-return]


def _lm(seed: int) -> Workload:
    torch.manual_seed(seed)
    text = _corpus()
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    split = int(len(data) * 0.9)
    train_data, test_data = data[:split], data[split:]

    def sample(src: torch.Tensor, g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(0, len(src) - _CTX - 1, (n,), generator=g)
        x = torch.stack([src[s : s + _CTX] for s in starts.tolist()])
        y = torch.stack([src[s + 1 : s + _CTX + 1] for s in starts.tolist()])
        return x, y

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return sample(train_data, _gen(seed, step), 32)

    def loss_fn(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = m(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    model = TinyLM(len(chars))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    heldout = [sample(test_data, _gen(seed, 10_000_000 + i), 64) for i in range(3)]
    return Workload("lm", model, opt, batch, loss_fn, heldout)


WORKLOADS: dict[str, Callable[[int], Workload]] = {"mlp": _mlp, "cnn": _cnn, "lm": _lm}


def make(name: str, seed: int = 0) -> Workload:
    """Build the workload ``name`` (one of ``WORKLOADS``), deterministically from ``seed``."""
    try:
        factory = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"workload {name!r} unknown; choose from {sorted(WORKLOADS)}") from None
    return factory(seed)


def train(
    workload: Workload, steps: int, *, every: int, start: int = 0
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Train ``steps`` steps from ``start``, yielding ``(step, state)`` every ``every`` steps.

    The state is a fresh deep copy, so the caller may keep it while training goes on.
    """
    for step in range(start, start + steps):
        workload.train_step(step)
        done = step + 1
        if done % every == 0:
            yield done, _clone(workload.state())


def _clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clone(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_clone(v) for v in obj)
    return obj
