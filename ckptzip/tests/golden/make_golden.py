"""Write the golden ``.ckz`` files of every format version. Run once when a version (or a case)
is added:

    python tests/golden/make_golden.py

Never regenerate a released version's files: every later ckptzip must decode them exactly as
``expected_v<N>.json`` records (``tests/test_golden.py``); files that exist are skipped.
The inputs are built from integer arithmetic only (and NumPy's seeded legacy generators), so
the test recomputes them identically on any platform and torch release.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def ramp(n: int, dtype: torch.dtype) -> torch.Tensor:
    """Deterministic, exactly representable values in every float dtype (multiples of 1/8)."""
    i = torch.arange(n, dtype=torch.int64)
    return (((i * 7919) % 401) - 200).to(torch.float64).div(8).to(dtype)


def heavy(n: int, dtype: torch.dtype) -> torch.Tensor:
    """A heavy-tailed, weight-like tensor from a multiplicative hash; exact float64 arithmetic."""
    i = torch.arange(n, dtype=torch.int64)
    u = ((i * 2654435761) % (1 << 32)).to(torch.float64).add(0.5).div(1 << 32)
    return ((u - 0.5) ** 3 * 0.5).to(dtype)


def exact_object() -> dict[str, Any]:
    """Every structure node and every exact dtype."""
    tensors = {
        name: ramp(12, dtype).reshape(3, 4)
        for name, dtype in [
            ("f16", torch.float16),
            ("bf16", torch.bfloat16),
            ("f32", torch.float32),
            ("f64", torch.float64),
        ]
    }
    for name, dtype in [
        ("i8", torch.int8),
        ("i16", torch.int16),
        ("i32", torch.int32),
        ("i64", torch.int64),
        ("u8", torch.uint8),
    ]:
        tensors[name] = torch.arange(10, dtype=torch.int64).mul(3).sub(5).remainder(100).to(dtype)
    tensors["bool"] = torch.arange(9).remainder(3).eq(0)
    tensors["c64"] = torch.complex(ramp(4, torch.float32), ramp(4, torch.float32).flip(0))
    tensors["scalar"] = torch.tensor(2.5, dtype=torch.float32)
    tensors["empty"] = torch.zeros(0, 3, dtype=torch.float32)
    special = ramp(8, torch.float32)
    special[0], special[1], special[2], special[3] = math.nan, math.inf, -math.inf, -0.0
    special[4] = 1e-45  # subnormal
    tensors["special"] = special
    return {
        "tensors": tensors,
        "scalars": {
            "int": 7,
            "big": 2**70,
            "float": 0.1,
            "nan": math.nan,
            "inf": -math.inf,
            "bool": True,
            "none": None,
            "str": "héllo/wörld",
        },
        "containers": {0: ("a", 1), 1: [[], {}, ()]},
        "optimizer": {"state": {0: {"step": torch.tensor(10.0)}}},
    }


def planes_object() -> dict[str, Any]:
    """Exact tensors large enough for the byte-plane stage (added to version 1 later)."""
    return {
        "f32": heavy(2048, torch.float32),
        "bf16": heavy(2048, torch.bfloat16),
        "i64": torch.arange(1024, dtype=torch.int64).mul(977).remainder(5000),
    }


def quant_object() -> dict[str, Any]:
    """Quantized tensors of each float dtype, pruned and protected, with non-finite values."""
    w = heavy(3000, torch.float32)
    w[17], w[1000] = math.nan, math.inf
    return {
        "model": {
            "w16": heavy(2048, torch.float32).reshape(32, 64),
            "w4_pruned": w,
            "bf16": heavy(1500, torch.bfloat16),
            "f16": heavy(1500, torch.float16),
            "f64": heavy(1500, torch.float64),
            "bias": ramp(32, torch.float32),
        },
        "epoch": 3,
    }


def shared_object() -> dict[str, Any]:
    """Version 2: tied weights and views of one storage, quantized and exact."""
    emb = heavy(64 * 80, torch.float32).reshape(64, 80)  # quantized (>= min_numel)
    ids = torch.arange(24, dtype=torch.int64).mul(7).remainder(50).reshape(4, 6)  # exact
    span = ramp(40, torch.float32)  # only views of it are saved: the entry is their span
    return {
        "model": {"wte.weight": emb, "lm_head.weight": emb, "wte_rows": emb[5:9]},
        "emb_t": emb.t(),
        "ids": ids,
        "ids_col": ids[:, 2],
        "ids_expanded": ids[1].expand(3, 6),
        "span_a": span[4:20],
        "span_b": span[12:30:3],
    }


def numpy_object() -> dict[str, Any]:
    """Version 2: NumPy arrays and RNG states (what Hugging Face's Trainer saves)."""
    import numpy as np

    return {
        "python": {"seed": 1234},
        "numpy": np.random.RandomState(5).get_state(),
        "numpy_dict": np.random.RandomState(6).get_state(legacy=False),
        "generator": np.random.Generator(np.random.PCG64(7)).bit_generator.state,
        "arrays": {
            "f64": np.arange(12, dtype=np.float64).reshape(3, 4) / 8,
            "f32_big_endian": np.arange(5, dtype=">f4"),
            "u64": np.array([0, 2**64 - 1], dtype=np.uint64),
            "bool": np.array([True, False, True]),
            "c128": np.array([1 + 2j, -0.5j]),
            "scalar": np.array(7, dtype=np.int16),
            "big": np.arange(5000, dtype=np.float32) / 16,  # large and floating: still exact
        },
        "torch_rng": ramp(16, torch.float32).to(torch.uint8),
    }


def bell(n: int, salt: int) -> torch.Tensor:
    """Bell-shaped float32 values from integer hashing alone (splitmix64, four draws summed)."""
    import numpy as np

    total = np.zeros(n, dtype=np.float64)
    with np.errstate(over="ignore"):
        for k in range(4):
            z = np.arange(n, dtype=np.uint64) + np.uint64(salt * 1_000_003 + k * 7_919 + 1)
            z = z * np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            total += (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return torch.from_numpy(total - 2.0).to(torch.float32)


def ans_object() -> dict[str, Any]:
    """Tensors whose k-means indices are unequally used, so they are coded with ANS."""
    w = bell(3000, 2)
    w[17], w[1000] = math.nan, math.inf
    return {
        "model": {
            "w16": bell(4096, 1).reshape(64, 64),
            "w4_pruned": w,
            "bias": ramp(32, torch.float32),
        },
        "step": 7,
    }


def lanes_object() -> dict[str, Any]:
    """Index streams long enough for ANS in lanes ("ans-lanes", then "ans-wide"), one over two
    blocks."""
    w = bell(270_000, 4)
    w[5], w[200_000] = math.nan, -math.inf
    return {"model": {"w4_pruned": w, "w16": bell(70_000, 5)}, "step": 3}


def many_object() -> dict[str, Any]:
    """Enough entries that the manifest passes 4 KiB and is stored compressed (version 3)."""
    layers = {f"layer{i:02d}.bias": ramp(8 + i, torch.float32) for i in range(60)}
    return {"model": {**layers, "w16": bell(4096, 3).reshape(64, 64)}, "step": 11}


def exact_config() -> Any:
    from ckptzip import CompressionConfig

    return CompressionConfig(min_numel=1 << 40)


def quant_config() -> Any:
    from ckptzip import CompressionConfig, QuantConfig

    return CompressionConfig(
        quant=QuantConfig(bins=16, protect=0.005),
        overrides=(("model/w4_pruned", QuantConfig(bins=4, prune=0.3, protect=0.01)),),
        min_numel=1000,
    )


def sha256_tensor(x: torch.Tensor) -> str:
    from ckptzip.codecs.exact import tensor_to_bytes

    return hashlib.sha256(tensor_to_bytes(x)).hexdigest()


def cases() -> dict[int, dict[str, tuple[Any, Any]]]:
    """Each version's files: name -> (object, config)."""
    return {
        1: {
            "v1_exact.ckz": (exact_object(), None),
            "v1_quant.ckz": (quant_object(), quant_config()),
            "v1_planes.ckz": (planes_object(), exact_config()),
            # written once the quant codec could code indices with ANS ("ans" index layout)
            "v1_quant_ans.ckz": (ans_object(), quant_config()),
        },
        2: {
            "v2_shared.ckz": (shared_object(), quant_config()),
            "v2_numpy.ckz": (numpy_object(), quant_config()),
        },
        3: {
            "v3_zstd_manifest.ckz": (many_object(), quant_config()),
        },
        # chunk digests shortened to 64 bits; a manifest both plain and compressed
        4: {
            "v4_quant.ckz": (ans_object(), quant_config()),
            "v4_zstd_manifest.ckz": (many_object(), quant_config()),
            # written once the quant codec coded long index streams in lanes ("ans-lanes")
            "v4_quant_lanes.ckz": (lanes_object(), quant_config()),
            # written once it coded them in 32 wide lanes ("ans-wide"): the same object
            "v4_quant_wide.ckz": (lanes_object(), quant_config()),
        },
        # chunk digests are CRC-32s; a manifest both plain and compressed
        5: {
            "v5_quant.ckz": (ans_object(), quant_config()),
            "v5_zstd_manifest.ckz": (many_object(), quant_config()),
        },
    }


def main() -> None:
    import ckptzip
    from ckptzip.api import read_manifest, read_quantized

    for version, files in cases().items():
        expected_path = os.path.join(HERE, f"expected_v{version}.json")
        expected: dict[str, Any] = {"version": version, "files": {}}
        if os.path.exists(expected_path):
            with open(expected_path) as f:
                expected = json.load(f)
        for name, (obj, cfg) in files.items():
            path = os.path.join(HERE, name)
            if os.path.exists(path):
                # golden files are never rewritten; only cases added since are written
                if name not in expected["files"]:
                    sys.exit(f"{path} exists but is not in {expected_path}: restore that entry")
                continue
            ckptzip.save(obj, path, config=cfg)
            if read_manifest(path).version != version:
                os.remove(path)
                sys.exit(f"{name} was written as version {read_manifest(path).version}")
            decoded = ckptzip.load(path)
            _, leaves = ckptzip.structure.flatten(decoded)
            q = read_quantized(path)
            expected["files"][name] = {
                "file_sha256": ckptzip.storage.sha256_file(path),
                "codecs": {
                    p: ("exact" if isinstance(v, torch.Tensor) else "quant") for p, v in q.items()
                },
                "decoded_sha256": {p: sha256_tensor(t) for p, t in leaves},
            }
        with open(expected_path, "w") as f:
            json.dump(expected, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
