"""Learned policies on disk and in example databases: writes that never lose what was
learned, reads that never break a run.

A policy document is one JSON object::

    {"format": "rlcheck-policy-file", "version": 1,
     "meta": {...caller's metadata...},
     "policy": <Policy.to_dict() snapshot>}

A *policy file* holds one document. Saving writes a temporary file in the target's
directory, fsyncs it, renames it over the target (``os.replace`` is atomic on POSIX and
Windows) and fsyncs the directory, so a reader sees either the old file or the new one,
never half of one.

Loading is best-effort by design (a learned policy only speeds learning up): a missing file
returns ``False`` silently; a truncated, garbage, wrong-version or mismatched file returns
``False`` with one :class:`~rlcheck.errors.RLCheckWarning`, and the policy is left unchanged.
Nothing in the file is ever executed: it is parsed as JSON only, and bounded before it is:
only a regular file is read (a FIFO or device is refused without blocking), at most
``max_bytes`` (:data:`MAX_BYTES` by default: its size is checked before reading), with
values type-checked and tables and rows capped by the policy's own limits.

Saving keeps the mode of the file it replaces (a new file gets the usual ``0666 & ~umask``).

Parsing is bounded by cost, not only by size: before the JSON parser runs, the number of
values the document can hold is bounded from its bytes (every value but the first of a
container follows a comma or a colon, so values <= commas + colons + brackets + 1, a C-speed
count), and a document over ``max_items`` (:data:`MAX_ITEMS`) is refused without being
parsed. So a file of 32 MiB of empty lists is refused in tens of milliseconds, not parsed
into 11 million list objects.

:class:`DatabasePolicy` keeps the policy of one test in a Hypothesis example database
(anything with ``save``/``fetch``/``delete`` of bytes under a key), as a *set of
contributions*, one value per learner: a zlib-compressed document (:data:`VALUE_MAGIC`)
holding the visits that learner made since it loaded; a load merges every contribution
(:meth:`rlcheck.learner.Policy.merge_dict`: visit-weighted means, as if one learner had made
every episode). Contributions are disjoint sets of episodes, so concurrent learners (xdist
workers, CI machines, ``rlcheck fuzz`` workers sharing one Redis) add up instead of the last
writer winning; finished learners' contributions are compacted into one (the class
docstring says how, and what a race can cost). Reading is bounded as for files: at most
``max_values`` values, ``max_bytes`` and ``max_items`` over all of them. Read-only
databases are read, never written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from rlcheck.errors import InvalidArgument, PolicyFileError, PolicyMismatch, RLCheckWarning
from rlcheck.learner import Policy, PolicyMark

__all__ = [
    "COMPACT_AT",
    "FILE_FORMAT",
    "FILE_VERSION",
    "MAX_BYTES",
    "MAX_ITEMS",
    "KEY_SUFFIX",
    "MAX_VALUES",
    "STALE_S",
    "VALUE_MAGIC",
    "DatabasePolicy",
    "ExampleDatabaseLike",
    "decode_value",
    "encode_value",
    "load_policy",
    "save_policy",
]

FILE_FORMAT = "rlcheck-policy-file"
"""The ``format`` tag every policy file carries."""
FILE_VERSION = 1
"""The policy file layout version this code writes and reads."""
MAX_BYTES = 32 << 20
"""Largest policy file :func:`load_policy` reads by default (32 MiB); for a database, the
most bytes read over all of one test's contributions (after decompression)."""
MAX_ITEMS = 1_000_000
"""Most JSON values (containers, numbers, strings) a policy document may hold, over all of
a test's contributions: bounds what parsing allocates (about 70 MB at worst, all empty
lists; a typical Q-table row is 12-16 values). Saving refuses a policy the load would
refuse."""
MAX_VALUES = 64
"""Most contributions of one test read from a database."""
COMPACT_AT = 8
"""A save that finds more finished writers' contributions than this merges them into one."""
VALUE_MAGIC = b"RLCP\x01"
"""First bytes of a policy document stored in a database (then zlib-compressed JSON)."""
KEY_SUFFIX = b".rlcheck-policy"
"""Appended to a test's database key: the key its policy contributions are saved under."""


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
    >>> from rlcheck.learner import Policy, PolicyMark
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
    text = _document_text(policy.to_dict(), meta)
    _atomic_write_text(Path(path), text)


