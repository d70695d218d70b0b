"""device-fit's launch settings: the llama-server flags (upstream llama.cpp's `--n-cpu-moe`, the KV
cache flags) and the serving fork's environment variables for a fit's chosen division.

Moved out of core.py (issue 28); the expert-tensor pattern mirrors llama.cpp's common/fit.cpp.
"""

import os

from moetools.devicefit.core import GIB, NATIVE, chosen_fork_cache
from moetools.gguf.locator import llama_model_args


# --- launch settings --------------------------------------------------------------------------

def cpu_moe_layers(facts, budget):
    """K for upstream `--n-cpu-moe K`: experts of blocks < K stay on the CPU; the last MoE layers whose
    whole expert tensors fit in `budget` bytes go to the GPU (upstream has no streaming cache)."""
    used, first_gpu = 0, None
    for block in reversed(facts.moe_layers):
        if used + facts.layer_expert_bytes[block] > budget:
            break
        used += facts.layer_expert_bytes[block]
        first_gpu = block
    if first_gpu is None:
        return facts.block_count, 0
    return first_gpu, used


# llama.cpp's own expert-tensor pattern (common/fit.cpp): also matches the `_chexps` tensors
EXPERT_PATTERN = "\\.ffn_(up|down|gate_up|gate)_(ch|)exps"


def kv_flags(settings):
    flags = ["-ctk", settings.ctk, "-ctv", settings.ctv, "-fa", "on" if settings.flash_attn else "off"]
    if settings.ubatch != 512:
        flags += ["-ub", str(settings.ubatch)]
    if settings.batch != 2048:
        flags += ["-b", str(settings.batch)]
    # always explicit: llama-server defaults to 4 slots and a unified cache, which would give a
    # sliding-window model a bigger cache than the one planned
    flags += ["-np", str(settings.n_seq), "-kvu" if settings.unified else "--no-kv-unified"]
    if settings.swa_full:
        flags.append("--swa-full")
    return flags


def server_args(path, context, settings):
    """The llama-server arguments every launch shares: model, context, all layers on the GPU, the
    KV cache types and batch settings, and no automatic fitting."""
    return [*llama_model_args(path), "-c", str(context), "-ngl", "999", *kv_flags(settings), "--fit", "off"]


def llama_launch(result):
    """Upstream llama.cpp flags for the native division: {"args": [...], "cpu_moe_layers": K,
    "gpu_expert_bytes": n, "note": text}. Upstream cannot load a resident override."""
    facts = result.facts
    native = result.divisions[0]
    if not native.feasible:
        return {"args": [], "cpu_moe_layers": facts.block_count, "gpu_expert_bytes": 0,
                "note": "upstream llama.cpp cannot fit the native resident weights and KV on this card"}
    args = server_args(facts.path, native.context, result.options.kv)
    layers, used = (0, 0)
    override = ""
    if not facts.dense:
        layers, used = cpu_moe_layers(facts, native.free_bytes)
        if layers >= facts.block_count:
            args.append("--cpu-moe")  # not one whole layer of experts fits
            override = EXPERT_PATTERN + "=CPU"
        elif any(block < layers for block in facts.moe_layers):
            args += ["--n-cpu-moe", str(layers)]
            cpu = [block for block in facts.moe_layers if block < layers]
            override = "blk\\.(" + "|".join(str(block) for block in cpu) + ")" + EXPERT_PATTERN + "=CPU"
        else:  # every MoE layer's experts fit (the blocks below are dense): nothing stays on the CPU
            layers = 0
    return {"args": args, "cpu_moe_layers": layers, "gpu_expert_bytes": used, "override_tensor": override,
            "note": "" if result.chosen is native or result.chosen is None else
            f"upstream has no resident override: these flags realise the native division, not {result.chosen.tier.label}"}


def env_launch(result, plan_path="", capture_path=""):
    """The serving fork's variables for the chosen division ({name: value or None to unset}).

    The fork keeps ONE expert cache: GGML_MOE_VRAM_CACHE_GB when it is in VRAM, GGML_MOE_HOST_CACHE_GB
    (and the VRAM one unset) when the --ram host budget holds more experts. GGML_MOE_CAPTURE_FILE is
    where the fork writes its per-token JSONL capture (`--capture`)."""
    chosen = result.chosen
    if chosen is None:
        return {}
    cache = chosen_fork_cache(result)
    on_host = cache is not None and cache.device == "host"

    def floored_gib(size):  # floored to 0.01 GiB so the cache never asks for more than the budget
        return f"{int(size / GIB * 100) / 100:.2f}"

    env = {
        "LLAMA_RESIDENT_OVERRIDE": None if chosen.tier.label == NATIVE else chosen.tier.gguf,
        "GGML_MOE_VRAM_CACHE_GB": None if on_host else floored_gib(chosen.expert_budget_bytes),
        "GGML_MOE_PLAN_FILE": os.path.abspath(plan_path) if plan_path else None,
        "GGML_MOE_CONTAINER": os.path.abspath(result.options.container) if result.options.container else None,
        "GGML_MOE_HOST_CACHE_GB": floored_gib(cache.budget_bytes) if on_host else None,
        "GGML_MOE_CAPTURE_FILE": os.path.abspath(capture_path) if capture_path else None,
    }
    return env


def plan_budget(result):
    """(host budget bytes, device budget bytes, tier label) for the plan file."""
    host = result.host["host_cache_bytes"] if result.host else 0
    return host, result.chosen.expert_budget_bytes, result.chosen.tier.label


def plan_cache_device(result):
    """"vram"/"host" for the plan's cache_device key (None for a dense model)."""
    cache = chosen_fork_cache(result)
    return cache.device if cache else None
