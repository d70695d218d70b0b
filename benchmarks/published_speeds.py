"""Published llama.cpp speed measurements (tests/data/devicefit_published_speeds.json) rebuilt as speed-model
cases: each point's model as a header-only synthetic GGUF at the point's quant, its GPUs, RAM and threads,
and the placement its flags give, evaluated once by upstream.plan_at (speed/calibrate.py Case).

Used by benchmarks/calibrate_devicefit_speed.py (the fit of the default efficiencies and the held-out
error) and tests/test_devicefit_speed_published.py. A point is skipped, with the reason, when its model
has no builder here, its flags cannot be read (a placement described in words, llama.cpp's --fit choosing
it) or it ran another runtime (ik_llama.cpp's kernels are not llama.cpp's).

Model dimensions are the models' config.json figures; quants are approximated per tensor class (the
expert type, the ffn_down type of llama-quantize's more-bits layers, the rest) as the quant's name says.
"""

import json
import os
import re
import tempfile
from pathlib import Path

from moetools import synth
from moetools.devicefit import core, devices as devicesmod, upstream
from moetools.devicefit.kv import KVSettings
from moetools.devicefit.speed import SpeedSettings
from moetools.devicefit.speed.calibrate import case_from_plan
from moetools.gguf import open_model
from moetools.host.gpus import PCIE_LANE_BYTES, pcie_bytes_per_s
from moetools.synth.spec import Types, more_bits_blocks

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "devicefit_published_speeds.json"
GIB = 1024**3
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_0 = 10, 11, 12, 13, 14, 8
IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, BF16, MXFP4, F16 = 16, 17, 18, 19, 20, 21, 22, 23, 29, 30, 39, 1


def quant_types(quant, n_layer):
    """synth Types for a quant's name (None: not understood)."""
    name = (quant or "").upper().replace("UD-", "")
    more = more_bits_blocks(n_layer)
    if name.startswith("MXFP4"):
        return Types(expert=MXFP4, resident=Q8_0, embed=Q8_0, output=Q8_0)
    if name.startswith("Q8_0"):
        return Types(expert=Q8_0, resident=Q8_0, embed=Q8_0, output=Q8_0)
    if name.startswith(("Q4_K_M", "Q4_K_L", "Q4_K_XL", "Q4_K_S")):
        return Types(expert=Q4_K, expert_down=Q6_K, expert_down_blocks=more, resident=Q4_K if name.startswith("Q4_K_M") else Q8_0,
                     embed=Q4_K, output=Q6_K)
    if name.startswith(("Q5_K", )):
        return Types(expert=Q5_K, expert_down=Q6_K, expert_down_blocks=more, resident=Q5_K, embed=Q5_K, output=Q6_K)
    if name.startswith(("Q3_K", )):
        return Types(expert=Q3_K, expert_down=Q4_K, expert_down_blocks=more, resident=Q4_K, embed=Q3_K, output=Q6_K)
    if name.startswith(("Q2_K", )):
        return Types(expert=Q2_K, expert_down=Q3_K, resident=Q4_K, embed=Q2_K, output=Q6_K)
    if name.startswith("IQ1_S"):
        return Types(expert=IQ1_S, expert_down=IQ2_XXS, resident=Q8_0, embed=Q4_K, output=Q6_K)
    if name.startswith("IQ1_M"):
        return Types(expert=IQ1_M, expert_down=IQ2_XXS, resident=Q8_0, embed=Q4_K, output=Q6_K)
    if name.startswith(("IQ2_M", "IQ2_S")):
        return Types(expert=IQ2_S, expert_down=IQ3_S, resident=Q8_0, embed=Q4_K, output=Q6_K)
    if name.startswith("IQ3_XXS"):
        return Types(expert=IQ3_XXS, expert_down=IQ3_S, resident=Q8_0, embed=Q4_K, output=Q6_K)
    if name.startswith(("IQ4_NL", "IQ4_XS")):
        return Types(expert=IQ4_XS, resident=Q8_0, embed=Q4_K, output=Q6_K)
    return None


def _qwen35(types, **dims):
    base = dict(arch="qwen35moe", head=256, rope=64, k_heads=16, state=128, nextn=1, vocab=248320, ctx=262144)
    return synth.BUILDERS["qwen35moe"](types, **(base | dims))