def _document_text(
    snapshot: dict[str, Any],
    meta: dict[str, Any] | None,
    *,
    max_bytes: int = MAX_BYTES,
    max_items: int = MAX_ITEMS,
    writer: dict[str, Any] | None = None,
) -> str:
    """The JSON of one policy document; refused when a load would refuse it."""
    document = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "meta": dict(meta) if meta is not None else {},
        "policy": snapshot,
        **({"writer": writer} if writer is not None else {}),
    }
    try:
        text = json.dumps(document, separators=(",", ":"), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"meta={meta!r} cannot be written as JSON ({exc}); use str, int, float, bool, "
            "None, lists and dicts with str keys"
        ) from exc
    raw = text.encode("utf-8")
    if len(raw) > max_bytes or _items_bound(raw) > max_items:
        # Whatever is saved must load: never write what the bounded reader refuses.
        raise PolicyFileError(
            f"the policy is too large to be read back ({len(raw)} bytes, at most "
            f"{_items_bound(raw)} JSON values; the limits are max_bytes={max_bytes}, "
            f"max_items={max_items}): lower the policy's max_states"
        )
    return text


class _TooLarge(PolicyFileError):
    """Over ``max_bytes`` or ``max_items``."""


def _items_bound(raw: bytes) -> int:
    """An upper bound on the JSON values in ``raw``, without parsing it: every value but
    the first one of a container follows a comma or a colon (bytes.count runs at C speed)."""
    return raw.count(b",") + raw.count(b":") + raw.count(b"[") + raw.count(b"{") + 1


