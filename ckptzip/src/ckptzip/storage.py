"""Where checkpoint files live: atomic single-file writes, and the :class:`Storage` protocol.

Two layers:

* Single files (:func:`atomic_write`, :func:`open_read`, :func:`read_bytes`), used by
  :func:`ckptzip.save` and :func:`ckptzip.load`. A file appears under its name complete or
  not at all: it is written into a temp file in the same directory (name from
  :func:`temp_path`, recognised by :func:`is_temp_name` so listings skip it), flushed and
  fsynced, then published with one atomic step and the directory is fsynced so the new name
  survives a power cut. Without ``overwrite`` the publish step is ``os.link`` (fails if the
  name exists, so two writers cannot both win); with it, ``os.replace``. On any failure the
  temp file is removed and an existing file under the name is untouched. A URL
  (``s3://bucket/run/step_10.ckz``, ``memory://...``; needs the ``remote`` extra) is written
  with a single put of the finished bytes: object stores publish an object whole or not at
  all.
* Directories of named files (:class:`Storage`, from :func:`open_storage`), used by the chain
  store under :class:`~ckptzip.CheckpointManager`: list, read, publish, delete, lock.
  :class:`LocalStorage` is the local file system; :class:`FsspecStorage` is any fsspec object
  store, where a file counts as committed only once a small commit marker, written after it,
  says so (object stores have no atomic rename, and a listing may show an object whose upload
  another writer has not finished committing).

Readers open nothing but regular files: a FIFO or device under a checkpoint name is refused
with :class:`~ckptzip.errors.NotRegularFileError` before any blocking open.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import posixpath
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, ClassVar, Protocol

from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    NotRegularFileError,
    StorageError,
)

try:  # POSIX; elsewhere LocalStorage.lock is a no-op (documented there)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "TEMP_MARKER",
    "FsspecStorage",
    "LocalStorage",
    "Storage",
    "atomic_write",
    "check_target",
    "file_size",
    "is_dir",
    "is_file",
    "is_temp_name",
    "is_url",
    "open_read",
    "open_storage",
    "read_bytes",
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


def is_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory (local path, or a URL's prefix in an object store)."""
    if is_url(path):
        fs, p = _fs(os.fspath(path))
        return bool(fs.isdir(p))
    return os.path.isdir(_local(path))


def file_size(path: str | os.PathLike[str]) -> int:
    """Bytes of the file at ``path`` (local path or URL).

    Raises
    ------
    CheckpointNotFoundError
        No such file.
    StorageError
        Its size cannot be read.
    """
    try:
        if is_url(path):
            fs, p = _fs(os.fspath(path))
            return int(fs.size(p))
        return os.path.getsize(_local(path))
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"no checkpoint at {os.fspath(path)!r}") from None
    except OSError as exc:
        raise StorageError(f"cannot read {os.fspath(path)!r}: {exc.strerror or exc}") from exc


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
        return _open_regular(_local(path))
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"no checkpoint at {path!r}") from None
    except IsADirectoryError:
        raise CheckpointNotFoundError(f"{path!r} is a directory, not a checkpoint file") from None
    except NotRegularFileError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot read {path!r}: {exc.strerror or exc}") from exc


def _not_regular(path: str, mode: int) -> NotRegularFileError:
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    return NotRegularFileError(
        f"{path!r} is {kind}, not a checkpoint file; ckptzip reads regular files only"
    )


