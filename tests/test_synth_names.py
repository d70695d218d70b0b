"""moetools.synth.names: every tensor synth writes is named from gguf's TENSOR_NAMES or the one local table
of newer templates, and that table holds only what the pinned gguf lacks."""

from gguf.constants import MODEL_TENSOR, TENSOR_NAMES

import moetools.synth.names as names
from moetools import synth
from moetools.synth.names import parse, tn


def test_tn_and_parse():
    assert tn(MODEL_TENSOR.ATTN_NORM, 3) == "blk.3.attn_norm.weight"
    assert tn(MODEL_TENSOR.ATTN_Q, 0, "bias") == "blk.0.attn_q.bias"
    assert tn(MODEL_TENSOR.SSM_A, 7, suffix=None) == "blk.7.ssm_a"
    assert tn(MODEL_TENSOR.OUTPUT, suffix="bias") == "output.bias"
    assert tn(names.HC_HEAD_FN) == "output_hc_fn.weight"
    assert parse("blk.12.ffn_norm.weight") == (MODEL_TENSOR.FFN_NORM, 12, "weight")
    assert parse("blk.2.nextn.eh_proj.weight") == (MODEL_TENSOR.NEXTN_EH_PROJ, 2, "weight")
    assert parse("blk.5.ssm_d") == (MODEL_TENSOR.SSM_D, 5, None)
    assert parse("blk.1.hc_attn_fn.weight") == (names.HC_ATTN_FN, 1, "weight")
    assert parse("token_embd.weight") == (MODEL_TENSOR.TOKEN_EMBD, None, "weight")
    assert parse("blk.1.no_such_tensor.weight")[0] is None


def test_every_synth_tensor_name_comes_from_the_tables():
    specs = [synth.tiny(name) for name in synth.BUILDERS]
    specs += [synth.tiny("qwen4exp", ple=1), synth.tiny("deepseek4", nextn=1), synth.tiny("glm5-next", nextn=1)]
    for spec in specs:
        for tensor in spec.tensors:
            kind, bid, suffix = parse(tensor.name)
            assert kind is not None, (spec.architecture, tensor.name)
            assert tn(kind, bid, suffix) == tensor.name


def test_local_templates_are_only_those_gguf_lacks():
    local = {key: value for key, value in vars(names).items() if key.isupper() and isinstance(value, str)}
    newer_in_gguf = sorted(key for key, value in local.items() if value in TENSOR_NAMES.values())
    assert not newer_in_gguf, f"gguf now has these: use MODEL_TENSOR.<name> and drop them from synth/names.py: {newer_in_gguf}"
    assert not set(local) & set(MODEL_TENSOR.__members__), "a local name shadows a gguf MODEL_TENSOR member"
