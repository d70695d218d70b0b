"""device-fit --host FILE (issue 30): a plan for the machine a host profile describes, with every figure
naming where it came from; flags beside it win; bad profiles are one line; and the threads default
says which machine the plan is of."""

import json
import stat
import sys

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.devicefit import hostplan
from moetools.host.cpu import math_threads
from tests.test_host import profile_doc

GIB = 1024**3


def run(*args):
    return CliRunner().invoke(cli, ["device-fit", *map(str, args)])


def run_json(*args, code=0):
    result = run(*args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


@pytest.fixture
def host_file(tmp_path):
    """A server: an RTX 4090 (22 GiB free) on PCIe 4.0 x16, 128 GiB of RAM read at 80 GB/s, 12 threads,
    two NUMA nodes, a drive read at 5 GB/s."""
    doc = profile_doc(hostname="server")
    doc["cpu"].update(threads=12, threads_source="physical cores, llama.cpp's default (thread_siblings in sysfs)", numa_nodes=2)
    doc["disk"] = {"path": "/models", "read_bytes_per_s": 5e9, "source": "measured"}
    doc["calibration"] = {"cpu_efficiency": 0.5}
    path = tmp_path / "host.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_profile_is_the_machine_planned(tiny_models, host_file):
    doc = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--host", host_file, "--ctx", 4096)
    gpu, cpu = doc["devices"][0], doc["devices"][-1]
    label = f"host profile {host_file}"
    assert gpu["name"] == "CUDA0" and gpu["capacity_bytes"] == 22 * GIB
    assert gpu["bandwidth_bytes_per_s"] == 1008e9 and gpu["bandwidth_source"] == f"{label}: GPU table"
    assert cpu["capacity_bytes"] == 128 * GIB and cpu["bandwidth_bytes_per_s"] == 80e9
    assert cpu["bandwidth_source"] == f"{label}: measured read"
    machine = doc["machine"]
    assert machine["host_profile"] == str(host_file) and machine["hostname"] == "server"
    assert machine["threads"] == 12 and machine["threads_source"].startswith(f"{label}: physical cores")
    assert machine["ram_bw_bytes_per_s"] == 80e9 and machine["ram_bw_source"] == f"{label}: measured read"
    assert machine["disk_bw_bytes_per_s"] == 5e9 and machine["disk_bw_source"] == f"{label}: measured read of /models"
    assert machine["pcie_bytes_per_s"] == 31.504e9 and machine["pcie_source"].startswith(f"{label}: PCIe 4.0 x16 of CUDA0")
    assert machine["sockets"] == 1  # the speed model's NUMA term is per socket
    assert f"machine: server as {host_file} describes it (1 GPU(s), RAM read 80.0 GB/s, 12 threads, drive 5.0 GB/s, " \
           "PCIe 31.5 GB/s)" in " ".join(doc["notes"])


def test_flags_beside_the_profile_win(tiny_models, host_file):
    doc = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--host", host_file, "--ctx", 4096, "--vram", "8G",
                   "--ram", "64G", "--ram-bw", "40GB/s", "--threads", 4, "--disk-bw", "1GB/s", "--h2d", "10GB/s")
    gpu, cpu, machine = doc["devices"][0], doc["devices"][-1], doc["machine"]
    assert gpu["capacity_bytes"] == 8 * GIB and gpu["bandwidth_bytes_per_s"] == 1008e9  # its size given, its card kept
    assert cpu["capacity_bytes"] == 64 * GIB and cpu["bandwidth_bytes_per_s"] == 40e9
    assert (machine["threads"], machine["threads_source"]) == (4, "--threads")
    assert (machine["ram_bw_source"], machine["disk_bw_source"], machine["pcie_source"]) == ("--ram-bw", "--disk-bw", "--h2d")
    assert machine["disk_bw_bytes_per_s"] == 1e9 and machine["pcie_bytes_per_s"] == 10e9
    doc = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--host", host_file, "--ctx", 4096, "--gpu", "rtx3090",
                   "--vram-bw", "900GB/s")
    gpu = doc["devices"][0]
    assert gpu["capacity_bytes"] == 24 * GIB  # the table's RTX 3090
    assert (gpu["bandwidth_bytes_per_s"], gpu["bandwidth_source"]) == (900e9, "--vram-bw")
    assert doc["devices"][-1]["capacity_bytes"] == 128 * GIB  # the rest is still the profile's


