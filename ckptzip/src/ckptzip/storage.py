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
import socket
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, ClassVar, Protocol

from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    CkptzipError,
    CkptzipWarning,
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
    "local_path",
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


def local_path(path: str | os.PathLike[str]) -> str:
    """A local path as the operating system takes it: ``file://`` stripped."""
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
    except Exception as exc:  # a driver failing as it starts (credentials, configuration)
        raise storage_error(exc, url, "opening") from exc


# -- what went wrong, in one vocabulary ---------------------------------------------------------

# What to check, by the names of the exception classes a driver raises (botocore, aiohttp,
# gcsfs, the builtins), first match wins. Matching names rather than importing the drivers
# keeps this free of optional imports; every class in each exception's MRO and its causes
# is looked at, so a driver's own subclass of ConnectionError still counts.
_CHECKS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("Timeout", "TimeoutError"),
        "the store timed out: check the network and the store's status, then retry",
    ),
    (
        (
            "NoCredentialsError",
            "PartialCredentialsError",
            "CredentialRetrievalError",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "ExpiredToken",
            "InvalidToken",
            "AccessDenied",
            "Forbidden",
            "PermissionError",
            "Unauthorized",
            "RefreshError",
        ),
        "access denied: check the credentials (for S3: AWS_ACCESS_KEY_ID / AWS_PROFILE / "
        "the instance role) and that they may read and write this bucket",
    ),
    (
        (
            "EndpointConnectionError",
            "ConnectionError",
            "ConnectionRefusedError",
            "ClientConnectorError",
            "ClientOSError",
            "ServerDisconnectedError",
            "gaierror",
            "ProxyConnectionError",
            "SSLError",
        ),
        "cannot reach the store: check the endpoint URL, that the server is up, and the network",
    ),
    (("NoSuchBucket",), "no such bucket: check the URL or create the bucket"),
)


def _failure_names(exc: BaseException) -> list[str]:
    names, seen = [], set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        names += [k.__name__ for k in type(cur).__mro__]
        names.append(str(cur))  # codes a driver only puts in its message ("AccessDenied")
        cur = cur.__cause__ or cur.__context__
    return names


def what_to_check(exc: BaseException) -> str:
    """One line saying what an I/O failure most likely means and what to check.

    Examples
    --------
    >>> what_to_check(ConnectionRefusedError(111, "Connection refused"))[:23]
    'cannot reach the store:'
    >>> what_to_check(OSError(errno.ENOSPC, "No space left on device"))[:21]
    'no space left on the '
    """
    if isinstance(exc, OSError) and exc.errno is not None:
        if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            return "no space left on the device (or quota exceeded); free space and retry"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return "permission denied or read-only file system"
    names = _failure_names(exc)
    for keys, advice in _CHECKS:
        if any(k in n for n in names for k in keys):
            return advice
    if isinstance(exc, OSError):
        return f"I/O error ({exc.strerror or exc})"
    return f"{type(exc).__name__}: {exc}"


def storage_error(exc: BaseException, where: str, doing: str) -> StorageError:
    """The :class:`~ckptzip.errors.StorageError` for ``exc``, raised while ``doing`` (a verb
    such as ``"reading"``) ``where`` (a path or URL): it names both and what to check.

    Drivers' own exceptions (botocore's ``EndpointConnectionError``, aiohttp's, a
    ``PermissionError``) never leave the storage layer; they are this error's ``__cause__``.
    """
    err = StorageError(f"{doing} {where!r} failed: {what_to_check(exc)}")
    err.errno = getattr(exc, "errno", None)
    return err


_DIRECTORY_PROTOCOLS = frozenset(
    {"file", "local", "sftp", "ssh", "smb", "ftp", "hdfs", "webhdfs", "arrow_hdfs"}
)
"""fsspec protocols whose directories exist on their own and are not made by a write."""


@contextlib.contextmanager
def _driver(where: str, doing: str) -> Iterator[None]:
    """Every failure of a storage driver inside becomes a :class:`StorageError`; the package's
    own errors, and ``FileNotFoundError`` (which callers turn into their own), pass."""
    try:
        yield
    except (CkptzipError, FileNotFoundError, IsADirectoryError):
        raise
    except Exception as exc:
        raise storage_error(exc, where, doing) from exc


