"""`moetools inspect URL --json` against @huggingface/gguf's reader over loopback HTTP.

The model: the 14-shard Kimi-K3-class example (header-only sparse files, a 6 MiB first header with
the 163,840-token vocabulary and its merges), served by the tests' threaded HTTP server (Range, ETag,
keep-alive). Both readers run as whole processes on the same server: moetools with an empty header
cache each time (a cold read), @huggingface/gguf's `ggufAllShards` (npm-installed into a temporary
folder here; node must be on PATH). Targets (issue 12): at least 5x faster, fewer requests. The
parameter counts of both readers must agree. Also reported: a second (cached) moetools plan.
moetools runs as an installed package does, with its bytecode cached (pip compiles it at install):
PYTHONDONTWRITEBYTECODE is dropped for its processes and one untimed run writes the cache first.

    .venv/bin/python benchmarks/bench_remote.py [REPEAT]
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from common import MOETOOLS, report, scratch  # noqa: E402

from moetools import synth  # noqa: E402
from tests.httpfixture import Server  # noqa: E402

NODE_SCRIPT = """
import { ggufAllShards } from "@huggingface/gguf";
const result = await ggufAllShards(process.argv[2]);
const tensors = result.shards.reduce((sum, shard) => sum + shard.tensorInfos.length, 0);
console.log(JSON.stringify({ shards: result.shards.length, tensors, parameterCount: result.parameterCount }));
"""


def install_hf_gguf(folder):
    """npm-install @huggingface/gguf into `folder`; returns the script path, or None without node/npm."""
    if not shutil.which("node") or not shutil.which("npm"):
        return None
    (folder / "package.json").write_text('{"name": "bench-remote", "private": true, "type": "module"}\n')
    subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "@huggingface/gguf"], cwd=folder, check=True)
    script = folder / "read.mjs"
    script.write_text(NODE_SCRIPT)
    return script


def timed(argv, server, env=None, cwd=None, fresh_cache=None):
    """(seconds, stdout, requests served) of one whole process."""
    if fresh_cache is not None:
        shutil.rmtree(fresh_cache, ignore_errors=True)
    server.reset_counters()
    start = time.perf_counter()
    proc = subprocess.run(argv, check=True, capture_output=True, text=True, env=env, cwd=cwd)
    return time.perf_counter() - start, proc.stdout, server.requests


def main():
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with scratch("bench-remote-") as tmp, tempfile.TemporaryDirectory(prefix="bench-remote-npm-") as npm_dir:
        tmp = Path(tmp)
        (tmp / "model").mkdir()
        shards = synth.write_model(synth.preset("kimi-k3"), tmp / "model" / "kimi-k3.gguf", sparse=True, shards=14)
        script = install_hf_gguf(Path(npm_dir))
        if script is None:
            print("node/npm not found: cannot run the @huggingface/gguf baseline")
            return 1
        cache = tmp / "cache"
        env = dict(os.environ, MOETOOLS_CACHE_DIR=str(cache))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        with Server(tmp / "model") as server:
            url = server.url(os.path.basename(shards[0]))
            timed(MOETOOLS + ["inspect", url, "--json"], server, env, fresh_cache=cache)  # writes the bytecode cache
            ours, theirs, warm = [], [], []
            for _ in range(repeat):
                seconds, out, ours_requests = timed(MOETOOLS + ["inspect", url, "--json"], server, env, fresh_cache=cache)
                ours.append(seconds)
                doc = json.loads(out)
                seconds, _, warm_requests = timed(MOETOOLS + ["inspect", url, "--json"], server, env)
                warm.append(seconds)
                seconds, out, theirs_requests = timed(["node", str(script), url], server, cwd=npm_dir)
                theirs.append(seconds)
                other = json.loads(out)
        assert (other["shards"], other["tensors"]) == (len(doc["shards"]), doc["tensor_count"]), (other, doc["tensor_count"])
        assert other["parameterCount"] == doc["parameters"], (other["parameterCount"], doc["parameters"])
        print(f"14-shard K3-class header over loopback, median of {repeat}, load average {os.getloadavg()[0]:.2f}")
        speed = report("inspect URL (cold cache) vs @huggingface/gguf ggufAllShards, whole process",
                       statistics.median(ours), statistics.median(theirs))
        report("inspect URL (second plan, header cache) vs @huggingface/gguf", statistics.median(warm), statistics.median(theirs))
        print(f"requests: moetools {ours_requests} (cold; {doc['fetched_bytes']} bytes), {warm_requests} (cached: "
              f"If-None-Match per shard, 0 bytes) vs @huggingface/gguf {theirs_requests}")
        print(f"parameters agree: {doc['parameters']}")
        ok = speed >= 5 and ours_requests < theirs_requests
        print("targets (>= 5x faster, fewer requests):", "met" if ok else "NOT met")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
