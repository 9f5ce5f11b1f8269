"""PNG plots of campaign results: unique valid inputs over time (matplotlib, optional)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlcheck.errors import InvalidArgument, RLCheckError

if TYPE_CHECKING:
    from rlcheck.campaign import Result

__all__ = ["plot_curves", "plot_unique_valid"]

_X_AXES = {"seconds": "seconds", "trials": "trials (generated inputs)"}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise RLCheckError(
            "plotting needs matplotlib, which is not installed; "
            "run `pip install 'rlcheck[plot]'` (or pip install matplotlib)"
        ) from exc
    matplotlib.use("Agg")  # files only: never open a window, work without a display
    import matplotlib.pyplot as plt

    return plt


def plot_unique_valid(
    results: Mapping[str, Result], path: str | os.PathLike[str], *, x: str = "seconds"
) -> None:
    """Write a PNG with one curve of unique valid inputs per named result.

    Parameters
    ----------
    results:
        Curve label -> campaign result.
    path:
        Output PNG file.
    x:
        ``"seconds"`` (wall-clock) or ``"trials"`` (generated inputs) on the x axis.

    Examples
    --------
    >>> import os, tempfile, rlcheck
    >>> gen = lambda g: (g.integer(0, 9), g.integer(0, 9))
    >>> runs = {name: rlcheck.run(gen, lambda p: p[0] < p[1], guide=guide, trials=300)
    ...         for name, guide in [("random", rlcheck.RandomGuide(seed=0)),
    ...                             ("rl", rlcheck.RLGuide(seed=0))]}
    >>> plot_unique_valid(runs, os.path.join(tempfile.mkdtemp(), "u.png"), x="trials")
    """
    if x not in _X_AXES:
        raise InvalidArgument(f"x={x!r} must be one of {sorted(_X_AXES)}")
    if not results:
        raise InvalidArgument("results is empty: give at least one named Result to plot")
    curves = {
        label: [(getattr(s, x), s.unique_valid) for s in result.series]
        for label, result in results.items()
    }
    plot_curves(curves, path, xlabel=_X_AXES[x], ylabel="unique valid inputs")


def plot_curves(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    path: str | os.PathLike[str],
    *,
    xlabel: str,
    ylabel: str,
) -> None:
    """Write a PNG with one labelled curve of ``(x, y)`` points each.

    Examples
    --------
    >>> import os, tempfile
    >>> plot_curves({"a": [(0, 0), (1, 3)]}, os.path.join(tempfile.mkdtemp(), "c.png"),
    ...             xlabel="seconds", ylabel="unique valid inputs")
    """
    if not curves:
        raise InvalidArgument("curves is empty: give at least one named curve to plot")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    try:
        for label, points in curves.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if len(curves) <= 12:
            ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(os.fspath(path), format="png")
    finally:
        plt.close(fig)