def is_file(path: str | os.PathLike[str]) -> bool:
    """Whether a finished file exists at ``path`` (local path or URL)."""
    if is_url(path):
        url = os.fspath(path)
        fs, p = _fs(url)
        with _driver(url, "checking"):
            return bool(fs.isfile(p))
    return os.path.isfile(local_path(path))


def is_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory (local path, or a URL's prefix in an object store)."""
    if is_url(path):
        url = os.fspath(path)
        fs, p = _fs(url)
        with _driver(url, "checking"):
            return bool(fs.isdir(p))
    return os.path.isdir(local_path(path))


def file_size(path: str | os.PathLike[str]) -> int:
    """Bytes of the file at ``path`` (local path or URL).

    Raises
    ------
    CheckpointNotFoundError
        No such file.
    StorageError
        Its size cannot be read.
    """
    where = os.fspath(path)
    try:
        with _driver(where, "reading the size of"):
            if is_url(path):
                fs, p = _fs(where)
                return int(fs.size(p))
            return os.path.getsize(local_path(path))
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"no checkpoint at {where!r}") from None


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
    return os.path.join(os.path.dirname(os.path.abspath(local_path(text))), name)


def same_directory(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two files (that may not exist yet) sit in the same directory."""
    ta, tb = os.fspath(a), os.fspath(b)
    if is_url(ta) or is_url(tb):
        return is_url(ta) and is_url(tb) and posixpath.dirname(ta) == posixpath.dirname(tb)
    da = os.path.dirname(os.path.abspath(local_path(ta)))
    db = os.path.dirname(os.path.abspath(local_path(tb)))
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
        url = os.fspath(path)
        fs, p = _fs(url)
        with _driver(url, "checking"):
            if fs.isdir(p):
                raise StorageError(f"{url!r} is a directory; give a file name")
            if not overwrite and fs.exists(p):
                raise CheckpointExistsError(
                    f"{url!r} already exists; pass overwrite=True to replace it, "
                    "or choose a new name"
                )
        return
    path = local_path(path)
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
    err = storage_error(exc, path, "writing")
    err.args = (f"{err}; any existing file there is untouched",)
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
    path = local_path(path)
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
        try:
            _fsync_dir(os.path.dirname(os.path.abspath(path)))
        except OSError as exc:
            # Published: the file is there and its bytes are synced; what failed is making
            # its name durable. Raising "nothing was written" would be false (and a retry
            # would find the file), so it is a warning.
            warnings.warn(
                f"{path!r} is written, but syncing its directory failed "
                f"({os.strerror(exc.errno) if exc.errno else exc}): the file may not survive a "
                "power loss",
                CkptzipWarning,
                stacklevel=2,
            )
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
    except CkptzipError:
        raise
    except Exception as exc:  # OSError, or a driver's own (botocore's connection errors)
        raise (
            _storage_error(exc, url)
            if isinstance(exc, OSError)
            else storage_error(exc, url, "writing")
        ) from exc
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
            with _driver(path, "reading"):
                if fs.isdir(p):
                    raise IsADirectoryError(path)
                return _GuardedFile(fs.open(p, "rb"), path)  # type: ignore[return-value]
        return _open_regular(local_path(path))
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"no checkpoint at {path!r}") from None
    except IsADirectoryError:
        raise CheckpointNotFoundError(f"{path!r} is a directory, not a checkpoint file") from None
    except NotRegularFileError:
        raise
    except OSError as exc:
        raise storage_error(exc, path, "reading") from exc


class _GuardedFile:
    """A remote file whose reads fail with :class:`StorageError` only (an object store is
    read lazily, so the endpoint can go away after the open)."""

    def __init__(self, f: Any, url: str) -> None:
        self._f, self._url = f, url

    def read(self, n: int = -1) -> bytes:
        with _driver(self._url, "reading"):
            return bytes(self._f.read(n))

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        with _driver(self._url, "reading"):
            return int(self._f.seek(offset, whence))

    def tell(self) -> int:
        return int(self._f.tell())

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        with contextlib.suppress(Exception):  # nothing was written: a failed close loses nothing
            self._f.close()

    def __enter__(self) -> _GuardedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kind(mode: int) -> str:
    """What a non-regular file is, for messages (``"a FIFO (named pipe)"``)."""
    return (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a symbolic link"
        if stat.S_ISLNK(mode)
        else "a FIFO (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )


def _not_regular(path: str, mode: int) -> NotRegularFileError:
    return NotRegularFileError(
        f"{path!r} is {_kind(mode)}, not a checkpoint file; ckptzip reads regular files only"
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
            raise storage_error(exc, os.fspath(path), "reading") from exc


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
            raise storage_error(exc, os.fspath(path), "reading") from exc
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
    return LocalStorage(local_path(location))


# -- writers: who holds a lock, and whether it still runs -----------------------------------------


def _read_small(path: str) -> str | None:
    """The first 4 KiB of ``path`` as text, or ``None``; never through a link, never blocking
    (it also reads a lock file in a user's directory, which a FIFO or link may stand in for)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def _parse_record(raw: str | bytes | None) -> Any:
    """The JSON of a lock record, lease or commit marker, or ``None`` if it does not parse.

    These are written by other processes and may be damaged or crafted: whatever fails to
    parse (bad syntax or encoding, nesting deep enough to exhaust the recursion limit) is a
    damaged record, which each caller already handles, never an error of its own.
    """
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return None


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, Linux ``/proc``), or ``None``."""
    text = _read_small(f"/proc/{pid}/stat")
    if text is None:
        return None
    # the command name (field 2) may hold spaces and ')': count fields after the last ')'
    fields = text.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def writer_identity() -> dict[str, Any]:
    """Who this process is, as a lock or lease records its holder.

    ``host`` and ``pid``; on Linux also the boot (``boot``), the PID namespace (``pidns``)
    and the process's start time (``start``), which together let another process on the
    same machine prove that the holder has exited (:func:`holder_gone`), even when its pid
    was reused or the jobs run in separate containers.
    """
    ident: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    for key, value in (
        ("boot", _read_small("/proc/sys/kernel/random/boot_id")),
        ("pidns", _pid_namespace()),
        ("start", _process_start(os.getpid())),
    ):
        if value is not None:
            ident[key] = value
    return ident


def holder_gone(holder: dict[str, Any]) -> str | None:
    """Why the process that recorded ``holder`` provably no longer runs, or ``None`` if it may.

    Only a process on the same machine (same host name, boot and PID namespace) can prove
    it; from anywhere else a holder is presumed alive until its lease expires.
    """
    me = writer_identity()
    pid = holder.get("pid")
    if holder.get("host") != me["host"] or not isinstance(pid, int) or pid <= 0:
        return None
    if any(holder.get(k) != me.get(k) for k in ("boot", "pidns")):
        return None
    who = describe_holder(holder)
    if "start" in holder and "start" in me:  # Linux: exact, pid reuse included
        now = _process_start(pid)
        if now is None:
            return f"{who} has exited"
        if now != holder["start"]:
            return f"{who} has exited (its pid now belongs to another process)"
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"{who} has exited"
    except OSError:  # exists, owned by someone else
        return None
    return None


def describe_holder(holder: dict[str, Any] | None) -> str:
    """``"pid 123 on host 'node7'"`` (for messages)."""
    if not holder:
        return "an unknown writer"
    return f"pid {holder.get('pid')} on host {holder.get('host')!r}"


def _when(t: object) -> str:
    if not isinstance(t, (int, float)):
        return "an unknown time"
    ago = time.time() - float(t)
    return f"{ago:.0f} s ago" if ago >= 0 else f"in {-ago:.0f} s"


class _HeldLock:
    """A lock descriptor this process holds; a forked child drops its copy (see below)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.dropped = False


# Descriptors of directory locks held by this process. A flock belongs to the open file,
# which fork() shares: a child forked while a save holds the lock (a DataLoader worker
# started during an asynchronous save) would keep the lock after the writer died, and
# block the restarted job for as long as it lives. Each child closes its copies at once.
# This is process state on purpose: descriptors are the process's, not an object's.
_HELD_LOCKS: set[_HeldLock] = set()


def _drop_inherited_locks() -> None:
    for held in list(_HELD_LOCKS):
        held.dropped = True
        with contextlib.suppress(OSError):
            os.close(held.fd)
    _HELD_LOCKS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_inherited_locks)


