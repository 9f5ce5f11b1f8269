"""The ``ckptzip`` command line.

``compress`` / ``decompress`` convert between ``torch.save`` (or ``.safetensors``) files and
``.ckz``; ``inspect`` shows what a file holds and how each tensor was stored; ``verify``
checks every checksum (and with ``--decode`` decodes everything). Every file or directory
argument may also be an fsspec URL (``s3://bucket/run/step_10.ckz``, ``memory://...``; the
``remote`` extra), read and written through :mod:`ckptzip.storage`. Errors of the package
become one-line messages and exit status 1.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import click

from ckptzip import __version__
from ckptzip.errors import (
    CheckpointExistsError,
    CkptzipError,
    CorruptCheckpointError,
    UnsupportedFormatError,
)

if TYPE_CHECKING:
    from rich.console import Console

    from ckptzip.codecs.base import Description
    from ckptzip.container import TensorEntry

# torch (seconds to import on a loaded machine), rich and the package's pipeline are imported
# by the commands that use them, never at import: `--help`, `--version` and argument errors
# answer at once (tests/test_cli.py checks that torch stays out of sys.modules).

# Progress bars appear only when a file is big enough for the wait to be noticeable.
PROGRESS_MIN_BYTES = 64 << 20

# Piped output (logs, files, `| grep`) is never wrapped: each row stays on one line, however
# long its tensor path. Rich needs some width; this one is wider than any table it makes.
UNWRAPPED_WIDTH = 100_000

# What a terminal acts on instead of showing: C0 controls, DEL, C1 controls, and the
# bidirectional overrides that reorder the text around them ("Trojan Source").
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _printable(text: object) -> str:
    r"""``text`` with each control character as its Python escape (``\x1b``, ``\n``).

    Text from a file (a tensor path, metadata, a note, an error naming them) can then
    neither drive the terminal (set its title, clear it, forge output) nor break a row.

    Examples
    --------
    >>> _printable("a\x1b[2Jb\n")
    'a\\x1b[2Jb\\n'
    """
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def _shown(text: object) -> str:
    """``text`` (from a file, or a path typed by the user) as rich may print it: controls
    escaped (:func:`_printable`) and rich's markup escaped, so ``[/bold]`` in a tensor's
    name prints as it is instead of failing, and ``[link=...]`` makes no hyperlink.

    Every string the commands print that they did not write themselves goes through this.
    """
    from rich.markup import escape

    return escape(_printable(text))


class _Stdout:
    """Prints through a rich ``Console`` made for the stdout and environment of the moment.

    Made at each print, not at import: a command run in-process (click's test runner, a
    notebook) writes to the stdout of its own run. A terminal gets its own width (``COLUMNS``
    set by the user wins), where a long path may fold inside its column; piped output is
    not wrapped at all (:data:`UNWRAPPED_WIDTH`).
    """

    def print(self, *objects: Any, **kwargs: Any) -> None:
        from rich.console import Console

        # emoji=False: a ":thumbs_up:" in a tensor's name stays text (markup is escaped)
        if sys.stdout.isatty() or "COLUMNS" in os.environ:
            console = Console(emoji=False)
        else:
            console = Console(width=UNWRAPPED_WIDTH, soft_wrap=True, emoji=False)
        console.print(*objects, **kwargs)


console = _Stdout()


def _err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, emoji=False)


@contextlib.contextmanager
def _progress(label: str, size: int) -> Iterator[Callable[[int, int], None] | None]:
    if size < PROGRESS_MIN_BYTES:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=_err_console(),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@contextlib.contextmanager
def _errors(src: str | None = None) -> Iterator[None]:
    """The package's errors become one-line messages (exit status 1) that name ``src`` and
    say what to type on the command line."""
    try:
        yield
    except CkptzipError as exc:
        message = str(exc)
        if isinstance(exc, CorruptCheckpointError) and src is not None and src not in message:
            message = f"{src}: {message}"  # "the file is truncated": which file
        if isinstance(exc, CheckpointExistsError):
            if "overwrite=True" in message:
                message = message.replace("overwrite=True", "--overwrite")
            else:
                message += " (pass --overwrite to replace it)"
        raise click.ClickException(_printable(message)) from exc


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - loop always returns


def _ratio(tensor_bytes: int, file_bytes: int) -> float | None:
    return tensor_bytes / file_bytes if file_bytes else None


#: Manifest metadata key under which ``compress`` keeps a .safetensors file's own header
#: metadata (JSON), so that ``decompress`` gives it back (transformers reads its "format").
SAFETENSORS_METADATA = "safetensors.metadata"


def _safetensors_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a .safetensors file's header (the file was parsed already)."""
    try:
        n = int.from_bytes(data[:8], "little")
        meta = json.loads(data[8 : 8 + n]).get("__metadata__") or {}
    except (ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {}


def _numpy_globals() -> list[Any]:
    """What pickled NumPy arrays need under ``weights_only`` (an RNG state; the Trainer's
    rng_state.pth): the array constructor and the dtype classes, none of which runs code."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - torch ships with NumPy in practice
        return []
    core = getattr(np, "_core", None) or np.core
    found: list[Any] = [core.multiarray._reconstruct, np.ndarray, np.dtype]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        found += [getattr(dtypes, n) for n in dir(dtypes) if n.endswith("DType")]
    return found


def _read_input(path: str) -> tuple[Any, dict[str, str]]:
    """A torch.save file (weights_only: no arbitrary code) or a .safetensors file, and the
    metadata to keep in the manifest (a .safetensors file's header metadata)."""
    from ckptzip import storage
    from ckptzip.container import MAGIC

    data = storage.read_bytes(path)  # one read, local or remote; a missing file is our error
    if path.endswith(".safetensors"):
        try:
            from safetensors.torch import load as st_load
        except ImportError:
            raise click.ClickException(
                "reading .safetensors needs the safetensors package: "
                "pip install 'ckptzip[safetensors]'"
            ) from None
        try:
            tensors = st_load(data)
        except Exception as exc:  # the library's own error types vary across versions
            raise click.ClickException(
                _printable(f"cannot read {path!r} as safetensors: {exc}")
            ) from exc
        meta = _safetensors_metadata(data)
        return tensors, ({SAFETENSORS_METADATA: json.dumps(meta)} if meta else {})
    if data.startswith(MAGIC):
        raise click.ClickException(
            f"{path!r} is already a ckptzip file: `ckptzip inspect` shows it, `ckptzip "
            "decompress` turns it back into a torch.save file"
        )
    # torch.save writes a zip archive (torch >= 1.6) or a pickle (protocol 2+: byte 0x80)
    if not (data.startswith(b"PK\x03\x04") or data[:1] == b"\x80"):
        raise click.ClickException(
            f"{path!r} is not a checkpoint: a torch.save file is a zip archive (or, before "
            f"torch 1.6, a pickle) and this one begins with {data[:16]!r}; a .safetensors "
            "file needs that extension"
        )
    import torch

    allowed = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
    try:
        with allowed(_numpy_globals()) if allowed else contextlib.nullcontext():
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True), {}
    except Exception as exc:
        if "Weights only load failed" in str(exc) and "nsupported operand" not in str(exc):
            # torch's message is many lines of advice (weights_only=False among them); keep
            # only what the file holds that needs unpickling
            found = re.search(r"GLOBAL ([\w.]+)", str(exc))
            what = f" (it holds {found.group(1)})" if found else ""
            raise click.ClickException(
                f"cannot read {path!r} with torch.load(weights_only=True){what}: ckptzip "
                "compresses tensors, numbers, strings and containers of them, and refuses "
                "objects that need arbitrary unpickling; for a whole module saved with "
                "torch.save(model), save model.state_dict() instead"
            ) from exc
        raise click.ClickException(
            _printable(
                f"cannot read {path!r}: the torch.save file is truncated or damaged "
                f"({type(exc).__name__}: {exc})"
            )
        ) from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ckptzip")
def main() -> None:
    """Compress PyTorch training checkpoints, inspect and verify them."""


# File arguments are plain strings, not click.Path(exists=True): they may be URLs, which the
# storage layer resolves (and reports missing with the package's own error).
@main.command()
@click.argument("src")
@click.option("-o", "--output", help="Output .ckz file [default: SRC with .ckz appended].")
@click.option(
    "--bins",
    type=int,
    default=None,
    help="Quantization levels of every lossy tensor [default: a file standing alone's: 32 for "
    "weights, 8 for Adam's first moment, 4 for its second; 16 with --prune or --protect].",
)
@click.option("--prune", type=float, default=0.0, show_default=True, help="Fraction zeroed.")
@click.option(
    "--protect", type=float, default=0.0005, show_default=True, help="Fraction kept exact."
)
@click.option(
    "--exact",
    multiple=True,
    help="Path pattern kept bit-exact (repeatable; fnmatch against '/'-joined paths such as "
    "'model/fc.weight'; --exact '*' makes the whole file lossless).",
)
@click.option(
    "--min-numel",
    type=int,
    default=4096,
    show_default=True,
    help="Smaller tensors stay exact.",
)
@click.option("--level", type=int, default=3, show_default=True, help="zstd level.")
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
def compress(
    src: str,
    output: str | None,
    bins: int | None,
    prune: float,
    protect: float,
    exact: tuple[str, ...],
    min_numel: int,
    level: int,
    overwrite: bool,
    as_json: bool,
) -> None:
    """Compress SRC (a torch.save file or .safetensors) into a .ckz file.

    LOSSY by default: floating-point tensors of at least --min-numel elements are quantized
    (integers, small tensors and step counters stay bit-exact), at a file standing alone's
    levels (CompressionConfig.standalone) or at --bins levels. For a bit-exact file pass
    --exact '*'.
    """
    from ckptzip import api, storage
    from ckptzip.config import CompressionConfig, QuantConfig, StandaloneConfig
    from ckptzip.structure import flatten

    out = output or src + ".ckz"
    with _errors():
        quant = QuantConfig(bins=16 if bins is None else bins, prune=prune, protect=protect)
        config = CompressionConfig(
            quant=quant,
            exact=exact,
            min_numel=min_numel,
            zstd_level=level,
            # --bins named: those levels for every tensor, 16 included
            standalone=StandaloneConfig() if bins is None else None,
        )
        storage.check_target(out, overwrite=overwrite)
        size = storage.file_size(src)
        obj, metadata = _read_input(src)
        paths = [p for p, _ in flatten(obj)[1]]
        for pat in exact:
            if not any(CompressionConfig(exact=(pat,)).is_exact(p) for p in paths):
                example = paths[0] if paths else "model/fc.weight"
                _err_console().print(
                    f"warning: --exact {_shown(repr(pat))} matches no tensor; paths are "
                    f"'/'-joined, e.g. {_shown(repr(example))} (a pattern like "
                    f"{_shown(repr(pat.rstrip('/*') + '/*'))} matches everything below a key)"
                )
        with _progress("compressing", size) as progress:
            report = api.save(
                obj, out, config=config, overwrite=overwrite, metadata=metadata, progress=progress
            )
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=1))
        return
    lossy = [e for e in report.entries if e.config is not None]
    console.print(
        f"{_shown(src)} -> {_shown(out)}: "
        f"{_fmt_bytes(report.bytes_in)} -> {_fmt_bytes(report.bytes_out)} "
        f"in {report.seconds:.2f} s: ratio [bold]{report.ratio:.2f}x[/bold], "
        f"tensor ratio {report.tensor_ratio:.2f}x"
    )
    if lossy:
        measured = [e for e in lossy if e.rel_error is not None]
        worst = max(measured, key=lambda e: e.rel_error or 0.0, default=None)
        err = (
            ""
            if worst is None
            else f", largest relative error {worst.rel_error:.1e} ({_shown(worst.path)})"
        )
        levels = sorted({e.config.bins for e in lossy if e.config is not None})
        console.print(
            f"[bold]lossy[/bold]: {len(lossy)} of {len(report.entries)} tensors quantized to "
            f"{'/'.join(map(str, levels))} levels{err}; for a bit-exact file pass --exact '*'"
        )
    else:
        console.print(f"lossless: all {len(report.entries)} tensors stored bit-exact")
    console.print(f"{api.RATIO}; {api.TENSOR_RATIO}")


