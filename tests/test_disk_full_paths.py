"""A write that fails (a full disk, a file-size limit) names the file or folder it failed on, in one
line with exit 2, in every command that writes (issue 15: "every error that names a condition of a
path names the path").

Real failing writes: each command runs in a subprocess under RLIMIT_FSIZE, so its writes fail with
EFBIG as they would with ENOSPC on a full drive (Python ignores SIGXFSZ, so the write returns the
error instead of killing the process).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_tracetail_cli import skewed_tokens, write_tokens

resource = pytest.importorskip("resource", reason="needs POSIX RLIMIT_FSIZE to make writes fail for real")

ROOT = Path(__file__).resolve().parent.parent


def run_with_file_limit(args, limit, cwd=ROOT):
    def limit_writes():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "moetools", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, preexec_fn=limit_writes, env=env)


def writing_commands(tmp, model):
    trace = write_tokens(tmp / "run.trace", skewed_tokens(100, n_layers=4, n_expert=16, top_k=4))
    (tmp / "hot" / "m").mkdir(parents=True)
    (tmp / "hot" / "m" / "model.gguf").write_bytes(Path(model).read_bytes())
    return {
        "container-encode": (["container-encode", model, "-o", tmp / "container"], tmp / "container"),
        "quantize": (["quantize", model, "--pure", "--type", "q8_0", "-o", tmp / "tiers"], tmp / "tiers"),
        "trace-tail --curve -o": (["trace-tail", trace, "--model", model, "--curve", "-o", tmp / "out" / "curve.json"],
                                  tmp / "out"),
        "trace-tail --plan": (["trace-tail", trace, "--model", model, "--plan", tmp / "plans" / "plan.json"], tmp / "plans"),
        "device-fit --plan": (["device-fit", model, "--vram", "8G", "--ram", "64G", "--plan", tmp / "fit" / "plan.json"],
                              tmp / "fit"),
        "cold-twin --migrate": (["cold-twin", tmp / "hot", tmp / "cold", "--migrate", tmp / "cold", "--yes",
                                 "--log", tmp / "logs" / "actions.jsonl"], tmp),
    }


@pytest.mark.parametrize("name", ["container-encode", "quantize", "trace-tail --curve -o", "trace-tail --plan",
                                  "device-fit --plan", "cold-twin --migrate"])
def test_a_failed_write_names_its_path(name, tmp_path, tiny_models):
    args, folder = writing_commands(tmp_path, tiny_models["qwen3moe"])[name]
    folder.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cold").mkdir(exist_ok=True)
    (tmp_path / "logs").mkdir(exist_ok=True)
    result = run_with_file_limit(args, 40)  # 40 bytes: the first real write of any output fails
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in result.stderr
    assert str(folder) in lines[-1], f"the error does not name {folder}: {lines[-1]}"
