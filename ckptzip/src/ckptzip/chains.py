"""The chain store: the steps of one run as keyframes and delta chains, over a :class:`Storage`.

This is the bookkeeping half of :class:`~ckptzip.CheckpointManager` (the other half, in
:mod:`ckptzip.manager`, turns training objects into checkpoints and back). It knows step
names, parents, keyframes, retention, the writer lock and cleanup after crashed saves; it
never decodes a tensor. The split follows Orbax (a ``CheckpointManager`` over step/path
helpers and per-item handlers) and ``torch.distributed.checkpoint`` (a planner deciding what
to write over a storage writer/reader that only moves bytes).

Layout: one file per step, ``step-00000042.ckz``. Every ``keyframe_every``-th file of a
chain is a full checkpoint (a keyframe); the files between are deltas, each against one
earlier file (its *parent*), which its manifest names by file name and sha256. Which parent
is the store's ``layout`` (:data:`LAYOUTS`): ``"chain"`` (the default) takes the step saved
just before; ``"skip"`` takes, for the ``n``-th file after the keyframe, the file at position
``n - lowbit(n)``, so restoring any file decodes at most ``log2(keyframe_every) + 1`` deltas.
A reader only follows the recorded parents, whatever layout wrote them.

Call order of a save (what the manager does)::

    with store.writing():                    # writer lock, leftovers of crashed saves removed
        store.check_new(step, overwrite)     # refuse before any work is published
        parent = store.parent_chain(step)    # links to decode for the delta, or None
        ...encode against the decoded parent...
        store.publish(step, write, overwrite=overwrite)
        store.retain(step)                   # deletes only what it proves unneeded

and of a load: ``store.chain(step)`` (or :meth:`ChainStore.latest`), then decode the links
keyframe first. Readers take no lock.

The same order as the references': DCP's ``StorageWriter`` sees ``set_up_storage_writer``,
``prepare_local_plan`` / ``prepare_global_plan``, ``write_data``, then ``finish`` (the metadata
written last is the commit); Orbax's ``CheckpointManager.save`` has its handlers write into a
temporary location, finalizes it (an atomic rename, or a ``commit_success`` file on object
stores), then removes old steps, and ``wait_until_finished`` joins an asynchronous save. Here
``writing``/``check_new`` set up, ``parent_chain`` and the encoder plan, ``publish`` writes
and commits (the rename, or the marker written last), ``retain`` removes old steps, and
:meth:`ckptzip.CheckpointManager.wait` joins.

Guarantees:

* A chain is resolved iteratively (no recursion), at most :data:`MAX_CHAIN_LENGTH` files.
  Each file is read once; its sha256 is checked against its child's record and the links
  carry those very bytes, so what is decoded is what was checked.
* A step's file must record that step (:class:`~ckptzip.errors.StepMismatchError`).
* Retention deletes a file only when every kept step's chain was read without error and
  none needs it; any error keeps everything, with one :class:`~ckptzip.errors.CkptzipWarning`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import warnings
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import BinaryIO

from ckptzip import storage as _storage
from ckptzip.container import Manifest, Reader
from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    CkptzipError,
    CkptzipWarning,
    ConfigError,
    CorruptCheckpointError,
    MissingParentError,
    ParentUnusableWarning,
    StepMismatchError,
)

__all__ = [
    "LAYOUTS",
    "MAX_CHAIN_LENGTH",
    "POSITION_KEY",
    "RELIST_ATTEMPTS",
    "ChainStore",
    "Link",
    "parse_link",
    "resolve_parents",
    "step_file_name",
    "step_of",
]

#: The longest chain a reader follows, and the upper bound of ``keyframe_every``. Restoring
#: a step reads at most this many files; a chain this long loads in a fresh process in well
#: under a second per thousand small files (``tests/test_chains.py``).
MAX_CHAIN_LENGTH = 1000

#: How many times :meth:`ChainStore.latest` lists a directory again when files vanished under
#: it (a writer's retention deleting the steps it was reading). Each attempt that moves
#: forward finds a step committed after the previous listing, so a few suffice; the bound
#: keeps a reader from chasing a writer that saves faster than one chain is read.
RELIST_ATTEMPTS = 20

#: The parent rules a :class:`ChainStore` writes by (see :meth:`ChainStore.parent_chain`).
LAYOUTS = ("chain", "skip")

#: The manifest metadata key where a ``"skip"`` layout records a delta's position after its
#: keyframe (a decimal string). A file without it is one position after its parent, which is
#: what every ``"chain"`` file is (so files written before layouts existed need none).
POSITION_KEY = "chain_position"

# ASCII digits only (``\d`` also matches ``"०"`` and ``"²"``), and few enough that ``int``
# takes them (a step fits in 64 bits; ``int`` refuses strings of over 4300 digits).
_NAME = re.compile(r"step-([0-9]{8,18})\.ckz")
_POSITION = re.compile(r"[0-9]{1,18}")


def step_file_name(step: int) -> str:
    """The file name of ``step`` in a manager's directory.

    Examples
    --------
    >>> step_file_name(42)
    'step-00000042.ckz'
    """
    return f"step-{step:08d}.ckz"


def step_of(name: str) -> int | None:
    """The step a file name stands for, or ``None`` if it is not a step file.

    Examples
    --------
    >>> step_of("step-00000042.ckz"), step_of(".step-00000042.ckz.tmp-1-ab"), step_of("x")
    (42, None, None)
    """
    m = _NAME.fullmatch(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Link:
    """One file of a chain: its name, its bytes, their sha256 and its validated manifest.

    ``opened`` is the reader that validated ``manifest`` from ``data`` (when the link was
    made by :func:`parse_link` or :func:`resolve_parents`): :meth:`reader` reuses it, so a
    chain's manifests are parsed once, not again to decode.
    """

    name: str
    data: bytes
    sha256: str
    manifest: Manifest
    opened: Reader | None = field(default=None, repr=False, compare=False)

    @property
    def parent_name(self) -> str | None:
        ref = self.manifest.parent
        return None if ref is None else ref["name"]

    def reader(self, *, vouched: bool = False) -> Reader:
        """A :class:`~ckptzip.container.Reader` of the link's own bytes (chunks read from
        ``data`` and checked against their digests as they are read).

        ``vouched``: ``sha256`` was compared with the one this link's child records (every
        link of :func:`resolve_parents`), which checks every chunk of ``data`` at once: the
        reader does not hash its chunks again.
        """
        f = io.BytesIO(self.data)
        opened = self.opened
        if opened is None or opened.manifest is not self.manifest:
            opened = Reader(io.BytesIO(self.data), name=repr(self.name))
        return opened.reopen(f, checked=vouched)


def _link(name: str, data: bytes, sha256: str) -> Link:
    reader = Reader(io.BytesIO(data), name=repr(name))
    return Link(name, data, sha256, reader.manifest, reader)


def parse_link(name: str, data: bytes) -> Link:
    """Validate a file's header and manifest from its bytes (reads no chunk)."""
    return _link(name, data, _sha256_hex(data))


