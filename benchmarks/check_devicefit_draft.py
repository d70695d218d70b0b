"""Check device-fit's --draft ledger against llama.cpp itself and record the draft's buffers it logs.

    .venv/bin/python benchmarks/check_devicefit_draft.py --bin DIR_WITH_LLAMA_TOOLS [--write] [--mtp]

Starts two `ggml-rpc-server` processes on 127.0.0.1 (ports in tests/devicefit_draft_case.py; stopped at
the end), writes the case's target and draft models, and for every setting of the case asks device-fit
for the llama-server flags, launches `llama-speculative-simple` with them (`-nr -lv 4`, no weights
read beyond loading) and reads the buffers llama.cpp logs per device after "loading draft model": the
draft's model, KV and compute buffers. `--write` records them in tests/data/devicefit_llama_draft.json
(with the llama.cpp commit given by --commit) for tests/test_devicefit_draft_llama.py, which needs no
llama.cpp. `--mtp`: the same for `--spec-type draft-mtp` on the case's NextN targets
(tests/devicefit_draft_case.mtp_specs): the buffers logged after "creating MTP draft context" (the MTP context's KV and compute)
and the target's model buffers (with the NextN tensors; for the base setting also those llama-completion logs for the
target alone, which NextN tensors it loads without MTP), in tests/data/devicefit_llama_mtp.json. moetools ships no llama.cpp code and no recipe to build it: bring your own binaries
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

BUFFER = re.compile(r"(?P<device>CPU|RPC\d+\[[^\]]+\])(?:_Mapped)? +(?P<kind>model|KV|RS|compute|DSV4 \w+ state) buffer size = "
                    r"+(?P<mib>[\d.]+) MiB")
DRAFT_START = "loading draft model"
MTP_START = "creating MTP draft context"
SERVER_ONLY = ("--no-kv-unified", "-kvu")  # llama-server's flags; with -np N and a split cache, unchanged


def buffers(log):
    """{device: {"model": "3.46", "kv": ..., "compute": ...}} (MiB with two decimals, as logged; a list
    when a device logs several buffers of a kind, as the DSA cache's MLA and indexer KV buffers)."""
    result = {}
    for match in BUFFER.finditer(log):
        kinds = result.setdefault(match["device"], {})
        kind = "state" if match["kind"].startswith("DSV4") else match["kind"].lower()  # DeepSeek-V4's compressor states
        if kind in kinds:
            kinds[kind] = [*(kinds[kind] if isinstance(kinds[kind], list) else [kinds[kind]]), match["mib"]]
        else:
            kinds[kind] = match["mib"]
    return result


def launch(binary, args, start=DRAFT_START):
    argv = [binary, *args, "-nr", "-lm", "none", "-lv", "4", "-n", "1", "-p", "hello"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    if start not in log:
        raise SystemExit(f"no draft context created by {shlex.join(argv)}:\n{log[-3000:]}")
    target_log, draft_log = log.split(start, 1)
    return buffers(target_log), buffers(draft_log)


def device_fit(args):
    plan = subprocess.run([sys.executable, "-m", "moetools", "device-fit", *args, "--json"], capture_output=True, text=True)
    if plan.returncode != 0:
        raise SystemExit(f"device-fit {shlex.join(args)} failed: {plan.stderr}")
    return json.loads(plan.stdout)


def show(name, doc, logged):
    for device in doc["draft"]["devices"]:
        mine = logged.get(device["name"], {})
        print(f"{name:18} {device['name']:22} ledger model {(device['resident_bytes'] + device['expert_bytes']) / 2**20:7.2f} "
              f"kv {device['kv_bytes'] / 2**20:6.2f} compute {device['compute_bytes'] / 2**20:6.2f} | logged {mine}")


def mtp_settings(tool, folder, only, targets=None):
    """{target: {setting: record}} of --spec-type draft-mtp (targets: only these of case.mtp_specs())."""
    result = {}
    for target_name, spec in case.mtp_specs().items():
        if targets and target_name not in targets:
            continue
        target = synth.write_model(spec, os.path.join(folder, f"{target_name}.gguf"), seed=3)[0]
        result[target_name] = {}
        for name in only or case.MTP_SETTINGS:
            refused = subprocess.run([sys.executable, "-m", "moetools", "device-fit", *case.mtp_device_fit_args(target, name)],
                                     capture_output=True, text=True)
            if refused.returncode == 2:  # llama.cpp must refuse it too: run the base flags with this setting's
                base = device_fit(case.mtp_device_fit_args(target, "base"))["launch"]["llama"]["args"]
                argv = [tool("llama-speculative-simple"), *[a for a in base if a not in SERVER_ONLY], *case.MTP_SETTINGS[name],
                        "-nr", "-lm", "none", "-n", "1", "-p", "hello"]
                log = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                errors = [line.split(" E ", 1)[1] for line in (log.stdout + log.stderr).splitlines() if " E " in line]
                result[target_name][name] = {"device_fit_refused": refused.stderr.strip(), "llama_cpp_errors": errors[:2]}
                print(f"{target_name}/{name}: both refuse: {refused.stderr.strip()} | {errors[:1]}")
                continue
            doc = device_fit(case.mtp_device_fit_args(target, name))
            args = [arg for arg in doc["launch"]["llama"]["args"] if arg not in SERVER_ONLY]
            target_logged, mtp_logged = launch(tool("llama-speculative-simple"), args, MTP_START)
            emitted = [os.path.basename(arg) if arg == target else arg for arg in args]
            result[target_name][name] = {"emitted_args": emitted, "target_logged": target_logged, "mtp_logged": mtp_logged}
            if name == "base":  # the target alone (no --spec-type): which NextN tensors llama.cpp loads anyway
                result[target_name][name]["main_logged"] = main_weights(tool, target)
            show(f"{target_name}/{name}", doc, mtp_logged)
    return result


def main_weights(tool, target):
    """{device: {"model": ...}} llama-completion logs for the target without --spec-type draft-mtp (the flags
    device-fit emits for the base setting less its MTP ones): the NextN tensors a loader creates anyway."""
    args = case.mtp_device_fit_args(target, "base")
    position = args.index("--spec-type")
    emitted = device_fit(args[:position] + args[position + 2:])["launch"]["llama"]["args"]
    argv = [tool("llama-completion"), *[a for a in emitted if a not in SERVER_ONLY], "-nr", "-lv", "4", "-n", "1",
            "-p", "hello", "-no-cnv"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    return {device: {"model": kinds["model"]} for device, kinds in buffers(done.stdout + done.stderr).items()
            if "model" in kinds}


def draft_settings(tool, folder, only):
    """{setting: record} of --draft."""
    target = synth.write_model(case.target_spec(), os.path.join(folder, "target.gguf"), seed=1)[0]
    draft = synth.write_model(case.draft_spec(), os.path.join(folder, "draft.gguf"), seed=2)[0]
    result = {}
    for name in only or case.SETTINGS:
        doc = device_fit(case.device_fit_args(target, draft, name))
        args = [arg for arg in doc["launch"]["llama"]["args"] if arg not in SERVER_ONLY]
        target_logged, draft_logged = launch(tool("llama-speculative-simple"), args)
        emitted = [os.path.basename(arg) if arg in (target, draft) else arg for arg in args]
        result[name] = {"emitted_args": emitted, "target_logged": target_logged, "draft_logged": draft_logged}
        show(name, doc, draft_logged)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="folder holding llama-speculative-simple and ggml-rpc-server")
    parser.add_argument("--commit", default="0c1e57098", help="the llama.cpp commit those binaries were built from")
    parser.add_argument("--write", action="store_true", help="record the figures in " + case.RECORD)
    parser.add_argument("--only", nargs="*", help="run only these settings")
    parser.add_argument("--mtp", action="store_true", help="check --spec-type draft-mtp instead (" + case.MTP_RECORD + ")")
    parser.add_argument("--target", nargs="*", help="--mtp: run only these targets; --write then replaces only "
                                                    "their records in " + case.MTP_RECORD)
    options = parser.parse_args()
    tool = lambda name: os.path.join(options.bin, name)  # noqa: E731
    servers = [subprocess.Popen([tool("ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for port in case.RPC_PORTS]
    try:
        time.sleep(1.0)
        with tempfile.TemporaryDirectory(prefix="devicefit-draft-") as folder:
            if options.mtp:
                settings = mtp_settings(tool, folder, options.only, options.target)
            else:
                settings = draft_settings(tool, folder, options.only)
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=10)
    if options.mtp and options.target:  # the other targets' records stay as they were
        with open(case.MTP_RECORD) as handle:
            kept = json.load(handle)
        if kept["llama_cpp_commit"] != options.commit:
            raise SystemExit(f"{case.MTP_RECORD} was recorded with llama.cpp {kept['llama_cpp_commit']}, not {options.commit}")
        settings = {name: settings.get(name, kept["settings"].get(name)) for name in case.mtp_specs()}
    record = {"llama_cpp_commit": options.commit, "tool": "llama-speculative-simple", "settings": settings}
    if options.write:
        from moetools.atomic import write_json

        write_json(case.MTP_RECORD if options.mtp else case.RECORD, record)
    else:
        print(json.dumps(record, indent=1)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