@main.command()
@click.argument("src")
@click.option(
    "-o", "--output", required=True, help="Output file: .pt (torch.save) or .safetensors."
)
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists.")
def decompress(src: str, output: str, overwrite: bool) -> None:
    """Decode a .ckz file into a torch.save file (or .safetensors)."""
    import torch

    from ckptzip import api, storage

    with _errors(src):
        storage.check_target(output, overwrite=overwrite)
        with _progress("decoding", storage.file_size(src)) as progress:
            obj = api.load(src, progress=progress)
        if output.endswith(".safetensors"):
            try:
                from safetensors.torch import save as st_save
            except ImportError:
                raise click.ClickException(
                    "writing .safetensors needs the safetensors package: "
                    "pip install 'ckptzip[safetensors]'"
                ) from None
            tensors = _flat_tensors(obj, src)
            kept = api.read_manifest(src).metadata.get(SAFETENSORS_METADATA)
            meta = {"format": "pt"}  # what transformers' loaders check for
            with contextlib.suppress(ValueError, AttributeError):
                meta.update({str(k): str(v) for k, v in json.loads(kept or "{}").items()})
            payload = st_save(tensors, metadata=meta)
            size = storage.atomic_write(output, lambda f: f.write(payload), overwrite=overwrite)
        else:
            size = storage.atomic_write(output, lambda f: torch.save(obj, f), overwrite=overwrite)
    console.print(f"{_shown(src)} -> {_shown(output)}: {_fmt_bytes(size)}")


