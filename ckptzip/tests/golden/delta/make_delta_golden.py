"""Write the golden delta pair of the current format version. Run once per version:

    python tests/golden/delta/make_delta_golden.py

``v1_parent.ckz`` is a full checkpoint, ``v1_child.ckz`` a delta against it (its manifest
names the parent by file name and sha256). Never regenerate a released version's files:
every later ckptzip must decode the child exactly as ``expected_v1.json`` records
(``tests/test_delta.py``). A symbol back end added within a format version gets its own pair,
named by a tag: ``python tests/golden/delta/make_delta_golden.py rle_ans`` wrote
``rle_ans_parent.ckz``, ``rle_ans_child.ckz`` and ``expected_rle_ans.json`` (the first files
whose deltas use ``"rle+ans"``; ``methods`` records each delta entry's back end), and
``... wide_ctx`` the ``wide_ctx_*`` files (the first whose deltas use
``"ans-wide-ctx"``) and ``... rle_ans_wide`` the ``rle_ans_wide_*`` ones (``"rle+ans-wide"``,
its inner streams in the wide lanes). The inputs
are built from integer arithmetic only (the generators of ``tests/golden/make_golden.py``), so
they are the same on any platform and torch release.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from typing import Any

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION = 1

_spec = importlib.util.spec_from_file_location(
    "make_golden", os.path.join(HERE, "..", "make_golden.py")
)
assert _spec is not None and _spec.loader is not None
make_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_golden)


def objects(sparse: bool = False, wide: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """A parent state and a child state a few "training steps" later (``sparse``: ``w`` ten
    times larger and only every 40th of its weights moves, so most differences are runs;
    ``wide``: ``w`` 70 000 normal weights from NumPy's seeded legacy generator, every one
    moved by normal noise of a tenth their spread, so the differences are dense and a stream
    long enough for the wide lanes; both: those weights, every 40th moved by half their
    spread)."""
    heavy, ramp = make_golden.heavy, make_golden.ramp
    rows = 700 if wide else 600 if sparse else 60
    w = heavy(rows * 100, torch.float32).reshape(rows, 100)
    b16 = heavy(3000, torch.bfloat16)
    parent = {"model": {"w": w, "b16": b16, "bias": ramp(16, torch.float32)}, "step": 1}
    # Small moves (multiples of 2**-16 from integer arithmetic), so most weights keep their
    # bin; one tensor changes shape between the two, so it is stored in full in the child.
    nudge = ramp(rows * 100, torch.float64).reshape(rows, 100).div(2**16)
    every40 = (torch.arange(rows * 100) % 40 == 0).reshape(rows, 100)
    if sparse and not wide:
        nudge = nudge.mul(64).mul(every40)
    if wide:
        rng = np.random.RandomState(20261207)
        w = torch.from_numpy(rng.standard_normal((rows, 100)).astype(np.float32))
        parent["model"]["w"] = w
        nudge = torch.from_numpy(rng.standard_normal((rows, 100))).mul(0.1)
        if sparse:
            nudge = nudge.mul(5).mul(every40)
    child = {
        "model": {
            "w": (w.to(torch.float64) + nudge).to(torch.float32),
            "b16": b16,
            "bias": ramp(16, torch.float32).add(1),
            "grown": heavy(5000, torch.float32),
        },
        "step": 2,
    }
    parent["model"]["grown"] = heavy(4500, torch.float32)
    return parent, child


def config() -> Any:
    from ckptzip import CompressionConfig, QuantConfig

    return CompressionConfig(quant=QuantConfig(bins=16, prune=0.1, protect=0.005), min_numel=1000)


def sha256_tensor(x: torch.Tensor) -> str:
    from ckptzip.codecs.exact import tensor_to_bytes

    return hashlib.sha256(tensor_to_bytes(x)).hexdigest()


def main() -> None:
    import ckptzip
    from ckptzip.api import read_manifest
    from ckptzip.structure import flatten

    tag = sys.argv[1] if len(sys.argv) > 1 else f"v{VERSION}"
    parent_obj, child_obj = objects(
        sparse=tag in ("rle_ans", "rle_ans_wide"), wide=tag in ("wide_ctx", "rle_ans_wide")
    )
    if tag == "rle_ans_wide":
        # the run tokens and other symbols of a 70 000-weight delta are too few for the wide
        # lanes at the writer's threshold, and the codec would keep "ans-wide-ctx" here; the
        # format takes either coder for any length, and any back end for any tensor
        from ckptzip import bindiff, entropy

        entropy.RLE_WIDE_MIN = 256
        bindiff.delta_methods = lambda n: ("rle+ans-wide",)
    names = {"parent": f"{tag}_parent.ckz", "child": f"{tag}_child.ckz"}
    paths = {k: os.path.join(HERE, v) for k, v in names.items()}
    for path in paths.values():
        if os.path.exists(path):
            sys.exit(f"{path} exists: golden files of a released version are never rewritten")
    ckptzip.save(parent_obj, paths["parent"], config=config())
    ckptzip.save(child_obj, paths["child"], config=config(), parent=paths["parent"])
    _, leaves = flatten(ckptzip.load(paths["child"]))
    expected = {
        "version": VERSION,
        "file_sha256": {k: ckptzip.storage.sha256_file(p) for k, p in paths.items()},
        "modes": {
            e.path: e.meta.get("mode", e.codec) for e in read_manifest(paths["child"]).tensors
        },
        "decoded_sha256": {p: sha256_tensor(t) for p, t in leaves},
    }
    if len(sys.argv) > 1:
        expected["methods"] = {
            e.path: e.meta["delta"]["method"]
            for e in read_manifest(paths["child"]).tensors
            if e.meta.get("mode") == "delta"
        }
    with open(os.path.join(HERE, f"expected_{tag}.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
