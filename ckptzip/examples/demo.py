"""ckptzip demo: what the package can do so far."""

from __future__ import annotations

import ckptzip

print(f"ckptzip {ckptzip.__version__}: compression pipeline not yet wired into the demo")
