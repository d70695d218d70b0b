"""`moetools host` (issue 30): this machine as a host profile, run as a real process with the GPU tools
absent and with a stand-in nvidia-smi on the PATH; the CPU and PCIe readers on small sysfs trees; the
profile format's checks."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from moetools.errors import FormatError
from moetools.formats import host_profile
from moetools.host import cpu as cpumod
from moetools.host import gpus as gpusmod

ROOT = Path(__file__).resolve().parent.parent
GIB = 1024**3
MIB = 1024**2

# nvidia-smi's answer to the host probe's query (index, name, free, total MiB, bus id, link gen/width
# now, link gen/width max), and to --vram auto's four-column query
LINKED_CSV = ("0, NVIDIA GeForce RTX 4090, 22528, 24564, 00000000:01:00.0, 1, 16, 4, 16\n"
              "1, NVIDIA GeForce RTX 3090, 20480, 24576, 00000000:FE:00.0, [N/A], [N/A], [N/A], [N/A]\n")
PLAIN_CSV = "0, NVIDIA GeForce RTX 4090, 22528, 24564\n1, NVIDIA GeForce RTX 3090, 20480, 24576\n"


def fake_nvidia_smi(folder):
    """An nvidia-smi on PATH that answers the linked query when asked for pcie fields, else the plain one."""
    folder.mkdir(exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text("#!/bin/sh\n"
                    "case \"$1\" in\n"
                    f"  *pcie*) printf '{LINKED_CSV}' ;;\n"
                    f"  *) printf '{PLAIN_CSV}' ;;\n"
                    "esac\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return folder


def run_host(*args, path, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=str(path))
    return subprocess.run([sys.executable, "-m", "moetools", "host", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def test_host_without_gpu_tools_describes_cpu_and_ram(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    result = run_host(path=empty)
    assert result.returncode == 0, result.stderr
    profile = host_profile.validate(json.loads(result.stdout))
    assert profile["format"] == "moetools-host" and profile["version"] == 1 and profile["calibration"] is None
    assert profile["gpus"] == [] and profile["disk"] is None
    assert "no GPU found" in result.stderr and "nvidia-smi (not on the PATH)" in result.stderr
    cpu, ram = profile["cpu"], profile["ram"]
    assert 1 <= cpu["physical_cores"] <= cpu["logical_cpus"] and cpu["threads"] == cpumod.math_threads()[0]
    assert "llama.cpp's default" in cpu["threads_source"] and cpu["numa_nodes"] >= 1 and cpu["sockets"] >= 1
    assert 0 < ram["available_bytes"] <= ram["total_bytes"]
    assert ram["read_bytes_per_s"] > 0 and ram["read_source"].startswith("measured: ")
    assert f"by {cpu['logical_cpus']} thread" in ram["read_source"]


@pytest.mark.skipif(sys.platform.startswith("win"), reason="a shell script stands in for nvidia-smi")
def test_host_reads_gpus_and_pcie_from_nvidia_smi(tmp_path):
    result = run_host(path=fake_nvidia_smi(tmp_path / "bin"))
    assert result.returncode == 0, result.stderr
    gpus = json.loads(result.stdout)["gpus"]
    assert [gpu["name"] for gpu in gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"]
    first, second = gpus
    assert first["backend"] == "cuda" and first["vram_bytes"] == 24564 * MIB and first["vram_free_bytes"] == 22528 * MIB
    assert first["bandwidth_bytes_per_s"] == 1008e9 and first["bandwidth_source"].startswith("GPU table (GeForce RTX 4090")
    # the link's maximum, not the idle link's gen 1
    assert first["pcie"]["gen"] == 4 and first["pcie"]["width"] == 16
    assert first["pcie"]["bytes_per_s"] == pytest.approx(16 * 1.969e9)
    assert "pcie.link.gen.max" in first["pcie"]["source"] and "now gen 1 x16" in first["pcie"]["source"]
    assert second["bandwidth_bytes_per_s"] == 936e9 and second["pcie"] is None  # [N/A], and no such bus in sysfs


@pytest.mark.skipif(sys.platform.startswith("win"), reason="a shell script stands in for nvidia-smi")
def test_host_falls_back_to_the_plain_query(tmp_path):
    """An nvidia-smi that refuses the link fields: the GPUs still come, without a PCIe entry."""
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "nvidia-smi"
    tool.write_text("#!/bin/sh\ncase \"$1\" in\n  *pcie*) echo 'Field \"pcie.link.gen.max\" is not a valid field to query.' >&2;"
                    f" exit 2 ;;\n  *) printf '{PLAIN_CSV}' ;;\nesac\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    result = run_host(path=folder)
    assert result.returncode == 0, result.stderr
    gpus = json.loads(result.stdout)["gpus"]
    assert [gpu["vram_free_bytes"] for gpu in gpus] == [22528 * MIB, 20480 * MIB]
    assert [gpu["pcie"] for gpu in gpus] == [None, None]


@pytest.mark.skipif(sys.platform.startswith("win"), reason="a shell script stands in for rocm-smi")
def test_host_reads_rocm_smi(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    memory = json.dumps({"card0": {"VRAM Total Memory (B)": "25753026560", "VRAM Total Used Memory (B)": "753026560"}})
    buses = json.dumps({"card0": {"PCI Bus": "0000:FD:00.0"}})
    tool = folder / "rocm-smi"
    tool.write_text(f"#!/bin/sh\ncase \"$1\" in\n  --showbus) echo '{buses}' ;;\n  *) echo '{memory}' ;;\nesac\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    result = run_host(path=folder)
    assert result.returncode == 0, result.stderr
    [gpu] = json.loads(result.stdout)["gpus"]
    assert (gpu["name"], gpu["backend"], gpu["vram_bytes"], gpu["vram_free_bytes"]) == ("card0", "rocm", 25753026560, 25_000_000_000)
    assert gpu["bandwidth_bytes_per_s"] is None and "not in the GPU table" in gpu["bandwidth_source"]


def test_output_file_and_disk(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    drive = tmp_path / "drive"
    drive.mkdir()
    out = tmp_path / "host.json"
    result = run_host("--disk", drive, "-o", out, path=empty)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and f"written to {out}" in result.stderr
    profile = host_profile.load(out)
    disk = profile["disk"]
    assert disk["path"] == str(drive) and disk["read_bytes_per_s"] > 0 and disk["source"].startswith("measured: ")
    assert os.listdir(drive) == []  # its temporary file is gone
    assert [name for name in os.listdir(tmp_path) if name.startswith(".")] == []  # no temporary left by -o


def test_bad_options_are_one_line(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    result = run_host("--disk", tmp_path / "nowhere", path=empty)
    assert result.returncode == 2 and "nowhere" in result.stderr and "Traceback" not in result.stderr
    result = run_host("-o", tmp_path / "no" / "host.json", path=empty)
    assert result.returncode == 2 and "no such folder" in result.stderr and len(result.stderr.strip().splitlines()) == 1


# --- the readers, on small sysfs trees ------------------------------------------------------------

def write(root, path, text):
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def hybrid_tree(root):
    """8 logical CPUs: two P-cores with two threads each (0-1, 2-3), four E-cores (4-7), one package."""
    write(root, "/sys/devices/system/cpu/online", "0-7\n")
    masks = ["03", "03", "0c", "0c", "10", "20", "40", "80"]
    for cpu, mask in enumerate(masks):
        write(root, f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings", mask + "\n")
        write(root, f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id", "0\n")
    write(root, "/sys/devices/cpu_atom/cpus", "4-7\n")
    write(root, "/proc/cpuinfo", "processor\t: 0\nmodel name\t: 13th Gen Intel(R) Core(TM) i5-1340P\n")
    (root / "sys/devices/system/node/node0").mkdir(parents=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="llama.cpp skips E-cores on Linux x86-64 only")
def test_threads_skip_e_cores_as_llama_cpp(tmp_path):
    hybrid_tree(tmp_path)
    info = cpumod.cpu_info(str(tmp_path))
    assert info["physical_cores"] == 6 and info["logical_cpus"] == 8 and info["sockets"] == 1 and info["numa_nodes"] == 1
    assert info["model"] == "13th Gen Intel(R) Core(TM) i5-1340P"
    # cpu_count_math_cpus: cpu0 counted (cpu1 skipped), cpu2 counted (cpu3 skipped), cpu4-7 are E-cores
    assert cpumod.math_threads(str(tmp_path), machine="x86_64")[0] == 2
    assert cpumod.math_threads(str(tmp_path), machine="aarch64") == (6, "physical cores, llama.cpp's default (thread_siblings in sysfs)")


def test_cores_fallback_and_numa(tmp_path):
    write(tmp_path, "/sys/devices/system/cpu/online", "0-15\n")
    for node in (0, 1):
        (tmp_path / f"sys/devices/system/node/node{node}").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/possible").write_text("0-1\n")
    assert cpumod.physical_cores(str(tmp_path)) == (8, "half of 16 logical CPUs (llama.cpp's fallback rule)")
    assert cpumod.numa_nodes(str(tmp_path)) == 2 and cpumod.sockets(str(tmp_path)) == 1
    assert cpumod.parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]


def test_ram_read_needs_no_cleanup_of_its_threads():
    """A short read test: a positive rate, its threads gone when it returns."""
    import threading

    from moetools.host import measure

    before = threading.active_count()
    rate, how = measure.ram_read(2, total_bytes=16 * MIB, seconds=0, min_passes=2)
    assert rate > 0 and "0.02 GiB read by 2 threads at once" in how and "best of 2 passes" in how
    assert threading.active_count() == before


def test_pcie_rates():
    assert gpusmod.pcie_bytes_per_s(3, 16) == pytest.approx(15.76e9)
    assert gpusmod.pcie_bytes_per_s(4, 16) == pytest.approx(31.504e9)
    assert gpusmod.pcie_bytes_per_s(5, 8) == pytest.approx(31.504e9)


@pytest.mark.skipif(sys.platform.startswith("win"), reason="sysfs links")
def test_sysfs_link_is_bounded_by_the_upstream_port(tmp_path):
    port = tmp_path / "sys/devices/pci0000:00/0000:00:01.0"
    gpu = port / "0000:01:00.0"
    gpu.mkdir(parents=True)
    (port / "max_link_speed").write_text("8.0 GT/s PCIe\n")
    (port / "max_link_width").write_text("16\n")
    (gpu / "max_link_speed").write_text("16.0 GT/s PCIe\n")
    (gpu / "max_link_width").write_text("16\n")
    (gpu / "current_link_speed").write_text("2.5 GT/s PCIe\n")
    (gpu / "current_link_width").write_text("16\n")
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink(gpu, tmp_path / "sys/bus/pci/devices/0000:01:00.0")
    gen, width, how = gpusmod.sysfs_link("0000:01:00.0", str(tmp_path))
    assert (gen, width) == (3, 16) and "upstream port" in how and "now gen 1 x16" in how
    assert gpusmod.sysfs_link("0000:02:00.0", str(tmp_path)) is None


# --- the format ----------------------------------------------------------------------------------

def profile_doc(**changes):
    doc = {"format": "moetools-host", "version": 1, "written_by": "moetools test", "hostname": "box", "os": "Linux 6",
           "gpus": [{"name": "NVIDIA GeForce RTX 4090", "backend": "cuda", "vram_bytes": 24 * GIB,
                     "vram_free_bytes": 22 * GIB, "bandwidth_bytes_per_s": 1008e9, "bandwidth_source": "GPU table",
                     "pcie": {"gen": 4, "width": 16, "bytes_per_s": 31.504e9, "source": "nvidia-smi"}}],
           "cpu": {"model": "x", "physical_cores": 16, "logical_cpus": 32, "threads": 16, "threads_source": "t",
                   "numa_nodes": 1, "sockets": 1},
           "ram": {"total_bytes": 128 * GIB, "available_bytes": 120 * GIB, "read_bytes_per_s": 80e9, "read_source": "m"},
           "disk": None, "calibration": None}
    doc.update(changes)
    return doc


def test_calibration_and_unknown_keys_survive_a_round_trip(tmp_path):
    doc = profile_doc(calibration={"cpu_efficiency": 0.5, "runs": [{"tok_s": 9.5}]}, extra={"kept": True})
    path = tmp_path / "host.json"
    host_profile.dump(doc, path)
    assert host_profile.load(path) == doc


@pytest.mark.parametrize("change, words", [
    (lambda doc: doc["cpu"].pop("threads"), "missing field cpu.threads"),
    (lambda doc: doc["cpu"].update(threads="8"), "cpu.threads must be an integer"),
    (lambda doc: doc["cpu"].update(threads=0), "cpu.threads must be more than 0"),
    (lambda doc: doc["gpus"][0].update(vram_bytes=1.5), "gpus[0].vram_bytes must be an integer"),
    (lambda doc: doc["gpus"][0]["pcie"].pop("gen"), "missing field gpus[0].pcie.gen"),
    (lambda doc: doc.update(disk={"path": "/m"}), "missing field disk.read_bytes_per_s"),
    (lambda doc: doc.update(calibration=[1]), "calibration must be an object or null"),
    (lambda doc: doc.update(format="moetools-plan"), 'not a host profile: "format" is "moetools-plan"'),
    (lambda doc: doc.update(version=2), "version 2 is newer"),
])
def test_bad_profiles_name_the_field(tmp_path, change, words):
    doc = profile_doc()
    change(doc)
    path = tmp_path / "host.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError) as err:
        host_profile.load(path)
    assert str(err.value).startswith(f"{path}: ") and words in str(err.value)


def test_not_json(tmp_path):
    path = tmp_path / "host.json"
    path.write_text("{not json")
    with pytest.raises(FormatError, match="host profile is not valid JSON"):
        host_profile.load(path)


def test_disk_reads_a_large_file_where_it_is(tmp_path):
    """A file past the size floor is read as it is, never written or deleted."""
    from moetools.host import measure

    model = tmp_path / "model.gguf"
    model.write_bytes(os.urandom(4 * MIB))
    rate, how = measure.disk_read(str(model), min_file_bytes=MIB)
    assert rate > 0 and f"4 MiB of {model}" in how and model.stat().st_size == 4 * MIB
    assert os.listdir(tmp_path) == ["model.gguf"]
