"""`device-fit --check` on the launch line of every upstream llama.cpp plan in the benchmarks gives back
the same plan: for each llama.cpp case of benchmarks/bench_devicefit_cases.py (one GPU, four devices,
draft-mtp and draft models), `--emit llama` prints the line, `--check` reads it back from a file, and
every device's ledger, the speed, the context and the launch arguments must be equal, with nothing for
device-fit to change. tests/test_devicefit_check.py holds a sample of these in the suite.

    .venv/bin/python benchmarks/check_devicefit_roundtrip.py [--only SUBSTRING,...]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_devicefit_cases import cases, write_models  # noqa: E402

LEDGER = ("name", "kind", "capacity_bytes", "compute_bytes", "resident_bytes", "kv_bytes", "expert_bytes", "draft_bytes")


def moetools(*args):
    done = subprocess.run([sys.executable, "-m", "moetools", *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return done.returncode, done.stdout, done.stderr


def device_options(argv):
    """The case's device options (everything after MODEL but --json): what --check is evaluated on."""
    return [arg for arg in argv[2:] if arg != "--json"]


def ledger(doc):
    return [{key: device.get(key) for key in LEDGER} for device in doc["devices"]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="only cases whose name contains one of these (comma-separated)")
    args = parser.parse_args(argv)
    wanted = [part for part in args.only.split(",") if part]
    same = differ = 0
    with tempfile.TemporaryDirectory(prefix="devicefit-roundtrip-") as folder:
        paths = write_models(folder)
        for name, case_argv in cases(paths):
            if case_argv[0] != "device-fit" or "--runtime" not in case_argv or "llama" not in case_argv:
                continue
            if wanted and not any(part in name for part in wanted):
                continue
            model, options = case_argv[1], device_options(case_argv)
            code, out, err = moetools("device-fit", model, *options, "--json")
            planned = json.loads(out)
            if planned["verdict"] != "fits":
                print(f"{name:44} skipped: the plan does not fit")
                continue
            code, line, err = moetools("device-fit", model, *options, "--emit", "llama")
            saved = Path(folder) / "launch.sh"
            saved.write_text(line)
            # the line carries the draft (-md, --spec-type): --check gets the devices only
            devices = [arg for index, arg in enumerate(options)
                       if arg not in ("--draft", "--spec-type") and not (index and options[index - 1] in ("--draft", "--spec-type"))]
            code, out, err = moetools("device-fit", *devices, "--json", "--check", saved)
            doc = json.loads(out) if out.strip().startswith("{") else None
            ok = (doc is not None and doc["check"]["fits"] and ledger(doc) == ledger(planned)
                  and doc["tok_s"] == planned["tok_s"] and doc["context"] == planned["context"]
                  and doc["launch"]["llama"]["args"] == planned["launch"]["llama"]["args"]
                  and doc["check"]["device_fit"] is not None and doc["check"]["device_fit"]["changes"] == [])
            same += ok
            differ += not ok
            print(f"{name:44} {'same plan' if ok else 'DIFFERS: ' + (err.strip() or 'see the JSON')}")
    print(f"round trips giving back the same plan: {same} of {same + differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
