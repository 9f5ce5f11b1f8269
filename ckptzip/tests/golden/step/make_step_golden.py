"""Write the golden chain of the ``"step"`` codec (Adam's first moment as its step). Run once
per version:

    python tests/golden/step/make_step_golden.py

``v1_parent.ckz`` is a keyframe whose ``exp_avg`` is a ``step`` entry over its ``exp_avg_sq``
(``quant``, log domain); ``v1_child.ckz`` a delta against it, ``exp_avg`` again a ``step``
entry, now over an ``exp_avg_sq`` stored as a bin-index ``delta`` (so both kinds of second
moment are pinned), the weight a ``residual``. ``exp_avg`` holds exact zeros over zero
second moments, a NaN and an inf; ``exp_avg_sq`` an inf. Never regenerate a released
version's files: every later ckptzip must decode the chain exactly as ``expected_v1.json``
records (``tests/test_step.py``). The inputs come from the integer arithmetic of
``tests/golden/make_golden.py``, so they are the same on any platform.
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
NAMES = ("parent", "child")
M_PATH, V_PATH = "optimizer/state/0/exp_avg", "optimizer/state/0/exp_avg_sq"

_spec = importlib.util.spec_from_file_location(
    "make_golden", os.path.join(HERE, "..", "make_golden.py")
)
assert _spec is not None and _spec.loader is not None
make_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_golden)


def state(k: int) -> dict[str, Any]:
    """The checkpoint of "training step" ``k`` (0, 1): exactly representable values."""
    heavy, ramp = make_golden.heavy, make_golden.ramp
    n = 6000
    v = heavy(n, torch.float64).abs().add(2**-20).mul(2 ** (-8 - k)).to(torch.float32)
    m = (heavy(n, torch.float64).mul(2**-6) + ramp(n, torch.float64).mul(2**-14 * (k + 1))).to(
        torch.float32
    )
    m[:50], v[:50] = 0.0, 0.0  # units that never had a gradient
    m[100], m[101], v[200] = float("nan"), float("inf"), float("inf")
    w = (heavy(n, torch.float64) + k * ramp(n, torch.float64).div(2**16)).to(torch.float32)
    return {
        "model": {"w": w.reshape(60, 100)},
        "optimizer": {"state": {"0": {"exp_avg": m, "exp_avg_sq": v, "step": float(k + 1)}}},
    }


def config(m: torch.Tensor) -> Any:
    from ckptzip import CompressionConfig, QuantConfig
    from ckptzip.plan import keep_zeros, zero_fraction

    first = keep_zeros(QuantConfig(bins=4, protect=0.001, fit="step"), zero_fraction(m))
    assert first is not None
    return CompressionConfig(
        quant=QuantConfig(bins=16, protect=0.005),
        min_numel=1000,
        residual=QuantConfig(bins=4, protect=0.0005),
        overrides=(
            (M_PATH, first),
            (V_PATH, QuantConfig(bins=16, protect=0.0005, log_domain=True)),
        ),
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
        s = state(k)
        m = s["optimizer"]["state"]["0"]["exp_avg"]
        ckptzip.save(s, paths[name], config=config(m), parent=parent)
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
