"""Fuzz the compiled decoders through the library's own entry points (run by test_sanitizers).

``python _native_fuzz.py LIBRARY SECONDS SEED`` loads ``LIBRARY`` (the kernels built with
AddressSanitizer and UndefinedBehaviorSanitizer; the interpreter runs with the sanitizers'
runtimes preloaded) in place of ``ckptzip.kernels._native``, then spends a third of
``SECONDS`` on each of three parts:

* **symbol streams**: every back end of :data:`ckptzip.entropy.SYMBOL_METHODS` codes a
  random stream (uniform, sparse or skewed; 1 to 200 000 symbols; 1 to 256 symbols; with and
  without contexts), which is decoded intact (it must come back) and then with its bytes,
  its metadata or its length changed (it must decode or raise a ``CkptzipError``); the two
  one-context layouts also straight into a tensor (``decode_ans_into``, one or two threads);
* **crafted files**: real files (manager chains with error feedback, bin-index deltas, the
  skip layout and Adam's step coded over the second moment; files standing alone) with one
  chunk's bytes or one value of an entry's metadata changed and every checksum recomputed, as
  an attacker who writes the whole file does, loaded from the directory of their parents;
* **odd tensors saved** (the encoders: not an attacker's input, but any user's): float16,
  bfloat16, float32 and float64 tensors of 0 to 300 000 elements, plain or constant, mostly
  zero, non-finite, subnormal, near the dtype's limits or of a few distinct values, saved
  under five configs (the default, two levels with half the values pruned, 256 levels, the log
  domain...) as a file standing alone and as a delta against it, each loaded back with its
  dtype and shape.

A sanitizer's report aborts the process (non-zero status, the report on stderr). Any
exception that is not a ``CkptzipError`` is printed and makes the status 1. The last line of
stdout is a JSON summary.
"""

from __future__ import annotations

import copy
import importlib.abc
import importlib.machinery
import json
import random
import shutil
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path
from typing import Any


class _Library(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``ckptzip.kernels._native`` is the sanitized build (the kernels load it by its path)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "ckptzip.kernels._native":
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__file__ = self.path
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not b:
            b.append(rng.randrange(256))
            continue
        i, op = rng.randrange(len(b)), rng.randrange(5)
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif op == 2:
            del b[i : i + rng.randint(1, 16)]
        elif op == 3:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        else:  # a 32-bit word (a length, a state, a count) set to an extreme
            word = rng.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, rng.randrange(1 << 32)])
            b[i : i + 4] = word.to_bytes(4, "little")
    return bytes(b)


def _mutate_value(rng: random.Random, doc: Any) -> None:
    """One leaf of a JSON document replaced by a hostile value of its kind, in place."""

    def leaves(x: Any, path: tuple[Any, ...] = ()) -> Any:
        if isinstance(x, dict):
            for k, v in x.items():
                yield from leaves(v, (*path, k))
        elif isinstance(x, list):
            for i, v in enumerate(x):
                yield from leaves(v, (*path, i))
        else:
            yield path

    paths = list(leaves(doc))
    if not paths or paths == [()]:
        return
    where = rng.choice(paths)
    node = doc
    for k in where[:-1]:
        node = node[k]
    old = node[where[-1]]
    if isinstance(old, bool):
        new: Any = not old
    elif isinstance(old, int):
        new = rng.choice([0, 1, -1, old + 1, old - 1, old * 2, old // 2, 255, 256, 257, 65536,
                          1 << 31, (1 << 63) - 1])  # fmt: skip
    elif isinstance(old, float):
        new = rng.choice([0.0, -1.0, 1e308, old * 2])
    elif isinstance(old, str):
        new = rng.choice(["", "ans", "zstd", "ans-lanes", "ans-wide", "ans-wide-ctx", "rle+ans",
                          "rle+ans-wide", "packed", old + "x"])  # fmt: skip
    else:
        new = None
    node[where[-1]] = new


def _attempt(counts: dict[str, Any], what: str, call: Any, *args: Any, **kwargs: Any) -> None:
    """``call(*args, **kwargs)``, counted: a ``CkptzipError`` is a refusal, any other
    exception a finding (printed)."""
    from ckptzip.errors import CkptzipError

    try:
        call(*args, **kwargs)
    except CkptzipError:
        counts["refused"] += 1
    except Exception as exc:  # the finding this harness looks for
        print(f"FOREIGN {what}: {type(exc).__name__}: {exc}"[:400])
        counts["foreign"] += 1


