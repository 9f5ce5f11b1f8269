"""The compiled decoders under AddressSanitizer and UndefinedBehaviorSanitizer, fed crafted input.

A file's chunks reach the C decoders once their checksums match, and an attacker who writes
the whole file computes those too: so every decoder must stay inside its buffers, and keep
to defined behaviour, whatever the bytes and the metadata say. This builds the kernels with
``-fsanitize=address,undefined`` (any report aborts), runs ``_native_fuzz.py`` on them in a
fresh interpreter with the sanitizers' runtimes preloaded, and requires a clean exit: no
report, no exception but a ``CkptzipError``, and decoders actually reached. The harness also
saves odd tensors (non-finite, subnormal, near a dtype's limits, ...) through the encoders,
which see any user's data.

Skipped where the build cannot be made: not Linux, no gcc, no sanitizer runtime, or the C
sources not beside the package (an installed wheel). The run lasts ``scaled(90)`` seconds (90
in CI, 15 minutes under ``make attack``), or ``CKPTZIP_FUZZ_SECONDS``, shared by the loops a
processor may take (the widest this one has, AVX2, scalar): the crafted inputs are random, so
a longer run searches further.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from _attack import scaled

import ckptzip.kernels

pytestmark = pytest.mark.slow

_KERNELS = Path(ckptzip.kernels.__file__).parent
_SOURCES = ["_native.c", "_entropy.c", "_delta.c", "_wide.c"]
_HARNESS = Path(__file__).with_name("_native_fuzz.py")


def _runtime(gcc: str, name: str) -> str | None:
    found = subprocess.run(
        [gcc, f"-print-file-name={name}"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return found if os.path.isabs(found) and os.path.exists(found) else None


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The kernels built with both sanitizers, and the runtimes to preload."""
    gcc = shutil.which("gcc")
    if not sys.platform.startswith("linux") or gcc is None:
        pytest.skip("needs Linux and gcc")
    runtimes = [_runtime(gcc, "libasan.so"), _runtime(gcc, "libubsan.so")]
    if None in runtimes:
        pytest.skip("gcc has no AddressSanitizer / UndefinedBehaviorSanitizer runtime here")
    sources = [_KERNELS / s for s in _SOURCES]
    if not all(s.exists() for s in sources):
        pytest.skip("the kernels' C sources are not beside the package")
    out = tmp_path_factory.mktemp("sanitized") / "_native_sanitized.so"
    flags = ["-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer", "-ffp-contract=off"]
    sanitize = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    include = ["-I" + sysconfig.get_paths()["include"], "-I" + str(_KERNELS)]
    build = subprocess.run(
        [gcc, *flags, *sanitize, *include, *map(str, sources), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    return out, " ".join(r for r in runtimes if r)


# each of the loops a processor may take: the widest this one has, then the AVX2 and the
# scalar ones (what other processors run; the same bits, other code)
_PATHS = {
    "widest": {},
    "avx2": {"CKPTZIP_NO_AVX512": "1"},
    "scalar": {"CKPTZIP_NO_AVX512": "1", "CKPTZIP_NO_AVX2": "1"},
}


_SECONDS = float(os.environ.get("CKPTZIP_FUZZ_SECONDS", scaled(90))) / len(_PATHS)


@pytest.mark.parametrize("path", list(_PATHS))
@pytest.mark.timeout(_SECONDS * 4 + 600)  # a long run is not held to pytest-timeout's 600 s
def test_crafted_streams_and_files_stay_inside_the_decoders_buffers(
    sanitized: tuple[Path, str], path: str
) -> None:
    library, preload = sanitized
    seconds = f"{_SECONDS:g}"
    env = {
        **os.environ,
        **_PATHS[path],
        "LD_PRELOAD": preload,
        # leaks: the interpreter's own, not the decoders'; abort on the first report
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        "CKPTZIP_KERNELS": "fast",
    }
    seed = str(list(_PATHS).index(path))
    run = subprocess.run(
        [sys.executable, str(_HARNESS), str(library), seconds, seed],
        capture_output=True,
        text=True,
        env=env,
        timeout=_SECONDS * 4 + 300,  # the corpus is built under the sanitizers too
        check=False,
    )
    report = run.stdout[-4000:] + run.stderr[-8000:]
    assert "AddressSanitizer" not in run.stderr, report
    assert "runtime error" not in run.stderr, report
    assert run.returncode == 0, report
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"crafted inputs, {path} loops, {seconds} s: {json.dumps(summary)}")
    symbols, files = summary["symbols"], summary["files"]
    # the harness reached the decoders: intact streams decoded, and crafted ones got past
    # the parsing into the kernels (not every one refused before them)
    # (bounds a slow machine meets in a few seconds a part)
    assert symbols["streams"] > 20 and symbols["decodes"] > symbols["refused"] > 0, summary
    assert files["loads"] > 20 and files["loads"] > files["refused"], summary
    assert {"quant", "delta", "residual", "step", "exact"} <= set(files["codecs"]), summary
    assert summary["saves"]["saves"] > 10, summary  # the encoders ran on odd tensors