# model name (lower case, a prefix of the point's "model.name") -> (layers, builder(types))
MODELS = {
    "gpt-oss-120b": (36, lambda t: synth.BUILDERS["gpt-oss"](
        Types(expert=MXFP4, resident=F16, embed=F16, output=F16), name="gpt-oss-120b", n_layer=36, n_embd=2880, n_head=64,
        n_head_kv=8, head=64, n_ff_exp=2880, n_expert=128, top_k=4, swa=128, vocab=201088, ctx=131072)),
    "gpt-oss-20b": (24, lambda t: synth.BUILDERS["gpt-oss"](
        Types(expert=MXFP4, resident=F16, embed=F16, output=F16), name="gpt-oss-20b", n_layer=24, n_embd=2880, n_head=64,
        n_head_kv=8, head=64, n_ff_exp=2880, n_expert=32, top_k=4, swa=128, vocab=201088, ctx=131072)),
    "qwen3-30b-a3b": (48, lambda t: synth.BUILDERS["qwen3moe"](
        t, n_layer=48, n_embd=2048, n_head=32, n_head_kv=4, head=128, n_ff=6144, n_ff_exp=768, n_expert=128, top_k=8,
        vocab=151936, ctx=40960)),
    "qwen3-235b": (94, lambda t: synth.BUILDERS["qwen3moe"](
        t, n_layer=94, n_embd=4096, n_head=64, n_head_kv=4, head=128, n_ff=12288, n_ff_exp=1536, n_expert=128, top_k=8,
        vocab=151936, ctx=40960)),
    "qwen3.5-35b": (40, lambda t: _qwen35(t, n_layer=40, n_embd=2048, n_head=16, n_head_kv=2, n_ff_exp=512, n_ff_shexp=512,
                                          n_expert=256, top_k=8, v_heads=32)),
    "qwen3.6-35b": (40, lambda t: _qwen35(t, n_layer=40, n_embd=2048, n_head=16, n_head_kv=2, n_ff_exp=512, n_ff_shexp=512,
                                          n_expert=256, top_k=8, v_heads=32)),
    # 48 layers, 256 experts (8 routed + 1 shared); hidden 3072 and expert width 1024 give its 122B (assumed)
    "qwen3.5-122b": (48, lambda t: _qwen35(t, n_layer=48, n_embd=3072, n_head=32, n_head_kv=2, n_ff_exp=1024,
                                           n_ff_shexp=1024, n_expert=256, top_k=8, v_heads=64)),
    "glm-4.5-air": (46, lambda t: synth.BUILDERS["glm4moe"](
        t, n_layer=46, n_embd=4096, n_head=96, n_head_kv=8, head=128, n_ff=10944, n_ff_exp=1408, n_expert=128, top_k=8,
        n_dense=1, vocab=151552, ctx=131072)),
    "glm-4.5": (92, lambda t: synth.BUILDERS["glm4moe"](
        t, n_layer=92, n_embd=5120, n_head=96, n_head_kv=8, head=128, n_ff=12288, n_ff_exp=1536, n_expert=160, top_k=8,
        n_dense=3, vocab=151552, ctx=131072)),
    "deepseek": (61, lambda t: synth.BUILDERS["deepseek2"](
        t, n_layer=61, n_embd=7168, n_head=128, n_ff=18432, n_ff_exp=2048, n_expert=256, top_k=8, n_dense=3, q_lora=1536,
        kv_lora=512, rope=64, qk_nope=128, v_head=128, vocab=129280, ctx=163840)),
    "kimi-k2": (61, lambda t: synth.BUILDERS["deepseek2"](
        t, n_layer=61, n_embd=7168, n_head=64, n_ff=18432, n_ff_exp=2048, n_expert=384, top_k=8, n_dense=1, q_lora=1536,
        kv_lora=512, rope=64, qk_nope=128, v_head=128, vocab=163840, ctx=131072)),
}
ALIASES = {"glm-4.6": "glm-4.5", "glm-4.7": "glm-4.5", "deepseek-r1": "deepseek", "deepseek-v3": "deepseek"}
EXTRA_GPUS = {"rx7900xt": ("Radeon RX 7900 XT", 20 * GIB, 800e9), "rx6900xt": ("Radeon RX 6900 XT", 16 * GIB, 512e9),
              "rtx2080": ("GeForce RTX 2080", 8 * GIB, 448e9), "rtxa1000": ("RTX A1000", 8 * GIB, 192e9), "rtxpro6000blackwellmaxq": ("RTX PRO 6000 Max-Q", 96 * GIB, 1792e9)}