def _open_lock_file(path: str) -> int:
    """Open (creating it if need be) the lock file ``path`` for writing: a regular file only.

    The lock is truncated and rewritten on every save, so it is never opened through a
    link: a ``.ckptzip.lock`` symlink (planted, or unpacked from another run's archive)
    would make that write land on its target, a file outside the directory, and a dangling
    one would create it. ``O_NOFOLLOW`` refuses the link, ``O_NONBLOCK`` keeps a FIFO or
    device from blocking the open, and the ``fstat`` refuses either.

    Raises
    ------
    NotRegularFileError
        ``path`` is a symbolic link, FIFO, device, socket or directory (nothing was written).
    OSError
        The open failed otherwise (the caller says what to do).
    """
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError:
        # a link fails with ELOOP on Linux, with other errnos elsewhere: say what is there
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            mode = stat.S_IFREG  # nothing to blame on the name: the open's own error stands
        if not stat.S_ISREG(mode):
            raise _not_a_lock(path, mode) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_a_lock(path, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _not_a_lock(path: str, mode: int) -> NotRegularFileError:
    return NotRegularFileError(
        f"the writer lock {path!r} is {_kind(mode)}, not a regular file; ckptzip never writes "
        "through it (a link could point outside the directory). Remove it (it holds nothing "
        "but the last writer's pid) and save again"
    )


class LocalStorage:
    """A local directory: temp file + fsync + link/replace + directory fsync per publish.

    The directory is created by the first :meth:`lock` (a writer), never by a reader, so
    read-only media can be listed and read.

    :meth:`lock` is an exclusive ``flock`` on ``.ckptzip.lock``, which also records its
    holder (:func:`writer_identity`). That name must be a regular file (or absent): a symbolic
    link, FIFO or device there is refused with :class:`~ckptzip.errors.NotRegularFileError`,
    never written through. The kernel releases a ``flock`` when its process dies,
    however it dies, so a restarted job takes the lock of a killed one at once; processes
    forked while the lock is held do not keep it. A writer that is still running makes
    :meth:`lock` wait up to :attr:`lock_wait` seconds, then fail with a
    :class:`~ckptzip.errors.StorageError` naming it. On platforms without :mod:`fcntl`
    (Windows) :meth:`lock` does not exclude other processes: use one writer there.

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
    #: Seconds :meth:`lock` waits for a running writer before it fails.
    lock_wait: float = 60.0

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
            raise storage_error(exc, self.location, "listing") from exc
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
            raise storage_error(exc, self.path(name), "deleting") from exc

    def holder(self) -> dict[str, Any] | None:
        """What the lock file says about its last holder (``None``: nothing readable)."""
        found = _parse_record(_read_small(self.path(LOCK_NAME)))
        return found if isinstance(found, dict) else None

    def _held_message(self) -> str:
        holder = self.holder()
        gone = holder_gone(holder) if holder else None
        where = f"{self.location!r}"
        if gone:
            return (
                f"the writer lock on {where} is held, but the writer that took it ({gone}): "
                f"another process has {self.path(LOCK_NAME)!r} open and locked (`fuser` "
                "names it); stop it, or save into another directory"
            )
        since = f", since {_when(holder.get('since'))}" if holder else ""
        return (
            f"another writer holds the lock on {where}: {describe_holder(holder)}{since}, "
            f"still running; waited {self.lock_wait:.0f} s. One writer per directory: stop "
            "that job (its lock is released the moment it exits), or save into another "
            "directory"
        )

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        try:
            os.makedirs(self.location, exist_ok=True)
            fd = _open_lock_file(self.path(LOCK_NAME))
        except CkptzipError:
            raise
        except OSError as exc:
            raise StorageError(
                f"cannot write to {self.location!r} ({exc.strerror or exc}); saving needs a "
                "writable directory (loading does not)"
            ) from exc
        held = _HeldLock(fd)
        try:
            if fcntl is not None:
                deadline = time.monotonic() + self.lock_wait
                pause = 0.01
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise StorageError(self._held_message()) from None
                        time.sleep(pause)
                        pause = min(2 * pause, 0.5)
                _HELD_LOCKS.add(held)
            record = json.dumps({**writer_identity(), "since": time.time()}).encode()
            with contextlib.suppress(OSError):  # the record only serves messages
                os.ftruncate(fd, 0)
                os.pwrite(fd, record, 0)
            yield
        finally:
            _HELD_LOCKS.discard(held)
            if not held.dropped:
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
    marker first, for the same reason. Every failure of the store (endpoint down,
    credentials, timeouts) is a :class:`~ckptzip.errors.StorageError` naming the URL and
    what to check.

    :meth:`lock` is a lease object, ``.ckptzip.lock``: its holder (:func:`writer_identity`)
    and an expiry :attr:`lease_seconds` ahead, renewed by a heartbeat thread every quarter of
    that while the lock is held. A writer that dies stops renewing it, so a restarted job
    takes the lease over (with a :class:`~ckptzip.errors.CkptzipWarning` saying why):

    * at once when it runs on the same machine and can prove the holder exited (same host,
      boot and PID namespace; the holder's pid gone or reused);
    * from anywhere else once the lease expires, at most :attr:`lease_seconds` after the
      holder died (hosts' clocks must agree to within a few seconds, as NTP keeps them).

    A holder that is still running makes :meth:`lock` wait up to :attr:`lease_wait` seconds,
    then fail with a :class:`~ckptzip.errors.StorageError` naming it. Stores without
    conditional writes cannot make taking a lease atomic, so two writers starting within the
    same instant may both win; each checks it still holds the lease before it publishes
    (a writer that lost it raises and publishes nothing). Keep one writing job per
    directory.

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
    #: Seconds a lease lasts without renewal (the heartbeat renews it every quarter of that).
    lease_seconds: float = 30.0
    #: Seconds :meth:`lock` waits for a running holder before it fails (``None``: twice
    #: :attr:`lease_seconds`, long enough for a dead remote holder's lease to expire).
    lease_wait: float | None = None

    def __init__(self, url: str) -> None:
        self.location = url.rstrip("/")
        self._fs, root = _fs(self.location)
        self._root = root.rstrip("/")
        self._lease: str | None = None
        self._lost: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"FsspecStorage({self.location!r})"

    def _make_directory(self) -> None:
        """Create the directory on file systems that have real ones (a writer's first save
        creates it, as a local path's does). Object stores are left alone: their "makedirs"
        may create a bucket, which is the user's to create."""
        protocol = self._fs.protocol
        protocols = {protocol} if isinstance(protocol, str) else set(protocol)
        if protocols & _DIRECTORY_PROTOCOLS:
            with _driver(self.location, "creating the directory"):
                self._fs.makedirs(self._root, exist_ok=True)

    def path(self, name: str) -> str:
        return f"{self.location}/{name}"

    def _p(self, name: str) -> str:
        return f"{self._root}/{name}"

    def _all_names(self) -> set[str]:
        with contextlib.suppress(Exception):
            self._fs.invalidate_cache(self._root)  # listings are cached per instance
        try:
            with _driver(self.location, "listing"):
                found = self._fs.ls(self._root, detail=False)
        except FileNotFoundError:
            return set()
        return {posixpath.basename(str(p).rstrip("/")) for p in found}

    def names(self) -> list[str]:
        names = self._all_names()
        return sorted(
            n for n in names if not n.endswith(COMMIT_SUFFIX) and n + COMMIT_SUFFIX in names
        )

    def exists(self, name: str) -> bool:
        try:
            with _driver(self.path(name), "checking"):
                return bool(self._fs.exists(self._p(name + COMMIT_SUFFIX)))
        except FileNotFoundError:
            return False

    def _get(self, name: str) -> bytes:
        try:
            with _driver(self.path(name), "reading"):
                return bytes(self._fs.cat_file(self._p(name)))
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"no committed file at {self.path(name)!r}") from None

    def read(self, name: str) -> bytes:
        marker = self._get(name + COMMIT_SUFFIX)
        data = self._get(name)
        want = _parse_record(marker)
        ok = (
            isinstance(want, dict)
            and want.get("size") == len(data)
            and want.get("sha256") == hashlib.sha256(data).hexdigest()
        )
        if not ok:
            raise CorruptCheckpointError(
                f"{self.path(name)!r} does not match its commit marker: an overwrite is in "
                "progress or the upload was damaged"
            )
        return data

    def _put(self, name: str, data: bytes) -> None:
        try:
            self._fs.pipe_file(self._p(name), data)
        except CkptzipError:
            raise
        except OSError as exc:
            raise _storage_error(exc, self.path(name)) from exc
        except Exception as exc:  # a driver's own (botocore's connection errors)
            raise storage_error(exc, self.path(name), "writing") from exc

    def publish(self, name: str, write: Callable[[BinaryIO], object], *, overwrite: bool) -> int:
        if not overwrite and self.exists(name):
            raise CheckpointExistsError(
                f"{self.path(name)!r} already exists; pass overwrite=True to replace it"
            )
        buf = io.BytesIO()
        write(buf)  # the whole file before anything is uploaded: a failed encode puts nothing
        data = buf.getvalue()
        self._check_lease()
        if overwrite:
            self._rm(name + COMMIT_SUFFIX)
        self._put(name, data)
        marker = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        self._put(name + COMMIT_SUFFIX, json.dumps(marker).encode())  # the commit, last
        return len(data)

    def _rm(self, name: str) -> None:
        try:
            with _driver(self.path(name), "deleting"):
                self._fs.rm_file(self._p(name))
        except FileNotFoundError:
            pass

    def delete(self, name: str) -> None:
        self._rm(name + COMMIT_SUFFIX)  # uncommit first: a half delete is never listed
        self._rm(name)

    def holder(self) -> dict[str, Any] | None:
        """The lease as the store holds it (``None``: no lease, or a damaged one)."""
        try:
            with _driver(self.path(LOCK_NAME), "reading the lease"):
                raw = self._fs.cat_file(self._p(LOCK_NAME))
        except FileNotFoundError:
            return None
        lease = _parse_record(raw)  # a damaged lease counts as free
        return lease if isinstance(lease, dict) else None

    def _write_lease(self, token: str) -> None:
        now = time.time()
        lease = {**writer_identity(), "owner": token, "renewed": now}
        lease["expires"] = now + self.lease_seconds
        self._put(LOCK_NAME, json.dumps(lease).encode())

    def _check_lease(self) -> None:
        """Under :meth:`lock`: fail, publishing nothing, if another writer took the lease."""
        token = self._lease
        if token is None:
            return
        holder = self._lost or self.holder()
        if (holder or {}).get("owner") != token:
            raise StorageError(
                f"lost the lease on {self.location!r} to {describe_holder(holder)} during "
                f"this save (its heartbeat was not renewed for {self.lease_seconds:.0f} s, "
                "or another job took over); nothing was published. One writer per directory"
            )
        self._write_lease(token)

    def _free(self, holder: dict[str, Any] | None) -> str | None:
        """``""`` if the lease is free, a reason if it may be taken over, ``None`` if held."""
        if holder is None:
            return ""
        expires = holder.get("expires")
        if not isinstance(expires, (int, float)) or expires < time.time():
            return (
                f"the lease of {describe_holder(holder)} expired {_when(expires)} (it stopped "
                "renewing it: it crashed, was killed or lost the store)"
            )
        gone = holder_gone(holder)
        if gone:
            return f"{gone}, so its lease (due to expire {_when(expires)}) was taken over"
        return None

    def _heartbeat(self, token: str, stop: threading.Event) -> None:
        while not stop.wait(self.lease_seconds / 4):
            try:
                holder = self.holder()
                if (holder or {}).get("owner") != token:
                    self._lost = holder or {}
                    return
                self._write_lease(token)
            except CkptzipError:
                continue  # the store is unreachable: the publish will say so

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        self._make_directory()
        token = secrets.token_hex(8)
        wait = 2 * self.lease_seconds if self.lease_wait is None else self.lease_wait
        deadline = time.monotonic() + wait
        while True:
            holder = self.holder()
            why = self._free(holder)
            if why is not None:
                self._write_lease(token)
                if (self.holder() or {}).get("owner") == token:
                    break
            if time.monotonic() > deadline:
                held = holder or {}
                raise StorageError(
                    f"another writer holds the lease on {self.location!r}: "
                    f"{describe_holder(held)}, renewed {_when(held.get('renewed'))}, "
                    f"expires {_when(held.get('expires'))}; waited {wait:.0f} s. It is "
                    "renewed while that writer runs: one writer per directory (a writer that "
                    f"dies loses its lease within {self.lease_seconds:.0f} s)"
                )
            time.sleep(0.2)
        if why:
            warnings.warn(
                f"took over the writer lease on {self.location!r}: {why}",
                CkptzipWarning,
                stacklevel=4,
            )
        self._lease, self._lost = token, None
        stop = threading.Event()
        beat = threading.Thread(
            target=self._heartbeat, args=(token, stop), name="ckptzip-lease", daemon=True
        )
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join()
            self._lease = None
            with contextlib.suppress(StorageError):  # unreachable: the lease just expires
                if (self.holder() or {}).get("owner") == token:
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
