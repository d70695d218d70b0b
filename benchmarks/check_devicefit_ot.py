"""Check device-fit's evaluation of a user's own `-ot` placements against llama.cpp itself.

    .venv/bin/python benchmarks/check_devicefit_ot.py --bin DIR_WITH_LLAMA_TOOLS [--write]

Starts two `ggml-rpc-server` processes on 127.0.0.1 (the ports and sizes of tests/devicefit_llama_case.py),
writes that case's fixture model, and for each override case below launches `llama-completion` with the
user's flags as a llama.cpp user types them (`--rpc ... -ngl 99 -ot PATTERN=DEVICE ...`, `-nr -lv 4`, one
token) and reads the model, KV and compute buffers llama.cpp logs per device. device-fit evaluates the
same flags (`device-fit MODEL --runtime llama --rpc ... -ngl 99 -ot ...`). `--write` records what
llama.cpp logged in tests/data/devicefit_llama_ot.json (with the commit given by --commit) for
tests/test_devicefit_ot_llama.py, which needs no llama.cpp. moetools ships no llama.cpp code and no
recipe to build it: bring your own binaries.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from moetools import synth  # noqa: E402
from tests import devicefit_llama_case as case  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_devicefit_llama import device_row, launch, rpc_servers  # noqa: E402

RECORD = case.OT_RECORD
COMMON = ["-c", str(case.CONTEXT), "-fa", "on", "--fit", "off"]


def rpc_flags():
    return ["--rpc", ",".join(f"127.0.0.1:{port}" for port in case.RPC_PORTS)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="folder holding llama-completion and ggml-rpc-server")
    parser.add_argument("--commit", default="0c1e57098", help="the llama.cpp commit those binaries were built from")
    parser.add_argument("--write", action="store_true", help="record the figures in " + RECORD)
    options = parser.parse_args()
    tool = lambda name: os.path.join(options.bin, name)  # noqa: E731
    record = {"llama_cpp_commit": options.commit, "cases": []}
    with rpc_servers(options.bin, case.RPC_PORTS):
        with tempfile.TemporaryDirectory(prefix="devicefit-ot-") as folder:
            model = synth.write_model(case.fixture_spec(), os.path.join(folder, "fixture.gguf"), seed=1)[0]
            for name, flags in case.OT_CASES:
                logged, _ = launch(tool("llama-completion"), model, [*rpc_flags(), *COMMON, *flags])
                fit = subprocess.run([sys.executable, "-m", "moetools", "device-fit", *case.ot_device_fit_args(model, flags), "--json"],
                                     capture_output=True, text=True)
                doc = json.loads(fit.stdout)
                record["cases"].append({"name": name, "flags": flags, "logged": logged})
                print(f"== {name}: {' '.join(flags)} (device-fit exit {fit.returncode})")
                for device in doc["devices"]:
                    print(device_row(device, logged))
    if options.write:
        from moetools.atomic import write_json

        write_json(RECORD, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