# measured figures left out of the fit, with the reason (the point's other figure may still be used)
EXCLUDED = {
    "hc-gptoss120b-3090-epyc7343": ("tg", "64 GB of RAM for a 61 GB model: decode pages experts from the drive "
                                          "(the source's 1.4-1.8 tok/s; the drive is not described)"),
    "dsr1-udiq1s-": ("pp", "13- and 17-token prompts: a latency, not a batched prompt speed"),
    "dsr1-udiq1s-epyc": ("tg", "January/February 2025 builds: DeepSeek's cache held every head's K and V before "
                               "llama.cpp's MLA cache (April 2025), so decode read far more than this commit does "
                               "(the model predicts these 2x too fast)"),
}


def excluded(point, kind):
    """The reason a point's tg or pp is left out, or None."""
    return next((reason for prefix, (which, reason) in EXCLUDED.items()
                 if point["id"].startswith(prefix) and which == kind), None)


def exclusions(points):
    """[(id, kind, reason)] of every figure left out of the fit."""
    return [(point["id"], kind, excluded(point, kind)) for point in points for kind in ("tg", "pp")
            if point.get(kind) and excluded(point, kind)]


def model_key(point):
    name = point["model"]["name"].lower().replace("qwen/", "").replace(" ", "-")
    name = re.sub(r"^.*/", "", name)
    for alias, target in ALIASES.items():
        if name.startswith(alias):
            return target
    return next((key for key in sorted(MODELS, key=len, reverse=True) if name.startswith(key)), None)


def skip_reason(point):
    """Why a point is not a case, or None."""
    if point["runtime"] != "llama.cpp":
        return f"runtime {point['runtime']}"
    if point["model"]["name"].lower().replace(" ", "-").startswith("deepseek-v3.2"):
        return "DeepSeek-V3.2 is deepseek32 (a lightning indexer the deepseek2 builder here lacks)"
    if model_key(point) is None:
        return f"no builder for {point['model']['name']}"
    if quant_types(point["model"]["quant"], 1) is None:
        return f"quant {point['model']['quant']!r} not understood"
    flags = point["flags"]
    ot = flags.get("ot")
    if ot and any("..." in part or " " in part.strip() or "=" not in part for part in ot.split(";")):
        return "the -ot placement is described in words"
    if "ncmoe" in point["id"] and flags.get("n_cpu_moe") is None and not ot:
        return "its --n-cpu-moe value is not in the source"
    if not (ot or flags.get("n_cpu_moe") is not None or flags.get("cpu_moe") or flags.get("ngl") is not None):
        return "no placement flags (llama.cpp's --fit or an unstated placement)"
    if any(_gpu(gpu["name"]) is None for gpu in point["gpus"]):
        return "a GPU not in the table"
    if not point["ram"].get("type") and not point["ram"].get("measured_gbs"):
        return "no RAM type or speed"
    return None


def _gpu(name):
    """(table key, (name, VRAM, bandwidth)) of a published GPU, or None."""
    table = {**devicesmod.GPU_TABLE, **EXTRA_GPUS}
    key = devicesmod.table_match(name, table)
    return (key, table[key]) if key else None


# what a point that leaves the RAM's speed or channels out is taken to have: the type's common speed, and
# the platform's channels (EPYC 7003: 8, EPYC 9004/9005: 12, Xeon Scalable 2nd gen: 6 per socket; else 2)
DEFAULT_MTS = {"DDR4": 3200, "DDR5": 4800}
PLATFORM_CHANNELS = ((r"EPYC 7\d\d\d", 8), (r"EPYC 9\d\d\d", 12), (r"Xeon (Gold|Platinum|Silver) \d", 6))


def ram_peak(point):
    """(bytes/s, measured?) of the point's RAM: channels x MT/s x 8 bytes, from the defaults above where
    the point does not say."""
    ram = point["ram"]
    if ram.get("measured_gbs"):
        return ram["measured_gbs"] * 1e9, True
    mts = ram.get("mts") or DEFAULT_MTS[ram["type"].upper()[:4]]
    channels = ram.get("channels")
    if not channels:
        name = point["cpu"].get("name") or ""
        per_socket = next((count for pattern, count in PLATFORM_CHANNELS if re.search(pattern, name)), 2)
        channels = per_socket * (point["cpu"].get("sockets") or 1)
    return channels * mts * 1e6 * 8, False


