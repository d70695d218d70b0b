"""Zhipu's GLM loaders (glm4, glm4moe, glm-dsa, glm5-next, chatglm).

One ArchProfile per architecture (moetools.arch.profile); fields left out keep their defaults."""

from moetools.arch.profile import ArchProfile as P

PROFILES = (
    P("chatglm", llama_cpp="src/models/chatglm.cpp"),
    P("glm-dsa", indexer_rule="glm_dsa", llama_cpp="src/models/glm-dsa.cpp", synth_builder="moetools.synth.families.glm:glm_dsa", sparse_kv="dsa",
      gating="sigmoid", mtp="graph", mtp_kept=(".exp_probs_b.bias",),
      mtp_single_block="GLM_DSA MTP currently only supports a single MTP block"),
    P("glm4", llama_cpp="src/models/glm4.cpp", mrope="if_sections"),
    P("glm4moe", llama_cpp="src/models/glm4-moe.cpp", synth_builder="moetools.synth.families.glm:glm4moe", gating="sigmoid",
      norm_w="default_true", mrope="if_sections", mtp="graph"),
    P("glm5-next", kv_trunk_only=True, indexer_rule="types_kv", indexer_kpool=True,
      shape_reader="moetools.devicefit.graph.models.deepseek4:read_glm5_next_shape", llama_cpp="src/models/glm5-next.cpp", synth_builder="moetools.synth.families.glm:glm5_next",
      graph_builder="moetools.devicefit.graph.models.deepseek4:_build_dsv4", sparse_kv="dsa", rs_rollback=True, mtp="llama",
      mtp_fails="GLM5-Next NextN graph not implemented yet",
      quant_keep=("hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate",
                  "indexer_compressor_ape", "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight", "ssm_g_b.weight",
                  "ssm_beta.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight", "attn_v_b.weight"),
      quant_q8_0=("attn_q_a", "attn_q_b", "nextn.eh_proj"), kda_conv_snapshots=True),
)
