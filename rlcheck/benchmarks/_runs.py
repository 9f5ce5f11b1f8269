"""What the benchmarks' runs and tables share (``bugs.py``, ``etna.py``, ``etna_replay.py``,
``satisfiability.py``): one definition of a generate-only Hypothesis run, of a variant of
the rlcheck backend, and of the layout of their results tables.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, settings

__all__ = ["generate_only", "grid", "register_variant"]


def generate_only(backend: str, budget: int, database: Any = None, **options: Any) -> settings:
    """The settings of one measured run on ``backend``: up to ``budget`` examples, the
    generate phase alone (no replay, no shrinking), no deadline, every health check
    suppressed, ``database`` (default: none, so nothing is learned from an earlier run) and
    any further ``options``."""
    return settings(
        backend=backend,
        max_examples=budget,
        database=database,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        **options,
    )


def grid(
    rows: list[dict[str, Any]], key: str
) -> tuple[list[str], list[str], dict[tuple[str, str], dict[str, Any]]]:
    """A results table's layout: its columns (the rows' ``"backend"`` values) and its lines
    (their ``key`` values), each in the order first seen, and each row by ``(key value,
    backend)``."""
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    names = list(dict.fromkeys(r[key] for r in rows))
    return backends, names, {(r[key], r["backend"]): r for r in rows}


def register_variant(name: str, base: str = "RLCheckProvider", **options: Any) -> None:
    """Register a variant of the rlcheck backend (``base``, a provider class of
    :mod:`rlcheck.hypothesis.provider`, with the class options ``options``) as backend
    ``name``; a name already registered is left as it is."""
    from hypothesis.internal.conjecture.providers import AVAILABLE_PROVIDERS

    from rlcheck.hypothesis import provider

    AVAILABLE_PROVIDERS.setdefault(name, type(name, (getattr(provider, base),), options))
