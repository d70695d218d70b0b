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


# The fork pages an expert only when its weight sits in a host buffer and its MUL_MAT_ID runs on the GPU
# (CambrianTech/llama.cpp ggml/src/ggml-backend.cpp ggml_backend_sched_compute_splits: a split input with
# buffer usage WEIGHTS, ggml_backend_buffer_is_host, consumed as src[0] of GGML_OP_MUL_MAT_ID). So the
# launch keeps every expert tensor on the CPU (-ot ...=CPU; the fork's own fit-device counts `_exps.`
# names as paged, tools/moe-fit/fit-device.cpp is_expert), turns off the CPU repack that would move them
# into a non-host buffer (--no-repack), and lets a one-token decode batch offload (ggml-cuda.cu
# ggml_backend_cuda_device_offload_op: get_op_batch_size = ne[2] tokens for MUL_MAT_ID >= the
# GGML_OP_OFFLOAD_MIN_BATCH read in ggml_backend_cuda_reg, default 32). The fork's "[MOE-PAGER] ...
# Paging is currently doing NOTHING" warning names exactly these three causes.
FORK_EXPERT_OVERRIDE = "\\.ffn_.*_exps\\.=CPU"
FORK_MIN_BATCH = "1"

# The fork's three speed switches (CambrianTech/llama.cpp ggml/src/ggml-moe-residency.hpp
# MoeServingConfig::from_env, read at 0832f66b; ggml/src/ggml-backend.cpp at e696f67b). Each is a presence
# flag, `getenv(NAME) != nullptr`: set to anything, "0" and "" included, it is on; unset, off.
# - GGML_MOE_GATHER (`gather`): with the expert cache on, ggml_backend_sched_compute_splits publishes an
#   expert-offset table as the MUL_MAT_ID's src[3] and the kernel reads the cache slots in place, instead
#   of one copy per routed expert into the split's staging tensor (device-to-device for a VRAM slot, over
#   PCIe for a host slot); only where the backend's registry exposes "ggml_backend_moe_gather_entry" and
#   its supports_op takes the table, and it arms the cache's gather fence (ResidencyCache::set_gather_fence).
# - GGML_MOE_DIRECT_READ (`direct_read`): moe_pick_base_fetcher picks DirectReadFetcher (unbuffered,
#   overlapped ReadFile of the GGUF behind the mmap, FILE_FLAG_NO_BUFFERING) under _WIN32 only, and only
#   without GGML_MOE_CONTAINER (the container's DirContainerFetcher is picked first); otherwise the cache
#   fills through MmapFaultFetcher (memcpy through the mmap, the page cache's path).
# - GGML_MOE_PREFETCH (`prefetch`): under _WIN32 only, ggml_backend_sched_compute_splits issues one
#   PrefetchVirtualMemory over the mmap ranges of the experts the current MUL_MAT_ID routed to, before they
#   are cached or copied; elsewhere it is read and never used.
# device-fit's speed model (docs/speed-model.md) is the fork's default, all three off, so the launch exports
# none of them and says so in one note.
FORK_SWITCHES = ("GGML_MOE_GATHER", "GGML_MOE_DIRECT_READ", "GGML_MOE_PREFETCH")
SWITCHES_NOTE = (
    "fork switches GGML_MOE_GATHER, GGML_MOE_DIRECT_READ and GGML_MOE_PREFETCH are off by default and not "
    "exported: any value, 0 included, turns one on (ggml-moe-residency.hpp MoeServingConfig::from_env), and "
    "device-fit's speed figure assumes all three unset. GATHER: MUL_MAT_ID reads cache slots in place, no "
    "per-expert copy (ggml-backend.cpp ggml_backend_sched_compute_splits); DIRECT_READ: Windows only, "
    "unbuffered reads of the GGUF, unused with GGML_MOE_CONTAINER (moe_pick_base_fetcher); PREFETCH: Windows "
    "only, OS read-ahead of each layer's routed experts (ggml_backend_sched_compute_splits)")


def cold_expert_override(hot_blocks, block_count):
    """The `-ot` value that puts the expert tensors of every block NOT in `hot_blocks` on the CPU, as the
    daemon builds it (CambrianTech/continuum core/continuum-core/src/inference/llama_server.rs
    cold_expert_offload_ot): hot indices outside 0..block_count are ignored, a dense block in the cold
    list is harmless (it has no `_exps` tensor), and "" when nothing is cold (never an empty -ot).
    With no hot block at all it is the one pattern for every layer."""
    hot = {block for block in hot_blocks if 0 <= block < block_count}
    cold = [block for block in range(block_count) if block not in hot]
    if not cold:
        return ""
    if not hot:
        return FORK_EXPERT_OVERRIDE
    return "blk\\.(" + "|".join(str(block) for block in cold) + ")" + FORK_EXPERT_OVERRIDE


def floored_gib(size):
    """Bytes as the fork's `*_CACHE_GB` text: GiB floored to 0.01, so the cache never asks for more than
    the budget."""
    return f"{int(size / GIB * 100) / 100:.2f}"


