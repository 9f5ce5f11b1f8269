"""Write the golden DCP checkpoint directories (``ckptzip.dcp.Writer``). Run once per case:

    python tests/golden/dcp/make_dcp_golden.py NAME

Never regenerate a committed directory: every later ckptzip must read it (``tests/test_dcp.py``).

* ``legacy_pickle``: written by the Writer of ckptzip before the JSON metadata (commit b494ca2),
  whose ``.metadata`` is DCP's ``Metadata`` pickled. Made by running this script on that commit.
* ``json_v1``: ``.metadata`` in the JSON form, version 1 (see FORMAT.md).

Values are integer arithmetic only, stored exactly (every tensor under ``min_numel``), so the
test compares them bit for bit with :func:`state` recomputed.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import torch
import torch.distributed.checkpoint as dcp

HERE = os.path.dirname(os.path.abspath(__file__))


def ramp(n: int, dtype: torch.dtype) -> torch.Tensor:
    """Deterministic, exactly representable values (multiples of 1/8)."""
    i = torch.arange(n, dtype=torch.int64)
    return (((i * 7919) % 401) - 200).to(torch.float64).div(8).to(dtype)


def state(name: str) -> dict[str, Any]:
    """The state dict saved into golden directory ``name``."""
    model: dict[str, Any] = {
        "emb.weight": ramp(48, torch.float32).reshape(12, 4),
        "fc.weight": ramp(32, torch.float32).reshape(8, 4).flip(0).contiguous(),
        "fc.bias": ramp(8, torch.bfloat16),
        "count": torch.arange(5, dtype=torch.int64),
    }
    return {"model": model, "step": 7, "extra": {"lr": 0.125, "betas": [0.5, 0.25]}}


def main(name: str) -> None:
    import ckptzip
    from ckptzip.dcp import Writer

    path = os.path.join(HERE, name)
    if os.path.exists(path):
        sys.exit(f"{path} exists; golden directories are never regenerated")
    os.chdir(HERE)  # checkpoint_id recorded in the metadata is the relative name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(
            state(name),
            storage_writer=Writer(name, config=ckptzip.CompressionConfig(), threads=1),
            no_dist=True,
        )


if __name__ == "__main__":
    main(sys.argv[1])
