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
Nothing in the file is ever executed: it is parsed as JSON only.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from rlcheck.errors import InvalidArgument, PolicyFileError, RLCheckWarning
from rlcheck.learner import Policy

__all__ = ["FILE_FORMAT", "FILE_VERSION", "load_policy", "save_policy"]

FILE_FORMAT = "rlcheck-policy-file"
"""The ``format`` tag every policy file carries."""
FILE_VERSION = 1
"""The policy file layout version this code writes and reads."""


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
    path: str | os.PathLike[str], policy: Policy, *, expect_meta: dict[str, Any] | None = None
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
        raw = target.read_bytes()
    except FileNotFoundError:
        return False
    except OSError as exc:
        _warn(target, f"it could not be read ({exc})")
        return False
    try:
        _load_document(raw, policy, expect_meta)
    # The file is untrusted input: any way its content can fail to parse is a reason to
    # ignore it, never to stop the run (RELIABILITY.md, rlcheck #3).
    except (PolicyFileError, ValueError, TypeError, KeyError, RecursionError) as exc:
        _warn(target, str(exc))
        return False
    return True


def _load_document(raw: bytes, policy: Policy, expect_meta: dict[str, Any] | None) -> None:
    try:
        document = json.loads(raw.decode("utf-8"))
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
                raise PolicyFileError(
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
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
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
