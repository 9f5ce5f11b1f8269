"""The attack suite: which tests attack which promise, and how hard.

The tests that attack ckptzip's promises (``RELIABILITY.md``) carry the ``attack`` marker,
given here by file and test name rather than in each file, with the area each one attacks.
``pytest -m attack`` runs them all (slow ones included), as CI does within ``make test``;
``CKPTZIP_ATTACK_SCALE=10 pytest -m attack`` (``make attack``) multiplies the Hypothesis
examples and the SIGKILL counts of the tests that use :func:`scaled` by ten, for a long run.
"""

from __future__ import annotations

import fnmatch
import os

__all__ = ["AREAS", "SCALE", "area_of", "scaled"]


def _scale() -> float:
    text = os.environ.get("CKPTZIP_ATTACK_SCALE", "1")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"CKPTZIP_ATTACK_SCALE={text!r} must be a number (1: CI's size)") from None
    if not value > 0:
        raise ValueError(f"CKPTZIP_ATTACK_SCALE={text!r} must be positive")
    return value


#: How much harder than CI the attacks run (``CKPTZIP_ATTACK_SCALE``, default 1).
SCALE = _scale()


def scaled(n: int) -> int:
    """``n`` attempts (Hypothesis examples, kills) times :data:`SCALE`, at least 1."""
    return max(1, round(n * SCALE))


#: area -> {test file: test-name patterns}; the first match names a test's area.
AREAS: dict[str, dict[str, tuple[str, ...]]] = {
    "format fuzzing and hostile files": {
        "test_malformed.py": ("*",),
        "test_dcp.py": ("test_dcp_metadata_*",),
        "test_structure.py": ("test_unflatten_of_arbitrary_json*", "test_malformed_skeletons*"),
        "test_golden.py": ("*",),
        "test_sanitizers.py": ("*",),
        "test_dcp_crafted.py": ("*",),
        "test_storage_crafted.py": ("*",),
    },
    "SIGKILLs, full disks and I/O faults": {
        "test_crash.py": ("*",),
        "test_storage.py": ("*",),
        "test_async.py": ("*fail*", "*error*"),
    },
    "damaged chains and retention": {
        "test_chains.py": ("*",),
        "test_manager.py": (
            "test_random_saves*",
            "test_missing_parent*",
            "test_altered_parent*",
            "test_describe_names_damaged*",
            "test_a_damaged_newest*",
            "*racing*",
            "*reader*",
            "test_thousands_of_loads*",
            "test_when_every_step_is_skipped*",
            "test_describe_and_inspect*",
            "test_save_then_load_through_the_manager",
        ),
    },
    "S3 faults (moto)": {"test_s3.py": ("*",)},
    "odd tensors and read limits": {
        "test_limits.py": ("*",),
        "test_structure_crafted.py": ("*",),
        "test_structure.py": (
            "*odd*",
            "*conj*",
            "*huge*",
            "*views*",
            "*numpy_arrays_that_need*",
            "test_keys_whose_paths_coincide*",
        ),
        "test_api.py": (
            "test_save_load_property",
            "test_odd_tensors*",
            "test_tensors_that_cannot*",
        ),
    },
}


def area_of(file: str, test: str) -> str | None:
    """The area a test attacks (``None``: not part of the attack suite)."""
    for area, files in AREAS.items():
        patterns = files.get(file, ())
        if any(fnmatch.fnmatch(test, p) for p in patterns):
            return area
    return None
