"""Small, real training workloads that run on a CPU in a minute or two.

No data set can be downloaded here, so every workload trains on data that either ships with
Python (the standard library's own source text, for a character-level transformer and a
word-level GRU language model) or with a package (scikit-learn's 8×8 handwritten digits, the
``digits`` workload, imported only when built) or that the code makes deterministically (a
Gaussian-mixture classification task, procedurally drawn images). Batches are a pure
function of ``(seed, step)``, so a run that restores from a checkpoint and redoes steps sees
exactly the same data, as the evaluation protocol requires.

>>> w = make("mlp", seed=0)
>>> loss = w.train_step(0)
>>> isinstance(w.eval_fn(w.model), float)
True
"""

from __future__ import annotations

import argparse
import collections
import copy
import re
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "HELD_OUT",
    "PROBE_STEPS",
    "WORKLOADS",
    "Workload",
    "failure_steps",
    "make",
    "offline_parser",
    "states_at",
    "train",
]

PROBE_STEPS = 5  # optimisation steps of Workload.probe
PROBE_FIRST_STEP = 30_000_000  # its batches' step numbers: beyond any run, and the held-out's


@dataclass
class Workload:
    """A model, its optimizer, a deterministic data stream and a held-out metric.

    ``train_step(step)`` runs one optimisation step on the batch for ``step`` and returns the
    loss; ``eval_fn(model)`` returns the held-out loss (lower is better) without touching the
    optimizer or the model's training mode afterwards. ``val_fn`` is the same on the ``val``
    batches (disjoint from ``heldout``; a configuration search tunes on them, so the held-out
    figure stays unbiased); ``accuracy(model)`` is the held-out top-1 accuracy of the model's
    logits (per token for the language models).
    """

    name: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
    heldout: list[tuple[torch.Tensor, torch.Tensor]]
    val: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def train_step(self, step: int) -> float:
        self.model.train()
        x, y = self.batch(step)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model, x, y)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def probe(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """A few optimisation steps on fixed training batches (a configuration search's
        ``probe_fn``): the batches come from the training distribution under step numbers the
        run never reaches, so the run's own data order is untouched."""
        model.train()
        for i in range(PROBE_STEPS):
            x, y = self.batch(PROBE_FIRST_STEP + i)
            optimizer.zero_grad(set_to_none=True)
            self.loss_fn(model, x, y).backward()
            optimizer.step()

    def eval_fn(self, model: nn.Module) -> float:
        return self._mean(model, self.heldout, lambda m, x, y: float(self.loss_fn(m, x, y)))

    def val_fn(self, model: nn.Module) -> float:
        return self._mean(model, self.val, lambda m, x, y: float(self.loss_fn(m, x, y)))

    def accuracy(self, model: nn.Module) -> float:
        def acc(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
            return float((m(x).argmax(-1) == y).float().mean())

        return self._mean(model, self.heldout, acc)

    @torch.no_grad()
    def _mean(
        self,
        model: nn.Module,
        batches: list[tuple[torch.Tensor, torch.Tensor]],
        metric: Callable[[nn.Module, torch.Tensor, torch.Tensor], float],
    ) -> float:
        if not batches:
            raise ValueError(f"workload {self.name!r} has no batches for this metric")
        was_training = model.training
        model.eval()
        total = sum(metric(model, x, y) for x, y in batches)
        model.train(was_training)
        return total / len(batches)

    def state(self) -> dict[str, Any]:
        """What a user passes to ``torch.save`` for a checkpoint."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}


_Batch = tuple[torch.Tensor, torch.Tensor]  # inputs, targets


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
    val = [batch(20_000_000 + i, 512) for i in range(2)]
    return Workload(
        "mlp", model, opt, batch, lambda m, x, y: F.cross_entropy(m(x), y), heldout, val
    )


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
    val = [batch(20_000_000 + i, 256) for i in range(2)]
    return Workload(
        "cnn", model, opt, batch, lambda m, x, y: F.cross_entropy(m(x), y), heldout, val
    )


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
    batch, heldout, val = _token_stream(data, seed, 32, 64, _CTX)
    model = TinyLM(len(chars))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    return Workload("lm", model, opt, batch, _lm_loss, heldout, val)


def _token_stream(
    data: torch.Tensor, seed: int, n_train: int, n_eval: int, ctx: int
) -> tuple[Callable[[int], _Batch], list[_Batch], list[_Batch]]:
    """The language models' data from one token sequence ``data``: the first 90 % trains,
    the rest is held out. Returns ``batch(step)`` (``n_train`` windows of ``ctx`` tokens and
    the next token of each position, drawn from ``(seed, step)``), 3 held-out and 2 val
    batches of ``n_eval`` windows each (disjoint step numbers: 10M+ and 20M+)."""
    split = int(len(data) * 0.9)
    train_data, test_data = data[:split], data[split:]

    def sample(src: torch.Tensor, g: torch.Generator, n: int) -> _Batch:
        starts = torch.randint(0, len(src) - ctx - 1, (n,), generator=g).tolist()
        x = torch.stack([src[s : s + ctx] for s in starts])
        y = torch.stack([src[s + 1 : s + ctx + 1] for s in starts])
        return x, y

    def batch(step: int) -> _Batch:
        return sample(train_data, _gen(seed, step), n_train)

    heldout = [sample(test_data, _gen(seed, 10_000_000 + i), n_eval) for i in range(3)]
    val = [sample(test_data, _gen(seed, 20_000_000 + i), n_eval) for i in range(2)]
    return batch, heldout, val


def _lm_loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = m(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


# -- digits: a CNN on scikit-learn's 8×8 handwritten digits (1797 images) --------------------


def _digits(seed: int) -> Workload:
    from sklearn.datasets import load_digits  # optional: only this workload needs it

    torch.manual_seed(seed)
    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(data.target, dtype=torch.long)
    # one fixed split for every seed (the seed moves the initialisation and the batch order)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(1234))
    train_idx, val_idx, test_idx = order[:1297], order[1297:1497], order[1497:]

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        pick = train_idx[torch.randint(0, len(train_idx), (64,), generator=_gen(seed, step))]
        return images[pick], labels[pick]

    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    heldout = [(images[test_idx], labels[test_idx])]
    val = [(images[val_idx], labels[val_idx])]
    return Workload(
        "digits", model, opt, batch, lambda m, x, y: F.cross_entropy(m(x), y), heldout, val
    )


# -- gru: word-level GRU language model on standard-library source --------------------------

_GRU_FILES = (
    "argparse.py", "ast.py", "dataclasses.py", "enum.py", "inspect.py", "pathlib.py",
    "subprocess.py", "tarfile.py", "typing.py", "zipfile.py", "email/message.py", "json/decoder.py",
)  # fmt: skip
_GRU_VOCAB, _GRU_CTX = 1024, 32


class GRULM(nn.Module):
    """Embedding table, one GRU layer and a linear head over a word vocabulary."""

    def __init__(self, vocab: int, d: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.gru = nn.GRU(d, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h, _ = self.gru(self.embed(idx))
        return self.head(h)  # type: ignore[no-any-return]


def _gru(seed: int) -> Workload:
    torch.manual_seed(seed)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = "\n".join(
        (stdlib / n).read_text(encoding="utf-8", errors="replace")
        for n in _GRU_FILES
        if (stdlib / n).exists()
    )
    tokens = re.findall(r"[A-Za-z_]\w*|\d+|\S", text)
    if len(tokens) < 10_000:
        raise RuntimeError(f"too little standard-library source found under {stdlib}")
    common = [t for t, _ in collections.Counter(tokens).most_common(_GRU_VOCAB - 1)]
    lookup = {t: i + 1 for i, t in enumerate(common)}  # 0: any rarer word
    data = torch.tensor([lookup.get(t, 0) for t in tokens], dtype=torch.long)
    batch, heldout, val = _token_stream(data, seed, 32, 128, _GRU_CTX)
    model = GRULM(_GRU_VOCAB)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    return Workload("gru", model, opt, batch, _lm_loss, heldout, val)


# -- llm: an LLM-shaped byte-level decoder (tied embedding, RMSNorm, no biases) ------------

_LLM_FILES = (
    "argparse.py", "ast.py", "dataclasses.py", "enum.py", "inspect.py", "pathlib.py",
    "subprocess.py", "tarfile.py", "typing.py", "zipfile.py", "textwrap.py", "shlex.py",
)  # fmt: skip
_LLM_CTX = 64


class _Block(nn.Module):
    """Pre-norm decoder block: RMSNorm, causal attention, RMSNorm, GELU MLP; no biases."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.norm2 = nn.RMSNorm(d)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        q, k, v = self.qkv(self.norm1(h)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return h + self.down(F.gelu(self.up(self.norm2(h))))  # type: ignore[no-any-return]


class _TiedByteDecoder(nn.Module):
    """A decoder over bytes whose output head is its embedding table (tied): the byte
    embedding (normal, std 0.02), learned positions (``ctx`` of them, normal with std
    ``pos_std``), ``layers`` blocks ``block(d, heads)``, a final ``norm(d)``, the head.
    Built in that order (the order the initialisation draws from torch's generator in);
    ``forward`` runs each block through :meth:`_run`, which a subclass may override."""

    def __init__(
        self,
        d: int,
        layers: int,
        heads: int,
        *,
        ctx: int,
        pos_std: float,
        block: Callable[[int, int], nn.Module],
        norm: Callable[[int], nn.Module],
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, d)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.pos = nn.Parameter(torch.randn(ctx, d) * pos_std)
        self.blocks = nn.ModuleList(block(d, heads) for _ in range(layers))
        self.norm = norm(d)
        self.head = nn.Linear(d, 256, bias=False)
        self.head.weight = self.embed.weight  # tied

    def _run(self, block: nn.Module, h: torch.Tensor) -> torch.Tensor:
        return block(h)  # type: ignore[no-any-return]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.embed(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            h = self._run(block, h)
        return self.head(self.norm(h))  # type: ignore[no-any-return]


class ByteLLM(_TiedByteDecoder):
    """A decoder-only transformer over bytes shaped like an LLM: the output head is the
    embedding table (tied), RMSNorm without biases, so norms are under 0.1 % of the
    parameters."""

    def __init__(self, d: int = 192, layers: int = 3, heads: int = 4) -> None:
        super().__init__(
            d, layers, heads, ctx=_LLM_CTX, pos_std=0.02, block=_Block, norm=nn.RMSNorm
        )


def _llm(seed: int) -> Workload:
    torch.manual_seed(seed)
    batch, heldout, val = _byte_stream(seed, 8, 64, _LLM_CTX, files=_LLM_FILES)
    model = ByteLLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return Workload("llm", model, opt, batch, _lm_loss, heldout, val)


# -- held out: two models the defaults were never tuned on (opt-in in the benchmarks) --------
#
# Added after ckptzip's defaults were chosen, to check they hold on models nobody tuned them
# for: neither is in any benchmark's default model list.

_HELD_OUT_FILES = (
    "functools.py", "collections/__init__.py", "logging/__init__.py", "heapq.py",
    "difflib.py", "configparser.py", "http/client.py", "pydoc.py",
)  # fmt: skip
_BYTE_CTX = 64


def _byte_stream(
    seed: int, n_train: int, n_eval: int, ctx: int, *, files: tuple[str, ...] = _HELD_OUT_FILES
) -> tuple[Callable[[int], _Batch], list[_Batch], list[_Batch]]:
    """:func:`_token_stream` over the bytes of standard-library ``files`` (by default ones
    that only the held-out workloads read; ``llm`` passes its own)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    raw = b"\n".join((stdlib / n).read_bytes() for n in files if (stdlib / n).exists())
    if len(raw) < 100_000:
        raise RuntimeError(f"too little standard-library source found under {stdlib}")
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
    return _token_stream(data, seed, n_train, n_eval, ctx)


class CharGRU(nn.Module):
    """Byte embedding, two stacked GRU layers, an untied linear head."""

    def __init__(self, d: int = 64, hidden: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, d)
        self.gru = nn.GRU(d, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, 256)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h, _ = self.gru(self.embed(idx))
        return self.head(h)  # type: ignore[no-any-return]


class _LayerNormBlock(nn.Module):
    """Pre-norm block with LayerNorm, ``nn.MultiheadAttention`` and a GELU MLP, biases on."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.ln1(h)
        h = h + self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))  # type: ignore[no-any-return]


