"""Check device-fit's --spec-type draft-mtp MTP context against llama.cpp on the CPU, at width and with a
unified cache, and record what llama.cpp logs.

    .venv/bin/python benchmarks/check_devicefit_mtp_probe.py --probe PROBE [--write] [--only ARCH...]

PROBE is tests/llama_probe/probe.cpp compiled against the libllama you measure (moetools ships no
llama.cpp code and no recipe to build it). With PROBE_MTP=1 it loads the model with its NextN tensors
(load_mtp, no allocation: header-only sparse models cost no RAM) and makes the MTP context
common_speculative_init_result makes for `--spec-type draft-mtp`; llama.cpp logs that context's KV
cache sizes and its compute buffer. This covers what tests/data/devicefit_llama_mtp.json (two RPC
devices, llama-speculative-simple) cannot: `-kvu` (llama-speculative-simple has no such flag) and
widths of real models. `--write` records tests/data/devicefit_llama_mtp_probe.json (with --commit)
for tests/test_devicefit_mtp_llama.py.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from moetools import synth  # noqa: E402

RECORD = "tests/data/devicefit_llama_mtp_probe.json"
KV_SIZE = re.compile(r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers")
COMPUTE = re.compile(r"CPU compute buffer size = +([\d.]+) MiB")

# name -> (tiny architecture, its parameters): the tiny layouts of tests/devicefit_draft_case.mtp_specs and
# wider ones (widths of the published models, fewer trunk layers: the MTP context holds the NextN
# blocks only, and the trunk's depth changes none of its buffers; vocabularies of 16384: the MTP
# context's logits are one row per sequence, and writing a 250k-token vocabulary costs the test 20 s)
MODELS = {
    "qwen35": ("qwen35", {"n_layer": 4, "n_embd": 256, "vocab": 2048, "ctx": 8192, "nextn": 1}),
    "qwen35-27b-width": ("qwen35", {"n_layer": 8, "n_embd": 5120, "n_head": 24, "n_head_kv": 4, "head": 256,
                                    "rope": 64, "n_ff": 17408, "k_heads": 16, "v_heads": 48, "state": 128,
                                    "vocab": 16384, "ctx": 262144, "nextn": 1}),
    "bailingmoe3": ("bailingmoe3", {"n_layer": 4, "n_embd": 256, "vocab": 2048, "ctx": 8192, "nextn": 1, "rope": 32}),
    "bailingmoe3-width": ("bailingmoe3", {"n_layer": 8, "n_embd": 2560, "n_head": 32, "kda_head": 128, "n_ff": 9216,
                                          "n_ff_exp": 512, "n_expert": 256, "top_k": 8, "q_lora": 768, "kv_lora": 512,
                                          "rope": 64, "qk_nope": 128, "v_head": 128, "vocab": 16384, "ctx": 131072,
                                          "nextn": 1}),
    "cohere2moe": ("cohere2moe", {"n_layer": 4, "n_embd": 256, "vocab": 2048, "ctx": 8192, "nextn": 1}),
    "cohere2moe-width": ("cohere2moe", {"n_layer": 8, "n_embd": 2048, "n_head": 16, "n_head_kv": 4, "n_ff": 6144,
                                        "n_ff_exp": 768, "n_expert": 128, "top_k": 8, "swa": 4096, "vocab": 16384,
                                        "ctx": 131072, "nextn": 1}),
    "mimo2": ("mimo2", {"n_embd": 256, "vocab": 2048, "ctx": 8192, "nextn": 2}),
    "mimo2-flash-width": ("mimo2", {"n_embd": 4096, "n_head": 64, "kv_full": 4, "kv_swa": 8, "k_head": 192,
                                    "v_head": 128, "n_ff": 16384, "n_ff_exp": 2048, "n_expert": 256, "top_k": 8,
                                    "pattern": "FSSSSS", "swa": 128, "vocab": 16384, "ctx": 262144, "nextn": 3}),
    # glm-dsa (GLM-5 widths), hy_v3, step35 (Step-3.5-Flash widths: 3 NextN blocks, full and sliding-window),
    # deepseek4 (DeepSeek-V4 widths: hc streams, a sliding-window NextN block)
    "glm-dsa": ("glm-dsa", {"n_embd": 256, "vocab": 2048, "ctx": 8192}),
    "glm-5-width": ("glm-dsa", {"idx_types": "11", "n_embd": 6144, "n_head": 64, "q_lora": 2048, "kv_lora": 512, "rope": 64,
                                "qk_nope": 192, "v_head": 256, "n_ff": 12288, "n_ff_exp": 2048, "n_expert": 256, "top_k": 8,
                                "idx_heads": 32, "idx_head": 128, "idx_top_k": 2048, "vocab": 16384, "ctx": 202752}),
    "hy_v3": ("hy_v3", {"n_layer": 4, "n_embd": 256, "vocab": 2048, "ctx": 8192, "nextn": 1}),
    "hy_v3-width": ("hy_v3", {"n_layer": 4, "n_embd": 4096, "n_head": 32, "n_head_kv": 8, "n_ff": 12288, "n_ff_exp": 1536,
                              "n_expert": 192, "top_k": 8, "vocab": 16384, "ctx": 262144, "nextn": 1}),
    "step35": ("step35", {"n_embd": 256, "vocab": 2048, "ctx": 8192, "nextn": 1}),
    "step35-flash-width": ("step35", {"n_embd": 4096, "heads_full": 64, "heads_swa": 96, "n_head_kv": 8, "head": 128,
                                      "n_ff": 11264, "n_ff_exp": 1280, "n_ff_shexp": 1280, "n_expert": 288, "top_k": 8,
                                      "n_dense": 1, "pattern": "FSSS", "swa": 512, "vocab": 16384, "ctx": 262144,
                                      "nextn": 3, "mtp_pattern": "FSS"}),
    "deepseek4": ("deepseek4", {"ratios": [0, 4, 128, 0], "n_embd": 256, "vocab": 2048, "ctx": 8192, "nextn": 1}),
    "deepseek4-width": ("deepseek4", {"ratios": [0, 4, 128, 4, 0], "n_embd": 4096, "n_head": 64, "head": 512, "rope": 64,
                                      "q_lora": 1024, "o_groups": 8, "o_lora": 1024, "n_ff_exp": 2048, "n_expert": 256,
                                      "top_k": 6, "idx_heads": 64, "idx_head": 128, "idx_top_k": 512, "hc": 4, "swa": 128,
                                      "vocab": 16384, "ctx": 1048576, "nextn": 1}),
}

# name -> (context, ubatch, sequences, unified, flash attention, cache type)
SETTINGS = {
    "base": (4096, 512, 1, False, True, "f16"),
    "kvu-np4": (16384, 512, 4, True, True, "f16"),
    "kvu-np2-fa-off": (8192, 256, 2, True, False, "f16"),
    "np2-split-q8_0": (32768, 1024, 2, False, True, "q8_0"),
    "ctx-64k-ub-2048": (65536, 2048, 1, False, True, "f16"),
    "fa-off-ub-128-bf16": (16384, 128, 1, False, False, "bf16"),
}


def device_fit(path, setting):
    ctx, ubatch, n_seq, unified, fa, cache = SETTINGS[setting]
    args = [path, "--runtime", "llama", "--ram", "1T", "--margin", "0", "--spec-type", "draft-mtp", "-c", str(ctx),
            "-ub", str(ubatch), "-b", str(max(2048, ubatch)), "-np", str(n_seq), "-fa", "on" if fa else "off",
            "-ctk", cache, "-ctv", cache, "-ctkd", cache, "-ctvd", cache, "--json"]
    if unified:
        args.append("--kv-unified")
    done = subprocess.run([sys.executable, "-m", "moetools", "device-fit", *args], capture_output=True, text=True)
    if done.returncode:
        return {"refused": done.stderr.strip()}
    draft = json.loads(done.stdout)["draft"]["devices"]
    return {"kv_bytes": sum(d["kv_bytes"] for d in draft), "compute_bytes": sum(d["compute_bytes"] for d in draft)}


def probe(binary, path, setting):
    ctx, ubatch, n_seq, unified, fa, cache = SETTINGS[setting]
    argv = [binary, path, str(ctx), str(n_seq), cache, cache, str(int(fa)), "0", str(int(unified)), str(ubatch),
            str(max(2048, ubatch))]
    done = subprocess.run(argv, capture_output=True, text=True, env=os.environ | {"PROBE_MTP": "1"}, timeout=600)
    log = done.stdout + done.stderr
    if "PROBE: mtp context" not in log:
        return {"errors": [line for line in log.splitlines() if "error" in line.lower()][:2] or log.splitlines()[-2:]}
    mtp = log.split("PROBE: mtp context", 1)[1]
    if "PROBE: mtp ok" not in mtp:
        return {"errors": [line for line in mtp.splitlines() if "error" in line.lower() or "failed" in line][:2]}
    return {"kv_mib": [[m[1], int(m[2]), int(m[3])] for m in KV_SIZE.finditer(mtp) if int(m[3])],
            "compute_mib": COMPUTE.search(mtp)[1]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", required=True, help="tests/llama_probe/probe.cpp compiled against libllama")
    parser.add_argument("--commit", default="0c1e57098", help="the llama.cpp commit the probe is linked against")
    parser.add_argument("--write", action="store_true", help="record the figures in " + RECORD)
    parser.add_argument("--only", nargs="*", help="only these models")
    options = parser.parse_args()
    cases = []
    worst = {}
    with tempfile.TemporaryDirectory(prefix="devicefit-mtp-probe-") as folder:
        for name, (arch, params) in MODELS.items():
            if options.only and name not in options.only:
                continue
            spec = synth.tiny(arch, **params)
            spec.merges = 16
            path = str(synth.write_model(spec, os.path.join(folder, f"{name}.gguf"), sparse=True)[0])
            for setting in SETTINGS:
                logged, ours = probe(options.probe, path, setting), device_fit(path, setting)
                cases.append({"model": name, "setting": setting, "llama": logged})
                if "errors" in logged or "refused" in ours:
                    print(f"{name:20} {setting:18} llama {logged} | device-fit {ours}")
                    continue
                kv = sum(float(entry[0]) for entry in logged["kv_mib"])
                ratio = ours["compute_bytes"] / 2**20 / float(logged["compute_mib"]) - 1
                worst[name] = max(worst.get(name, 0), abs(ratio))
                print(f"{name:20} {setting:18} kv {ours['kv_bytes'] / 2**20:9.2f} vs {kv:9.2f}  compute "
                      f"{ours['compute_bytes'] / 2**20:9.2f} vs {logged['compute_mib']:>9} ({ratio * 100:+.3f}%)")
    for name, value in worst.items():
        print(f"worst {name}: {value * 100:.3f}%")
    if options.write:
        from moetools.atomic import write_json

        write_json(RECORD, {"llama_cpp_commit": options.commit, "tool": "tests/llama_probe/probe.cpp PROBE_MTP=1",
                            "models": {name: list(MODELS[name]) for name in MODELS}, "settings": SETTINGS, "cases": cases})
    return 0


if __name__ == "__main__":
    sys.exit(main())
