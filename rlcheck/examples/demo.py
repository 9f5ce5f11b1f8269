"""rlcheck demo: what the package can do so far."""

from __future__ import annotations

import rlcheck

print(f"rlcheck {rlcheck.__version__}: campaign runner not yet wired into the demo")