def _overrides(flags):
    out = []
    if flags.get("ot"):
        for part in re.split(r"\s*;\s*", flags["ot"]):
            out.append(("-ot", part.strip()))
    if flags.get("cpu_moe"):
        out.append(("--cpu-moe", None))
    if flags.get("n_cpu_moe") is not None and out:
        out.append(("--n-cpu-moe", flags["n_cpu_moe"]))
    return out or None


def build_case(point, folder):
    """A calibrate.Case of a point (the plan of its placement on its devices, once)."""
    key = model_key(point)
    n_layer, builder = MODELS[key]
    spec = builder(quant_types(point["model"]["quant"], n_layer))
    path = synth.write_model(spec, os.path.join(folder, f"{key}-{point['id']}.gguf"), sparse=True)[0]
    with open_model(path) as model:
        facts = core.model_facts(model)
    gpus = [devicesmod.Device(f"CUDA{index}", "gpu", entry[1], entry[2], "published", table_key)
            for index, (table_key, entry) in enumerate(_gpu(gpu["name"]) for gpu in point["gpus"])]
    bw, measured = ram_peak(point)
    flags = point["flags"]
    cores = (point["cpu"].get("cores") or 8) * (point["cpu"].get("sockets") or 1)
    lanes = point.get("pcie") or {}
    pcie = {"pcie_bw": pcie_bytes_per_s(lanes["gen"], lanes["width"])} if lanes.get("gen") in PCIE_LANE_BYTES and lanes.get("width") else {}
    speed = SpeedSettings(ram_bw=bw, ram_bw_measured=measured, threads=flags.get("t") or cores, **pcie,
                          numa_nodes=point["cpu"].get("sockets") or 1)
    tg = None if excluded(point, "tg") else point.get("tg")
    pp = None if excluded(point, "pp") else point.get("pp")
    depth = (tg.get("depth") or 0) if tg else 0
    ub, b = flags.get("ub") or 512, flags.get("b") or 2048
    ctx = max(flags.get("ctx") or 0, 4096, depth + 1024, ((pp or {}).get("n_prompt") or 0) + 256)
    kv = KVSettings(ubatch=ub, batch=max(b, ub), flash_attn=bool(flags.get("fa")), ctk=flags.get("ctk") or "f16",
                    ctv=flags.get("ctv") or "f16")
    overrides = _overrides(flags)
    options = upstream.UpstreamOptions(ctx=ctx, kv=kv, speed=speed, depth=depth, ngl=flags.get("ngl") if flags.get("ngl") is not None else 999,
                                       n_cpu_moe=flags.get("n_cpu_moe") if not overrides else None, overrides=overrides,
                                       margin=0)
    cpu = devicesmod.cpu_device((point["ram"].get("gib") or 256) * GIB, bw, "published")
    if overrides:
        upstream._resolve_overrides(facts, gpus, options, [], [])
    plan_ = upstream.plan_at(facts, gpus, cpu, options, ctx)
    n_prompt = (pp or {}).get("n_prompt") or 512
    return case_from_plan(point["id"], facts, gpus, plan_, options, cpu, tg=tg and tg["tok_s"], pp=pp and pp["tok_s"],
                          n_prompt=n_prompt, n_ubatch=min(ub, max(b, ub), n_prompt))


def load_points():
    return json.loads(DATA.read_text())["points"]


def held_out_ids(points):
    """The points kept out of the fit: every third usable point in id order (ids name the machine first, so
    each machine's runs fall on both sides)."""
    usable = sorted(point["id"] for point in points if skip_reason(point) is None)
    return {point_id for index, point_id in enumerate(usable) if index % 3 == 1}


def build_cases(points=None):
    """(cases, skipped [(id, reason)]) for every point (header-only models in a temporary folder)."""
    cases, skipped = [], []
    with tempfile.TemporaryDirectory(prefix="published-") as folder:
        for point in points or load_points():
            reason = skip_reason(point)
            if reason:
                skipped.append((point["id"], reason))
                continue
            cases.append(build_case(point, folder))
    return cases, skipped