def load_policy(
    path: str | os.PathLike[str],
    policy: Policy,
    *,
    expect_meta: dict[str, Any] | None = None,
    max_bytes: int = MAX_BYTES,
    max_items: int = MAX_ITEMS,
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
    max_items:
        Files that may hold more JSON values than this are ignored (with a warning)
        without being parsed (the bound is counted from the bytes; see the module
        docstring).
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
    >>> from rlcheck.learner import Policy, PolicyMark
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
        policy.load_dict(_parse_document(raw, expect_meta, max_items=max_items)["policy"])
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


def _parse_document(
    raw: bytes, expect_meta: dict[str, Any] | None, *, max_items: int
) -> dict[str, Any]:
    """A checked policy document (format, version, meta) from untrusted bytes, its cost
    bounded before parsing; :class:`PolicyFileError` (or a ``ValueError``) otherwise."""
    items = _items_bound(raw)
    if items > max_items:
        raise _TooLarge(
            f"it may hold up to {items} JSON values, more than the {max_items} allowed "
            "(max_items); refused without parsing"
        )
    try:
        document = json.loads(raw, parse_constant=_no_constants)
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
    return document


def _warn(path: Path, reason: str, *, stacklevel: int = 3) -> None:
    warnings.warn(
        f"ignoring policy file {str(path)!r}: {reason}; learning starts from scratch",
        RLCheckWarning,
        stacklevel=stacklevel,
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


class ExampleDatabaseLike(Protocol):
    """What :class:`DatabasePolicy` needs of a database: Hypothesis's ``ExampleDatabase``
    interface (a set of byte values under each key)."""

    def save(self, key: bytes, value: bytes) -> None: ...

    def fetch(self, key: bytes) -> Iterable[bytes]: ...

    def delete(self, key: bytes, value: bytes) -> None: ...


def encode_value(
    snapshot: dict[str, Any],
    meta: dict[str, Any] | None,
    *,
    writer: dict[str, Any] | None = None,
    max_bytes: int = MAX_BYTES,
    max_items: int = MAX_ITEMS,
) -> bytes:
    """One database value: :data:`VALUE_MAGIC` + the zlib-compressed policy document of a
    :meth:`~rlcheck.learner.Policy.to_dict` snapshot, with its writer record (see
    :class:`DatabasePolicy`); deterministic bytes."""
    text = _document_text(snapshot, meta, max_bytes=max_bytes, max_items=max_items, writer=writer)
    return VALUE_MAGIC + zlib.compress(text.encode("utf-8"), 6)


def decode_value(
    value: bytes,
    *,
    expect_meta: dict[str, Any] | None = None,
    max_bytes: int = MAX_BYTES,
    max_items: int = MAX_ITEMS,
) -> dict[str, Any]:
    """The checked document of one database value (or of a plain JSON policy file's bytes).

    Decompression stops at ``max_bytes`` (a zlib bomb costs no more than that); parsing is
    bounded by ``max_items``. Raises :class:`PolicyFileError` (a ``ValueError``), or
    :class:`PolicyMismatch` when the document was saved for other metadata.
    """
    if value.startswith(VALUE_MAGIC):
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(value[len(VALUE_MAGIC) :], max_bytes + 1)
        except zlib.error as exc:
            raise PolicyFileError(f"it is not valid compressed data: {exc}") from exc
        if len(raw) > max_bytes or inflater.unconsumed_tail:
            raise _TooLarge(f"it inflates to more than the {max_bytes} bytes allowed (max_bytes)")
        if not inflater.eof:
            raise PolicyFileError("its compressed data is truncated")
    else:
        raw = bytes(value)
        if len(raw) > max_bytes:
            raise _TooLarge(f"it is more than the {max_bytes} bytes allowed (max_bytes)")
    return _parse_document(raw, expect_meta, max_items=max_items)


def _measure(value: bytes, max_bytes: int, max_items: int) -> tuple[int, int]:
    """The size and JSON-value bound of a value's document, inflated in 1 MiB pieces that
    are counted and dropped (so measuring costs no more memory than a piece); raises
    :class:`_TooLarge` past either limit, :class:`PolicyFileError` on bad data."""
    if not value.startswith(VALUE_MAGIC):
        size, items = len(value), _items_bound(value)
    else:
        inflater, data, size, items = zlib.decompressobj(), value[len(VALUE_MAGIC) :], 0, 0
        try:
            while data and size <= max_bytes and items <= max_items:
                piece = inflater.decompress(data, 1 << 20)
                data = inflater.unconsumed_tail
                size += len(piece)
                items += _items_bound(piece) - 1
                if not piece:
                    break
        except zlib.error as exc:
            raise PolicyFileError(f"it is not valid compressed data: {exc}") from exc
        items += 1
        if size <= max_bytes and items <= max_items and not inflater.eof:
            raise PolicyFileError("its compressed data is truncated")
    if size > max_bytes:
        raise _TooLarge(f"it inflates to more than the {max_bytes} bytes allowed (max_bytes)")
    if items > max_items:
        raise _TooLarge(f"it may hold more than the {max_items} JSON values allowed (max_items)")
    return size, items


Fetch = Callable[[bytes, int, int], Iterable[bytes]]
"""``fetch(key, max_values, max_bytes)``: the values under a key, each at most
``max_bytes`` long (longer ones skipped), at most ``max_values`` of them."""


class DatabasePolicy:
    """The learned policy of one test kept in an example database (see the module
    docstring): load once, then save as often as wanted.

    Call order: :meth:`load` (merges every stored contribution into the policy and marks
    what it holds), then :meth:`save` any number of times, the last one with
    ``final=True`` when the learner is done.

    How learners share one key without a lock (the database offers no atomic
    compare-and-set): each learner (one instance of this class) is a *writer* with a
    random id, and keeps exactly one value under the key, its *cumulative* contribution
    (every visit since its load), saved with a sequence number, then its previous value
    deleted. Readers keep the highest sequence of each writer (a delete that lags is not
    counted twice). Contributions of live writers are disjoint, so the merge is exact
    however saves interleave. Finished writers' values (``final``, or not saved for
    :data:`STALE_S`) are compacted: past ``compact_at`` of them, a saver merges them into
    one finished value listing their writer ids (``parts``: readers skip a listed writer
    whose delete lags), saves it, then deletes them. Two savers compacting the same set
    write the same bytes (the database holds them once); two compacting overlapping sets
    at the same instant count the overlap twice (its weight, never its loss).

    Never raises on bad stored values (they are skipped with one :class:`RLCheckWarning`
    each, and deleted when the database is writable), nor on a database that refuses
    writes (said once; the learner then only reads).

    Parameters
    ----------
    database:
        The example database (``save``/``fetch``/``delete``).
    key:
        The test's database key; contributions go under ``key +`` :data:`KEY_SUFFIX`.
    meta:
        Written into every contribution; values saved for other metadata are ignored.
    legacy_file:
        A policy file from before policies lived in databases: read as one more
        (finished) contribution; the first save copies it into the database and, once
        the database is seen to hold it (not read-only), deletes the file.
    fetch:
        How to read values (default: ``database.fetch``, bounded after each read); lets a
        caller check sizes before reading (a directory database's files).

    Examples
    --------
    >>> from hypothesis.database import InMemoryExampleDatabase
    >>> from rlcheck.learner import Policy
    >>> db = InMemoryExampleDatabase()
    >>> first, second = Policy(seed=0), Policy(seed=0)
    >>> a, b = DatabasePolicy(db, b"test"), DatabasePolicy(db, b"test")
    >>> a.load(first), b.load(second)
    (False, False)
    >>> first.learn([("coin", (), 1)], 20.0); a.save(first)
    >>> second.learn([("coin", (), 1)], -1.0); b.save(second)
    >>> merged = Policy(seed=0)
    >>> DatabasePolicy(db, b"test").load(merged)
    True
    >>> merged.table("coin").value((), 1)
    (9.5, 2)
    """

    def __init__(
        self,
        database: ExampleDatabaseLike,
        key: bytes,
        *,
        meta: dict[str, Any] | None = None,
        legacy_file: str | os.PathLike[str] | None = None,
        fetch: Fetch | None = None,
        max_bytes: int = MAX_BYTES,
        max_items: int = MAX_ITEMS,
        max_values: int = MAX_VALUES,
        compact_at: int = COMPACT_AT,
    ) -> None:
        self.database = database
        self.key = bytes(key) + KEY_SUFFIX
        self.meta = dict(meta) if meta is not None else {}
        self.legacy_file = None if legacy_file is None else Path(legacy_file)
        self._fetch = fetch if fetch is not None else self._plain_fetch
        self.max_bytes = max_bytes
        self.max_items = max_items
        self.max_values = max_values
        self.compact_at = compact_at
        self.writer_id = os.urandom(8).hex()
        self._seq = 0
        self._mark: PolicyMark | None = None
        self._saved: bytes | None = None  # this writer's value in the database
        self._saved_as: tuple[dict[str, Any], bool] | None = None  # its snapshot, final
        self._legacy: bytes | None = None  # a legacy file as a value, until migrated
        self.writable = True  # until the database refuses a write

    def __repr__(self) -> str:
        return f"DatabasePolicy({self.database!r}, key={self.key!r})"

    # -- reading --------------------------------------------------------------------

    def _plain_fetch(self, key: bytes, max_values: int, max_bytes: int) -> Iterator[bytes]:
        for i, value in enumerate(self.database.fetch(key)):
            if i >= max_values:
                return
            if len(value) <= max_bytes:
                yield value

    def _decoded(self) -> list[tuple[bytes, dict[str, Any]]]:
        """``(value, document)`` of each good value of matching metadata, within the read
        bounds over all of them; bad values are warned about (and deleted)."""
        budget_bytes, budget_items = self.max_bytes, self.max_items
        try:
            values = list(self._fetch(self.key, self.max_values, self.max_bytes))
        except Exception as exc:  # a database that cannot be read: learn from scratch
            self._warn(f"the database could not be read ({type(exc).__name__}: {exc})")
            return []
        out, unread = [], 0
        for value in sorted(values):  # sorted: a deterministic merge order
            try:
                n_bytes, n_items = _measure(value, self.max_bytes, self.max_items)
                if n_bytes > budget_bytes or n_items > budget_items:
                    unread += 1  # a good value past the bounds of all values: kept
                    continue
                document = decode_value(
                    value, expect_meta=self.meta, max_bytes=n_bytes, max_items=n_items
                )
                _writer_of(document)
            except PolicyMismatch:
                continue  # another kind of learner under this test's key: not ours
            except (PolicyFileError, ValueError, TypeError, KeyError, RecursionError) as exc:
                self._skip(value, exc)
                continue
            budget_bytes -= n_bytes
            budget_items -= n_items
            out.append((value, document))
        if unread:
            self._warn(
                f"{unread} of {len(values)} values were not read: together they pass the "
                f"read bounds (max_bytes={self.max_bytes}, max_items={self.max_items})"
            )
        return out

    def _contributions(self) -> list[tuple[bytes, dict[str, Any]]]:
        """The values to merge: the latest of each writer not compacted into another."""
        decoded = self._decoded()
        absorbed = {part for _, doc in decoded for part in _writer_of(doc)["parts"]}
        latest: dict[str, tuple[bytes, dict[str, Any]]] = {}
        for value, doc in decoded:
            writer = _writer_of(doc)
            if writer["id"] in absorbed:
                continue
            held = latest.get(writer["id"])
            if held is None or _writer_of(held[1])["seq"] < writer["seq"]:
                latest[writer["id"]] = (value, doc)
        return [latest[w] for w in sorted(latest)]

    def load(self, policy: Policy) -> bool:
        """Merge every stored contribution (and a legacy file) into ``policy``; whether
        anything was loaded. Marks what the policy holds: what :meth:`save` writes is
        learned after this."""
        loaded = False
        for value, document in self._contributions():
            try:
                policy.merge_dict(document["policy"])
                loaded = True
            except PolicyFileError as exc:
                self._skip(value, exc)
        if self.legacy_file is not None:
            loaded |= self._load_legacy(policy)
        self._mark = policy.mark()
        return loaded

    def _load_legacy(self, policy: Policy) -> bool:
        assert self.legacy_file is not None
        try:
            raw = _read_bounded(self.legacy_file, self.max_bytes)
        except FileNotFoundError:
            return False
        except (OSError, PolicyFileError) as exc:
            _warn(self.legacy_file, str(exc), stacklevel=4)
            return False
        try:
            document = _parse_document(raw, self.meta, max_items=self.max_items)
            policy.merge_dict(document["policy"])
        except (PolicyFileError, ValueError, TypeError, KeyError, RecursionError) as exc:
            _warn(self.legacy_file, str(exc), stacklevel=4)
            return False
        writer = _record(f"file-{hashlib.sha256(raw).hexdigest()[:16]}", 0, True, 0.0, [])
        self._legacy = encode_value(
            document["policy"],
            self.meta,
            writer=writer,
            max_bytes=self.max_bytes,
            max_items=self.max_items,
        )
        return True

    # -- writing --------------------------------------------------------------------

    def save(self, policy: Policy, *, final: bool = False) -> None:
        """Store every visit learned since :meth:`load` as this writer's contribution
        (replacing its previous one; nothing when there is none yet), copy a legacy file
        in, and compact finished writers' values when more than ``compact_at``.
        ``final=True`` says this writer is done (its value may then be compacted)."""
        if self._mark is None:
            raise InvalidArgument("DatabasePolicy.save() before load(): call load() first")
        snapshot = policy.to_dict(since=self._mark)
        changed = self._saved_as != (snapshot, final)
        if changed and (snapshot["tables"] or self._saved is not None):
            self._seq += 1
            writer = _record(self.writer_id, self._seq, final, time.time(), [])
            value = encode_value(
                snapshot,
                self.meta,
                writer=writer,
                max_bytes=self.max_bytes,
                max_items=self.max_items,
            )
            if not self._write(self.database.save, value):
                return
            if self._saved is not None:
                self._write(self.database.delete, self._saved)
            self._saved, self._saved_as = value, (snapshot, final)
        if self._legacy is not None:
            self._migrate()
        self._compact()

    def _migrate(self) -> None:
        assert self._legacy is not None and self.legacy_file is not None
        value, self._legacy = self._legacy, None
        if self._write(self.database.save, value) and value in self._fetch(
            self.key, self.max_values, len(value)
        ):
            # Held (not a read-only database): the file would now count twice.
            with contextlib.suppress(OSError):
                self.legacy_file.unlink()

    def _compact(self) -> None:
        now = time.time()
        done = [
            (value, doc)
            for value, doc in self._contributions()
            if _writer_of(doc)["id"] != self.writer_id
            and (_writer_of(doc)["final"] or now - _writer_of(doc)["saved_at"] > STALE_S)
        ]
        if len(done) <= self.compact_at:
            return
        merged = Policy()
        for _, doc in done:  # in writer order: the same bytes from any compactor
            merged.merge_dict(doc["policy"])
        parts = sorted(_writer_of(doc)["id"] for _, doc in done)
        writer = _record(
            "merge-" + hashlib.sha256(" ".join(parts).encode()).hexdigest()[:16],
            0,
            True,
            max(_writer_of(doc)["saved_at"] for _, doc in done),
            parts,
        )
        try:
            value = encode_value(
                merged.to_dict(),
                self.meta,
                writer=writer,
                max_bytes=self.max_bytes,
                max_items=self.max_items,
            )
        except PolicyFileError as exc:
            self._warn(f"its contributions were not compacted: {exc}")
            return
        # Save first, delete after: a crash in between leaves both, and readers skip
        # the parts the merge lists.
        if self._write(self.database.save, value):
            for old, _ in done:
                self._write(self.database.delete, old)

    def _write(self, operation: Callable[[bytes, bytes], None], value: bytes) -> bool:
        """One ``save``/``delete``; a database that refuses writes (GitHub artifacts not
        wrapped in ``ReadOnlyDatabase`` raise) is said once and then only read."""
        if not self.writable:
            return False
        try:
            operation(self.key, value)
        except Exception as exc:
            self.writable = False
            self._warn(
                f"the database refused a write ({type(exc).__name__}: {exc}); this learner's "
                "policy is not saved (wrap a read-only database in ReadOnlyDatabase)"
            )
            return False
        return True

    def _skip(self, value: bytes, exc: BaseException) -> None:
        self._warn(f"a stored value was skipped: {exc}")
        if self.writable:
            with contextlib.suppress(Exception):
                self.database.delete(self.key, value)

    def _warn(self, reason: str) -> None:
        where = repr(self.database)
        if len(where) > 120:  # an in-memory database's repr holds its values
            where = type(self.database).__name__
        warnings.warn(
            f"rlcheck policy in {where} under key {self.key!r}: {reason}",
            RLCheckWarning,
            stacklevel=4,
        )


STALE_S = 24 * 3600.0
"""A writer that has not saved for this long (seconds) is taken as finished (killed)."""


def _record(
    writer_id: str, seq: int, final: bool, saved_at: float, parts: list[str]
) -> dict[str, Any]:
    return {"id": writer_id, "seq": seq, "final": final, "saved_at": saved_at, "parts": parts}


def _writer_of(document: dict[str, Any]) -> dict[str, Any]:
    """A database value's writer record, checked (``PolicyFileError`` if malformed)."""
    writer = document.get("writer")
    if not (
        isinstance(writer, dict)
        and isinstance(writer.get("id"), str)
        and type(writer.get("seq")) is int
        and type(writer.get("final")) is bool
        and type(writer.get("saved_at")) in (int, float)
        and isinstance(writer.get("parts"), list)
        and all(isinstance(p, str) for p in writer["parts"])
    ):
        raise PolicyFileError("its writer record is missing or malformed")
    return writer
