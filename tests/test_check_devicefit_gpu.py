"""benchmarks/check_devicefit_gpu.py: its committed record (tests/data/devicefit_gpu_margin_cpu.json,
llama.cpp 0c1e57098 through two loopback RPC servers and on the CPU alone) and, where a llama.cpp build
is at hand, its rpc path run end to end as a subprocess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import check_devicefit_gpu as check
from tests.factory import SHARED_MODELS

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "data" / "devicefit_gpu_margin_cpu.json"
KINDS = ("model", "kv", "compute")


def llama_bin():
    """A folder with llama-server, llama-bench and ggml-rpc-server, else skip saying where it looked."""
    candidates = [os.environ.get("MOETOOLS_LLAMA_BIN"), os.environ.get("LLAMA_BIN"), "/work/llama/build/bin"]
    for folder in filter(None, candidates):
        if all(os.access(os.path.join(folder, tool), os.X_OK) for tool in ("llama-server", "llama-bench", "ggml-rpc-server")):
            return folder
    pytest.skip("no llama.cpp build with llama-server, llama-bench and ggml-rpc-server "
                "(set MOETOOLS_LLAMA_BIN or LLAMA_BIN to its bin folder)")


def check_case(entry):
    """A case's record has every field, and device-fit's buffers equal llama.cpp's within 1%."""
    assert {"case", "verdict", "context", "device_fit_args", "server_args", "bench_args", "plan_tok_s",
            "plan_pp_tok_s", "devices", "bench"} <= entry.keys()
    assert entry["devices"], entry["case"]
    for row in entry["devices"]:
        assert {"name", "capacity_mib", "predicted_mib", "logged_mib", "agree", "reported_free_mib",
                "planned_margin_mib", "margin_left_mib"} <= row.keys()
        for kind in KINDS:
            predicted, logged = row["predicted_mib"][kind], row["logged_mib"][kind]
            assert abs(predicted - logged) <= max(0.01 * logged, 0.005), (entry["case"], row["name"], kind, predicted, logged)
            assert row["agree"][kind] is True
        assert row["reported_free_mib"] > 0
        assert row["margin_left_mib"] == pytest.approx(row["reported_free_mib"] - sum(row["logged_mib"].values()), abs=0.011)
    assert {b["kind"] for b in entry["bench"]} == {"pp", "tg"}
    for bench in entry["bench"]:
        assert bench["measured_tok_s"] > 0 and bench["build_commit"]
        # device-fit predicts generation speed; its JSON has no prompt-speed field yet (recorded null)
        if bench["kind"] == "tg":
            assert bench["predicted_tok_s"] > 0
        else:
            assert bench["predicted_tok_s"] is None or bench["predicted_tok_s"] > 0


def test_committed_record():
    doc = json.loads(RECORD.read_text())
    assert doc["llama_cpp_commit"] == "0c1e57098"
    assert set(doc["devices"]) == {"rpc", "cpu"}
    for device, record in doc["devices"].items():
        assert {"device_name", "driver", "cpu", "free_note", "cases"} <= record.keys()
        assert len(record["cases"]) == 4
        for entry in record["cases"]:
            check_case(entry)
    rpc = doc["devices"]["rpc"]["cases"]
    # the plans put layers on both RPC servers and some experts on the CPU: every ledger is exercised
    assert all({row["name"] for row in entry["devices"]} == {"RPC0[127.0.0.1:50240]", "RPC0[127.0.0.1:50241]", "CPU"}
               for entry in rpc)
    assert any(row["name"] == "CPU" and row["logged_mib"]["model"] > 1 for entry in rpc for row in entry["devices"])
    assert all(len(entry["devices"]) == 1 for entry in doc["devices"]["cpu"]["cases"])


def test_bench_flags_keep_llama_cpp_override_order():
    server = ["-m", "m.gguf", "--rpc", "a:1,b:2", "-c", "1024", "-ngl", "5", "-ts", "3,2", "--n-cpu-moe", "2",
              "-ot", r"blk\.3\.=CPU,blk\.4\.=CPU", "-ctk", "q8_0", "-fa", "on", "-np", "1", "--no-kv-unified", "--fit", "off"]
    exps = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
    assert check.bench_flags(server) == [
        "-m", "m.gguf", "--rpc", "a:1,b:2", "-ngl", "5", "-ts", "3/2", "-ctk", "q8_0", "-fa", "on",
        "-ot", rf"blk\.0{exps}=CPU;blk\.1{exps}=CPU;blk\.3\.=CPU;blk\.4\.=CPU"]
    with pytest.raises(ValueError, match="no equivalent of --spec-type"):
        check.bench_flags(["--spec-type", "draft-mtp"])


def test_log_parsing_sums_iswa_kv_and_names_rpc_devices():
    log = ("0.00.006 I cmn  common_param:   - CPU     : AMD EPYC (24105 MiB, 24105 MiB free)\n"
           "0.00.010 I llama_prepare_model_devices: using device RPC0 (127.0.0.1:50240) (unknown id) - 900 MiB free\n"
           "0.00.010 I llama_prepare_model_devices: using device CUDA0 (NVIDIA H100 80GB HBM3) (0000:01:00.0) - 80000 MiB free\n"
           "I llama_kv_cache: RPC0[127.0.0.1:50240] KV buffer size =     0.50 MiB\n"
           "I llama_kv_cache: RPC0[127.0.0.1:50240] KV buffer size =     0.75 MiB\n"
           "I load_tensors:        CUDA0 model buffer size =  1024.00 MiB\n")
    assert check.reported_free(log) == {"CPU": 24105, "RPC0[127.0.0.1:50240]": 900, "CUDA0": 80000}
    assert check.device_buffers(log) == {"RPC0[127.0.0.1:50240]": {"model": 0.0, "kv": 1.25, "compute": 0.0},
                                         "CUDA0": {"model": 1024.0, "kv": 0.0, "compute": 0.0}}


def test_rpc_path_end_to_end(tmp_path):
    """The script's rpc path, run as a user runs it: one model, two RPC servers, llama-server, llama-bench."""
    folder = llama_bin()
    name = "tiny-qwen3moe-Q8_0" if (SHARED_MODELS / "tiny-qwen3moe-Q8_0.gguf").is_file() else "fixture-qwen3moe"
    out = tmp_path / "margin.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "check_devicefit_gpu.py"), "--bin", folder,
                           "--device", "rpc", "--case", name, "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    doc = json.loads(out.read_text())
    (entry,) = doc["devices"]["rpc"]["cases"]
    assert entry["case"] == name
    check_case(entry)
