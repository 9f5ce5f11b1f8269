"""Every script in ``examples/`` runs (``--quick``) in a fresh process and says what it should:
the restored step, a resumed loss close to the uninterrupted one, a real compression ratio."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

pytestmark = pytest.mark.slow


def run_example(name: str, tmp_path: Path) -> str:
    """The stdout of ``examples/<name>.py --quick``; its temporary files go under ``tmp_path``."""
    # One intra-op thread: the examples' models are small, and on a loaded 2-core machine
    # torch's thread pool spins more than it computes.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--quick"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in:\n{text}"
    return float(found.group(1))


def losses(text: str) -> tuple[float, float]:
    """The final loss after a crash and a restore, and without the crash."""
    found = re.search(r"final loss ([\d.]+) with a crash and a restore, ([\d.]+) without", text)
    assert found, text
    return float(found.group(1)), float(found.group(2))


def smaller(text: str) -> float:
    return number(r"\(([\d.]+)x smaller\)", text)


CRASHES = {  # examples that crash and restore, and the line saying which step came back
    "plain_loop": "crash at step 90: restored step 80 from step-00000080.ckz",
    "dcp_fsdp": "crash at step 25: restored step 20 on 2 processes",
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_crash_and_resume(name: str, tmp_path: Path) -> None:
    out = run_example(name, tmp_path)
    assert CRASHES[name] in out
    resumed, exact = losses(out)
    assert resumed == pytest.approx(exact, rel=0.05)
    assert smaller(out) > 5


@pytest.mark.skipif(
    importlib.util.find_spec("pytorch_lightning") is None, reason="needs ckptzip[lightning]"
)
def test_lightning_trainer(tmp_path: Path) -> None:
    out = run_example("lightning_trainer", tmp_path)
    assert re.search(r"resumed from epoch=1-step=\d+\.ckpt: epoch 6, loss [\d.]+", out), out
    assert "load_from_checkpoint: hparams {'hidden': 512, 'lr': 0.001, 'rows': 512}" in out
    assert "cost: 14 checkpoints" in out  # 6 epochs and last.ckpt each time
    assert smaller(out) > 5


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs ckptzip[hf]")
def test_hf_trainer(tmp_path: Path) -> None:
    out = run_example("hf_trainer", tmp_path)
    exact = number(r"uninterrupted: final loss ([\d.]+)", out)
    resumed = number(r"resumed from checkpoint-10: final loss ([\d.]+)", out)
    assert resumed == pytest.approx(exact, rel=0.05)
    listing = re.search(r"checkpoint-10: \[(.*)\]", out)
    assert listing and ".ckz" in listing.group(1), out
    assert smaller(out) > 3


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs ckptzip[hf]")
def test_hf_llama_resume(tmp_path: Path) -> None:
    out = run_example("hf_llama_resume", tmp_path)
    assert "killed after step 21; left ['checkpoint-10', 'checkpoint-20']" in out
    assert "resumed steps 21-30: learning rates equal the reference's" in out
    assert number(r"loss within ([\d.]+)% of it", out) < 5
    assert "each decodes to the Trainer's files" in out
    assert "load_best_model_at_end: the model holds checkpoint-" in out
    assert smaller(out) > 3


def test_demo(tmp_path: Path) -> None:
    out = run_example("demo", tmp_path)
    exact = number(r"held-out loss: exact weights ([\d.]+)", out)
    restored = number(r"restored from \.ckz ([\d.]+)", out)
    assert restored == pytest.approx(exact, rel=0.05)
    assert re.search(r"restored step 180 \(of \[150, 160, 170, 180\]\)", out), out


def test_every_example_is_tested() -> None:
    scripts = {p.stem for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
    tested = {*CRASHES} | {n.removeprefix("test_") for n in globals() if n.startswith("test_")}
    assert scripts <= tested, f"examples without a test: {sorted(scripts - tested)}"