def resolve_parents(
    child: str,
    manifest: Manifest,
    read: Callable[[str], bytes],
    where: str,
    known: Callable[[str], bool] | None = None,
) -> list[Link]:
    """The files a delta needs, keyframe first, each read once and checked against its child.

    ``read(name)`` returns a sibling file's bytes. Iterative, so any allowed chain length
    resolves in any process. With ``known(sha256)`` true for a parent (already decoded, in
    the caller's cache), resolution stops there: that parent is checked (present, same
    sha256) and its own parents are not read.

    Each file is hashed on a helper thread (hashlib releases the GIL) while this one parses
    its manifest and reads its parent; the errors are those of checking one file after the
    other: a file whose sha256 differs from its child's record is reported before anything
    found past it (its manifest, its parent), which only a trusted file leads to.

    Raises
    ------
    MissingParentError
        A parent is missing, altered (sha256 differs), or the names make a cycle.
    CorruptCheckpointError
        The chain is longer than :data:`MAX_CHAIN_LENGTH`, or a file is damaged.
    """
    if manifest.parent is None:
        return []
    out: list[Link] = []
    # (child, parent, the sha256 the child records, the parent's digest)
    hashes: list[tuple[str, str, str, Future[str]]] = []
    seen = {child}
    name = child
    ref: dict[str, str] | None = manifest.parent
    with ThreadPoolExecutor(1, thread_name_prefix="ckptzip-hash") as hasher:
        try:
            while ref is not None:
                if len(out) >= MAX_CHAIN_LENGTH:
                    raise CorruptCheckpointError(
                        f"{child!r}: delta chain longer than {MAX_CHAIN_LENGTH} files"
                    )
                pname = ref["name"]
                if "/" in pname or "\\" in pname or pname in seen:
                    raise MissingParentError(
                        f"{name!r} names {pname!r} as its parent, which is not a sibling file or "
                        f"makes a cycle: {where} is damaged"
                    )
                try:
                    data = read(pname)
                except CheckpointNotFoundError:
                    raise MissingParentError(
                        f"{name!r} is a delta against {pname!r}, which is missing from {where}; "
                        "restore that file to read this one"
                    ) from None
                hashes.append((name, pname, ref["hash"], hasher.submit(_sha256_hex, data)))
                link = _link(pname, data, ref["hash"])
                out.append(link)
                # a file whose digest is not the recorded one is refused below
                if known is not None and known(ref["hash"]):
                    break
                seen.add(pname)
                name, ref = pname, link.manifest.parent
        except Exception:
            # what went wrong past an altered file is that file's fault: report it instead
            altered = _first_altered(hashes)
            if altered is not None:
                raise altered from None
            raise
        altered = _first_altered(hashes)
        if altered is not None:
            raise altered
    return out[::-1]


