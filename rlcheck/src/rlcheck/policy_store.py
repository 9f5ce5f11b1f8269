"""Learned policies on disk: atomic JSON writes, reads that never break a run.

A policy file is one JSON object::

    {"format": "rlcheck-policy-file", "version": 1,
     "meta": {...caller's metadata...},
     "policy": <Policy.to_dict() snapshot>}

Saving writes a temporary file in the target's directory, fsyncs it, renames it over the
target (``os.replace`` is atomic on POSIX and Windows) and fsyncs the directory, so a reader
sees either the old file or the new one, never half of one.

Loading is best-effort by design (a learned policy only speeds learning up): a missing file
returns ``False`` silently; a truncated, garbage, wrong-version or mismatched file returns
``False`` with one :class:`~rlcheck.errors.RLCheckWarning`, and the policy is left unchanged.
Nothing in the file is ever executed: it is parsed as JSON only, and bounded before it is:
only a regular file is read (a FIFO or device is refused without blocking), at most
``max_bytes`` (:data:`MAX_BYTES` by default: its size is checked before reading), with
values type-checked and tables and rows capped by the policy's own limits.

Saving keeps the mode of the file it replaces (a new file gets the usual ``0666 & ~umask``).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

from rlcheck.errors import InvalidArgument, PolicyFileError, PolicyMismatch, RLCheckWarning
from rlcheck.learner import Policy

__all__ = ["FILE_FORMAT", "FILE_VERSION", "MAX_BYTES", "load_policy", "save_policy"]

FILE_FORMAT = "rlcheck-policy-file"
"""The ``format`` tag every policy file carries."""
FILE_VERSION = 1
"""The policy file layout version this code writes and reads."""
MAX_BYTES = 32 << 20
"""Largest policy file :func:`load_policy` reads by default (32 MiB; parsing costs about
50x the file size in memory)."""


def save_policy(
    path: str | os.PathLike[str], policy: Policy, *, meta: dict[str, Any] | None = None
) -> None:
    """Write ``policy`` to ``path`` atomically, with optional JSON metadata.

    Parameters
    ----------
    path:
        Target file; its directory must exist. An existing file is replaced atomically.
    policy:
        The learned policy to store (its Q-tables; not its random stream).
    meta:
        JSON-serialisable facts about the policy (generator name, state abstraction, ...)
        that :func:`load_policy` can require to match through ``expect_meta``.

    Raises
    ------
    InvalidArgument
        ``meta`` is not JSON-serialisable or the policy holds keys that cannot be saved.
    OSError
        The file could not be written; the previous file, if any, is untouched.

    Examples
    --------
    >>> import tempfile, os
    >>> from rlcheck.learner import Policy
    >>> p = Policy(seed=0)
    >>> p.learn([("coin", (), 1)], 20.0)
    >>> path = os.path.join(tempfile.mkdtemp(), "policy.json")
    >>> save_policy(path, p, meta={"generator": "coin"})
    >>> q = Policy(seed=0)
    >>> load_policy(path, q, expect_meta={"generator": "coin"})
    True
    >>> q.table("coin").value((), 1)
    (20.0, 1)
    """
    target = Path(path)
    document = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "meta": dict(meta) if meta is not None else {},
        "policy": policy.to_dict(),
    }
    try:
        text = json.dumps(document, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"meta={meta!r} cannot be written as JSON ({exc}); use str, int, float, bool, "
            "None, lists and dicts with str keys"
        ) from exc
    _atomic_write_text(target, text)


def load_policy(
    path: str | os.PathLike[str],
    policy: Policy,
    *,
    expect_meta: dict[str, Any] | None = None,
    max_bytes: int = MAX_BYTES,
    strict_meta: bool = False,
) -> bool:
    """Load a policy saved by :func:`save_policy` into ``policy``; never raises on bad files.

    Parameters
    ----------
    path:
        The policy file.
    policy:
        Receives the stored Q-tables (replacing its own) when loading succeeds; left
        unchanged otherwise.
    expect_meta:
        Every key given here must be present in the file's metadata with an equal value
        (compared after a JSON round trip, so tuples match lists); otherwise the file is
        ignored as incompatible.
    max_bytes:
        Larger files are ignored (with a warning) without being read.
    strict_meta:
        Raise :class:`~rlcheck.errors.PolicyMismatch` instead of warning when the file is
        a good policy file saved for other metadata (so the caller can keep it aside).

    Returns
    -------
    bool
        ``True`` when the policy was loaded. ``False`` when the file is missing (silently)
        or unusable (with one :class:`~rlcheck.errors.RLCheckWarning` saying why).

    Examples
    --------
    >>> from rlcheck.learner import Policy
    >>> load_policy("/nonexistent/policy.json", Policy())
    False
    """
    target = Path(path)
    try:
        raw = _read_bounded(target, max_bytes)
    except FileNotFoundError:
        return False
    except (OSError, PolicyFileError) as exc:
        reason = str(exc) if isinstance(exc, PolicyFileError) else f"it could not be read ({exc})"
        _warn(target, reason)
        return False
    try:
        _load_document(raw, policy, expect_meta)
    except PolicyMismatch as exc:
        if strict_meta:
            raise
        _warn(target, str(exc))
        return False
    # The file is untrusted input: any way its content can fail to parse is a reason to
    # ignore it, never to stop the run (RELIABILITY.md, rlcheck #3).
    except (PolicyFileError, ValueError, TypeError, KeyError, RecursionError) as exc:
        _warn(target, str(exc))
        return False
    return True


def _read_bounded(target: Path, max_bytes: int) -> bytes:
    """The file's bytes: a regular file of at most ``max_bytes`` (checked before reading)."""
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    fd = os.open(target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PolicyFileError("it is not a regular file")
        if info.st_size > max_bytes:
            raise PolicyFileError(
                f"it is {info.st_size} bytes, more than the {max_bytes} allowed (max_bytes)"
            )
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            raw = handle.read(max_bytes + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    if len(raw) > max_bytes:  # grew while being read
        raise PolicyFileError(f"it is more than the {max_bytes} bytes allowed (max_bytes)")
    return raw


def _no_constants(name: str) -> Any:
    raise PolicyFileError(f"it holds {name}, which JSON does not allow")


def _load_document(raw: bytes, policy: Policy, expect_meta: dict[str, Any] | None) -> None:
    try:
        document = json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyFileError(f"it is not valid JSON (truncated or corrupt?): {exc}") from exc
    if not isinstance(document, dict) or document.get("format") != FILE_FORMAT:
        raise PolicyFileError(f"it is not an rlcheck policy file (no format={FILE_FORMAT!r})")
    version = document.get("version")
    if version != FILE_VERSION:
        raise PolicyFileError(
            f"its format version {version!r} is not the supported version {FILE_VERSION}"
        )
    meta = document.get("meta")
    if not isinstance(meta, dict):
        raise PolicyFileError(f"its meta field is {type(meta).__name__}, not an object")
    if expect_meta:
        expected = json.loads(json.dumps(expect_meta))
        for key, want in expected.items():
            have = meta.get(key, "<missing>")
            if have != want:
                raise PolicyMismatch(
                    f"it was saved for {key}={have!r}, not {key}={want!r} (delete it or "
                    "save to another path to keep both)"
                )
    policy.load_dict(document.get("policy"))


def _warn(path: Path, reason: str) -> None:
    warnings.warn(
        f"ignoring policy file {str(path)!r}: {reason}; learning starts from scratch",
        RLCheckWarning,
        stacklevel=3,
    )


def _atomic_write_text(target: Path, text: str) -> None:
    """Temp file in the same directory + fsync + rename + directory fsync."""
    directory = target.parent
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with contextlib.suppress(OSError):  # mkstemp made it 0600: keep the file's mode
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not possible on every platform (e.g. Windows).
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