def _flat_tensors(obj: Any, src: str) -> dict[str, Any]:
    """``obj`` as safetensors holds it: every name of a flat mapping of names to tensors, a
    name whose tensor shares memory with an earlier one (tied weights, views) as its own
    copy, since safetensors refuses shared tensors. Anything else is refused: a nested
    checkpoint has no faithful safetensors form (write a torch.save file instead)."""
    import torch

    if not isinstance(obj, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()
    ):
        what = type(obj).__name__
        if isinstance(obj, Mapping):
            bad = next(
                k
                for k, v in obj.items()
                if not (isinstance(k, str) and isinstance(v, torch.Tensor))
            )
            what = f"a mapping whose entry {bad!r} is not a tensor"
        raise click.ClickException(
            _printable(
                f"{src!r} holds {what}: a .safetensors file holds a flat mapping of names to "
                "tensors only; decompress it to a torch.save file (.pt) instead"
            )
        )
    seen: set[int] = set()
    tensors = {}
    for name, t in obj.items():
        storage = t.untyped_storage().data_ptr() if t.numel() else None
        shared = storage is not None and storage in seen
        if storage is not None:
            seen.add(storage)
        tensors[name] = t.clone(memory_format=torch.contiguous_format) if shared else t.contiguous()
    return tensors


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.2f}"


