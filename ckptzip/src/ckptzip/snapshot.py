"""Consistent copies of training state for asynchronous saves.

An asynchronous save compresses and writes in a background thread while training goes on,
so it must work on a copy that training cannot change. Two ways, both used by
:class:`~ckptzip.CheckpointManager`:

* :func:`copy_tree`: an explicit object (a state dict) is copied at once. CPU tensors are
  cloned; CUDA tensors are copied into pinned host memory on a side stream, the current
  stream is made to wait for that copy (so later kernels cannot overwrite the source before
  it is read), and :meth:`Copied.ready` waits for the copies before the worker reads them.
* :class:`ModelSnapshot`: a model and its optimizer are copied *in the background*, and the
  optimizer's next ``step`` waits until the copy is done (a ``register_step_pre_hook``).
  Parameters and optimizer state change only inside ``optimizer.step``, so the copy taken
  while forward and backward run is consistent, and training stalls only if it reaches the
  next ``step`` before the copy is done. Buffers (batch-norm statistics change in
  ``forward``), the optimizer's hyper-parameters and ``extra`` are copied at once: they are
  small.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ckptzip.structure import extent

__all__ = ["Copied", "ModelSnapshot", "copy_tree"]


class Copied:
    """A copied object and the CUDA events its copies must reach before it is read."""

    def __init__(self, value: Any, events: list[Any]) -> None:
        self.value = value
        self._events = events

    def ready(self) -> Any:
        """Wait for the copies (a no-op on CPU) and return the copied object."""
        for event in self._events:
            event.synchronize()
        self._events = []
        return self.value


def _to_host(t: torch.Tensor, events: list[Any]) -> torch.Tensor:
    t = t.detach()
    if t.device.type != "cuda":
        return t.clone()
    # Pinned memory lets the device-to-host copy run asynchronously; the side stream keeps it
    # off the training stream, which only waits for it (not for the whole save).
    stream = torch.cuda.Stream(device=t.device)
    current = torch.cuda.current_stream(t.device)
    stream.wait_stream(current)
    with torch.cuda.stream(stream):
        host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
        host.copy_(t, non_blocking=True)
    t.record_stream(stream)
    event = stream.record_event()
    current.wait_event(event)
    events.append(event)
    return host


def _tensors(obj: Any, out: dict[int, torch.Tensor]) -> None:
    if isinstance(obj, torch.Tensor):
        out.setdefault(id(obj), obj)
    elif isinstance(obj, Mapping):
        for v in obj.values():
            _tensors(v, out)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            _tensors(v, out)


def _shared_spans(found: Mapping[int, torch.Tensor]) -> list[list[int]]:
    """The ids of tensors in ``found`` that view one storage, in groups of two or more
    (tensors of one dtype; a storage viewed through several dtypes is left out, and its
    tensors are copied one by one)."""
    groups: dict[tuple[str, int], list[int]] = {}
    for i, t in found.items():
        if t.layout != torch.strided or t.is_nested or t.is_quantized or t.numel() == 0:
            continue
        ptr = t.untyped_storage().data_ptr()
        if ptr and t.device.type != "meta":
            groups.setdefault((str(t.device), ptr), []).append(i)
    return [
        ids for ids in groups.values() if len(ids) > 1 and len({found[i].dtype for i in ids}) == 1
    ]


def _copy_span(tensors: list[torch.Tensor], events: list[Any]) -> list[torch.Tensor]:
    """``tensors`` (views of one storage, one dtype) copied to the host as views of one
    copy of the part of the storage they reach, so they stay views of one another."""
    lo = min(t.storage_offset() for t in tensors)
    hi = max(t.storage_offset() + extent(t) for t in tensors)
    first = tensors[0]
    span = torch.empty(0, dtype=first.dtype, device=first.device)
    span.set_(first.untyped_storage(), lo, (hi - lo,), (1,))
    host = _to_host(span, events)
    return [host.as_strided(t.shape, t.stride(), t.storage_offset() - lo) for t in tensors]


def copy_tree(obj: Any) -> Copied:
    """A deep copy of ``obj`` whose tensors live on the host, taken now.

    Tensors that are one object in ``obj`` (tied weights) stay one object in the copy, and
    views of one storage (a row of a weight, its transpose) stay views of one copy, as a
    blocking save stores them (one entry, its views restored as views).

    Examples
    --------
    >>> w = torch.ones(2)
    >>> snap = copy_tree({"w": w, "also": w, "n": 3})
    >>> _ = w.add_(1)
    >>> c = snap.ready()
    >>> c["w"], c["also"] is c["w"], c["n"]
    (tensor([1., 1.]), True, 3)
    """
    found: dict[int, torch.Tensor] = {}
    _tensors(obj, found)
    events: list[Any] = []
    memo: dict[int, Any] = {}
    with torch.no_grad():
        for ids in _shared_spans(found):
            # views beyond their storage fail here: copied one by one (and refused by the save)
            with contextlib.suppress(RuntimeError):
                memo.update(zip(ids, _copy_span([found[i] for i in ids], events), strict=True))
    memo.update({i: _to_host(t, events) for i, t in found.items() if i not in memo})
    return Copied(copy.deepcopy(obj, memo), events)


class _OptimizerView(torch.optim.Optimizer):
    """The copied optimizer state, over the copied model's parameters (read by the search)."""

    def __init__(self, groups: list[dict[str, Any]], state: dict[torch.Tensor, Any]) -> None:
        super().__init__(groups, {})
        self.state.update(state)


