"""Atomic, no-clobber writes of whole files, and checked reads.

A checkpoint file appears under its name complete or not at all: it is written into a temp
file in the same directory (name from :func:`temp_path`, recognised by :func:`is_temp_name` so
listings skip it), flushed and fsynced, then published with one atomic step and the directory
is fsynced so the new name survives a power cut. Without ``overwrite`` the publish step is
``os.link`` (fails if the name exists, so two writers cannot both win); with it, ``os.replace``.
On any failure the temp file is removed and an existing file under the name is untouched.

Paths may also be fsspec URLs (``s3://bucket/run/step_10.ckz``, ``memory://...``; needs the
``remote`` extra). A ``.ckz`` checkpoint is one object, and object stores publish an object
whole or not at all, so a URL is written with a single put of the finished bytes (no temp
object, no marker needed). The no-overwrite check on a URL is check-then-put: object stores
without conditional writes cannot make it atomic against a concurrent writer.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import posixpath
import secrets
from collections.abc import Callable
from typing import Any, BinaryIO

from ckptzip.errors import CheckpointExistsError, CheckpointNotFoundError, StorageError

__all__ = [
    "TEMP_MARKER",
    "atomic_write",
    "check_target",
    "is_file",
    "is_temp_name",
    "is_url",
    "open_read",
    "same_directory",
    "sha256_file",
    "sibling",
    "temp_path",
]

TEMP_MARKER = ".tmp-"
_READ_BLOCK = 1 << 22


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an fsspec URL (``scheme://...``) rather than a local path.

    Examples
    --------
    >>> is_url("s3://bucket/ckpt.ckz"), is_url("/tmp/ckpt.ckz"), is_url("file:///tmp/c.ckz")
    (True, False, False)
    """
    text = os.fspath(path)
    return "://" in text and not text.startswith("file://")


def _local(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    return text[len("file://") :] if text.startswith("file://") else text


def _fs(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:
        raise StorageError(
            f"{url!r} is a URL, which needs fsspec: pip install 'ckptzip[remote]'"
        ) from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ValueError, ImportError) as exc:  # unknown protocol, or its driver is missing
        raise StorageError(f"cannot open {url!r}: {exc}") from exc


def is_file(path: str | os.PathLike[str]) -> bool:
    """Whether a finished file exists at ``path`` (local path or URL)."""
    if is_url(path):
        fs, p = _fs(os.fspath(path))
        return bool(fs.isfile(p))
    return os.path.isfile(_local(path))


def sibling(path: str | os.PathLike[str], name: str) -> str:
    """The file called ``name`` in the directory of ``path`` (how a delta finds its parent).

    Examples
    --------
    >>> sibling("s3://b/run/step_2.ckz", "step_1.ckz")
    's3://b/run/step_1.ckz'
    """
    text = os.fspath(path)
    if is_url(text):
        return posixpath.join(posixpath.dirname(text), name)
    return os.path.join(os.path.dirname(os.path.abspath(_local(text))), name)


def same_directory(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two files (that may not exist yet) sit in the same directory."""
    ta, tb = os.fspath(a), os.fspath(b)
    if is_url(ta) or is_url(tb):
        return is_url(ta) and is_url(tb) and posixpath.dirname(ta) == posixpath.dirname(tb)
    da = os.path.dirname(os.path.abspath(_local(ta)))
    db = os.path.dirname(os.path.abspath(_local(tb)))
    try:
        return os.path.samefile(da, db)
    except OSError:
        return da == db


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
    if is_url(path):
        fs, p = _fs(os.fspath(path))
        if fs.isdir(p):
            raise StorageError(f"{os.fspath(path)!r} is a directory; give a file name")
        if not overwrite and fs.exists(p):
            raise CheckpointExistsError(
                f"{os.fspath(path)!r} already exists; pass overwrite=True to replace it, "
                "or choose a new name"
            )
        return
    path = _local(path)
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
    if is_url(path):
        return _put(os.fspath(path), write, overwrite=overwrite)
    path = _local(path)
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


def _put(url: str, write: Callable[[BinaryIO], object], *, overwrite: bool) -> int:
    check_target(url, overwrite=overwrite)
    buf = io.BytesIO()
    write(buf)  # the whole file first: the store then sees one complete put, or none
    data = buf.getvalue()
    fs, p = _fs(url)
    try:
        fs.pipe_file(p, data)
    except OSError as exc:
        raise _storage_error(exc, url) from exc
    return len(data)


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
    if is_temp_name(posixpath.basename(path) if is_url(path) else os.path.basename(path)):
        raise CheckpointNotFoundError(
            f"{path!r} is an unfinished write (a temp file); it is never read"
        )
    try:
        if is_url(path):
            fs, p = _fs(path)
            if fs.isdir(p):
                raise IsADirectoryError(path)
            return fs.open(p, "rb")
        return open(_local(path), "rb")
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
