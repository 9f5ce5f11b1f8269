"""Private APIs of dependencies, each with its public alternative (and the fallback to it).

Every use of a dependency's private API in ckptzip is here, so a new version of the
dependency breaks (at most) this module, and each function still works through the public
route when the private one is gone.
"""

from __future__ import annotations

import contextlib
import inspect
import pickle
from typing import IO, Any, cast

import torch

__all__ = ["dcp_memory_format_encoding", "release_post_accumulate_grad_hooks", "torch_save_size"]


class _CountingSink:
    """A write-only file object that counts bytes, so torch.save's size costs no disk."""

    def __init__(self) -> None:
        self.n = 0

    def write(self, data: bytes) -> int:
        n = len(memoryview(data).cast("B"))
        self.n += n
        return n

    def flush(self) -> None:
        pass


# the signature of torch.serialization._save this module was written against (torch 2.4-2.13)
_SAVE_PARAMETERS = [
    "obj",
    "zip_file",
    "pickle_module",
    "pickle_protocol",
    "_disable_byteorder_record",
]


def torch_save_size(obj: Any) -> int:
    """How many bytes ``torch.save(obj, f)`` writes to a stream.

    Private route: ``torch.serialization._save`` into a ``torch._C.PyTorchFileWriter`` made
    with CRC32 off. The archive has the same layout and size (a record's CRC field is there
    either way), but torch no longer checksums every tensor byte, which on a large checkpoint
    is most of the cost of measuring it (a second or so per GB). Public alternative (the
    fallback): ``torch.save(obj, sink)``. Raises what pickling ``obj`` raises.
    """
    sink = _CountingSink()
    try:
        writer_cls = torch._C.PyTorchFileWriter
        save = torch.serialization._save
        alignment = torch.serialization._get_storage_alignment()
        protocol = torch.serialization.DEFAULT_PROTOCOL
        known = list(inspect.signature(save).parameters) == _SAVE_PARAMETERS
    except (AttributeError, TypeError, ValueError):
        known = False
    if not known:
        torch.save(obj, sink)  # type: ignore[arg-type]
        return sink.n
    writer = writer_cls(cast(IO[bytes], sink), False, alignment)
    save(obj, writer, pickle, protocol, False)
    writer.write_end_of_file()
    return sink.n


def dcp_memory_format_encoding() -> type:
    """DCP's enum of memory formats, which a pickled ``TensorProperties`` refers to by name.

    Private route: ``torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING``. Public
    alternative (the fallback): the type of the member ``TensorProperties.__getstate__``
    returns, which is that enum.
    """
    from torch.distributed.checkpoint import metadata

    enum = getattr(metadata, "_MEM_FORMAT_ENCODING", None)
    if isinstance(enum, type):
        return enum
    return type(metadata.TensorProperties().__getstate__()[3])


def release_post_accumulate_grad_hooks(param: torch.Tensor) -> None:
    """Let autograd forget ``param``'s post-accumulate-grad hooks once the last is removed.

    Removing every ``register_post_accumulate_grad_hook`` handle leaves an empty dict that
    autograd still enters after each gradient accumulation (with the GIL taken): measured at
    about 0.75 us per parameter per backward, nearly what a hook returning at once costs.
    Private route: ``Tensor._post_accumulate_grad_hooks`` set back to ``None``, as it is
    before the first hook (torch 2.1-2.13). Public alternative (the fallback): none; the
    handles' ``remove()`` alone, which leaves that cost. A dict that still holds someone
    else's hook is left alone.
    """
    hooks = getattr(param, "_post_accumulate_grad_hooks", None)
    if isinstance(hooks, dict) and not hooks:
        with contextlib.suppress(AttributeError, TypeError, RuntimeError):
            param._post_accumulate_grad_hooks = None  # type: ignore[assignment]