def _first_altered(hashes: list[tuple[str, str, str, Future[str]]]) -> MissingParentError | None:
    """The error of the first file (from the child) whose sha256 is not the one its child
    records, if any: what checking one file after the other raises first."""
    for cname, pname, recorded, pending in hashes:
        digest = pending.result()
        if digest != recorded:
            return MissingParentError(
                f"{cname!r} is a delta against {pname!r} with sha256 {recorded[:12]}..., "
                f"but that file now has sha256 {digest[:12]}...: it was altered or replaced"
            )
    return None


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def skip_parent(n: int) -> int:
    """The position a ``"skip"`` layout codes the ``n``-th file after a keyframe against.

    ``n - lowbit(n)``: odd positions take the previous file, ``2, 4, 8, ...`` the keyframe.
    The parent is always a file of the chain of position ``n - 1`` (clearing the trailing
    ones of ``n - 1`` gives it), so the previous step's chain holds it.

    Examples
    --------
    >>> [skip_parent(n) for n in range(1, 10)]
    [0, 0, 2, 0, 4, 4, 6, 0, 8]
    """
    return n - (n & -n)


def positions(chain: list[Link]) -> list[int]:
    """Each link's position after its keyframe (keyframe first, ``0``).

    Read from :data:`POSITION_KEY` where a link records one that follows its parent's;
    otherwise (a ``"chain"`` file, a file written before layouts existed, a value that makes
    no sense) the parent's position plus one.
    """
    out: list[int] = []
    for i, link in enumerate(chain):
        if i == 0 or link.manifest.parent is None:
            out.append(0 if link.manifest.parent is None else i)
            continue
        raw = link.manifest.metadata.get(POSITION_KEY, "")
        pos = out[-1] + 1
        if _POSITION.fullmatch(raw) and out[-1] < int(raw) < MAX_CHAIN_LENGTH:
            pos = int(raw)
        out.append(pos)
    return out


