"""Tests of the command line: compress, decompress, inspect, verify, and their errors."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

import ckptzip
from ckptzip import api, storage
from ckptzip.cli import main


def state() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    return {
        "model": {"fc.weight": torch.randn(128, 64, generator=g), "fc.bias": torch.zeros(128)},
        "step": 7,
    }


def run(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args))
    return result


@pytest.fixture
def pt(tmp_path: Path) -> Path:
    p = tmp_path / "ckpt.pt"
    torch.save(state(), p)
    return p


def test_compress_inspect_verify_decompress(pt: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.ckz"
    r = run("compress", str(pt), "-o", str(out), "--bins", "8", "--prune", "0.1")
    assert r.exit_code == 0, r.output
    assert "1 of 2 tensors quantized" in r.output and "tensor ratio" in r.output

    r = run("inspect", str(out))
    assert r.exit_code == 0, r.output
    assert "model/fc.weight" in r.output and "quant" in r.output and "total (2 tensors)" in r.output
    doc = json.loads(run("inspect", str(out), "--json").output)
    w = doc["tensors"][0]
    assert (w["bins"], w["pruned"], w["codec"]) == (8, 0.1, "quant")
    assert doc["file_bytes"] == out.stat().st_size and doc["tensor_ratio"] > 4

    assert run("verify", str(out)).exit_code == 0
    r = run("verify", "--decode", str(out))
    assert r.exit_code == 0 and "checksums and decoding" in r.output

    back = tmp_path / "back.pt"
    assert run("decompress", str(out), "-o", str(back)).exit_code == 0
    restored = torch.load(back, weights_only=True)
    direct = ckptzip.load(out)
    assert restored["step"] == 7
    assert torch.equal(restored["model"]["fc.weight"], direct["model"]["fc.weight"])


def test_compress_json_report_and_default_output(pt: Path) -> None:
    r = run("compress", str(pt), "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["path"] == str(pt) + ".ckz"
    # torch names the archive's inner folder after the file, so sizes differ by a few bytes
    assert abs(report["bytes_in"] - pt.stat().st_size) < 256


def test_safetensors_in_and_out(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    src = tmp_path / "m.safetensors"
    save_file(state()["model"], src)
    out = tmp_path / "m.ckz"
    assert run("compress", str(src), "-o", str(out)).exit_code == 0
    back = tmp_path / "back.safetensors"
    r = run("decompress", str(out), "-o", str(back))
    assert r.exit_code == 0, r.output
    tensors = load_file(back)
    assert set(tensors) == {"fc.weight", "fc.bias"}
    assert torch.equal(tensors["fc.bias"], torch.zeros(128))


def test_decompress_to_safetensors_writes_every_name_and_the_format(tmp_path: Path) -> None:
    # It wrote one entry per storage: tied weights and views vanished without a word, and
    # the header lost {"format": "pt"}, which transformers 4.x's loader requires.
    from safetensors import safe_open
    from safetensors.torch import load_file

    w = torch.randn(300, 64, generator=torch.Generator().manual_seed(0))
    src = tmp_path / "m.pt"
    torch.save(
        {"emb.weight": w, "head.weight": w, "row": w[0], "t": w.t(), "bias": torch.ones(7)}, src
    )
    out = tmp_path / "m.ckz"
    assert run("compress", str(src), "-o", str(out), "--exact", "*").exit_code == 0
    back = tmp_path / "back.safetensors"
    r = run("decompress", str(out), "-o", str(back))
    assert r.exit_code == 0, r.output
    tensors = load_file(back)
    assert set(tensors) == {"emb.weight", "head.weight", "row", "t", "bias"}
    assert torch.equal(tensors["head.weight"], w) and torch.equal(tensors["row"], w[0])
    assert torch.equal(tensors["t"], w.t())
    with safe_open(back, "pt") as f:
        assert f.metadata() == {"format": "pt"}


def test_safetensors_metadata_survives_compress_and_decompress(tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    src = tmp_path / "m.safetensors"
    save_file(state()["model"], src, metadata={"format": "pt", "note": "kept"})
    out = tmp_path / "m.ckz"
    assert run("compress", str(src), "-o", str(out)).exit_code == 0
    back = tmp_path / "back.safetensors"
    assert run("decompress", str(out), "-o", str(back)).exit_code == 0
    with safe_open(back, "pt") as f:
        assert f.metadata() == {"format": "pt", "note": "kept"}


def test_decompress_to_safetensors_refuses_a_nested_checkpoint(tmp_path: Path) -> None:
    src = tmp_path / "c.pt"
    torch.save(state(), src)  # {"model": {...}, "optimizer": ...}: no flat form
    out = tmp_path / "c.ckz"
    assert run("compress", str(src), "-o", str(out)).exit_code == 0
    r = run("decompress", str(out), "-o", str(tmp_path / "c.safetensors"))
    assert r.exit_code == 1 and "torch.save file (.pt)" in r.output
    assert not (tmp_path / "c.safetensors").exists()


def test_compress_takes_numpy_arrays_as_the_trainer_rng_state_holds(tmp_path: Path) -> None:
    # torch.load(weights_only=True) without NumPy's globals refused the Trainer's
    # rng_state.pth, with advice about torch.save(model) that did not apply.
    import numpy as np

    rng = {
        "python": (3, tuple(range(5)), None),
        "numpy": np.random.get_state(),
        "cpu": torch.get_rng_state(),
    }
    src = tmp_path / "rng_state.pth"
    torch.save(rng, src)
    out = tmp_path / "rng_state.pth.ckz"
    r = run("compress", str(src), "-o", str(out))
    assert r.exit_code == 0, r.output
    back = ckptzip.load(out)
    assert np.array_equal(back["numpy"][1], rng["numpy"][1])
    assert torch.equal(back["cpu"], rng["cpu"])


def test_missing_safetensors_package_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "m.safetensors"
    src.write_bytes(b"whatever")
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    r = run("compress", str(src))
    assert r.exit_code == 1 and "pip install 'ckptzip[safetensors]'" in r.output


class Custom:
    pass


def test_inputs_needing_unpickling_are_refused(tmp_path: Path) -> None:
    src = tmp_path / "evil.pt"
    torch.save({"obj": Custom()}, src)
    r = run("compress", str(src))
    assert r.exit_code == 1 and "weights_only=True" in r.output
    assert not (tmp_path / "evil.pt.ckz").exists()


def test_a_whole_module_file_is_refused_in_one_line_naming_the_class(tmp_path: Path) -> None:
    # torch's own message is many lines, with escape codes and advice to load with
    # weights_only=False; ckptzip's answer is one line: what the file holds, what to save
    src = tmp_path / "module.pt"
    torch.save(torch.nn.Linear(2, 2), src)
    r = run("compress", str(src))
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    assert "torch.nn.modules.linear.Linear" in r.output and "state_dict()" in r.output
    assert "weights_only` set to `False`" not in r.output and "\x1b" not in r.output


def test_inspect_of_a_directory_without_steps_says_what_it_looks_for(tmp_path: Path) -> None:
    ckptzip.save({"w": torch.ones(3)}, tmp_path / "model.ckz")  # a file, not a manager's step
    r = run("inspect", str(tmp_path))
    assert r.exit_code == 0 and "no step-NNNNNNNN.ckz" in r.output, r.output
    assert "ckptzip inspect FILE" in r.output


def test_verify_of_a_directory_points_to_inspect(tmp_path: Path) -> None:
    mgr = ckptzip.CheckpointManager(tmp_path / "run")
    mgr.save(1, {"w": torch.ones(3)})
    r = run("verify", str(tmp_path / "run"))
    assert r.exit_code == 1 and f"ckptzip inspect {tmp_path / 'run'}" in r.output, r.output


def test_errors_are_one_line_and_exit_1(pt: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.ckz"
    assert run("compress", str(pt), "-o", str(out)).exit_code == 0
    r = run("compress", str(pt), "-o", str(out))
    assert r.exit_code == 1 and "--overwrite" in r.output
    assert run("compress", str(pt), "-o", str(out), "--overwrite").exit_code == 0
    r = run("compress", str(pt), "-o", str(tmp_path / "x.ckz"), "--bins", "1")
    assert r.exit_code == 1 and "bins=1" in r.output

    data = bytearray(out.read_bytes())
    data[-5] ^= 0xFF
    out.write_bytes(bytes(data))
    r = run("verify", str(out))
    assert r.exit_code == 1 and "checksum mismatch" in r.output
    r = run("inspect", str(pt))
    assert r.exit_code == 1 and "torch.save zip" in r.output


def test_progress_bar_path(pt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ckptzip.cli as cli

    monkeypatch.setattr(cli, "PROGRESS_MIN_BYTES", 0)  # force the bar on a small file
    out = tmp_path / "c.ckz"
    assert run("compress", str(pt), "-o", str(out)).exit_code == 0
    assert run("verify", str(out)).exit_code == 0
    assert run("decompress", str(out), "-o", str(tmp_path / "b.pt")).exit_code == 0


def test_compress_says_it_is_lossy_and_how_to_make_it_exact(pt: Path, tmp_path: Path) -> None:
    assert "LOSSY by default" in run("compress", "--help").output
    assert "--exact '*'" in run("compress", "--help").output
    r = run("compress", str(pt), "-o", str(tmp_path / "a.ckz"))
    assert r.exit_code == 0, r.output
    assert "lossy" in r.output and "--exact '*'" in r.output
    r = run("compress", str(pt), "-o", str(tmp_path / "b.ckz"), "--exact", "*")
    assert r.exit_code == 0, r.output
    assert "lossless: all 2 tensors stored bit-exact" in r.output
    torch.testing.assert_close(ckptzip.load(tmp_path / "b.ckz"), state(), rtol=0, atol=0)


def test_an_exact_pattern_that_matches_nothing_is_a_warning(pt: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(
        main, ["compress", str(pt), "-o", str(tmp_path / "c.ckz"), "--exact", "model"]
    )
    assert r.exit_code == 0, r.output
    assert "--exact 'model' matches no tensor" in r.output and "'/'-joined" in r.output
    assert "'model/*'" in r.output
    r = run("compress", str(pt), "-o", str(tmp_path / "d.ckz"), "--exact", "model/*")
    assert "matches no tensor" not in r.output


def test_two_named_ratios_one_definition_each(pt: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.ckz"
    r = run("compress", str(pt), "-o", str(out))
    found = re.search(r"ratio ([\d.]+)x, tensor ratio ([\d.]+)x", r.output)
    assert found, r.output
    assert api.RATIO in r.output and api.TENSOR_RATIO in r.output
    report = json.loads(run("compress", str(pt), "-o", str(out), "--overwrite", "--json").output)
    assert found.group(1) == f"{report['ratio']:.2f}"
    assert report["ratio"] == pytest.approx(report["bytes_in"] / report["bytes_out"])
    doc = json.loads(run("inspect", str(out), "--json").output)
    assert found.group(2) == f"{doc['tensor_ratio']:.2f}" == f"{report['tensor_ratio']:.2f}"
    assert doc["tensor_ratio_definition"] == api.TENSOR_RATIO
    assert "t.ratio: " + api.TENSOR_RATIO in run("inspect", str(out)).output.replace("\n", " ")


def test_inspect_notes_come_from_the_codecs(tmp_path: Path) -> None:
    d = tmp_path / "chain"
    d.mkdir()
    g = torch.Generator().manual_seed(0)
    w = torch.randn(10_000, generator=g)
    ckptzip.save({"w": w, "b": torch.ones(3)}, d / "p.ckz")
    # an unrelated tensor as the child's: its delta entry is stored in full
    ckptzip.save(
        {"w": torch.randn(10_000, generator=g), "b": torch.ones(3)}, d / "c.ckz", parent=d / "p.ckz"
    )
    doc = json.loads(run("inspect", str(d / "c.ckz"), "--json").output)
    rows = {r["path"]: r for r in doc["tensors"]}
    assert rows["w"]["codec"] == "delta" and rows["w"]["note"].startswith("stored in full")
    assert rows["w"]["protected"] is not None and rows["w"]["protected"] > 0  # from the inner codec
    assert rows["b"]["note"] == "fewer than min_numel=4096 elements"


def cli_round_trip_on(base: str, pt: Path, tmp_path: Path) -> None:
    """compress (local .pt to a URL), inspect, verify, decompress (URL to URL and to local)
    and ``inspect DIR`` of a manager directory, all under the URL ``base``."""
    url = f"{base}/c.ckz"
    r = run("compress", str(pt), "-o", url)
    assert r.exit_code == 0, r.output
    doc = json.loads(run("inspect", url, "--json").output)
    assert doc["file"] == url and doc["file_bytes"] == len(storage.read_bytes(url))
    assert [t["path"] for t in doc["tensors"]] == ["model/fc.weight", "model/fc.bias"]
    r = run("inspect", url)
    assert r.exit_code == 0 and "model/fc.weight" in r.output, r.output
    r = run("verify", "--decode", url)
    assert r.exit_code == 0 and "OK (checksums and decoding" in r.output, r.output

    direct = ckptzip.load(url)
    r = run("decompress", url, "-o", f"{base}/back.pt")
    assert r.exit_code == 0, r.output
    back = torch.load(io.BytesIO(storage.read_bytes(f"{base}/back.pt")), weights_only=True)
    assert torch.equal(back["model"]["fc.weight"], direct["model"]["fc.weight"])
    assert run("decompress", url, "-o", str(tmp_path / "back.pt")).exit_code == 0
    r = run("compress", f"{base}/back.pt", "-o", f"{base}/again.ckz")  # a remote input too
    assert r.exit_code == 0, r.output

    mgr = ckptzip.CheckpointManager(f"{base}/run", keyframe_every=2)
    for step in (1, 2, 3):
        mgr.save(step, state())
    r = run("inspect", f"{base}/run")
    assert r.exit_code == 0 and "of tensors (tensor ratio" in r.output, r.output
    chain = json.loads(run("inspect", f"{base}/run", "--json").output)
    assert [(e["step"], e["kind"], e["status"]) for e in chain] == [
        (1, "full", "ok"),
        (2, "delta", "ok"),
        (3, "full", "ok"),
    ]

    r = run("verify", f"{base}/missing.ckz")
    assert r.exit_code == 1 and "no checkpoint at" in r.output, r.output
    r = run("decompress", url, "-o", f"{base}/back.pt")
    assert r.exit_code == 1 and "--overwrite" in r.output, r.output


def test_remote_urls_through_the_storage_layer(pt: Path, tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    cli_round_trip_on(f"memory://ckptzip-cli/{tmp_path.name}", pt, tmp_path)


def test_missing_local_files_are_one_line_errors(tmp_path: Path) -> None:
    for args in (
        ["inspect", str(tmp_path / "nope.ckz")],
        ["verify", str(tmp_path / "nope.ckz")],
        ["decompress", str(tmp_path / "nope.ckz"), "-o", str(tmp_path / "x.pt")],
        ["compress", str(tmp_path / "nope.pt")],
    ):
        r = run(*args)
        assert r.exit_code == 1 and "no checkpoint at" in r.output, (args, r.output)


# -- first contact: fast help, messages that name the file and the flag (issue 20, item 12) -----


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["inspect", "--help"],
        ["compress", "--help"],
        ["compress"],
        ["inspect"],
        ["no-such-command"],
        ["compress", "x.pt", "--bins", "many"],
    ],
    ids=lambda a: " ".join(a),
)
def test_help_and_argument_errors_never_import_torch(args: list[str]) -> None:
    code = (
        "import sys\n"
        "from ckptzip.cli import main\n"
        f"sys.argv = ['ckptzip', *{args!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    status = exc.code\n"
        "heavy = [m for m in ('torch', 'numpy', 'rich') if m in sys.modules]\n"
        "print('STATUS', status, 'HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr
    assert "STATUS 0" in out.stdout or "STATUS 2" in out.stdout


def test_a_text_file_is_not_a_checkpoint(tmp_path: Path) -> None:
    src = tmp_path / "notes.pt"
    src.write_text("epoch 3: loss 0.41\n")
    r = run("compress", str(src))
    assert r.exit_code == 1 and "is not a checkpoint" in r.output and str(src) in r.output
    assert "unpickling" not in r.output
    ckz = tmp_path / "a.ckz"
    ckptzip.save(state(), ckz)
    r = run("compress", str(ckz), "-o", str(tmp_path / "b.ckz"))
    assert r.exit_code == 1 and "already a ckptzip file" in r.output


def test_truncated_files_are_named(pt: Path, tmp_path: Path) -> None:
    ckz = tmp_path / "c.ckz"
    ckptzip.save(state(), ckz)
    data = ckz.read_bytes()
    ckz.write_bytes(data[: len(data) // 2])
    for args in (["inspect", str(ckz)], ["verify", str(ckz)],
                 ["decompress", str(ckz), "-o", str(tmp_path / "o.pt")]):  # fmt: skip
        r = run(*args)
        assert r.exit_code == 1 and str(ckz) in r.output and "truncated" in r.output, r.output
    half = tmp_path / "half.pt"
    half.write_bytes(pt.read_bytes()[: pt.stat().st_size // 2])
    r = run("compress", str(half))
    assert r.exit_code == 1 and str(half) in r.output and "truncated or damaged" in r.output


def test_existing_output_names_the_flag_not_the_python_argument(pt: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.ckz"
    assert run("compress", str(pt), "-o", str(out)).exit_code == 0
    back = tmp_path / "back.pt"
    back.write_bytes(b"")
    for args in (["compress", str(pt), "-o", str(out)],
                 ["decompress", str(out), "-o", str(back)]):  # fmt: skip
        r = run(*args)
        assert r.exit_code == 1 and "pass --overwrite" in r.output, r.output
        assert "overwrite=True" not in r.output


def test_largest_error_names_its_tensor(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    src = tmp_path / "adam.pt"
    torch.save(
        {
            "model": {"w": torch.randn(64, 128, generator=g)},
            # a second moment with a huge dynamic range: the worst tensor by far
            "optimizer": {"state": {0: {"exp_avg_sq": torch.rand(64, 128, generator=g) ** 12}}},
        },
        src,
    )
    r = run("compress", str(src), "--json")
    report = json.loads(r.output)
    worst = max(report["entries"], key=lambda e: e["rel_error"] or 0)
    r = run("compress", str(src), "-o", str(tmp_path / "b.ckz"))
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if "largest relative error" in x)
    assert f"({worst['path']})" in line, (line, worst["path"])


def test_piped_inspect_never_wraps_a_path(tmp_path: Path) -> None:
    long = "encoder/" + "/".join(f"block_{i}_attention_projection" for i in range(8))
    ckz = tmp_path / "c.ckz"
    ckptzip.save({long: torch.randn(64, 128)}, ckz)
    r = run("inspect", str(ckz))  # CliRunner's stdout is no terminal: `ckptzip inspect | less`
    assert r.exit_code == 0, r.output
    assert any(long in line for line in r.output.splitlines()), r.output