def fuzz_symbols(rng: random.Random, seconds: float) -> dict[str, int]:
    import numpy as np
    import torch

    from ckptzip import entropy
    from ckptzip.errors import CkptzipError

    nprng = np.random.default_rng(rng.randrange(1 << 32))
    raw = ("zstd", "rle+zstd", "bitmap+zstd", "lzma", "rle+lzma")
    counts = {"streams": 0, "decodes": 0, "refused": 0, "foreign": 0}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        method = rng.choice(sorted(entropy.SYMBOL_METHODS))
        n = rng.choice([1, 2, 7, 100, 1000, 4096, 65535, 65536, 70000, 200000])
        alphabet = rng.choice([1, 2, 3, 4, 16, 255, 256])
        kind = rng.randrange(3)
        if kind == 0:
            s = nprng.integers(0, alphabet, n, dtype=np.uint8)
        elif kind == 1:
            s = np.zeros(n, np.uint8)
            k = max(1, n // 50)
            s[nprng.integers(0, n, k)] = nprng.integers(0, alphabet, k)
        else:
            p = nprng.dirichlet(np.ones(alphabet) * 0.3)
            s = nprng.choice(alphabet, n, p=p).astype(np.uint8)
        segments = None
        if method not in entropy.ONE_CONTEXT and method not in raw and rng.random() < 0.6:
            cuts = sorted(rng.randrange(n + 1) for _ in range(rng.randint(0, 5)))
            edges = [0, *cuts, n]
            segments = [edges[i + 1] - edges[i] for i in range(len(edges) - 1)]
        chunks, meta = entropy.encode_symbols(s, method, 3, segments=segments)
        meta = json.loads(json.dumps(meta))  # as a file holds it
        back = entropy.decode_symbols(chunks, meta, n, method, segments=segments)
        if not np.array_equal(back, s):
            print(f"ROUND TRIP {method} n={n} alphabet={alphabet}: decoded differently")
            counts["foreign"] += 1
        counts["streams"] += 1
        for _ in range(20):
            c2, m2, n2, seg2 = list(chunks), meta, n, segments
            r = rng.random()
            if r < 0.6:
                j = rng.randrange(len(c2))
                c2[j] = _mutate_bytes(rng, c2[j])
            elif r < 0.85:
                m2 = copy.deepcopy(meta)
                _mutate_value(rng, m2)
            elif r < 0.95:
                j = rng.randrange(len(c2))
                c2[j] = _mutate_bytes(rng, c2[j])
                m2 = copy.deepcopy(meta)
                _mutate_value(rng, m2)
            else:
                n2 = rng.choice([0, 1, max(0, n - 1), n + 1, 2 * n])
                if seg2 is not None:
                    seg2 = [*seg2[:-1], seg2[-1] + n2 - n]
                    seg2 = None if seg2[-1] < 0 else seg2
            counts["decodes"] += 1
            _attempt(counts, method, entropy.decode_symbols, c2, m2, n2, method, segments=seg2)
            if method in ("ans-lanes", "ans-wide") and segments is None and len(c2) == 1:
                out = torch.empty(n2)
                table = torch.arange(max(1, alphabet), dtype=torch.float32)
                base = out if rng.random() < 0.3 else None
                try:
                    entropy.decode_ans_into(
                        c2[0], m2, table, out, method=method, threads=rng.choice([1, 2]),
                        base=base,
                    )  # fmt: skip
                except CkptzipError:
                    pass
                except Exception as exc:  # the finding this harness looks for
                    print(f"FOREIGN into {method}: {type(exc).__name__}: {exc}"[:400])
                    counts["foreign"] += 1
    return counts


def _odd_tensor(rng: random.Random, gen: Any) -> Any:
    """A tensor of a kind users save: any float dtype and size, values plain or odd (constant,
    mostly zero, non-finite, subnormal, near the dtype's limits, a few distinct values)."""
    import torch

    dtype = rng.choice([torch.float32, torch.float64, torch.float16, torch.bfloat16])
    n = rng.choice([0, 1, 2, 7, 1000, 4097, 70000, 300000])
    x = torch.randn(n, generator=gen, dtype=torch.float64)
    kind = rng.randrange(8)
    if kind == 1:
        x = torch.full((n,), rng.choice([0.0, 1.0, -3.5, 1e-30]), dtype=torch.float64)
    elif kind == 2:
        x = x * (torch.rand(n, generator=gen, dtype=torch.float64) < 0.01)
    elif kind == 3 and n:
        special = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=torch.float64)
        x[torch.randint(0, n, (max(1, n // 20),), generator=gen)] = special[rng.randrange(3)]
    elif kind == 4:
        x = x * torch.finfo(dtype).tiny * rng.choice([0.5, 4.0])  # subnormal and near it
    elif kind == 5:
        x = x.clamp(-1, 1) * torch.finfo(dtype).max * rng.choice([0.5, 0.999])
    elif kind == 6:
        x = torch.randint(-3, 4, (n,), generator=gen).to(torch.float64)
    elif kind == 7:
        x = x * 10.0 ** rng.randint(-12, 12)
    shape = rng.choice([(n,), (1, n), (n, 1)]) if n else (0,)
    return x.to(dtype).reshape(shape)


def fuzz_saves(rng: random.Random, seconds: float) -> dict[str, int]:
    """The encoders on odd tensors: a file standing alone, then a delta against it, each
    loaded back with the dtype and shape it was saved with."""
    import io

    import torch

    import ckptzip
    from ckptzip.errors import CkptzipError

    gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
    configs = [
        ckptzip.CompressionConfig(),
        ckptzip.CompressionConfig(min_numel=1, rounding="nearest"),
        ckptzip.CompressionConfig(min_numel=1, quant=ckptzip.QuantConfig(bins=2, prune=0.5)),
        ckptzip.CompressionConfig(min_numel=1, quant=ckptzip.QuantConfig(bins=256)),
        ckptzip.CompressionConfig(min_numel=1, quant=ckptzip.QuantConfig(log_domain=True)),
    ]
    counts = {"saves": 0, "refused": 0, "foreign": 0}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        state = {f"t{i}": _odd_tensor(rng, gen) for i in range(rng.randint(1, 4))}
        config = rng.choice(configs)
        if config.quant.log_domain:  # for values that are not negative (Adam's second moment)
            state = {k: v.abs() for k, v in state.items()}
        moved = {k: v + (v.abs().amax() if v.numel() else 0) * 1e-3 for k, v in state.items()}
        try:
            parent = io.BytesIO()
            ckptzip.save(state, parent, config=config)
            for saved, data in ((state, parent), (moved, None)):
                if data is None:  # the child: a delta against the file just written
                    with tempfile.TemporaryDirectory() as d:
                        (Path(d) / "p.ckz").write_bytes(parent.getvalue())
                        ckptzip.save(saved, Path(d) / "c.ckz", config=config,
                                     parent=Path(d) / "p.ckz")  # fmt: skip
                        back = ckptzip.load(Path(d) / "c.ckz")
                else:
                    data.seek(0)
                    back = ckptzip.load(data)
                for k, v in saved.items():
                    if back[k].dtype != v.dtype or back[k].shape != v.shape:
                        raise AssertionError(f"{k}: {v.dtype} {tuple(v.shape)} came back as "
                                             f"{back[k].dtype} {tuple(back[k].shape)}")  # fmt: skip
            counts["saves"] += 2
        except CkptzipError:
            counts["refused"] += 1
        except Exception as exc:  # the finding this harness looks for
            print(f"FOREIGN save: {type(exc).__name__}: {exc}"[:400])
            counts["foreign"] += 1
    return counts


def _corpus(root: Path) -> list[tuple[Path, str]]:
    """Files of every codec and layout this version writes, small enough for a sanitized run."""
    import torch

    import ckptzip

    def model_and_optimizer(width: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Embedding(300, width),
            torch.nn.Linear(width, 4 * width),
            torch.nn.ReLU(),
            torch.nn.Linear(4 * width, 300),
            torch.nn.LayerNorm(300),
        )
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        for _ in range(3):
            x = torch.randint(0, 300, (32,))
            loss = torch.nn.functional.cross_entropy(model(x), x)
            opt.zero_grad()
            loss.backward()
            opt.step()

    def eval_fn(model: torch.nn.Module) -> float:
        x = torch.randint(0, 300, (64,), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            return float(torch.nn.functional.cross_entropy(model(x), x))

    step = ckptzip.MomentPolicy(first_bins=4, first_fit="step")
    corpus = []
    kinds: dict[str, dict[str, Any]] = {
        "feedback": {},
        "deltas": {"error_feedback": False},
        "skip": {"layout": "skip"},
        "step": {"moments": step, "eval_fn": eval_fn},
    }
    for name, kw in kinds.items():
        model, opt = model_and_optimizer(96)
        mgr = ckptzip.CheckpointManager(root / name, model=model, optimizer=opt, **kw)
        for i in range(4):
            train(model, opt)
            mgr.save(i)
        mgr.wait()
        files = sorted(p.name for p in (root / name).glob("*.ckz"))
        corpus += [(root / name, files[1]), (root / name, files[-1])]
    model, opt = model_and_optimizer(128)
    train(model, opt)
    alone = root / "alone"
    alone.mkdir()
    ckptzip.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, alone / "a.ckz")
    small = ckptzip.CompressionConfig(min_numel=10)
    ckptzip.save({"model": model.state_dict()}, alone / "b.ckz", config=small)
    return [*corpus, (alone, "a.ckz"), (alone, "b.ckz")]


def fuzz_files(rng: random.Random, seconds: float) -> dict[str, Any]:
    from _crafted import body_chunks, reseal_chunks, split

    import ckptzip

    def parts(data: bytes) -> tuple[dict[str, Any], list[bytes]]:
        doc, body = split(data)
        return doc, body_chunks(doc, body)

    scratch = Path(tempfile.mkdtemp(prefix="ckptzip-native-fuzz-"))
    try:
        corpus = _corpus(scratch / "corpus")
        codecs = set()
        for d, f in corpus:
            for t in split((d / f).read_bytes())[0]["tensors"]:
                codecs.add(t["codec"])
        counts: dict[str, Any] = {"files": len(corpus), "codecs": sorted(codecs)}
        counts.update(loads=0, refused=0, foreign=0)
        # the directories as the attacker leaves them: copied once, the parents intact, the
        # attacked file replaced for one load and put back after it
        attack = scratch / "attack"
        for d in {d for d, _ in corpus}:
            shutil.copytree(d, attack / d.name)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            d, f = rng.choice(corpus)
            original = (d / f).read_bytes()
            doc, chunks = parts(original)
            coded = [t for t in doc["tensors"] if t["codec"] != "exact"] or doc["tensors"]
            entry = rng.choice(coded)
            first, count = entry["chunks"]  # the entry's chunks: first, and how many
            own = range(first, first + count)
            if rng.random() < 0.7 and own:
                j = rng.choice(own)
                chunks[j] = _mutate_bytes(rng, chunks[j])
            else:
                _mutate_value(rng, entry.get("meta"))
                if rng.random() < 0.3 and own:
                    j = rng.choice(own)
                    chunks[j] = _mutate_bytes(rng, chunks[j])
            target = attack / d.name / f
            target.write_bytes(reseal_chunks(doc, chunks))
            counts["loads"] += 1
            _attempt(counts, f"{d.name}/{f} {entry['codec']}", ckptzip.load, target)
            target.write_bytes(original)
        return counts
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    library, seconds, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    sys.meta_path.insert(0, _Library(library))
    import ckptzip.kernels

    if ckptzip.kernels.IMPLEMENTATION != "fast":
        print(json.dumps({"error": f"kernels: {ckptzip.kernels.IMPLEMENTATION}"}))
        return 1
    warnings.simplefilter("ignore")  # the manager's notes about what it chose
    rng = random.Random(seed)
    summary = {
        "symbols": fuzz_symbols(rng, seconds / 3),
        "files": fuzz_files(rng, seconds / 3),
        "saves": fuzz_saves(rng, seconds / 3),
    }
    print(json.dumps(summary))
    return 1 if any(part["foreign"] for part in summary.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
