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
contributions*, one value per learner: the visits that learner made since it loaded, in a
compact zlib-compressed layout (:data:`VALUE_MAGIC_V2`: a JSON header, the distinct key
parts once each, the numbers as packed arrays; see ``_encode_tables``), read 3-4x
faster than the JSON document of earlier versions (:data:`VALUE_MAGIC`), which is still
read; a load merges every contribution (:meth:`rlcheck.learner.Policy.merge_tables`:
visit-weighted means, as if one learner had made every episode). A store decodes each
value once: a save's compaction check takes the writer records of the values it has seen
from then. A value of a later layout (``b"RLCP"`` and another version byte) is left alone,
neither read nor deleted. (rlcheck before the compact layout takes a compact value for a
damaged one: it skips it with a warning and deletes it.) Contributions are disjoint sets
of episodes, so concurrent learners (xdist workers, CI machines, ``rlcheck fuzz`` workers
sharing one Redis) add up instead of the last writer winning; finished learners'
contributions are compacted into one (the class docstring says how, and what a race can
cost). Reading is bounded as for files: at most ``max_values`` values, ``max_bytes`` and
``max_items`` over all of them (a compact value's numbers count one value each). Read-only
databases are read, never written.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import stat
import sys
import tempfile
import time
import warnings
import zlib
from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from rlcheck.errors import InvalidArgument, PolicyFileError, PolicyMismatch, RLCheckWarning
from rlcheck.learner import (
    Policy,
    PolicyMark,
    Tables,
    _encode,
    _parse_snapshot,
    check_flat_rows,
)

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
    "VALUE_MAGIC_V2",
    "VALUE_VERSION",
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
"""First bytes of a policy document stored in a database by rlcheck before the compact
layout (then zlib-compressed JSON); still read."""
VALUE_MAGIC_V2 = b"RLCP\x02"
"""First bytes of a policy value in the compact layout (what saves write; see
``_encode_tables``)."""
VALUE_VERSION = 2
"""The ``version`` of a compact value's header."""
_MAGIC_FAMILY = b"RLCP"
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
    """Over ``max_bytes`` or ``max_items``; ``spent``: the bytes inflated before it was."""

    def __init__(self, message: str, spent: int = 0) -> None:
        super().__init__(message)
        self.spent = spent


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
    return _checked_document(_json(raw), expect_meta, FILE_VERSION)


def _checked_document(
    document: Any, expect_meta: dict[str, Any] | None, version: int
) -> dict[str, Any]:
    """``document`` if it is a policy document (or a compact value's header) of
    ``version`` saved for ``expect_meta``; :class:`PolicyFileError` or
    :class:`PolicyMismatch` otherwise."""
    if not isinstance(document, dict) or document.get("format") != FILE_FORMAT:
        raise PolicyFileError(f"it is not an rlcheck policy file (no format={FILE_FORMAT!r})")
    have = document.get("version")
    if have != version:
        raise PolicyFileError(f"its format version {have!r} is not the supported version {version}")
    meta = document.get("meta")
    if not isinstance(meta, dict):
        raise PolicyFileError(f"its meta field is {type(meta).__name__}, not an object")
    if expect_meta:
        expected = json.loads(json.dumps(expect_meta))
        for key, want in expected.items():
            found = meta.get(key, "<missing>")
            if found != want:
                raise PolicyMismatch(
                    f"it was saved for {key}={found!r}, not {key}={want!r} (delete it or "
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
    if value.startswith(VALUE_MAGIC_V2):
        parts, _, _ = _open_compact(value, max_bytes, max_items)
        header, tables = _parse_compact(parts, expect_meta, max_items=max_items)
        snapshot = {
            "format": "rlcheck-policy",
            "version": 1,
            "epsilon": header.get("epsilon"),
            "tables": [
                [_encode(point), [[_encode(state), row] for state, row in rows]]
                for point, rows in tables
            ],
        }
        return {**header, "policy": snapshot}
    _refuse_unknown_layout(value)
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


def _refuse_unknown_layout(value: bytes) -> None:
    """:class:`PolicyMismatch` for a value of a layout this code does not know (a later
    rlcheck's): not ours to read, nor to delete as damaged."""
    if (
        value.startswith(_MAGIC_FAMILY)
        and len(value) > len(_MAGIC_FAMILY)
        and value[: len(VALUE_MAGIC)] not in (VALUE_MAGIC, VALUE_MAGIC_V2)
    ):
        raise PolicyMismatch(f"its layout {value[4:5]!r} is not one this rlcheck reads")


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
        raise _TooLarge(f"it inflates to more than the {max_bytes} bytes allowed (max_bytes)", size)
    if items > max_items:
        raise _TooLarge(
            f"it may hold more than the {max_items} JSON values allowed (max_items)", size
        )
    return size, items


# -- the compact layout (what databases hold since version 2) --------------------------
#
# value   = VALUE_MAGIC_V2 + zlib(header + b"\n" + atoms + b"\n" + numbers)
# header  = JSON {"format", "version": 2, "meta", "writer", "epsilon"}
# atoms   = JSON list of the distinct key atoms (str, int, float, bool, null): entries
#           0 .. A-1
# numbers = little-endian: uint32 counts T, P, R, then uint32 lists
#   tuples  (T):  the distinct tuple keys, entries A, A+1, ... in order, in groups: n, m,
#                 then the ids of m tuples of length n, column by column (the first ids
#                 of all m, then the second ids...); a group's ids name entries before
#                 it, so shared parts of keys are stored (and decoded) once, no key refers
#                 to itself or a later one, and a group is built by one zip()
#   tables  (P):  point id, number of rows, for each table in order
#   states  (R):  the state id of each row, table after table
#   lengths (R):  each row's length (2 per action: Q, visit count)
# then float64 rows: every row's values end to end
#
# Compact JSON holds no raw newline, so the three parts split at the first two. Decoding
# is two arrays read from bytes, one zip() per group of keys and C-speed checks over all
# values at once (check_flat_rows): no Python loop per key or value, no JSON but the atoms.


def _atom_key(key: Any) -> tuple[tuple[Any, Any], Any]:
    """``(identity, value)`` of a key atom: its identity typed (``1``, ``True`` and ``1.0``
    are three atoms; ``-0.0`` is not ``0.0``), its value as JSON writes it; or
    :class:`InvalidArgument` for a key that cannot be saved."""
    if key is None:
        return (None, None), None
    if isinstance(key, bool):
        return (bool, bool(key)), bool(key)
    if isinstance(key, int):
        return (int, int(key)), int(key)
    if isinstance(key, str):
        return (str, str(key)), str(key)
    if isinstance(key, float):
        if not math.isfinite(key):
            raise InvalidArgument(
                f"key {key!r} is not a finite float; policies cannot hold NaN or "
                "infinities (use a label or a string in place of the value)"
            )
        return (float, float(key).hex()), float(key)
    raise InvalidArgument(
        f"state or point key {key!r} of type {type(key).__name__} cannot be saved; "
        "use tuples of str, int, float, bool or None"
    )


def _encode_tables(
    tables: Tables,
    epsilon: float,
    meta: dict[str, Any] | None,
    writer: dict[str, Any],
    *,
    max_bytes: int = MAX_BYTES,
    max_items: int = MAX_ITEMS,
) -> tuple[bytes, int, int]:
    """One database value in the compact layout (above): ``(value, inflated bytes, value
    bound)``; deterministic bytes. Refused (:class:`PolicyFileError`) when a load would
    refuse it."""
    try:
        header = json.dumps(
            {
                "format": FILE_FORMAT,
                "version": VALUE_VERSION,
                "meta": dict(meta) if meta is not None else {},
                "writer": writer,
                "epsilon": epsilon,
            },
            separators=(",", ":"),
            allow_nan=False,
            sort_keys=True,
        ).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"meta={meta!r} cannot be written as JSON ({exc}); use str, int, float, bool, "
            "None, lists and dicts with str keys"
        ) from exc
    atoms: list[Any] = []
    atom_ids: dict[tuple[Any, Any], int] = {}
    tuple_ids: dict[tuple[int, ...], int] = {}
    children: list[tuple[int, ...]] = []  # atoms as their id, tuples as ~(tuple number)
    levels: list[int] = []  # 1 + the deepest tuple inside (tuples of atoms: 1)

    def ref(key: Any) -> int:
        if isinstance(key, tuple):
            ids = tuple(ref(k) for k in key)
            got = tuple_ids.get(ids)
            if got is None:
                got = tuple_ids[ids] = len(children)
                children.append(ids)
                levels.append(1 + max((levels[~i] for i in ids if i < 0), default=0))
            return ~got
        identity, atom = _atom_key(key)
        got = atom_ids.get(identity)
        if got is None:
            got = atom_ids[identity] = len(atoms)
            atoms.append(atom)
        return got

    points: list[int] = []
    states: list[int] = []
    lengths: list[int] = []
    values = array("d")
    for point, rows in tables:
        try:
            points.append(ref(point))
            points.append(len(rows))
            for state, row in rows:
                states.append(ref(state))
                lengths.append(len(row))
                values.extend(row)
        except InvalidArgument as exc:
            raise InvalidArgument(f"cannot save the table of point {point!r}: {exc}") from exc
    # Tuples in groups of one level and one length, each group's ids column by column:
    # a group refers only to lower levels, so it is decoded by one zip() (see
    # _parse_compact); ids are the entries' order, atoms first.
    order = sorted(range(len(children)), key=lambda k: (levels[k], len(children[k]), k))
    final = [0] * len(children)
    for position, k in enumerate(order, start=len(atoms)):
        final[k] = position

    def fix(ids: Iterable[int]) -> list[int]:
        return [i if i >= 0 else final[~i] for i in ids]

    out: list[int] = []
    for (_, n), group in itertools.groupby(order, key=lambda k: (levels[k], len(children[k]))):
        members = [fix(children[k]) for k in group]
        out += (n, len(members))
        for column in range(n):
            out.extend(ids[column] for ids in members)
    points[0::2] = fix(points[0::2])
    atoms_json = json.dumps(atoms, separators=(",", ":"), allow_nan=False).encode()
    states = fix(states)
    try:
        numbers = array("I", [len(out), len(points), len(states)])
        numbers.extend(out)
        numbers.extend(points)
        numbers.extend(states)
        numbers.extend(lengths)
    except OverflowError as exc:
        raise PolicyFileError(f"the policy is too large to be saved ({exc})") from exc
    if sys.byteorder == "big":
        numbers.byteswap()
        values.byteswap()
    payload = b"\n".join((header, atoms_json, numbers.tobytes() + values.tobytes()))
    items = _items_bound(header) + _items_bound(atoms_json) + len(numbers) + len(values)
    if len(payload) > max_bytes or items > max_items:
        raise PolicyFileError(
            f"the policy is too large to be read back ({len(payload)} bytes, at most "
            f"{items} values; the limits are max_bytes={max_bytes}, "
            f"max_items={max_items}): lower the policy's max_states"
        )
    return VALUE_MAGIC_V2 + zlib.compress(payload, 6), len(payload), items


def _open_compact(value: bytes, max_bytes: int, max_items: int) -> tuple[list[bytes], int, int]:
    """A compact value's three parts, its inflated size and its value bound: inflated at
    most ``max_bytes`` (a zlib bomb costs no more), :class:`_TooLarge` past either limit,
    :class:`PolicyFileError` on bad data."""
    inflater = zlib.decompressobj()
    try:
        payload = inflater.decompress(memoryview(value)[len(VALUE_MAGIC_V2) :], max_bytes + 1)
    except zlib.error as exc:
        raise PolicyFileError(f"it is not valid compressed data: {exc}") from exc
    if len(payload) > max_bytes or inflater.unconsumed_tail:
        raise _TooLarge(
            f"it inflates to more than the {max_bytes} bytes allowed (max_bytes)", len(payload)
        )
    if not inflater.eof:
        raise PolicyFileError("its compressed data is truncated")
    parts = payload.split(b"\n", 2)
    if len(parts) != 3 or len(parts[2]) % 4:
        raise PolicyFileError("it is not a compact policy value (bad layout)")
    items = _items_bound(parts[0]) + _items_bound(parts[1]) + len(parts[2]) // 4
    if items > max_items:
        raise _TooLarge(
            f"it may hold more than the {max_items} values allowed (max_items)", len(payload)
        )
    return parts, len(payload), items


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw, parse_constant=_no_constants)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyFileError(f"it is not valid JSON (truncated or corrupt?): {exc}") from exc