def _inspect_directory(directory: str, as_json: bool) -> None:
    """The chain table of a CheckpointManager directory (``ckptzip inspect DIR``)."""
    from rich.table import Table

    from ckptzip.api import TENSOR_RATIO
    from ckptzip.manager import describe_directory

    with _errors():
        entries = describe_directory(directory)
    if as_json:
        click.echo(json.dumps([e.to_json() for e in entries], indent=1))
        return
    table = Table(title=f"{_shown(directory)}: {len(entries)} checkpoints")
    for col in ("step", "kind", "bytes", "tensor ratio", "parent", "status"):
        table.add_column(col, justify="left" if col in ("kind", "parent", "status") else "right")
    for e in entries:
        table.add_row(
            str(e.step),
            _shown(e.kind),
            _fmt_bytes(e.bytes),
            f"{e.tensor_ratio:.2f}x" if e.bytes else "",
            "" if e.parent_step is None else str(e.parent_step),
            _shown(e.status),  # names parents and files as the directory has them
        )
    console.print(table)
    if not entries:
        console.print(
            f"{_shown(directory)} holds no step-NNNNNNNN.ckz file (a CheckpointManager's); "
            "`ckptzip inspect FILE` shows one .ckz file"
        )
    total = sum(e.bytes for e in entries)
    raw = sum(e.tensor_bytes for e in entries)
    if total:
        console.print(
            f"total {_fmt_bytes(total)} for {_fmt_bytes(raw)} of tensors (tensor ratio "
            f"{raw / total:.2f}x); {TENSOR_RATIO}"
        )


def _describe(entry: TensorEntry) -> Description:
    """The entry's codec describes it (an uninstalled codec: nothing to say)."""
    from ckptzip.codecs.base import Description, get_codec

    try:
        return get_codec(entry.codec).describe(entry.meta)
    except UnsupportedFormatError:
        return Description(note=f"codec {entry.codec!r} is not installed")