def _open_regular(path: str) -> BinaryIO:
    """Open a local regular file for reading; anything else is refused before a blocking open.

    The ``stat`` before the open keeps a FIFO's open (which waits for a writer) or a device's
    from ever happening; ``O_NONBLOCK`` and the ``fstat`` after it close the race with a
    file swapped for a FIFO in between.
    """
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The whole content of a finished file, in one read (local path or URL).

    Callers that hash and then decode a file use these bytes for both, so the file cannot
    change between the check and the use.

    Raises
    ------
    CheckpointNotFoundError
        No such file, or it is an unfinished temp file.
    NotRegularFileError
        The name holds a FIFO, device or directory.
    StorageError
        It cannot be read.
    """
    with open_read(path) as f:
        try:
            return f.read()
        except OSError as exc:
            raise StorageError(f"cannot read {os.fspath(path)!r}: {exc}") from exc


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


# -- directories of named files ---------------------------------------------------------------

LOCK_NAME = ".ckptzip.lock"
COMMIT_SUFFIX = ".commit"


class Storage(Protocol):
    """A flat directory of named files, as the chain store under the manager uses it.

    The whole contract of an implementation (:class:`LocalStorage`, :class:`FsspecStorage`):

    * :meth:`names` returns the *committed* names only: never a temp file, a commit marker, a
      lock, or a file whose publish has not finished. A name listed can still disappear
      (another writer's retention): :meth:`read` then raises
      :class:`~ckptzip.errors.CheckpointNotFoundError`.
    * :meth:`read` returns the whole file in one read (callers hash and decode those same
      bytes); a non-regular file is refused with
      :class:`~ckptzip.errors.NotRegularFileError` before any blocking open.
    * :meth:`publish` calls ``write(f)`` on a buffer or temp file and makes the result visible
      under ``name`` all at once; on any failure nothing new is visible and an existing file
      is untouched (local) or, with ``overwrite`` on an object store, no longer committed.
    * :meth:`delete` removes a name; a missing name is not an error.
    * :meth:`lock` is the writers' mutual exclusion (a ``flock`` locally, a lease object on a
      store). Readers never lock: publishes are atomic, so a reader sees a file whole or not.
    * :meth:`cleanup` removes leftovers of writes that crashed, for names ``accept`` admits.

    Call order for a writer (what :class:`ckptzip.chains.ChainStore` does)::

        with storage.lock():                 # one writer at a time
            storage.cleanup(accept)          # once: leftovers of crashed saves
            names = storage.names()
            data = storage.read(parent)      # parents to delta against
            storage.publish(name, write, overwrite=False)
            storage.delete(old)              # retention, newest first

    and for a reader: ``storage.names()``, then ``storage.read(name)`` per file, no lock.
    """

    #: True when the store cannot rename atomically and commits through a marker object.
    uses_commit_markers: ClassVar[bool]
    location: str

    def path(self, name: str) -> str:
        """The full path or URL of ``name`` (for messages and :func:`ckptzip.load`)."""
        ...

    def names(self) -> list[str]:
        """The committed names, sorted."""
        ...

    def exists(self, name: str) -> bool:
        """Whether ``name`` is committed."""
        ...

    def read(self, name: str) -> bytes:
        """The bytes of a committed file."""
        ...

    def publish(self, name: str, write: Callable[[BinaryIO], object], *, overwrite: bool) -> int:
        """Write a file atomically; returns its size in bytes."""
        ...

    def delete(self, name: str) -> None:
        """Remove ``name`` (no error if it is gone)."""
        ...

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """The exclusive writer lock (a context manager)."""
        ...

    def cleanup(self, accept: Callable[[str], bool]) -> list[str]:
        """Remove unfinished writes of names ``accept`` admits (under :meth:`lock`)."""
        ...


def open_storage(location: str | os.PathLike[str]) -> Storage:
    """The :class:`Storage` for a directory path or an fsspec URL (``s3://bucket/run``).

    Examples
    --------
    >>> import tempfile
    >>> type(open_storage(tempfile.mkdtemp())).__name__, type(open_storage("memory://r")).__name__
    ('LocalStorage', 'FsspecStorage')
    """
    if is_url(location):
        return FsspecStorage(os.fspath(location))
    return LocalStorage(_local(location))


class LocalStorage:
    """A local directory: temp file + fsync + link/replace + directory fsync per publish.

    The directory is created by the first :meth:`lock` (a writer), never by a reader, so
    read-only media can be listed and read. On platforms without :mod:`fcntl` (Windows)
    :meth:`lock` does not exclude other processes: use one writer there.

    Examples
    --------
    >>> import tempfile
    >>> s = LocalStorage(tempfile.mkdtemp())
    >>> with s.lock():
    ...     s.publish("a.ckz", lambda f: f.write(b"abc"), overwrite=False)
    3
    >>> s.names(), s.read("a.ckz")
    (['a.ckz'], b'abc')
    """

    uses_commit_markers: ClassVar[bool] = False

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.location = os.fspath(directory)

    def __repr__(self) -> str:
        return f"LocalStorage({self.location!r})"

    def path(self, name: str) -> str:
        return os.path.join(self.location, name)

    def names(self) -> list[str]:
        try:
            names = os.listdir(self.location)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {self.location!r}: {exc.strerror or exc}") from exc
        return sorted(n for n in names if not is_temp_name(n) and n != LOCK_NAME)

    def exists(self, name: str) -> bool:
        return os.path.lexists(self.path(name))

    def read(self, name: str) -> bytes:
        return read_bytes(self.path(name))

    def publish(self, name: str, write: Callable[[BinaryIO], object], *, overwrite: bool) -> int:
        return atomic_write(self.path(name), write, overwrite=overwrite)

    def delete(self, name: str) -> None:
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(
                f"could not delete {self.path(name)!r}: {exc.strerror or exc}"
            ) from exc

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        try:
            os.makedirs(self.location, exist_ok=True)
            fd = os.open(self.path(LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(
                f"cannot write to {self.location!r} ({exc.strerror or exc}); saving needs a "
                "writable directory (loading does not)"
            ) from exc
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def cleanup(self, accept: Callable[[str], bool]) -> list[str]:
        removed = []
        try:
            names = os.listdir(self.location)
        except FileNotFoundError:
            return []
        for name in names:
            if is_temp_name(name) and accept(name[1:].split(TEMP_MARKER)[0]):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path(name))
                    removed.append(name)
        return removed


class FsspecStorage:
    """An fsspec object store directory (``s3://``, ``gs://``, ``memory://`` ...).

    A publish uploads the file in one put, then a commit marker ``<name>.commit`` holding
    its size and sha256. Only names with a marker are listed, and :meth:`read` checks the
    bytes against the marker, so a reader never takes an unfinished or half-replaced upload
    for a checkpoint. An overwrite removes the old marker first: if it is interrupted, the
    step is no longer listed rather than listed with the wrong bytes. Deletion removes the
    marker first, for the same reason.

    :meth:`lock` is a lease object (``.ckptzip.lock``: an owner token and an expiry, renewed
    at each publish). Stores without conditional writes cannot make taking a lease atomic,
    so two writers starting within the same instant may both win: keep one writing job per
    directory, as you would anyway.

    Examples
    --------
    >>> s = FsspecStorage("memory://ckptzip-doc/run")
    >>> with s.lock():
    ...     s.publish("a.ckz", lambda f: f.write(b"abc"), overwrite=True)
    3
    >>> s.names(), s.read("a.ckz")
    (['a.ckz'], b'abc')
    """

    uses_commit_markers: ClassVar[bool] = True
    #: Seconds a lease lasts without renewal, and how long :meth:`lock` waits for one.
    lease_seconds: float = 600.0
    lease_wait: float = 60.0

    def __init__(self, url: str) -> None:
        self.location = url.rstrip("/")
        self._fs, root = _fs(self.location)
        self._root = root.rstrip("/")
        self._lease: str | None = None

    def __repr__(self) -> str:
        return f"FsspecStorage({self.location!r})"

    def path(self, name: str) -> str:
        return f"{self.location}/{name}"

    def _p(self, name: str) -> str:
        return f"{self._root}/{name}"

    def _all_names(self) -> set[str]:
        with contextlib.suppress(AttributeError):
            self._fs.invalidate_cache(self._root)  # listings are cached per instance
        try:
            found = self._fs.ls(self._root, detail=False)
        except FileNotFoundError:
            return set()
        except OSError as exc:
            raise StorageError(f"cannot list {self.location!r}: {exc}") from exc
        return {posixpath.basename(str(p).rstrip("/")) for p in found}

    def names(self) -> list[str]:
        names = self._all_names()
        return sorted(
            n for n in names if not n.endswith(COMMIT_SUFFIX) and n + COMMIT_SUFFIX in names
        )

    def exists(self, name: str) -> bool:
        try:
            return bool(self._fs.exists(self._p(name + COMMIT_SUFFIX)))
        except OSError as exc:
            raise StorageError(f"cannot reach {self.path(name)!r}: {exc}") from exc

    def _get(self, name: str) -> bytes:
        try:
            return bytes(self._fs.cat_file(self._p(name)))
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"no committed file at {self.path(name)!r}") from None
        except OSError as exc:
            raise StorageError(f"cannot read {self.path(name)!r}: {exc}") from exc

    def read(self, name: str) -> bytes:
        marker = self._get(name + COMMIT_SUFFIX)
        data = self._get(name)
        try:
            want = json.loads(marker)
            ok = want["size"] == len(data) and want["sha256"] == hashlib.sha256(data).hexdigest()
        except (ValueError, TypeError, KeyError):
            ok = False
        if not ok:
            raise CorruptCheckpointError(
                f"{self.path(name)!r} does not match its commit marker: an overwrite is in "
                "progress or the upload was damaged"
            )
        return data

    def _put(self, name: str, data: bytes) -> None:
        try:
            self._fs.pipe_file(self._p(name), data)
        except OSError as exc:
            raise _storage_error(exc, self.path(name)) from exc

    def publish(self, name: str, write: Callable[[BinaryIO], object], *, overwrite: bool) -> int:
        if not overwrite and self.exists(name):
            raise CheckpointExistsError(
                f"{self.path(name)!r} already exists; pass overwrite=True to replace it"
            )
        buf = io.BytesIO()
        write(buf)  # the whole file before anything is uploaded: a failed encode puts nothing
        data = buf.getvalue()
        self._renew()
        if overwrite:
            self._rm(name + COMMIT_SUFFIX)
        self._put(name, data)
        marker = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        self._put(name + COMMIT_SUFFIX, json.dumps(marker).encode())  # the commit, last
        return len(data)

    def _rm(self, name: str) -> None:
        try:
            self._fs.rm_file(self._p(name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"could not delete {self.path(name)!r}: {exc}") from exc

    def delete(self, name: str) -> None:
        self._rm(name + COMMIT_SUFFIX)  # uncommit first: a half delete is never listed
        self._rm(name)

    def _holder(self) -> dict[str, Any] | None:
        try:
            lease = json.loads(self._fs.cat_file(self._p(LOCK_NAME)))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):
            return None  # a damaged lease counts as free
        except OSError as exc:
            raise StorageError(f"cannot read the lease of {self.location!r}: {exc}") from exc
        return lease if isinstance(lease, dict) else None

    def _renew(self) -> None:
        if self._lease is not None:
            lease = {"owner": self._lease, "expires": time.time() + self.lease_seconds}
            self._put(LOCK_NAME, json.dumps(lease).encode())

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        token = secrets.token_hex(8)
        deadline = time.monotonic() + self.lease_wait
        while True:
            holder = self._holder()
            if holder is None or float(holder.get("expires", 0)) < time.time():
                self._lease = token
                self._renew()
                if (self._holder() or {}).get("owner") == token:
                    break
                self._lease = None
            if time.monotonic() > deadline:
                raise StorageError(
                    f"another writer holds the lease on {self.location!r} (until "
                    f"{(holder or {}).get('expires')}); one writer per directory"
                )
            time.sleep(0.2)
        try:
            yield
        finally:
            self._lease = None
            if (self._holder() or {}).get("owner") == token:
                self._rm(LOCK_NAME)

    def cleanup(self, accept: Callable[[str], bool]) -> list[str]:
        names = self._all_names()
        removed = []
        for n in sorted(names):
            if n.endswith(COMMIT_SUFFIX):
                if n[: -len(COMMIT_SUFFIX)] not in names and accept(n[: -len(COMMIT_SUFFIX)]):
                    self._rm(n)
                    removed.append(n)
            elif n + COMMIT_SUFFIX not in names and accept(n):
                self._rm(n)  # uploaded, never committed: a crashed publish
                removed.append(n)
        return removed