def test_the_fork_streams_over_the_profiles_pcie_link(tiny_models, host_file):
    doc = run_json(tiny_models["qwen3moe"], "--runtime", "fork", "--host", host_file)
    assert doc["h2d_bytes_per_s"] == 31.504e9 and doc["devices"][0]["name"] == "CUDA0"
    assert doc["machine"]["pcie_source"].startswith(f"host profile {host_file}: PCIe 4.0 x16")
    assert "(--h2d)" not in doc["speed_assumes"]


@pytest.mark.parametrize("flags", [["--vram", "auto"], ["--ram", "auto"], ["--gpu", "auto"]])
def test_auto_beside_a_profile_is_refused(tiny_models, host_file, flags):
    result = run(tiny_models["qwen3moe"], "--host", host_file, *flags)
    assert result.exit_code == 2
    assert f"{flags[0]} auto reads this machine, but --host {host_file} describes server" in result.output


@pytest.mark.parametrize("text, words", [
    ("{not json", "host profile is not valid JSON"),
    (json.dumps(profile_doc(format="moetools-plan")), 'not a host profile: "format" is "moetools-plan"'),
    (json.dumps({**profile_doc(), "cpu": {k: v for k, v in profile_doc()["cpu"].items() if k != "threads"}}),
     "missing field cpu.threads"),
])
def test_bad_profiles_are_one_line(tiny_models, tmp_path, text, words):
    path = tmp_path / "host.json"
    path.write_text(text)
    result = run(tiny_models["qwen3moe"], "--host", path)
    assert result.exit_code == 2 and f"error: {path}" in result.output and words in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = run(tiny_models["qwen3moe"], "--host", tmp_path / "missing.json")
    assert result.exit_code == 2 and "no such file" in result.output


def test_threads_default_names_the_machine(tiny_models):
    """A plan of another machine (--vram, --gpu or --ram given) does not take this machine's cores."""
    for flags in (["--vram", "24G"], ["--gpu", "rtx4090"], ["--ram", "64G"]):
        machine = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--ctx", 4096, *flags)["machine"]
        assert (machine["threads"], machine["threads_source"]) == (8, hostplan.DEFAULT_THREADS_SOURCE)
        assert machine["host_profile"] is None
    threads = math_threads()[0]
    for flags in ([], ["--ram", "auto"]):
        machine = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--ctx", 4096, *flags)["machine"]
        assert machine["threads"] == threads
        assert machine["threads_source"] == f"this machine ({threads} physical cores, llama.cpp's default)"
        assert machine["ram_bw_source"] == hostplan.DEFAULT_RAM_BW_SOURCE
        assert machine["disk_bw_source"] == hostplan.DEFAULT_DISK_BW_SOURCE


@pytest.mark.skipif(sys.platform.startswith("win"), reason="a shell script stands in for nvidia-smi")
def test_vram_auto_is_this_machine(tiny_models, tmp_path, monkeypatch):
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho '0, NVIDIA GeForce RTX 4090, 20480, 24564'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    machine = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--vram", "auto", "--ctx", 4096)["machine"]
    assert machine["threads"] == math_threads()[0] and machine["threads_source"].startswith("this machine (")


def test_profile_from_moetools_host_plans(tiny_models, tmp_path):
    """The whole path: `moetools host -o` here, `device-fit --host` reads it back."""
    out = tmp_path / "host.json"
    result = CliRunner().invoke(cli, ["host", "-o", str(out)])
    assert result.exit_code == 0, result.output
    profile = json.loads(out.read_text())
    machine = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--host", out, "--ctx", 4096)["machine"]
    assert machine["threads"] == profile["cpu"]["threads"]
    assert machine["ram_bw_bytes_per_s"] == profile["ram"]["read_bytes_per_s"]


def test_check_evaluates_a_line_on_the_profiles_machine(tiny_models, host_file):
    doc = run_json("--host", host_file, "--check", "--", "llama-server", "-m", tiny_models["qwen3moe"], "-ngl", 99, "-c", 4096)
    assert doc["check"]["fits"] and doc["devices"][0]["capacity_bytes"] == 22 * GIB
    assert doc["machine"]["threads"] == 12 and doc["machine"]["ram_bw_source"] == f"host profile {host_file}: measured read"


def test_a_profile_on_stdin(tiny_models, host_file):
    result = CliRunner().invoke(cli, ["device-fit", str(tiny_models["qwen3moe"]), "--runtime", "llama", "--host", "-",
                                      "--ctx", "4096", "--json"], input=host_file.read_text())
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["machine"]["threads_source"].startswith("host profile -: ")
    result = run(tiny_models["qwen3moe"], "--host", "-", "--coverage", "-")
    assert result.exit_code == 2 and "--coverage and --host cannot both read stdin" in result.output