@main.command()
@click.argument("src")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest summary as JSON.")
def inspect(src: str, as_json: bool) -> None:
    """Show each tensor's shape, dtype, codec, bins, pruned/protected %, bytes, tensor ratio, error
    and a note (why an exact tensor is exact, how a delta entry was stored).

    Given a CheckpointManager directory, show its chain instead: step, kind (full/delta),
    bytes, tensor ratio, parent step, and whether the step can be restored (parents present
    and unaltered, every chunk checksum intact: "damaged: ..." otherwise).
    """
    from rich.table import Table

    from ckptzip import api, storage
    from ckptzip.api import TENSOR_RATIO

    with _errors(src):
        if storage.is_dir(src):
            _inspect_directory(src, as_json)
            return
        manifest = api.read_manifest(src)
        file_size = storage.file_size(src)
    rows: list[dict[str, Any]] = []
    for e in manifest.tensors:
        stored = sum(manifest.chunks[e.chunks[0] + j].length for j in range(e.chunks[1]))
        cfg = e.config or {}
        desc = _describe(e)
        protected = desc.protected / e.numel if desc.protected is not None and e.numel else None
        rows.append(
            {
                "path": e.path,
                "shape": list(e.shape),
                "dtype": e.dtype,
                "codec": e.codec,
                "bins": cfg.get("bins"),
                "pruned": cfg.get("prune"),
                "protected": protected,
                "bytes": stored,
                "nbytes": e.nbytes,
                "tensor_ratio": _ratio(e.nbytes, stored),
                "rel_error": e.rel_error,
                "note": desc.note,
            }
        )
    total_in = sum(r["nbytes"] for r in rows)
    summary = {
        "file": src,
        "format_version": manifest.version,
        "created_by": manifest.created_by,
        "parent": manifest.parent,
        "metadata": manifest.metadata,
        "tensor_bytes": total_in,
        "file_bytes": file_size,
        "tensor_ratio": _ratio(total_in, file_size),
        "tensor_ratio_definition": TENSOR_RATIO,
        "tensors": rows,
    }
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    table = Table(title=_shown(f"{src} (format v{manifest.version}, {manifest.created_by})"))
    for col, justify in [
        ("path", "left"),
        ("shape", "right"),
        ("dtype", "left"),
        ("codec", "left"),
        ("bins", "right"),
        ("pruned%", "right"),
        ("prot.%", "right"),
        ("bytes", "right"),
        ("t.ratio", "right"),
        ("rel.err", "right"),
        ("note", "left"),
    ]:
        # only the path may wrap: numbers broken over lines are unreadable
        table.add_column(
            col,
            justify=justify,  # type: ignore[arg-type]
            overflow="fold" if col in ("path", "note") else "ellipsis",
            min_width=20 if col == "path" else None,
            no_wrap=col not in ("path", "note"),
        )
    for r in rows:
        table.add_row(
            _shown(r["path"]),
            "×".join(map(str, r["shape"])) or "()",
            _shown(r["dtype"]),
            _shown(r["codec"]),
            "" if r["bins"] is None else str(r["bins"]),
            _pct(r["pruned"]),
            _pct(r["protected"]),
            _fmt_bytes(r["bytes"]),
            "" if r["tensor_ratio"] is None else f"{r['tensor_ratio']:.2f}x",
            "" if r["rel_error"] is None else f"{r['rel_error']:.1e}",
            _shown(r["note"]),
        )
    table.add_section()
    table.add_row(
        f"total ({len(rows)} tensors)",
        "",
        "",
        "",
        "",
        "",
        "",
        _fmt_bytes(file_size),
        f"{summary['tensor_ratio']:.2f}x" if summary["tensor_ratio"] else "",
        "",
        "",
    )
    console.print(table)
    if manifest.parent:
        parent = manifest.parent
        console.print(f"delta against {_shown(parent['name'])} ({_shown(parent['hash'][:12])}…)")
    if manifest.metadata:
        console.print(f"metadata: {_shown(manifest.metadata)}")
    lossy = sum(1 for e in manifest.tensors if e.config is not None)
    if lossy:
        console.print(
            f"lossy: {lossy} of {len(manifest.tensors)} tensors quantized (compress with "
            "--exact '*' for a bit-exact file)"
        )
    console.print(
        f"t.ratio: {TENSOR_RATIO} (the file total includes the manifest); a file alone cannot "
        "give the ratio against torch.save, which compress reports"
    )


@main.command()
@click.argument("src")
@click.option("--decode", is_flag=True, help="Also decode every tensor (slower, checks more).")
def verify(src: str, decode: bool) -> None:
    """Check SRC's header, manifest and every chunk checksum; exit 1 if anything is wrong."""
    from ckptzip import api, storage

    if storage.is_dir(src):
        raise click.ClickException(
            f"{src!r} is a directory; verify takes one file: `ckptzip inspect {src}` checks "
            "every step of a manager's directory (checksums and parents, in its status column)"
        )
    with _errors(src), _progress("verifying", storage.file_size(src)) as progress:
        manifest = api.verify(src, decode=decode, progress=progress)
    what = "checksums and decoding" if decode else "checksums"
    console.print(
        f"{_shown(src)}: OK ({what}; {len(manifest.tensors)} tensors, "
        f"{len(manifest.chunks)} chunks, format v{manifest.version})"
    )


if __name__ == "__main__":
    main()
