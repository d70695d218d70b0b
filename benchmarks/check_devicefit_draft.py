"""Check device-fit's --draft ledger against llama.cpp itself and record the draft's buffers it logs.

    .venv/bin/python benchmarks/check_devicefit_draft.py --bin DIR_WITH_LLAMA_TOOLS [--write]

Starts two `ggml-rpc-server` processes on 127.0.0.1 (ports in tests/devicefit_draft_case.py; stopped at
the end), writes the case's target and draft models, and for every setting of the case asks device-fit
for the llama-server flags, launches `llama-speculative-simple` with them (`-nr -lv 4`, no weights
read beyond loading) and reads the buffers llama.cpp logs per device after "loading draft model": the
draft's model, KV and compute buffers. `--write` records them in tests/data/devicefit_llama_draft.json
(with the llama.cpp commit given by --commit) for tests/test_devicefit_draft_llama.py, which needs no
llama.cpp. moetools ships no llama.cpp code and no recipe to build it: bring your own binaries
(llama-speculative-simple is one of llama.cpp's examples).
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from moetools import synth  # noqa: E402
from tests import devicefit_draft_case as case  # noqa: E402

BUFFER = re.compile(r"(?P<device>CPU|RPC\d+\[[^\]]+\])(?:_Mapped)? +(?P<kind>model|KV|compute) buffer size = +(?P<mib>[\d.]+) MiB")
DRAFT_START = "loading draft model"
SERVER_ONLY = ("--no-kv-unified", "-kvu")  # llama-server's flags; with -np N and a split cache, unchanged


def buffers(log):
    """{device: {"model": "3.46", "kv": ..., "compute": ...}} (MiB with two decimals, as logged)."""
    result = {}
    for match in BUFFER.finditer(log):
        result.setdefault(match["device"], {})[match["kind"].lower()] = match["mib"]
    return result


def launch(binary, args):
    argv = [binary, *args, "-nr", "-lm", "none", "-lv", "4", "-n", "1", "-p", "hello"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    if DRAFT_START not in log:
        raise SystemExit(f"no draft model loaded by {shlex.join(argv)}:\n{log[-3000:]}")
    target_log, draft_log = log.split(DRAFT_START, 1)
    return buffers(target_log), buffers(draft_log)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="folder holding llama-speculative-simple and ggml-rpc-server")
    parser.add_argument("--commit", default="0c1e57098", help="the llama.cpp commit those binaries were built from")
    parser.add_argument("--write", action="store_true", help="record the figures in " + case.RECORD)
    parser.add_argument("--only", nargs="*", help="run only these settings")
    options = parser.parse_args()
    tool = lambda name: os.path.join(options.bin, name)  # noqa: E731
    servers = [subprocess.Popen([tool("ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for port in case.RPC_PORTS]
    settings = {}
    try:
        time.sleep(1.0)
        with tempfile.TemporaryDirectory(prefix="devicefit-draft-") as folder:
            target = synth.write_model(case.target_spec(), os.path.join(folder, "target.gguf"), seed=1)[0]
            draft = synth.write_model(case.draft_spec(), os.path.join(folder, "draft.gguf"), seed=2)[0]
            for name in options.only or case.SETTINGS:
                plan = subprocess.run([sys.executable, "-m", "moetools", "device-fit", *case.device_fit_args(target, draft, name),
                                       "--json"], capture_output=True, text=True)
                if plan.returncode != 0:
                    raise SystemExit(f"device-fit failed on {name}: {plan.stderr}")
                doc = json.loads(plan.stdout)
                args = [arg for arg in doc["launch"]["llama"]["args"] if arg not in SERVER_ONLY]
                target_logged, draft_logged = launch(tool("llama-speculative-simple"), args)
                emitted = [os.path.basename(arg) if arg in (target, draft) else arg for arg in args]
                settings[name] = {"emitted_args": emitted, "target_logged": target_logged, "draft_logged": draft_logged}
                for device in doc["draft"]["devices"]:
                    logged = draft_logged.get(device["name"], {})
                    print(f"{name:18} {device['name']:22} ledger model {(device['resident_bytes'] + device['expert_bytes']) / 2**20:7.2f} "
                          f"kv {device['kv_bytes'] / 2**20:6.2f} compute {device['compute_bytes'] / 2**20:6.2f} | logged {logged}")
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=10)
    record = {"llama_cpp_commit": options.commit, "tool": "llama-speculative-simple", "settings": settings}
    if options.write:
        from moetools.atomic import write_json

        write_json(case.RECORD, record)
    else:
        print(json.dumps(record, indent=1)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
