"""A free-space check before every large write: container-encode, quantize (and cold-twin's
migration, tested in test_coldtwin_actions.py) refuse up front, saying what they need and what is
free, instead of failing hours into the write on a full drive.

Real drives: a header-only (sparse) Kimi-K2-class model whose outputs are larger than the free space
of the drive the test's temporary folder is on.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moetools.diskspace import SPACE_MARGIN, check_room, existing_folder
from moetools.errors import OutputError

ROOT = Path(__file__).resolve().parent.parent


def run(*args):
    return subprocess.run([sys.executable, "-m", "moetools", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def free_of(path):
    return shutil.disk_usage(existing_folder(path)).free


def test_check_room_names_the_folder_the_need_and_the_free_space(tmp_path):
    free = free_of(tmp_path)
    check_room(tmp_path / "not-yet" / "created", 1 << 20, "a small file")  # an unborn folder: its drive counts
    with pytest.raises(OutputError) as caught:
        check_room(tmp_path / "out", 2 * free, "the banks")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'out'}: no space for the banks: needs ")
    assert "margin" in message and message.endswith(" free") and "bytes" not in message


def test_container_encode_refuses_a_container_larger_than_the_drive(tmp_path, preset_model):
    model = preset_model("kimi-k2")
    out = tmp_path / "container"
    if free_of(tmp_path) > Path(model).stat().st_size:
        pytest.skip("this drive has more free space than a Kimi-K2-class model: the refusal cannot be shown")
    result = run("container-encode", model, "-o", out)
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert line.startswith(f"error: {out}: no space for the container's banks: needs ") and line.endswith(" free"), line
    assert len(line.splitlines()) == 1
    assert not out.exists() or not any(p.name.startswith("experts-") or p.suffix == ".tmp" for p in out.iterdir())


def test_quantize_full_refuses_tiers_larger_than_the_drive(tmp_path, preset_model):
    model = preset_model("kimi-k2")
    out = tmp_path / "tiers"
    if free_of(tmp_path) > Path(model).stat().st_size:
        pytest.skip("this drive has more free space than a Kimi-K2-class model: the refusal cannot be shown")
    result = run("quantize", model, "--full", "-t", "Q8_0", "-o", out)
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {out}: no space for the tiers: needs ") and line.endswith(" free"), line
    assert not out.exists() or not any(p.suffix in (".gguf", ".tmp") for p in out.iterdir())


def test_margin_is_part_of_the_need(tmp_path):
    free = free_of(tmp_path)
    with pytest.raises(OutputError):
        check_room(tmp_path, free - SPACE_MARGIN + (1 << 30), "almost everything")  # 1 GiB: others may free space meanwhile