class ChainStore:
    """The steps of one run in a :class:`~ckptzip.storage.Storage`.

    Parameters
    ----------
    storage:
        Where the files live (:func:`ckptzip.storage.open_storage`).
    keyframe_every:
        A full checkpoint every this many files of a chain (``1 ..`` :data:`MAX_CHAIN_LENGTH`).
    keep:
        Keep the ``keep`` most recent steps (and the step just saved) restorable; ``None``
        keeps everything.
    layout:
        Which earlier file a delta is coded against (:data:`LAYOUTS`): ``"chain"``, the step
        saved just before; ``"skip"``, the file at position ``n - lowbit(n)`` of the keyframe's
        run (:func:`skip_parent`).
    """

    def __init__(
        self,
        storage: _storage.Storage,
        *,
        keyframe_every: int,
        keep: int | None,
        layout: str = "chain",
    ) -> None:
        if layout not in LAYOUTS:
            raise ConfigError(f"layout={layout!r} must be one of {', '.join(map(repr, LAYOUTS))}")
        if isinstance(keyframe_every, bool) or not isinstance(keyframe_every, int):
            raise ConfigError(f"keyframe_every={keyframe_every!r} must be an integer >= 1")
        if not 1 <= keyframe_every <= MAX_CHAIN_LENGTH:
            raise ConfigError(
                f"keyframe_every={keyframe_every!r} must be between 1 (every step in full) and "
                f"{MAX_CHAIN_LENGTH} (the longest chain a reader follows)"
            )
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ConfigError(f"keep={keep!r} must be None (keep all) or an integer >= 1")
        self.storage = storage
        self.keyframe_every = keyframe_every
        self.keep = keep
        self.layout = layout
        self._cleaned = False
        self._warned: set[str] = set()
        # File content (sha256) → (name, parent's sha256, chain length): the parent's hash is
        # in the content, so content fixes the chain; only the files' presence can change.
        self._seen: dict[str, tuple[str, str | None, int]] = {}

    @property
    def location(self) -> str:
        return self.storage.location

    def path(self, step: int) -> str:
        """The path or URL of ``step``'s file (whether or not it exists)."""
        return self.storage.path(step_file_name(step))

    def steps(self) -> list[int]:
        """The committed steps, ascending (temp files and markers never count)."""
        return sorted(s for s in map(step_of, self.storage.names()) if s is not None)

    # -- reading ---------------------------------------------------------------------------

    def _check_identity(self, step: int, manifest: Manifest) -> None:
        recorded = manifest.metadata.get("step")
        if recorded is not None and recorded != str(step):
            raise StepMismatchError(
                f"{step_file_name(step)} in {self.location!r} records step {recorded}: the "
                "file was renamed or swapped; move it back under its own step name"
            )

    def _read(self, name: str) -> bytes:
        step = step_of(name)
        if step is None:
            raise CheckpointNotFoundError(f"{name!r} is not a step file of {self.location!r}")
        return self.storage.read(name)

    def read(self, step: int) -> Link:
        """The file of ``step``, read once and checked to be that step's.

        Raises
        ------
        CheckpointNotFoundError
            No committed file for ``step``.
        StepMismatchError
            The file records another step.
        """
        name = step_file_name(step)
        try:
            link = parse_link(name, self.storage.read(name))
        except CheckpointNotFoundError:
            raise CheckpointNotFoundError(
                f"no finished checkpoint for step {step} in {self.location!r}; "
                f"available steps: {_short(self.steps())}"
            ) from None
        self._check_identity(step, link.manifest)
        return link

    def chain(self, step: int, known: Callable[[str], bool] | None = None) -> list[Link]:
        """The files restoring ``step`` reads, keyframe first, ``step`` last; each read once.

        With ``known`` (see :func:`resolve_parents`) the chain may start at a parent already
        decoded rather than at the keyframe.

        Raises
        ------
        CheckpointNotFoundError
            ``step`` does not exist.
        MissingParentError
            A parent on the way is missing or altered.
        StepMismatchError, CorruptCheckpointError, StorageError
            A file is swapped, damaged or unreadable.
        """
        top = self.read(step)
        where = repr(self.location)
        parents = resolve_parents(top.name, top.manifest, self._read, where, known)
        if parents and parents[0].manifest.parent is not None:
            # Stopped at a parent decoded before: its ancestors must still be there, as a
            # fresh process would need them; if that is not known, resolve the whole chain.
            listed = {step_file_name(s) for s in self.steps()}
            if self._intact_length(parents[0].sha256, listed) is None:
                parents = resolve_parents(top.name, top.manifest, self._read, where)
        else:
            for i, link in enumerate([*parents, top]):
                parent = None if i == 0 else parents[i - 1].sha256
                self._seen[link.sha256] = (link.name, parent, i + 1)
        for link in parents:
            s = step_of(link.name)
            assert s is not None  # _read admits step names only
            self._check_identity(s, link.manifest)
        return [*parents, top]

    def chain_steps(self, step: int) -> list[int]:
        """The steps of :meth:`chain` (reads headers and manifests only, checks no hash)."""
        out = [step]
        ref = self._manifest(step).parent
        while ref is not None:
            parent = step_of(ref["name"])
            if parent is None or parent >= out[-1] or len(out) >= MAX_CHAIN_LENGTH:
                raise MissingParentError(
                    f"{step_file_name(out[-1])} names {ref['name']!r} as its parent, which is not "
                    f"an earlier step: {self.location!r} is damaged"
                )
            try:
                manifest = self._manifest(parent)
            except CheckpointNotFoundError:
                raise MissingParentError(
                    f"{step_file_name(out[-1])} is a delta against {ref['name']!r}, which is "
                    f"missing from {self.location!r}; step {step} cannot be restored"
                ) from None
            out.append(parent)
            ref = manifest.parent
        return out[::-1]

    def _manifest(self, step: int) -> Manifest:
        link = self.read(step)
        return link.manifest

    def latest(
        self, newest: int | None = None, known: Callable[[str], bool] | None = None
    ) -> tuple[list[Link], list[tuple[int, str]]]:
        """The chain of the latest restorable step, and the newer steps skipped with why.

        ``newest`` bounds the search (steps above it are not considered); ``known`` as for
        :meth:`chain`. Readers take no lock, so a writer may publish and retention delete
        files while this reads: when a step was skipped and the listing changed meanwhile,
        it lists again (at most :data:`RELIST_ATTEMPTS` times) rather than report a step
        that vanished under it as unrestorable.

        Raises
        ------
        CheckpointNotFoundError
            No step restores (the message lists why each was skipped).
        """
        for _ in range(RELIST_ATTEMPTS):
            steps = self.steps()
            found, skipped = self._latest_of(steps, newest, known)
            if not skipped or self.steps() == steps:
                break  # nothing was skipped, or nothing moved under the reader: final
        if found is not None:
            return found, skipped
        if not skipped:
            raise CheckpointNotFoundError(f"no finished checkpoint in {self.location!r} yet")
        raise unrestorable(self.location, skipped)

    def _latest_of(
        self, steps: list[int], newest: int | None, known: Callable[[str], bool] | None
    ) -> tuple[list[Link] | None, list[tuple[int, str]]]:
        skipped: list[tuple[int, str]] = []
        for step in reversed(steps):
            if newest is not None and step > newest:
                continue
            try:
                return self.chain(step, known), skipped
            except (CkptzipError, OSError) as exc:
                skipped.append((step, f"{type(exc).__name__}: {exc}"))
        return None, skipped

    # -- writing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the writer lock; the first time, remove what crashed saves left behind."""
        with self.storage.lock():
            if not self._cleaned:
                self.storage.cleanup(lambda name: step_of(name) is not None)
                self._cleaned = True
            yield

    def check_new(
        self,
        step: int,
        *,
        overwrite: bool,
        steps: list[int],
        replaceable: Collection[int] = (),
    ) -> None:
        """Refuse a save of ``step`` that would clobber a step or one later deltas need.

        ``replaceable``: steps known not to restore (a restore skipped them); they never
        count as deltas that need ``step``.
        """
        if step not in steps:
            return
        if not overwrite:
            raise CheckpointExistsError(
                f"step {step} already exists ({self.path(step)!r}); pass overwrite=True to "
                "replace it, or save under another step"
            )
        dependents = []
        for s in steps:
            if s > step and s not in replaceable:
                try:
                    needs = step in self.chain_steps(s)
                except (CkptzipError, OSError):
                    needs = True  # cannot prove it does not: keep the parent
                if needs:
                    dependents.append(s)
        if dependents:
            raise CheckpointExistsError(
                f"step {step} cannot be overwritten: steps {_short(dependents)} may be deltas "
                "that need it; save under another step"
            )

    def parent_chain(
        self, step: int, steps: list[int], known: Callable[[str], bool] | None = None
    ) -> list[Link] | None:
        """The chain to delta ``step`` against (its last link is the parent), or ``None``.

        ``None`` (a keyframe) when deltas are off, no earlier step exists, the new file would
        be the ``keyframe_every``-th of its run, or the previous step's chain cannot be read: a
        damaged chain ends there and the new file starts a fresh one, with a
        :class:`~ckptzip.errors.ParentUnusableWarning` saying why.

        ``"chain"`` layout: the parent is the previous step. When it is ``known`` (decoded in
        the caller's cache) and its chain length was seen before, only it is read: saving the
        n-th delta costs one read, not n. ``"skip"`` layout: the previous step's chain is read
        (at most ``log2(keyframe_every) + 2`` files) and the parent is its link at position
        :func:`skip_parent` of the new file's (:meth:`plan` says which position).
        """
        return self.plan(step, steps, known)[0]

    def plan(
        self, step: int, steps: list[int], known: Callable[[str], bool] | None = None
    ) -> tuple[list[Link] | None, int]:
        """:meth:`parent_chain`, and the new file's position after its keyframe (``0`` for a
        keyframe), which a ``"skip"`` delta records under :data:`POSITION_KEY`."""
        if self.keyframe_every == 1:
            return None, 0
        earlier = [s for s in steps if s < step]
        if not earlier:
            return None, 0
        try:
            if self.layout == "skip":
                chain = self.chain(earlier[-1])
                at = positions(chain)
                n = at[-1] + 1
                if n >= self.keyframe_every:
                    return None, 0
                want = skip_parent(n)
                # a run begun by another layout may lack that position: the previous file
                return (chain[: at.index(want) + 1] if want in at else chain), n
            top = self.read(earlier[-1])
            length = self._intact_length(top.sha256, {step_file_name(s) for s in steps})
            if length is not None and known is not None and known(top.sha256):
                chain = [top]
            else:
                chain = self.chain(earlier[-1])
                length = len(chain)
        except (CkptzipError, OSError, ValueError) as exc:
            # ValueError: a value in the parent's file that no check above foresaw is damage
            # of that parent too, and a damaged parent never stops checkpointing
            warn_keyframe(step, earlier[-1], exc)
            return None, 0
        return (chain, length) if length < self.keyframe_every else (None, 0)

    def _intact_length(self, sha256: str, listed: set[str]) -> int | None:
        """The chain length of a file seen before whose ancestors are all still listed."""
        entry = self._seen.get(sha256)
        length = None if entry is None else entry[2]
        while entry is not None:
            name, parent, _ = entry
            if name not in listed:
                return None
            if parent is None:
                return length
            entry = self._seen.get(parent)
        return None

    def note(self, link_name: str, sha256: str, parent: str | None) -> None:
        """Record a file just written: its name, content hash and parent's content hash."""
        above = None if parent is None else self._seen.get(parent)
        if parent is None or above is not None:
            self._seen[sha256] = (link_name, parent, 1 if above is None else above[2] + 1)

    def publish(self, step: int, write: Callable[[BinaryIO], object], *, overwrite: bool) -> int:
        """Write ``step``'s file atomically (under :meth:`writing`); returns its size."""
        return self.storage.publish(step_file_name(step), write, overwrite=overwrite)

    def retain(self, just_saved: int | None = None) -> list[int]:
        """Apply ``keep``: delete the steps no kept step needs; returns the deleted steps.

        Kept: the ``keep`` most recent steps and ``just_saved`` (a report never names a
        deleted file). Needed: every file of a kept step's chain. If any kept chain cannot
        be read (unreadable, corrupt, missing parent, I/O error), nothing is deleted and a
        :class:`~ckptzip.errors.CkptzipWarning` says why, once per distinct problem.
        Deletion goes newest first, so an interrupted retention leaves every remaining file
        with its parent.
        """
        if self.keep is None:
            return []
        steps = self.steps()
        kept = set(steps[-self.keep :])
        if just_saved is not None and just_saved in steps:
            kept.add(just_saved)
        needed: set[int] = set()
        problems: list[str] = []
        for s in sorted(kept):
            try:
                needed.update(self.chain_steps(s))
            except (CkptzipError, OSError) as exc:
                problems.append(f"step {s}: {type(exc).__name__}: {exc}")
        if problems:
            message = (
                f"retention in {self.location!r} deleted nothing: it cannot prove which files "
                "the kept steps need (" + "; ".join(problems) + ")"
            )
            if message not in self._warned:
                self._warned.add(message)
                warnings.warn(message, CkptzipWarning, stacklevel=3)
            return []
        doomed = sorted(set(steps) - needed, reverse=True)
        for s in doomed:
            self.storage.delete(step_file_name(s))
        return doomed


def unrestorable(location: str, skipped: list[tuple[int, str]]) -> CheckpointNotFoundError:
    """The error of a directory whose every step was skipped, naming each and why."""
    why = "".join(f"\n  step {s}: {reason}" for s, reason in skipped)
    exc = CheckpointNotFoundError(f"no restorable checkpoint in {location!r}; skipped:{why}")
    exc.skipped = list(skipped)  # type: ignore[attr-defined]
    return exc


def warn_keyframe(step: int, parent: int, exc: BaseException) -> None:
    """Say that ``step`` starts a new keyframe because ``parent`` cannot be its parent."""
    warnings.warn(
        f"step {step} is saved as a new keyframe, not a delta: step {parent} cannot be its "
        f"parent ({type(exc).__name__}: {exc})",
        ParentUnusableWarning,
        stacklevel=4,
    )


def _short(steps: list[int]) -> str:
    if len(steps) <= 8:
        return str(steps)
    return f"[{steps[0]}, {steps[1]}, ..., {steps[-1]}] ({len(steps)} steps)"
