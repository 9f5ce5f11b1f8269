"""CompressionConfig's pattern matching: literal patterns looked up, the rest by fnmatch,
first match winning, the same answers as matching every pattern in order."""

from __future__ import annotations

import fnmatch
import time

from hypothesis import given
from hypothesis import strategies as st

from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.search import _escape

_CHARS = "ab/.[]*?!"
_paths = st.text(alphabet="ab/.[]*?!", max_size=6)
_patterns = st.one_of(
    st.text(alphabet=_CHARS, max_size=6),  # globs, malformed classes included
    _paths.map(_escape),  # the search's literal patterns
    _paths,
)


def _first_match(patterns: list[str], path: str) -> int | None:
    return next((i for i, p in enumerate(patterns) if fnmatch.fnmatchcase(path, p)), None)


@given(st.lists(_patterns, max_size=8), st.lists(_paths, max_size=8))
def test_matching_agrees_with_fnmatch_in_order(patterns: list[str], paths: list[str]) -> None:
    configs = [QuantConfig(bins=b) for b in range(2, 2 + len(patterns))]
    overrides = tuple(zip(patterns, configs, strict=True))
    config = CompressionConfig(overrides=overrides, exact=tuple(patterns))
    for path in [*paths, *patterns]:
        i = _first_match(patterns, path)
        assert config.override_for(path) == (None if i is None else configs[i])
        assert config.is_exact(path) == (i is not None)


def test_a_searched_configs_matching_grows_linearly_with_its_tensors() -> None:
    # One literal pattern per tensor (what the search writes): matching every path against
    # every pattern took 9.3 ms for the 213 paths of benchmarks/throughput.py --quick's state,
    # 0.2 ms by lookup, and grew with the square of the tensors.
    def cost(n: int) -> float:
        paths = [f"model/layers.{i}.weight" for i in range(n)]
        cfg = CompressionConfig(
            overrides=tuple((_escape(p), QuantConfig(bins=8)) for p in paths),
            exact=tuple(_escape(p + "_exact") for p in paths),
        )
        t0 = time.process_time()
        for p in paths:
            cfg.quant_for(p)
        return time.process_time() - t0

    cost(100)
    assert cost(4000) < 0.5  # about 4000 * 4000 fnmatch calls (several seconds) before