class ModelSnapshot:
    """A model and optimizer copied in the background, gating the optimizer's next step.

    Call order (the manager's)::

        snap = ModelSnapshot(model, optimizer, gate)   # caller's thread: buffers, groups
        # worker thread:
        model_copy, opt_view, state = snap.take()      # copies, then opens the gate
        ...search on model_copy / opt_view, encode ``state``...

    ``gate`` is a :class:`Gate` whose hook the manager registered on the optimizer once.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        self._model = model
        self._optimizer = optimizer
        # Small and changed outside optimizer.step: copied now.
        self._buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
        self._groups = (
            None
            if optimizer is None
            else [
                {k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
                for g in optimizer.param_groups
            ]
        )
        self._params = (
            None if optimizer is None else [list(g["params"]) for g in optimizer.param_groups]
        )
        self._state_refs = (
            None if optimizer is None else {p: dict(s) for p, s in optimizer.state.items()}
        )

    def take(
        self,
    ) -> tuple[nn.Module, torch.optim.Optimizer | None, dict[str, Any]]:
        """Copy the model and optimizer state; returns the copies and the state to save."""
        memo: dict[int, Any] = {}
        model = copy.deepcopy(self._model, memo)
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(self._buffers[name])
        state: dict[str, Any] = {"model": model.state_dict()}
        view = None
        if self._optimizer is not None:
            assert self._groups is not None and self._params is not None
            assert self._state_refs is not None
            groups = [
                {**g, "params": [memo.get(id(p), p) for p in ps]}
                for g, ps in zip(self._groups, self._params, strict=True)
            ]
            opt_state: dict[torch.Tensor, Any] = {}
            for p, s in self._state_refs.items():
                opt_state[memo.get(id(p), p)] = {
                    k: v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
                    for k, v in s.items()
                }
            view = _OptimizerView(groups, opt_state)
            state["optimizer"] = view.state_dict()
        return model, view, state


class Gate:
    """Makes ``optimizer.step`` wait while a background copy of its parameters is taken.

    Registered once per optimizer (:meth:`install`); :meth:`close` opens it for good. The
    time steps spent waiting is added to :attr:`waited` (the stall an asynchronous save
    cost training).
    """

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self.waited = 0.0
        self._handle: Any = None

    def install(self, optimizer: torch.optim.Optimizer) -> None:
        self._handle = optimizer.register_step_pre_hook(self._hook)

    def _hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self._open.is_set():
            t0 = time.perf_counter()
            self._open.wait()
            self.waited += time.perf_counter() - t0

    def shut(self) -> None:
        """Hold the next ``step`` until :meth:`release`."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.set()
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
