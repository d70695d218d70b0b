"""The case device-fit's --draft ledger is checked on against llama.cpp itself: the qwen3moe target of
tests/devicefit_llama_case.py, a dense llama draft with the same vocabulary, two llama.cpp RPC servers
on loopback and the CPU, in several settings.

`benchmarks/check_devicefit_draft.py` runs llama.cpp's llama-speculative-simple on each setting with the
flags device-fit emits and records the draft model's buffers llama.cpp logs per device in
tests/data/devicefit_llama_draft.json; tests/test_devicefit_draft_llama.py checks device-fit's draft
bytes against that record without llama.cpp.
"""

from moetools import synth
from tests import devicefit_llama_case as target_case

RPC_PORTS = (50162, 50163)  # not the target case's ports: both checks may run at once
RPC_SIZES = ("160M", "120M")
RECORD = "tests/data/devicefit_llama_draft.json"
DRAFT_DEVICE = "RPC1"  # llama.cpp's name of the second --rpc server's device

# name -> device-fit flags beyond the common ones (each is also the llama.cpp flag device-fit emits)
SETTINGS = {
    "base": [],
    "ctx-8192": ["-c", "8192"],
    "ngld-3": ["-ngld", "3"],
    "ngld-0": ["-ngld", "0"],
    "draft-q8_0-cache": ["-ctkd", "q8_0", "-ctvd", "q8_0"],
    "target-q8_0-cache": ["-ctk", "q8_0", "-ctv", "q8_0"],
    "no-flash-attn": ["-fa", "off"],
    "ubatch-256": ["-ub", "256"],
    "parallel-2": ["-np", "2"],
    "devd-second": ["-devd", DRAFT_DEVICE],
    "devd-reversed": ["-devd", "RPC1,RPC0"],  # the target's -ts applies by position in this list
    "devd-none": ["-devd", "none"],
}


def target_spec():
    return target_case.fixture_spec()


def draft_spec():
    spec = synth.tiny("dense", n_layer=6, n_embd=256, vocab=2048, ctx=8192)
    spec.merges = 16  # the same synthetic vocabulary and merges as the target's
    return spec


def device_fit_args(target, draft, setting):
    extra = SETTINGS[setting]
    args = [str(target), "--runtime", "llama", "--ram", "16G", "--margin", "0", "--draft", str(draft)]
    if "-c" not in extra:
        args += ["-c", "4096"]
    for port, size in zip(RPC_PORTS, RPC_SIZES):
        args += ["--rpc", f"127.0.0.1:{port}={size}"]
    return args + extra


# --spec-type draft-mtp: the model's own NextN/MTP block drafts (an MTP context on the target model)
MTP_RECORD = "tests/data/devicefit_llama_mtp.json"
MTP_SETTINGS = {
    "base": [],
    "ctx-8192": ["-c", "8192"],
    "draft-q8_0-cache": ["-ctkd", "q8_0", "-ctvd", "q8_0"],
    "no-flash-attn": ["-fa", "off"],
    "ubatch-256": ["-ub", "256"],
    "parallel-2": ["-np", "2"],
    "ngl-3": ["-ngl", "3"],  # the NextN block (the last) on the CPU with its KV
    "n-max-5": ["--spec-draft-n-max", "5"],  # a hybrid target's recurrent state keeps 5 snapshots
}


def mtp_specs():
    """{name: spec} of the MTP targets: the graph_mtp layouts device-fit replays (GQA, MLA, DeepSeek-V4's
    hyper-connections, and the hybrids: qwen35moe's and nemotron_h_moe's targets keep recurrent-state snapshots with MTP,
    qwen3next's does not; nemotron_h_moe's head folds NoPE attention and a relu^2 MoE in one block),
    dense qwen35, bailingmoe3's gated MLA head (rope 32: its 96-wide K rows take a q8_0 cache),
    cohere2moe's parallel block and mimo2's two sliding-window NextN blocks."""
    specs = {"glm4moe": synth.tiny("glm4moe", n_layer=4, n_embd=256, vocab=2048, ctx=8192),
             "deepseek32": synth.tiny("deepseek32", n_layer=4, n_embd=256, vocab=2048, ctx=8192),
             "qwen35moe": synth.tiny("qwen35moe", n_layer=4, n_embd=256, vocab=2048, ctx=8192, nextn=1),
             "qwen3next": synth.tiny("qwen35moe", arch="qwen3next", n_layer=4, n_embd=256, vocab=2048, ctx=8192, nextn=1),
             "nemotron_h_moe": synth.tiny("nemotron_h_moe", pattern="ME*E", n_embd=256, vocab=2048, ctx=8192, nextn=1),
             "qwen35": synth.tiny("qwen35", n_layer=4, n_embd=256, vocab=2048, ctx=8192, nextn=1),
             "bailingmoe3": synth.tiny("bailingmoe3", n_layer=4, n_embd=256, vocab=2048, ctx=8192, nextn=1, rope=32),
             "cohere2moe": synth.tiny("cohere2moe", n_layer=4, n_embd=256, vocab=2048, ctx=8192, nextn=1),
             "mimo2": synth.tiny("mimo2", n_embd=256, vocab=2048, ctx=8192, nextn=2),
             # glm-dsa: deepseek32's dense-MLA head over a DSA trunk; hy_v3: GQA with q/k norms in place; step35:
             # an iswa MTP cache, a head-wise gate and its own LM head, with a full and a sliding-window NextN block
             "glm-dsa": synth.tiny("glm-dsa", n_embd=256, vocab=2048, ctx=8192),
             "hy_v3": synth.tiny("hy_v3", n_layer=4, n_embd=256, vocab=2048, ctx=8192, nextn=1),
             "step35": synth.tiny("step35", n_embd=256, vocab=2048, ctx=8192, nextn=1),
             "step35-swa": synth.tiny("step35", n_embd=256, vocab=2048, ctx=8192, nextn=1, mtp_pattern="S"),
             # deepseek4: hyper-connection streams around a sliding-window NextN block (ratio 0) in an iswa cache
             "deepseek4": synth.tiny("deepseek4", ratios=(0, 4, 128, 0), n_embd=256, vocab=2048, ctx=8192, nextn=1)}
    for spec in specs.values():
        spec.merges = 16
    return specs


def mtp_device_fit_args(target, setting):
    extra = MTP_SETTINGS[setting]
    args = [str(target), "--runtime", "llama", "--ram", "16G", "--margin", "0", "--spec-type", "draft-mtp"]
    if "-c" not in extra:
        args += ["-c", "4096"]
    for port, size in zip(RPC_PORTS, RPC_SIZES):
        args += ["--rpc", f"127.0.0.1:{port}={size}"]
    return args + extra
