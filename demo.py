"""End-to-end demo of both libraries on bundled defaults (`make demo`).

Each package keeps its own demo in ``<package>/examples/demo.py``; this script runs them in turn
so one command shows what the project can do today.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def main() -> int:
    for package in ("ckptzip", "rlcheck"):
        script = ROOT / package / "examples" / "demo.py"
        print(f"\n=== {package} ===", flush=True)
        runpy.run_path(str(script), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
