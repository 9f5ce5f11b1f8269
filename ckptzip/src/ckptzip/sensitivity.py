"""Gradient sensitivity ``|g·w|`` gathered from training itself, at no cost outside a window.

The search (and the quantizer's protect/prune split) ranks weights by a first-order Taylor
estimate of the loss change if a weight were zeroed: ``|g · w|``, with ``g`` an exponential
moving average of the gradient. :class:`SensitivityTracker` keeps that average without any
change to the training loop and without an extra backward pass: it registers a
``register_post_accumulate_grad_hook`` on every trainable parameter, and each hook folds the
freshly accumulated ``.grad`` into the average

    ``ema ← alpha · grad + (1 − alpha) · ema``     (``alpha = 0.9``: the weight of the *new*
    gradient, as the method prescribes; the first gradient of a window initialises ``ema``)

but only during the ``window`` optimisation steps before a scheduled checkpoint: the
per-parameter hooks are registered when a window opens and removed when it closes. Outside
the window the one hook that counts steps is all that runs, one Python call per step whatever
the number of parameters (it was one call per parameter per backward pass while every hook
stayed registered: close to 1 % of a small MLP's step, ``tests/test_sensitivity.py``).

Steps are counted by an ``optimizer.register_step_post_hook`` when an optimizer is given (exact,
and right under gradient accumulation), otherwise by counting backward passes (one hook, on the
parameter whose gradient is ready last, advances the counter). A schedule is either periodic
(``every=N``: checkpoints after steps N, 2N, …) or one-off (:meth:`SensitivityTracker.arm`).

Under gradient accumulation over ``k`` micro-batches without an optimizer to count steps, each
micro-batch's backward updates the average with the running ``.grad`` sum; pass the optimizer
to avoid that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ckptzip._compat import release_post_accumulate_grad_hooks
from ckptzip.errors import ConfigError

__all__ = ["SensitivityTracker"]


class SensitivityTracker:
    """Keep an EMA of each parameter's gradient over the steps just before a checkpoint.

    Parameters
    ----------
    model:
        The module whose trainable parameters are tracked (names from ``named_parameters``).
    window:
        How many optimisation steps before a scheduled checkpoint the average is kept.
    alpha:
        Weight of the new gradient in the moving average, in (0, 1].
    every:
        Periodic schedule: a checkpoint follows every ``every``-th step (steps counted from
        the tracker's creation, or from ``start``). ``None``: only :meth:`arm` schedules.
    start:
        The number of steps already done when the tracker is created (after a restore).
    optimizer:
        When given, steps are counted by a hook on ``optimizer.step`` instead of by backward
        passes.

    Examples
    --------
    >>> model = nn.Linear(8, 2)
    >>> tracker = SensitivityTracker(model, window=2, every=4)
    >>> for step in range(4):
    ...     model(torch.randn(3, 8)).sum().backward()
    >>> sorted(tracker.scores())
    ['bias', 'weight']
    >>> tracker.close()
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        window: int = 50,
        alpha: float = 0.9,
        every: int | None = None,
        start: int = 0,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        if not isinstance(window, int) or window < 1:
            raise ConfigError(f"window={window!r} must be a positive number of steps")
        if not 0.0 < alpha <= 1.0:
            raise ConfigError(f"alpha={alpha!r} must lie in (0, 1]: it weights the new gradient")
        if every is not None and (not isinstance(every, int) or every < 1):
            raise ConfigError(f"every={every!r} must be a positive number of steps or None")
        if start < 0:
            raise ConfigError(f"start={start!r} must be >= 0")
        self.window = window
        self.alpha = float(alpha)
        self.every = every
        self._step = start
        self._due: int | None = None  # the step after which an armed checkpoint follows
        self._ema: dict[str, torch.Tensor] = {}
        self._named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self._named:
            raise ConfigError("the model has no trainable parameters to track")
        self._handles: list[Any] = []  # the step counter's, for the tracker's lifetime
        self._recording: list[Any] = []  # the per-parameter hooks, inside a window only
        self._counts_backward = optimizer is None
        if optimizer is not None:
            self._handles.append(optimizer.register_step_post_hook(self._on_optimizer_step))
        else:
            # Autograd fills the first-registered parameter last (it sits at the input end of
            # the graph in a plain feed-forward model), so its hook marks the end of a backward
            # (and records that parameter's gradient inside a window).
            first = self._named[0][1]
            self._handles.append(first.register_post_accumulate_grad_hook(self._on_backward))
        self._active = False
        self._closed = False
        self._paused = False
        self._update_active()

    # -- schedule ----------------------------------------------------------------------------

    @property
    def step(self) -> int:
        """Steps counted so far (including ``start``)."""
        return self._step

    @property
    def active(self) -> bool:
        """Whether the hooks are recording now (the next step lies inside a window)."""
        return self._active

    def arm(self, steps_until_checkpoint: int) -> None:
        """Schedule one checkpoint after ``steps_until_checkpoint`` more steps.

        The hooks record during the last ``window`` of those steps (all of them if fewer).
        """
        if not isinstance(steps_until_checkpoint, int) or steps_until_checkpoint < 1:
            raise ConfigError(
                f"steps_until_checkpoint={steps_until_checkpoint!r} must be a positive integer"
            )
        self._due = self._step + steps_until_checkpoint
        self._update_active()

    def _steps_left(self) -> int | None:
        """Steps until the nearest scheduled checkpoint, or None when nothing is scheduled."""
        left: list[int] = []
        if self._due is not None and self._due > self._step:
            left.append(self._due - self._step)
        if self.every is not None:
            left.append(self.every - self._step % self.every)
        return min(left) if left else None

    def _in_window(self) -> bool:
        left = self._steps_left()
        return left is not None and left <= self.window

    def _update_active(self) -> None:
        if self._closed:
            return
        active = self._in_window()
        if active and not self._active:
            # A new window starts from scratch: gradients from an earlier window are stale.
            self._ema.clear()
            self._start_recording()
        elif self._active and not active:
            self._stop_recording()
        self._active = active

    def _start_recording(self) -> None:
        # in the backward-counting mode the first parameter's counting hook records it too
        # (and its hook dict is the one autograd may be walking right now: left unchanged)
        named = self._named[1:] if self._counts_backward else self._named
        for name, param in named:
            self._recording.append(param.register_post_accumulate_grad_hook(self._hook_for(name)))

    def _stop_recording(self) -> None:
        for handle in self._recording:
            handle.remove()
        self._recording.clear()
        for _, param in self._named:
            release_post_accumulate_grad_hooks(param)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Neither record nor count steps inside the block (training steps that are not the
        run's own, such as a search's probe, leave the tracker as it was)."""
        active, self._active, self._paused = self._active, False, True
        try:
            yield
        finally:
            self._active, self._paused = active, False

    def _advance(self) -> None:
        if self._paused:
            return
        self._step += 1
        if self._due is not None and self._step >= self._due:
            self._due = None
        self._update_active()

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._advance()

    def _on_backward(self, param: torch.Tensor) -> None:
        if self._active:
            self._record(self._named[0][0], param)
        self._advance()

    # -- recording ---------------------------------------------------------------------------

    def _hook_for(self, name: str) -> Callable[[torch.Tensor], None]:
        def hook(param: torch.Tensor) -> None:
            if self._active:  # False while paused
                self._record(name, param)

        return hook

    def _record(self, name: str, param: torch.Tensor) -> None:
        grad = param.grad
        if grad is None or grad.is_sparse:
            return
        with torch.no_grad():
            ema = self._ema.get(name)
            if ema is None:
                self._ema[name] = grad.detach().clone()
            else:
                ema.mul_(1.0 - self.alpha).add_(grad, alpha=self.alpha)

    # -- results -----------------------------------------------------------------------------

    def has_scores(self) -> bool:
        """Whether at least one gradient has been recorded since the last window started."""
        return bool(self._ema)

    def scores(self, *, prefix: str = "") -> dict[str, torch.Tensor]:
        """``|ema(g) · w|`` for every parameter that received a gradient inside the window.

        Parameters
        ----------
        prefix:
            Prepended to each parameter name, e.g. ``"model/"`` to match the tensor paths of
            a checkpoint ``{"model": model.state_dict(), ...}``.

        Returns
        -------
        dict
            Name → float32 CPU tensor of the parameter's shape. Parameters with no recorded
            gradient are absent (the quantizer then falls back to magnitude).
        """
        out: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name, param in self._named:
                ema = self._ema.get(name)
                if ema is not None and ema.shape == param.shape:
                    out[prefix + name] = (ema * param.detach()).abs().float().cpu()
        return out

    def gradients(self) -> dict[str, torch.Tensor]:
        """The moving averages themselves (name → tensor), for inspection and tests."""
        return {k: v.detach().clone() for k, v in self._ema.items()}

    def reset(self) -> None:
        """Forget the recorded averages (their memory is released)."""
        self._ema.clear()

    def close(self) -> None:
        """Remove every hook and release the averages. Idempotent."""
        self._stop_recording()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        release_post_accumulate_grad_hooks(self._named[0][1])
        self._ema.clear()
        self._active = False
        self._closed = True

    def __enter__(self) -> SensitivityTracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"SensitivityTracker(params={len(self._named)}, window={self.window}, "
            f"alpha={self.alpha}, every={self.every}, step={self._step}, active={self._active})"
        )