def _cache_variable(name, size, notes):
    """The value for a `GGML_MOE_*_CACHE_GB` variable, or None (unset) with a note when the budget
    floors to 0.00: MoeServingConfig::from_env multiplies atof(value) by 2^30, so "0.00" is a cache of
    0 bytes, which the fork reads as off (ggml-backend.cpp enables the VRAM cache only when it is
    non-zero; ResidencyCache::enabled is budget_bytes > 0)."""
    text = floored_gib(size)
    if float(text) > 0:
        return text
    from moetools.sizes import format_size

    notes.append(f"{name} left unset: the {format_size(size)} expert budget floors to 0.00 GiB, which the fork "
                 "reads as a cache of 0 bytes (off); every expert streams from host memory each token")
    return None


def absolute(path):
    """A local path made absolute (the daemon launches the server from the engine's own folder and
    refuses relative GGML_MOE_*_FILE / LLAMA_RESIDENT_OVERRIDE: continuum engine_install.rs
    EngineInstallReceipt::read); a URL or hf:// name is left as it is."""
    from moetools.gguf.locator import is_remote

    if not path or path.startswith("hf://") or is_remote(path):
        return path
    return os.path.abspath(path)


def default_trace_path(model_path, plan_path=""):
    """Where --emit env points GGML_MOE_TRACE_FILE without --trace: beside the plan (`k3.plan.json` ->
    `k3.plan.trace`), else `<model stem>.trace` in the current folder. Absolute."""
    if plan_path:
        plan = os.path.abspath(plan_path)
        trace = os.path.splitext(plan)[0] + ".trace"
        return trace if trace != plan else plan + ".trace"
    from moetools.gguf.model import model_stem

    return os.path.abspath(model_stem(model_path) + ".trace")


def fork_launch(result, plan_path="", capture_path="", trace_path=""):
    """The serving fork's launch for the chosen division: {"env": {name: value or None to unset},
    "command": [llama-server argv], "override_tensor": the -ot value, "notes": [why a variable is unset;
    the speed switches left at their defaults]}.

    The fork keeps ONE expert cache: GGML_MOE_VRAM_CACHE_GB when it is in VRAM, GGML_MOE_HOST_CACHE_GB
    (and the VRAM one unset) when the --ram host budget holds more experts; a dense model has no cache.
    Every path is absolute. A model with experts gets the paging flags (see FORK_EXPERT_OVERRIDE),
    GGML_MOE_TRACE_FILE, the 12-byte routing trace the fork writes on the paged path only (`trace-tail`
    reads it), and the note naming the fork's speed switches it leaves at their defaults (FORK_SWITCHES)."""
    chosen = result.chosen
    if chosen is None:
        return {"env": {}, "command": [], "override_tensor": "", "notes": []}
    facts = result.facts
    cache = chosen_fork_cache(result)
    on_host = cache is not None and cache.device == "host"
    experts = bool(facts.moe_layers)
    notes = []
    env = {
        "LLAMA_RESIDENT_OVERRIDE": None if chosen.tier.label == NATIVE else absolute(chosen.tier.gguf),
        "GGML_MOE_VRAM_CACHE_GB": (_cache_variable("GGML_MOE_VRAM_CACHE_GB", chosen.expert_budget_bytes, notes)
                                   if experts and not on_host else None),
        "GGML_MOE_PLAN_FILE": os.path.abspath(plan_path) if plan_path else None,
        "GGML_MOE_CONTAINER": os.path.abspath(result.options.container) if result.options.container else None,
        "GGML_MOE_HOST_CACHE_GB": _cache_variable("GGML_MOE_HOST_CACHE_GB", cache.budget_bytes, notes) if on_host else None,
        "GGML_MOE_CAPTURE_FILE": os.path.abspath(capture_path) if capture_path else None,
        "GGML_MOE_TRACE_FILE": (os.path.abspath(trace_path or default_trace_path(facts.path, plan_path))
                                if experts else None),
        "GGML_OP_OFFLOAD_MIN_BATCH": FORK_MIN_BATCH if experts else None,
    }
    if experts:
        notes.append(SWITCHES_NOTE)
    override = cold_expert_override((), facts.block_count) if experts else ""
    args = server_args(absolute(facts.path), chosen.context, result.options.kv)
    if override:
        args += ["-ot", override, "--no-repack"]
    return {"env": env, "command": ["llama-server"] + args, "override_tensor": override, "notes": notes}


def shell_assignments(env):
    """`env -u A B=1 ...`-style words for a one-line launch: unset first, then the assignments."""
    words = []
    for name, value in env.items():
        if value is None:
            words += ["-u", name]
    words += [f"{name}={value}" for name, value in env.items() if value is not None]
    return words


def plan_budget(result):
    """(host budget bytes, device budget bytes, tier label) for the plan file."""
    host = result.host["host_cache_bytes"] if result.host else 0
    return host, result.chosen.expert_budget_bytes, result.chosen.tier.label


def plan_cache_device(result):
    """"vram"/"host" for the plan's cache_device key (None for a dense model)."""
    cache = chosen_fork_cache(result)
    return cache.device if cache else None