_ATOM_TYPES = frozenset((str, int, float, bool, type(None)))


def _uint32s(raw: memoryview) -> list[int]:
    """Little-endian uint32s (``raw``'s length a multiple of 4)."""
    numbers = array("I")
    if numbers.itemsize != 4:  # pragma: no cover - no platform Python supports has this
        raise PolicyFileError("this platform has no 4-byte unsigned integers")
    numbers.frombytes(raw)
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers.tolist()


#: A load inflates at most about this many times ``max_bytes`` over all values it reads
#: (the values it merges take at most ``max_bytes`` of it; a refused one may cost a little
#: more than ``max_bytes``), however many values the database holds.
INFLATE_BOUND = 3

#: Nesting levels a key may have (real keys: a label, span and window tuples, a few
#: levels). Python hashes a tuple by recursing into it with no depth guard, so a crafted
#: value of keys nested 200 000 deep crashed the interpreter (a C stack overflow).
MAX_KEY_DEPTH = 64


def _parse_compact(
    parts: list[bytes], expect_meta: dict[str, Any] | None, *, max_items: int = MAX_ITEMS
) -> tuple[dict[str, Any], Tables]:
    """The checked header and tables of a compact value (:func:`_open_compact`'s parts):
    :class:`PolicyFileError`, or :class:`PolicyMismatch` for other metadata.

    Bounded beyond the value's size: no key nests deeper than :data:`MAX_KEY_DEPTH`, and
    the keys its tables name, counted as the atoms each holds (what hashing them costs:
    Python does not cache a tuple's hash), hold at most ``max_items`` together, so a few
    bytes that name one long key from many rows cannot cost minutes."""
    header = _checked_document(_json(parts[0]), expect_meta, VALUE_VERSION)
    atoms = _json(parts[1])
    if type(atoms) is not list or not set(map(type, atoms)) <= _ATOM_TYPES:
        raise PolicyFileError("its key atoms are not all str, int, float, bool or null")
    if not all(map(math.isfinite, (a for a in atoms if type(a) is float))):
        raise PolicyFileError("a key atom is not a finite float")
    blob = memoryview(parts[2])
    numbers = _uint32s(blob[:12])
    if len(numbers) != 3:
        raise PolicyFileError("its numbers are truncated")
    n_tuples, n_points, n_rows = numbers
    rows_at = 12 + 4 * (n_tuples + n_points + 2 * n_rows)
    if len(blob) < rows_at or (len(blob) - rows_at) % 8:
        raise PolicyFileError("its numbers do not have the lengths its counts say")
    numbers = _uint32s(blob[12:rows_at])
    flat = numbers[:n_tuples]
    points = numbers[n_tuples : n_tuples + n_points]
    states = numbers[n_tuples + n_points : n_tuples + n_points + n_rows]
    lengths = numbers[n_tuples + n_points + n_rows :]
    entries: list[Hashable] = list(atoms)
    entry = entries.__getitem__
    # Per entry, its nesting level and the atoms it holds (a tuple hashes in time
    # proportional to them), built a group at a time as the keys are.
    depths = [0] * len(atoms)
    sizes = [1] * len(atoms)
    # Groups of tuples of one length n, m of them, their ids column by column, each group
    # referring only to the entries before it (so no key refers to itself or a later
    # one): one zip() a group builds its tuples.
    pos, end = 0, len(flat)
    while pos < end:
        if pos + 2 > end:
            raise PolicyFileError("its tuple keys are malformed")
        n, m = flat[pos], flat[pos + 1]
        start, pos = pos + 2, pos + 2 + n * m
        # distinct keys: one empty tuple at most (a group of m empty ones cost m entries
        # from 8 bytes: 10^8 of them were 1.5 GB)
        if not m or pos > end or (not n and m != 1):
            raise PolicyFileError("its tuple keys are malformed")
        ids = flat[start:pos]
        if ids and max(ids) >= len(entries):
            raise PolicyFileError("a tuple key refers to no earlier key")
        if n:
            columns = [ids[j * m : (j + 1) * m] for j in range(n)]
            level = [
                1 + max(d) for d in zip(*(map(depths.__getitem__, c) for c in columns), strict=True)
            ]
            if max(level) > MAX_KEY_DEPTH:
                raise PolicyFileError(f"a key nests deeper than {MAX_KEY_DEPTH} levels")
            depths.extend(level)
            sizes.extend(map(sum, zip(*(map(sizes.__getitem__, c) for c in columns), strict=True)))
            entries.extend(zip(*(map(entry, c) for c in columns), strict=True))
        else:
            depths.append(1)
            sizes.append(1)
            entries.append(())
    point_ids, counts = points[0::2], points[1::2]
    used = point_ids + states
    if (
        len(points) % 2
        or sum(counts) != len(states)
        or (used and max(used) >= len(entries))
        or any(map((1).__and__, lengths))
    ):
        raise PolicyFileError("its tables are malformed")
    if sum(map(sizes.__getitem__, used)) > max_items:
        raise PolicyFileError(
            f"its keys hold more than the {max_items} atoms allowed (max_items) together"
        )
    floats = array("d")
    floats.frombytes(blob[rows_at:])
    if sys.byteorder == "big":
        floats.byteswap()
    values = floats.tolist()
    if sum(lengths) != len(values):
        raise PolicyFileError("its rows do not hold the values their lengths say")
    check_flat_rows(values)
    ends = list(itertools.accumulate(lengths, initial=0))
    row_values = list(map(values.__getitem__, map(slice, ends, ends[1:])))
    keys = list(map(entry, states))
    tables: Tables = []
    first = 0
    for point_id, count in zip(point_ids, counts, strict=True):
        last = first + count
        tables.append(
            (entries[point_id], list(zip(keys[first:last], row_values[first:last], strict=True)))
        )
        first = last
    return header, tables


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
        self._saved_as: tuple[Tables, bool] | None = None  # its tables, final
        self._legacy: bytes | None = None  # a legacy file as a value, until migrated
        self._known: dict[bytes, _Read] = {}  # values decoded by this store (no tables)
        self.writable = True  # until the database refuses a write
        #: Bytes inflated by the last read of the values (see :data:`INFLATE_BOUND`).
        self.inflated = 0

    def __repr__(self) -> str:
        return f"DatabasePolicy({self.database!r}, key={self.key!r})"

    # -- reading --------------------------------------------------------------------

    def _plain_fetch(self, key: bytes, max_values: int, max_bytes: int) -> Iterator[bytes]:
        for i, value in enumerate(self.database.fetch(key)):
            if i >= max_values:
                return
            if len(value) <= max_bytes:
                yield value

    def _read(self, value: bytes, budget_bytes: float, budget_items: float) -> _Read | None:
        """One value's contribution, checked (``None``: a good value past the budget
        left, kept unread); :class:`PolicyFileError` or :class:`PolicyMismatch`.

        Adds the bytes inflating it cost to :attr:`inflated`, whatever the outcome
        (:meth:`_decoded` bounds them over all values)."""
        compact = value.startswith(VALUE_MAGIC_V2)
        if not compact:
            _refuse_unknown_layout(value)
        try:
            if compact:
                parts, n_bytes, n_items = _open_compact(value, self.max_bytes, self.max_items)
            else:
                n_bytes, n_items = _measure(value, self.max_bytes, self.max_items)
        except _TooLarge as exc:
            self.inflated += exc.spent
            raise
        except PolicyFileError:
            self.inflated += len(value)
            raise
        self.inflated += n_bytes
        if n_bytes > budget_bytes or n_items > budget_items:
            return None
        if compact:
            header, tables = _parse_compact(parts, self.meta, max_items=self.max_items)
            return _Read(_writer_of(header), n_bytes, n_items, tables)
        document = decode_value(value, expect_meta=self.meta, max_bytes=n_bytes, max_items=n_items)
        writer = _writer_of(document)
        tables = _parse_snapshot(document["policy"], sys.maxsize, sys.maxsize)
        return _Read(writer, n_bytes, n_items, tables)

    def _decoded(self, *, full: bool = True) -> list[tuple[bytes, _Read]]:
        """``(value, contribution)`` of each good value of matching metadata, within the
        read bounds over all of them; bad values are warned about (and deleted).

        Each value is decoded once by this store: later calls (a save's compaction check)
        take its writer record and sizes from then (``tables`` is ``None`` there unless
        ``full``; values are immutable bytes, so a value seen is a value known), and a
        value skipped or of other metadata is passed over without a second warning."""
        budget_bytes, budget_items = self.max_bytes, self.max_items
        self.inflated = 0
        try:
            values = list(self._fetch(self.key, self.max_values, self.max_bytes))
        except Exception as exc:  # a database that cannot be read: learn from scratch
            self._warn(f"the database could not be read ({type(exc).__name__}: {exc})")
            return []
        known, self._known = self._known, {}
        out, unread = [], 0
        for value in sorted(values):  # sorted: a deterministic merge order
            read = known.get(value)
            if read is not None:
                self._known[value] = read
                if read is _PASSED:
                    continue
                if full:
                    read = None  # its tables again (not kept: they cost memory)
            if read is None or read.n_bytes > budget_bytes or read.n_items > budget_items:
                if self.inflated >= INFLATE_BOUND * self.max_bytes:
                    # Inflating values (good, bad or past the budget: zlib bombs in a
                    # read-only database are never deleted, so they are met on every run)
                    # costs at most that much per load, not max_bytes per value: the rest
                    # wait for a later run.
                    unread += 1
                    continue
                try:
                    read = self._read(value, budget_bytes, budget_items)
                except PolicyMismatch:
                    self._known[value] = _PASSED  # another kind of learner's: not ours
                    continue
                except (PolicyFileError, ValueError, TypeError, KeyError, RecursionError) as exc:
                    self._known[value] = _PASSED
                    self._skip(value, exc)
                    continue
                if read is None:
                    unread += 1  # a good value past the bounds of all values: kept
                    continue
                self._known[value] = read._replace(tables=None)
            budget_bytes -= read.n_bytes
            budget_items -= read.n_items
            out.append((value, read))
        if unread:
            self._warn(
                f"{unread} of {len(values)} values were not read: together they pass the "
                f"read bounds (max_bytes={self.max_bytes}, max_items={self.max_items})"
            )
        return out

    def _contributions(self, *, full: bool = True) -> list[tuple[bytes, _Read]]:
        """The values to merge: the latest of each writer not compacted into another."""
        decoded = self._decoded(full=full)
        absorbed = {part for _, read in decoded for part in read.writer["parts"]}
        latest: dict[str, tuple[bytes, _Read]] = {}
        for value, read in decoded:
            writer = read.writer
            if writer["id"] in absorbed:
                continue
            held = latest.get(writer["id"])
            if held is None or held[1].writer["seq"] < writer["seq"]:
                latest[writer["id"]] = (value, read)
        return [latest[w] for w in sorted(latest)]

    def load(self, policy: Policy) -> bool:
        """Merge every stored contribution (and a legacy file) into ``policy``; whether
        anything was loaded. Marks what the policy holds: what :meth:`save` writes is
        learned after this."""
        tables = [read.tables for _, read in self._contributions()]
        assert None not in tables
        # The rows just decoded become the mark, uncopied (merge_contributions).
        self._mark = policy.merge_contributions(tables)  # type: ignore[arg-type]
        loaded = bool(tables)
        if self.legacy_file is not None and self._load_legacy(policy):
            loaded = True
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
            tables = _parse_snapshot(document["policy"], sys.maxsize, sys.maxsize)
        except (PolicyFileError, ValueError, TypeError, KeyError, RecursionError) as exc:
            _warn(self.legacy_file, str(exc), stacklevel=4)
            return False
        policy.merge_tables(tables)
        writer = _record(f"file-{hashlib.sha256(raw).hexdigest()[:16]}", 0, True, 0.0, [])
        with contextlib.suppress(PolicyFileError, InvalidArgument):  # not copied, still read
            self._legacy = self._encode(tables, policy.epsilon, writer)
        return True

    def _encode(self, tables: Tables, epsilon: float, writer: dict[str, Any]) -> bytes:
        """A value of this store (compact layout), known to it from now on."""
        value, n_bytes, n_items = _encode_tables(
            tables,
            epsilon,
            self.meta,
            writer,
            max_bytes=self.max_bytes,
            max_items=self.max_items,
        )
        self._known[value] = _Read(writer, n_bytes, n_items, None)
        return value

    # -- writing --------------------------------------------------------------------

    def save(self, policy: Policy, *, final: bool = False) -> None:
        """Store every visit learned since :meth:`load` as this writer's contribution
        (replacing its previous one; nothing when there is none yet), copy a legacy file
        in, and compact finished writers' values when more than ``compact_at``.
        ``final=True`` says this writer is done (its value may then be compacted)."""
        if self._mark is None:
            raise InvalidArgument("DatabasePolicy.save() before load(): call load() first")
        tables = policy.tables_since(self._mark)
        changed = self._saved_as != (tables, final)
        if changed and (tables or self._saved is not None):
            self._seq += 1
            writer = _record(self.writer_id, self._seq, final, time.time(), [])
            value = self._encode(tables, policy.epsilon, writer)
            if not self._write(self.database.save, value):
                return
            if self._saved is not None:
                self._write(self.database.delete, self._saved)
            self._saved, self._saved_as = value, (tables, final)
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
            (value, read)
            for value, read in self._contributions(full=False)
            if read.writer["id"] != self.writer_id
            and (read.writer["final"] or now - read.writer["saved_at"] > STALE_S)
        ]
        if len(done) <= self.compact_at:
            return
        merged = Policy()
        for value, _ in done:  # in writer order: the same bytes from any compactor
            try:
                again = self._read(value, math.inf, math.inf)
            except (PolicyFileError, ValueError, TypeError, KeyError, RecursionError) as exc:
                self._skip(value, exc)  # gone bad since it was read: compact the rest
                return
            assert again is not None and again.tables is not None
            merged.merge_tables(again.tables)
        parts = sorted(read.writer["id"] for _, read in done)
        writer = _record(
            "merge-" + hashlib.sha256(" ".join(parts).encode()).hexdigest()[:16],
            0,
            True,
            max(read.writer["saved_at"] for _, read in done),
            parts,
        )
        try:
            value = self._encode(merged.tables_since(), merged.epsilon, writer)
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


class _Read(NamedTuple):
    """One stored value as read: its writer record, inflated size, value bound and
    tables (``None`` where only the rest is kept)."""

    writer: dict[str, Any]
    n_bytes: int
    n_items: int
    tables: Tables | None


_PASSED = _Read({}, 0, 0, None)
"""Known to a store as a value it does not read (damaged, or another learner's)."""


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
