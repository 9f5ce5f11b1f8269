"""Write the golden chain of the ``"residual"`` codec (error feedback). Run once per version:

    python tests/golden/residual/make_residual_golden.py

``v1_parent.ckz`` is a keyframe, ``v1_child.ckz`` a delta against it whose weights are
residuals against the parent's dequantized tensors, ``v1_grandchild.ckz`` a delta against the
child whose weights are residuals against the child's reconstructions (so both kinds of parent
are pinned). The first moment stays a bin-index ``"delta"``, ``grown`` changes shape (stored in
full, mode ``"full"``), ``w`` holds a NaN and, from the child on, an inf. Never regenerate a
released version's files: every later ckptzip must decode the chain exactly as
``expected_v1.json`` records (``tests/test_residual.py``). The inputs come from the integer
arithmetic of ``tests/golden/make_golden.py``, so they are the same on any platform.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION = 1
NAMES = ("parent", "child", "grandchild")

_spec = importlib.util.spec_from_file_location(
    "make_golden", os.path.join(HERE, "..", "make_golden.py")
)
assert _spec is not None and _spec.loader is not None
make_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_golden)


def state(k: int) -> dict[str, Any]:
    """The checkpoint of "training step" ``k`` (0, 1, 2): every weight moved by ``k`` small,
    exactly representable steps (multiples of 2**-18 to 2**-14 from integer arithmetic)."""
    heavy, ramp = make_golden.heavy, make_golden.ramp
    nudge = ramp(6000, torch.float64).reshape(60, 100).div(2**16)
    w = (heavy(6000, torch.float64).reshape(60, 100) + k * nudge).to(torch.float32)
    w[0, 3] = float("nan")
    if k > 0:
        w[1, 5] = float("inf")
    b16 = (heavy(3000, torch.float64) + k * ramp(3000, torch.float64).div(2**14)).to(torch.bfloat16)
    m = (heavy(5000, torch.float64).mul(0.1) + k * ramp(5000, torch.float64).div(2**18)).to(
        torch.float32
    )
    return {
        "model": {
            "w": w,
            "b16": b16,
            "bias": ramp(16, torch.float32).add(k),
            "grown": heavy(4500 + 500 * k, torch.float32),
        },
        "optimizer": {"state": {"0": {"exp_avg": m}}},
        "step": k,
    }


def config() -> Any:
    from ckptzip import CompressionConfig, QuantConfig

    return CompressionConfig(
        quant=QuantConfig(bins=16, protect=0.005),
        min_numel=1000,
        residual=QuantConfig(bins=4, protect=0.0005),
    )


def sha256_tensor(x: torch.Tensor) -> str:
    from ckptzip.codecs.exact import tensor_to_bytes

    return hashlib.sha256(tensor_to_bytes(x)).hexdigest()


def main() -> None:
    import ckptzip
    from ckptzip.api import read_manifest
    from ckptzip.structure import flatten

    paths = {n: os.path.join(HERE, f"v{VERSION}_{n}.ckz") for n in NAMES}
    for path in paths.values():
        if os.path.exists(path):
            raise SystemExit(
                f"{path} exists: golden files of a released version are never rewritten"
            )
    parent = None
    for k, name in enumerate(NAMES):
        ckptzip.save(state(k), paths[name], config=config(), parent=parent)
        parent = paths[name]
    expected: dict[str, Any] = {
        "version": VERSION,
        "file_sha256": {n: ckptzip.storage.sha256_file(p) for n, p in paths.items()},
        "entries": {
            n: {
                e.path: [e.codec, e.meta.get("mode", e.codec), e.rel_error]
                for e in read_manifest(p).tensors
            }
            for n, p in paths.items()
        },
        "decoded_sha256": {
            n: {path: sha256_tensor(t) for path, t in flatten(ckptzip.load(p))[1]}
            for n, p in paths.items()
        },
    }
    with open(os.path.join(HERE, f"expected_v{VERSION}.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
