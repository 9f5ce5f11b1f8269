"""Atomic, no-clobber writes of whole files, and checked reads.

A checkpoint file appears under its name complete or not at all: it is written into a temp
file in the same directory (name from :func:`temp_path`, recognised by :func:`is_temp_name` so
listings skip it), flushed and fsynced, then published with one atomic step and the directory
is fsynced so the new name survives a power cut. Without ``overwrite`` the publish step is
``os.link`` (fails if the name exists, so two writers cannot both win); with it, ``os.replace``.
On any failure the temp file is removed and an existing file under the name is untouched.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
from collections.abc import Callable
from typing import BinaryIO

from ckptzip.errors import CheckpointExistsError, CheckpointNotFoundError, StorageError

__all__ = [
    "TEMP_MARKER",
    "atomic_write",
    "check_target",
    "is_temp_name",
    "open_read",
    "sha256_file",
    "temp_path",
]

TEMP_MARKER = ".tmp-"
_READ_BLOCK = 1 << 22


def temp_path(path: str | os.PathLike[str]) -> str:
    """A fresh temp name next to ``path``: ``.<name>.tmp-<pid>-<random>``.

    Examples
    --------
    >>> is_temp_name(os.path.basename(temp_path("/ckpt/step_10.ckz")))
    True
    """
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    return os.path.join(directory, f".{name}{TEMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}")


def is_temp_name(name: str) -> bool:
    """Whether a file name is an unfinished write of :func:`atomic_write` (never a checkpoint)."""
    return name.startswith(".") and TEMP_MARKER in name


def check_target(path: str | os.PathLike[str], *, overwrite: bool) -> None:
    """Fail early, before any work, if ``path`` cannot be written.

    Raises
    ------
    CheckpointExistsError
        ``path`` exists and ``overwrite`` is false.
    StorageError
        The directory does not exist.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise StorageError(f"directory {directory!r} does not exist; create it before saving")
    if os.path.isdir(path):
        raise StorageError(f"{path!r} is a directory; give a file name such as {path!r}/ckpt.ckz")
    if not overwrite and os.path.lexists(path):
        raise CheckpointExistsError(
            f"{path!r} already exists; pass overwrite=True to replace it, or choose a new name"
        )


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # platforms (Windows) where a directory cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _storage_error(exc: OSError, path: str) -> StorageError:
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        why = "no space left on the device (or quota exceeded); free space and retry"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = "permission denied or read-only file system"
    else:
        why = f"I/O error ({exc.strerror or exc})"
    err = StorageError(f"writing {path!r} failed: {why}; any existing file there is untouched")
    err.errno = exc.errno
    return err


def atomic_write(
    path: str | os.PathLike[str], write: Callable[[BinaryIO], object], *, overwrite: bool = False
) -> int:
    """Write a file atomically by calling ``write(f)`` on a temp file, then publishing it.

    Returns the number of bytes of the published file.

    Raises
    ------
    CheckpointExistsError
        ``path`` exists (checked first, and again atomically at publish) and not ``overwrite``.
    StorageError
        The disk is full, permissions or I/O failed; the temp file is removed.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> atomic_write(os.path.join(d, "f.bin"), lambda f: f.write(b"abc"))
    3
    """
    path = os.fspath(path)
    check_target(path, overwrite=overwrite)
    tmp = temp_path(path)
    try:
        with open(tmp, "xb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # atomic publish that refuses to clobber
            except FileExistsError:
                raise CheckpointExistsError(
                    f"{path!r} appeared while saving; pass overwrite=True to replace it"
                ) from None
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                    raise
                # no hard links on this file system: the check just above still holds
                if os.path.lexists(path):
                    raise CheckpointExistsError(
                        f"{path!r} appeared while saving; pass overwrite=True to replace it"
                    ) from None
                os.replace(tmp, path)
        _fsync_dir(os.path.dirname(os.path.abspath(path)))
        return size
    except (CheckpointExistsError, StorageError):
        raise
    except OSError as exc:
        raise _storage_error(exc, path) from exc
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        except OSError:  # leave it for cleanup by name; the original error matters more
            pass


def open_read(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a finished file for reading, with the package's errors.

    Raises
    ------
    CheckpointNotFoundError
        No such file, or it is an unfinished temp file.
    StorageError
        It cannot be read.
    """
    path = os.fspath(path)
    if is_temp_name(os.path.basename(path)):
        raise CheckpointNotFoundError(
            f"{path!r} is an unfinished write (a temp file); it is never read"
        )
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"no checkpoint at {path!r}") from None
    except IsADirectoryError:
        raise CheckpointNotFoundError(f"{path!r} is a directory, not a checkpoint file") from None
    except OSError as exc:
        raise StorageError(f"cannot read {path!r}: {exc.strerror or exc}") from exc


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes (how delta children name their parent).

    Examples
    --------
    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "x")
    >>> _ = atomic_write(p, lambda f: f.write(b""))
    >>> sha256_file(p)[:16]
    'e3b0c44298fc1c14'
    """
    h = hashlib.sha256()
    with open_read(path) as f:
        try:
            while block := f.read(_READ_BLOCK):
                h.update(block)
        except OSError as exc:
            raise StorageError(f"cannot read {os.fspath(path)!r}: {exc}") from exc
    return h.hexdigest()