class ByteTransformer(_TiedByteDecoder):
    """Four pre-norm LayerNorm blocks with biases, learned positions, the output head tied to
    the byte embedding."""

    def __init__(self, d: int = 128, layers: int = 4, heads: int = 4) -> None:
        super().__init__(
            d, layers, heads, ctx=_BYTE_CTX, pos_std=0.01, block=_LayerNormBlock, norm=nn.LayerNorm
        )
        mask = torch.triu(torch.full((_BYTE_CTX, _BYTE_CTX), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def _run(self, block: nn.Module, h: torch.Tensor) -> torch.Tensor:
        t = h.shape[1]
        return block(h, self.mask[:t, :t])  # type: ignore[no-any-return]


def _chargru(seed: int) -> Workload:
    torch.manual_seed(seed)
    batch, heldout, val = _byte_stream(seed, 16, 64, 48)
    model = CharGRU()
    opt = torch.optim.Adam(model.parameters(), lr=4e-3)  # plain Adam: no weight decay
    return Workload("chargru", model, opt, batch, _lm_loss, heldout, val)


def _bytetf(seed: int) -> Workload:
    torch.manual_seed(seed)
    batch, heldout, val = _byte_stream(seed, 8, 48, _BYTE_CTX)
    model = ByteTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1.5e-3, betas=(0.9, 0.95), weight_decay=0.1)
    return Workload("bytetf", model, opt, batch, _lm_loss, heldout, val)


HELD_OUT = ("chargru", "bytetf")
"""Workloads no default was tuned on: a byte-level two-layer GRU language model (plain Adam)
and a byte-level transformer (LayerNorm with biases, tied head, AdamW with betas 0.9/0.95)."""


WORKLOADS: dict[str, Callable[[int], Workload]] = {
    "mlp": _mlp,
    "cnn": _cnn,
    "lm": _lm,
    "digits": _digits,
    "gru": _gru,
    "llm": _llm,
    "chargru": _chargru,
    "bytetf": _bytetf,
}


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


def states_at(name: str, seed: int, steps: list[int]) -> tuple[Workload, list[dict[str, Any]]]:
    """Build the workload ``name`` from ``seed``, train it exactly from step 0 to the last of
    ``steps`` (increasing step counts) and return it with a deep copy of its state (what
    :meth:`Workload.state` gives) after each of them: the starting points of the offline
    benchmarks (``moment_codings.py``, ``restore_cost.py``)."""
    w = make(name, seed)
    states = []
    for step in range(steps[-1]):
        w.train_step(step)
        if step + 1 in steps:
            states.append(copy.deepcopy(w.state()))
    return w, states


def offline_parser(
    description: str,
    *,
    model: str,
    at: tuple[int, str],
    then: tuple[str, int, str],
    variants: str,
) -> argparse.ArgumentParser:
    """The command line of the offline benchmarks (``moment_codings.py``,
    ``restore_cost.py``), in this order: ``--model`` (one of :data:`WORKLOADS`, default
    ``model``), ``--seed`` (default 0), ``--at`` (exact training steps to the state they
    measure: ``(default, help)``), their second step count ``then`` (``(flag, default,
    help)``), ``--variants`` (comma-separated, default ``variants``) and ``--out`` (the
    results JSON, default ``None``: :func:`_report.results_path` picks it)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--model", default=model, choices=sorted(WORKLOADS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--at", type=int, default=at[0], help=at[1])
    ap.add_argument(then[0], type=int, default=then[1], help=then[2])
    ap.add_argument("--variants", default=variants)
    ap.add_argument("--out", default=None)
    return ap


def failure_steps(steps: int, every: int, failures: int) -> list[int]:
    """Failures spread evenly, each half-way between two checkpoints (work is lost)."""
    out = []
    for i in range(failures):
        at = round((i + 1) * steps / (failures + 1))
        at = (at // every) * every + every // 2
        if every < at < steps and at not in out:
            out.append(at)
    return out


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
